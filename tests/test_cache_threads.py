"""One ``TieredCache`` shared by threads: mixed puts, gets and invalidations stay consistent.

Eight threads hammer one cache (memory L1 + L2, SQLite L3, small capacities so
that evictions interleave) with a thread switch forced every microsecond. No
thread may raise; afterwards every tier's usage equals what it holds, every
vector index holds exactly its tier's entries, every entry in L1 is readable,
and every key still cached answers with its own value.
"""

from __future__ import annotations

import sys
import threading
from pathlib import Path

import numpy as np
import pytest

import mmcache
from mmcache.cache import REFRESH_TIMEOUT
from mmcache.encoders.base import HashingTestEncoder
from mmcache.errors import InvalidEmbeddingError
from mmcache.inputs import prepare
from mmcache.lab.testing import FakeClock
from mmcache.types import Query

from cache_helpers import snapshot

THREADS, OPS, KEYS, DIM = 8, 300, 60, 32
VECTORS = np.random.default_rng(0).standard_normal((KEYS, DIM)).astype(np.float32)
VECTORS /= np.linalg.norm(VECTORS, axis=1, keepdims=True)


def query(key: int) -> Query:
    return Query(embeddings={"text": VECTORS[key]}, scope="shared")


def hammer(cache: mmcache.TieredCache, seed: int, start: threading.Barrier,
           errors: list[str]) -> None:
    """Random puts (some batched), gets and invalidations; record what went wrong."""
    rng = np.random.default_rng(seed)
    start.wait()
    try:
        for i in range(OPS):
            key, op = int(rng.integers(KEYS)), rng.random()
            if op < 0.35:
                cache.put(query(key), {"key": key, "by": seed, "pad": "p" * int(rng.integers(80))})
            elif op < 0.45:
                keys = [int(k) for k in rng.integers(KEYS, size=3)]
                cache.put_many([query(k) for k in keys], [{"key": k, "by": seed} for k in keys])
            elif op < 0.85:
                hit = cache.get(query(key))
                if hit is not None and hit.value["key"] != key:
                    errors.append(f"thread {seed} op {i}: key {key} answered {hit.value}")
            else:
                cache.invalidate(query(key))
    except Exception as exc:  # noqa: BLE001 - every failure of a thread is the finding
        errors.append(f"thread {seed}: {exc!r}")


def run_threads(cache: mmcache.TieredCache) -> list[str]:
    errors: list[str] = []
    start = threading.Barrier(THREADS)
    threads = [threading.Thread(target=hammer, args=(cache, seed, start, errors))
               for seed in range(THREADS)]
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=60)
    finally:
        sys.setswitchinterval(interval)
    assert not any(t.is_alive() for t in threads), "a thread hung"
    return errors


def test_threads_share_one_cache(tmp_path: Path) -> None:
    cache = mmcache.TieredCache({
        "l1": {"max_entries": 12}, "l2": {"max_entries": 25, "index": "flat"},
        "l3": {"backend": "sqlite", "path": str(tmp_path / "l3.db"), "max_entries": 40}})
    errors = run_threads(cache)
    assert errors == []
    key_of = {prepare(query(k), {}).key: k for k in range(KEYS)}
    for tier in cache.tiers:
        entries = list(tier.scan())
        assert cache.usage()[tier.name] == (len(entries), sum(e.size for e in entries))
        if tier.semantic:
            index = tier.index.index("shared", "text")
            assert (0 if index is None else len(index)) == len(entries)
            assert all(e.entry_id in index for e in entries)
    for entry_id in cache.tier("l1").ids():
        assert cache.get(query(key_of[entry_id])).tier == "l1"
    present = {key_of[i] for tier in cache.tiers for i in tier.ids()}
    assert present, "the run left nothing cached to check"
    for key in present:
        assert cache.get(query(key)).value["key"] == key
    cache.close()


def test_metrics_can_be_exported_while_threads_use_the_cache(tmp_path: Path) -> None:
    """A scraper thread exports and snapshots the live metrics throughout the run (a smoke
    test: without the metrics lock a race here is possible but rare)."""
    cache = mmcache.TieredCache({"l1": {"max_entries": 12}, "l2": {"max_entries": 25,
                                                                   "index": "flat"}})
    done, failures = threading.Event(), []

    def scrape() -> None:
        try:
            while not done.is_set():
                cache.metrics.to_dataframe()
                cache.metrics.to_prometheus()
                snap = cache.metrics.snapshot()
                assert sum(snap.hits.values()) <= snap.lookups
        except Exception as exc:  # noqa: BLE001 - every failure of the scraper is the finding
            failures.append(repr(exc))

    scraper = threading.Thread(target=scrape)
    scraper.start()
    try:
        errors = run_threads(cache)
    finally:
        done.set()
        scraper.join(timeout=60)
    assert errors == [] and failures == []
    snap = cache.metrics.snapshot()
    assert snap.lookups == snap.latency["get"].count > 0   # every get counted once, and timed
    cache.close()


# -- encoders run outside the lock; stale refreshes are single-flight -------------------------
WAIT = 5.0  # seconds any test thread waits at most: a regression fails, it never hangs


class GatedEncoder(HashingTestEncoder):
    """Encodes like its parent, but a text starting with "slow" waits for ``release``."""

    def __init__(self) -> None:
        super().__init__("text", dim=16)
        self.entered, self.release = threading.Event(), threading.Event()

    def encode(self, inputs):
        if any(str(x).startswith("slow") for x in inputs):
            self.entered.set()
            self.release.wait(WAIT)
        return super().encode(inputs)


def in_thread(fn) -> tuple[threading.Thread, list]:
    """Run ``fn`` in a started thread; the list receives its result or exception."""
    out: list = []

    def run() -> None:
        try:
            out.append(fn())
        except Exception as exc:  # noqa: BLE001 - the test inspects it
            out.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, out


@pytest.mark.parametrize("slow_call", ["put", "get"])
def test_a_call_blocked_in_its_encoder_does_not_block_an_l1_hit(slow_call: str) -> None:
    encoder = GatedEncoder()
    cache = mmcache.TieredCache({"l2": {"index": "flat"}}, encoders={"text": encoder})
    cache.put(Query(text="fast question", scope="s"), "answer")
    slow = Query(text="slow question", scope="s")
    blocked, blocked_out = in_thread(lambda: getattr(cache, slow_call)(
        *((slow, "slow answer") if slow_call == "put" else (slow,))))
    try:
        assert encoder.entered.wait(WAIT)
        reader, hit = in_thread(lambda: cache.get(Query(text="fast question", scope="s")))
        reader.join(WAIT / 5)
        assert not reader.is_alive(), f"an L1 hit waited for a {slow_call} inside its encoder"
        assert hit[0].tier == "l1" and hit[0].value == "answer"
    finally:
        encoder.release.set()
        blocked.join(WAIT)
    assert not isinstance(blocked_out[0], Exception)
    if slow_call == "put":
        assert cache.get(slow).value == "slow answer"
    cache.close()


def test_a_dimension_fixed_while_encoding_fails_the_put_and_changes_nothing() -> None:
    encoder = GatedEncoder()
    cache = mmcache.TieredCache({"l2": {"index": "flat"}}, encoders={"text": encoder})
    rng = np.random.default_rng(4)
    image8, image32 = (rng.standard_normal(d).astype(np.float32) for d in (8, 32))
    slow = in_thread(lambda: cache.put(Query(text="slow caption", embeddings={"image": image8},
                                             scope="s"), "a"))
    try:
        assert encoder.entered.wait(WAIT)
        cache.put(Query(embeddings={"image": image32}, scope="s"), "b")  # fixes image at 32
        before = snapshot(cache)
    finally:
        encoder.release.set()
        slow[0].join(WAIT)
    assert isinstance(slow[1][0], InvalidEmbeddingError) and "expects 32" in str(slow[1][0])
    assert snapshot(cache) == before
    cache.close()


def test_on_stale_fires_once_for_concurrent_stale_gets_until_the_refresh_put() -> None:
    clock, calls = FakeClock(), []
    cache = mmcache.TieredCache({"freshness": {"ttl": 10, "stale_while_revalidate": 100}},
                                clock=clock, on_stale=lambda q, hit: calls.append(hit.value))
    q = Query(text="weather in Paris", embeddings={"text": VECTORS[0]}, scope="s")
    cache.put(q, "sunny")
    clock.advance(11)
    start = threading.Barrier(THREADS)

    def stale_gets() -> list[str]:
        start.wait(WAIT)
        return [cache.get(q).freshness for _ in range(20)]

    readers = [in_thread(stale_gets) for _ in range(THREADS)]
    for thread, _ in readers:
        thread.join(WAIT)
    assert all(out[0] == ["stale-while-revalidate"] * 20 for _, out in readers)
    assert calls == ["sunny"]                            # one refresh for 160 stale answers
    cache.put(q, "rain")                                 # the refresh lands
    clock.advance(11)
    assert cache.get(q).value == "rain" and cache.get(q).value == "rain"
    assert calls == ["sunny", "rain"]                    # stale again: one more refresh
    clock.advance(REFRESH_TIMEOUT)                       # that refresh never came back
    cache.get(q)
    assert calls == ["sunny", "rain", "rain"]
    cache.close()
