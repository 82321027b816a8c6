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

import mmcache
from mmcache.inputs import prepare
from mmcache.types import Query

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
