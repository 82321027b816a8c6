"""One ``TieredCache`` shared by threads: mixed puts, gets and invalidations stay consistent.

Eight threads hammer one cache (memory L1 + L2, SQLite L3, small capacities so
that evictions interleave) with a thread switch forced every microsecond. No
thread may raise; afterwards every tier's usage equals what it holds, every
vector index holds exactly its tier's entries, every entry in L1 is readable,
and every key still cached answers with its own value.
"""

from __future__ import annotations

import dataclasses
import sys
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any, Callable

import numpy as np
import pytest

import mmcache
from mmcache.cache import REFRESH_TIMEOUT
from mmcache.encoders.base import HashingTestEncoder
from mmcache.errors import InvalidEmbeddingError, MMCacheError, StorageError
from mmcache.inputs import prepare
from mmcache.lab.testing import FakeClock
from mmcache.types import Query

from cache_helpers import private_redis, snapshot

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


def run_threads(cache: mmcache.TieredCache, target=None, *extra) -> list[str]:
    """Run ``target(cache, seed, start_barrier, *extra, errors)`` (default :func:`hammer`) on
    THREADS threads at once, switching often; the errors they report."""
    errors: list[str] = []
    start = threading.Barrier(THREADS)
    threads = [threading.Thread(target=target or hammer,
                                args=(cache, seed, start, *extra, errors))
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
    # every stored value is its own key's (read from the tiers: a get back-fills the tiers above
    # it, whose evictions could drop an entry another tier no longer holds)
    stored = [(key_of[e.entry_id], e.value) for tier in cache.tiers for e in tier.scan()]
    assert stored, "the run left nothing cached to check"
    assert all(value["key"] == key for key, value in stored)
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


# -- L2 searches run outside the cache's lock (issue 27 item 3) --------------------------------
def l1_hit_beside(cache: mmcache.TieredCache, blocked: Callable[[], Any],
                  inside: threading.Event, release: threading.Event, what: str) -> Any:
    """Run ``blocked`` in a thread until it is held inside (``inside`` set), assert that an L1
    hit of key 0 completes meanwhile, then release it and return its answer
    (:func:`hits_beside` with that one lookup)."""
    return hits_beside(cache, blocked, inside, release, [(query(0), "l1", 0)], what)


def beside(blocked: Callable[[], Any], inside: threading.Event, release: threading.Event,
           meanwhile: Callable[[], None]) -> Any:
    """Run ``blocked`` in a thread until it is held inside (``inside`` set), run ``meanwhile``,
    then release it and return its answer (which must not be an exception)."""
    held = in_thread(blocked)
    try:
        assert inside.wait(WAIT)
        meanwhile()
    finally:
        release.set()
        held[0].join(WAIT)
    answer = held[1][0]
    assert not isinstance(answer, Exception), answer
    return answer


def change_beside(cache: mmcache.TieredCache, blocked: Callable[[], Any],
                  inside: threading.Event, release: threading.Event, change: str) -> Any:
    """:func:`beside`, making ``change`` meanwhile (``put`` a new value of key 1,
    ``invalidate`` it, ``put elsewhere``: move it far from the query; else put another key)."""

    def make_change() -> None:
        if change == "invalidate":
            assert cache.invalidate(query(1))
        elif change == "put":
            cache.put(query(1), {"key": 1, "v": "new"})
        elif change == "put elsewhere":  # the same key's value moves far away from the query
            cache.invalidate(query(1))
            cache.put(Query(embeddings={"text": VECTORS[30]}, scope="shared"), {"key": 30})
        else:
            cache.put(query(7), {"key": 7})
    return beside(blocked, inside, release, make_change)


def near(key: int, cos: float = 0.97, scope: str = "shared") -> Query:
    """A paraphrase of ``key``'s vector (cosine ``cos``): never its exact key, always an L2
    search, a hit at δ = 0.1."""
    base = VECTORS[key]
    other = VECTORS[(key + 1) % KEYS] - (VECTORS[(key + 1) % KEYS] @ base) * base
    vec = cos * base + np.sqrt(1 - cos ** 2) * other / np.linalg.norm(other)
    return Query(embeddings={"text": vec.astype(np.float32)}, scope=scope)


SEMANTIC = {"thresholds": {"delta": {"text": 0.1}}}


def gate_searches(cache: mmcache.TieredCache, parties: int) -> threading.Barrier:
    """Make every L2 search wait, once it has its candidates, until ``parties`` searches are
    inside it at once (a broken barrier: they never were)."""
    tier = cache.tier("l2")
    inner, barrier = tier.find, threading.Barrier(parties)

    def find(*args, **kwargs):
        found = inner(*args, **kwargs)
        barrier.wait(WAIT)
        return found
    tier.find = find
    return barrier


def test_two_threads_search_l2_at_once() -> None:
    cache = mmcache.TieredCache({**SEMANTIC, "l2": {"index": "flat"}})
    for key in range(4):
        cache.put(query(key), {"key": key})
    gate_searches(cache, 2)
    readers = [in_thread(lambda k=k: cache.get(near(k))) for k in (1, 2)]
    for thread, _ in readers:
        thread.join(WAIT * 2)
    hits = [out[0] for _, out in readers]
    assert not any(isinstance(h, Exception) for h in hits), hits  # BrokenBarrierError: serial
    assert [(h.tier, h.value["key"]) for h in hits] == [("l2", 1), ("l2", 2)]
    cache.close()


def test_an_l1_hit_is_served_while_another_thread_is_inside_an_l2_search() -> None:
    cache = mmcache.TieredCache({**SEMANTIC, "l2": {"index": "flat"}})
    cache.put(query(0), {"key": 0})
    cache.put(query(1), {"key": 1})
    tier, inside, release = cache.tier("l2"), threading.Event(), threading.Event()
    inner = tier.find

    def find(*args, **kwargs):
        inside.set()
        release.wait(WAIT)
        return inner(*args, **kwargs)
    tier.find = find
    hit = l1_hit_beside(cache, lambda: cache.get(near(1)), inside, release, "L2 search")
    assert hit.value == {"key": 1}
    cache.close()


@pytest.mark.parametrize("change", ["invalidate", "put", "put elsewhere", "other key"])
def test_a_write_while_a_search_is_outside_the_lock_is_never_missed(change: str) -> None:
    """A search outside the lock is only used while its tier is unchanged: after an invalidate
    the old value is not served; after a put, the new one is."""
    cache = mmcache.TieredCache({**SEMANTIC, "l2": {"index": "flat"}})
    cache.put(query(1), {"key": 1, "v": "old"})
    cache.put(query(5), {"key": 5})
    tier, inside, release = cache.tier("l2"), threading.Event(), threading.Event()
    inner, calls = tier.find, []

    def find(*args, **kwargs):
        found = inner(*args, **kwargs)
        calls.append(threading.current_thread().name)
        if len(calls) == 1:  # the first search pauses after it has its candidates
            inside.set()
            release.wait(WAIT)
        return found
    tier.find = find
    hit = change_beside(cache, lambda: cache.get(near(1)), inside, release, change)
    if change in ("invalidate", "put elsewhere"):
        assert hit is None
    else:
        assert hit.value == {"key": 1, "v": "new" if change == "put" else "old"}
    assert len(calls) == 2, "the changed tier was searched again under the lock"
    cache.close()


def overlap(cache: mmcache.TieredCache, seed: int, start: threading.Barrier,
            put_values: set, errors: list[str]) -> None:
    """Paraphrase gets (L2 searches outside the lock) overlapping puts, re-puts and
    invalidations of the same keys in two scopes; every served value must have been put for
    its key and scope."""
    rng = np.random.default_rng(seed)
    start.wait()
    try:
        for i in range(OPS):
            key, op = int(rng.integers(12)), rng.random()
            scope = ("a", "b")[int(rng.integers(2))]
            if op < 0.3:
                value = (scope, key, seed, i)
                put_values.add(value)  # before the put: a get may see it as soon as it lands
                cache.put(Query(embeddings={"text": VECTORS[key]}, scope=scope), list(value))
            elif op < 0.9:
                hit = cache.get(near(key, float(rng.uniform(0.92, 0.99)), scope))
                if hit is not None and (tuple(hit.value) not in put_values or
                                        tuple(hit.value[:2]) != (scope, key)):
                    errors.append(f"thread {seed} op {i}: {scope}/{key} answered {hit.value}")
            else:
                cache.invalidate(Query(embeddings={"text": VECTORS[key]}, scope=scope))
    except Exception as exc:  # noqa: BLE001 - every failure of a thread is the finding
        errors.append(f"thread {seed}: {exc!r}")


@pytest.mark.parametrize("index", ["flat", "hnsw"])
def test_gets_overlapping_puts_on_the_same_keys_serve_only_what_was_put(index: str) -> None:
    l2 = {"index": "flat"} if index == "flat" else {"ann_min_size": 4}
    cache = mmcache.TieredCache({**SEMANTIC, "l1": {"max_entries": 6},
                                 "l2": {"max_entries": 20, **l2}})
    semantic = cache.tier("l2").index  # HNSW: a backlog of 2, so builds swap in often
    semantic.spec = dataclasses.replace(semantic.spec, max_backlog=2)
    put_values: set = set()
    assert run_threads(cache, overlap, put_values) == []
    l2_tier = cache.tier("l2")
    l2_tier.index.flush()
    for tier in cache.tiers:
        entries = list(tier.scan())
        assert cache.usage()[tier.name] == (len(entries), sum(e.size for e in entries))
    for scope in ("a", "b"):
        held = {e.entry_id for e in l2_tier.scan() if e.scope == scope}
        index = l2_tier.index.index(prepare(Query(embeddings={"text": VECTORS[0]}, scope=scope),
                                            {}).scope, "text")
        assert held == (set() if index is None else set(index._slot))
    for e in l2_tier.scan():  # what is cached answers with its own key, exactly and nearby
        scope, key = e.value[0], e.value[1]
        assert cache.get(Query(embeddings={"text": VECTORS[key]}, scope=scope)).value == e.value
        assert cache.get(near(key, 0.97, scope)).value[:2] == [scope, key]
    cache.close()


@pytest.mark.parametrize("index", ["flat", "auto"])
def test_answers_with_and_without_the_search_outside_the_lock_are_the_same(
        tmp_path: Path, index: str) -> None:
    """One thread: the same operations give the same answers and the same state whether L2 is
    searched outside the lock or (as before) under it."""
    clock = FakeClock()
    l2 = {"index": "flat"} if index == "flat" else {"ann_min_size": 8}

    def make(name: str) -> mmcache.TieredCache:
        return mmcache.TieredCache({**SEMANTIC, "l1": {"max_entries": 5},
                                    "l2": {"max_entries": 15, **l2},
                                    "freshness": {"ttl": 50, "stale_while_revalidate": 20},
                                    "l3": {"backend": "sqlite", "path": str(tmp_path / name)}},
                                   clock=clock)

    outside, under = make("outside.db"), make("under.db")
    under._search_outside = lambda *args: {}  # every search under the lock
    same_answers(outside, under, clock, n_ops=400, near_share=0.5)
    outside.close()
    under.close()


def same_answers(a: mmcache.TieredCache, b: mmcache.TieredCache, clock: FakeClock,
                 n_ops: int, near_share: float) -> None:
    """Feed ``a`` and ``b`` the same seeded puts (30%), gets (60%: ``near_share`` of all
    operations paraphrases, the rest exact) and invalidations, asserting equal answers, then
    equal tier contents."""
    rng = np.random.default_rng(11)
    for i in range(n_ops):
        key, op, cos = int(rng.integers(25)), rng.random(), float(rng.uniform(0.85, 0.99))
        results = []
        for cache in (a, b):
            if op < 0.3:
                results.append(cache.put(query(key), {"key": key, "i": i}))
            elif op < 0.9:
                hit = cache.get(near(key, cos) if op < 0.3 + near_share else query(key))
                results.append(None if hit is None else
                               (hit.value, hit.tier, hit.entry_id, hit.freshness,
                                hit.similarities))
            else:
                results.append(cache.invalidate(query(key)))
        assert results[0] == results[1], (i, results)
        clock.advance(float(rng.uniform(0, 2)))
    assert snapshot(a)[:3] == snapshot(b)[:3]


def store_cache(tmp_path: Path, shared: bool) -> tuple[mmcache.TieredCache, str]:
    """Memory L1 + L2 of one entry each over a SQLite L3 (shared: revalidating a copy needs no
    round trip for a minute, so an L1 hit needs nothing of the store), holding key 0 in every
    tier and key 1 (whose id is returned) only in L3, so its get reads the store."""
    l3 = {"backend": "sqlite", "path": str(tmp_path / "l3.db")}
    if shared:
        l3.update(shared=True, options={"max_staleness": 60})
    cache = mmcache.TieredCache({**SEMANTIC, "l1": {"max_entries": 1},
                                 "l2": {"max_entries": 1, "index": "flat"}, "l3": l3})
    slow_id = cache.put(query(1), {"key": 1})
    cache.put(query(0), {"key": 0})
    return cache, slow_id


def pause_store_reads(cache: mmcache.TieredCache,
                      entry_id: str) -> tuple[threading.Event, threading.Event]:
    """Make every L3 store read of ``entry_id`` set the first event, then wait for the second."""
    store, inside, release = cache.tier("l3").store, threading.Event(), threading.Event()
    inner = store.read

    def read(scope, read_id):
        if read_id == entry_id:
            inside.set()
            release.wait(WAIT)
        return inner(scope, read_id)
    store.read = read
    return inside, release


@pytest.mark.parametrize("lookup", ["exact", "semantic"])
@pytest.mark.parametrize("shared", [False, True], ids=["private", "shared"])
def test_an_l1_hit_is_served_while_another_thread_is_inside_the_store(
        tmp_path: Path, shared: bool, lookup: str) -> None:
    """The blocked thread reads its L3 entry by its exact key, or as a candidate of the L3
    search."""
    cache, slow_id = store_cache(tmp_path, shared)
    inside, release = pause_store_reads(cache, slow_id)
    hit = l1_hit_beside(cache, lambda: cache.get(query(1) if lookup == "exact" else near(1)),
                        inside, release, "store read")
    assert hit.tier == "l3" and hit.value == {"key": 1}
    cache.close()


@pytest.mark.parametrize("change", ["put", "invalidate", "other key"])
@pytest.mark.parametrize("lookup", ["exact", "semantic"])
@pytest.mark.parametrize("shared", [False, True], ids=["private", "shared"])
def test_a_write_while_the_store_is_read_outside_the_lock_is_never_missed(
        tmp_path: Path, shared: bool, lookup: str, change: str) -> None:
    """What a lookup read from the store outside the lock is only served while the tier's view
    of the entry is unchanged: after a put the new value is read again, after an invalidation
    it is not served; a write of another key leaves the read as it was."""
    cache, slow_id = store_cache(tmp_path, shared)
    inside, release, reads = threading.Event(), threading.Event(), []
    inner = cache._fetch

    def fetch(request):
        fetched = inner(request)
        if request.entry_id == slow_id:
            reads.append(fetched.entry)
            if len(reads) == 1:  # the first read of it pauses once it has the entry
                inside.set()
                release.wait(WAIT)
        return fetched
    cache._fetch = fetch
    hit = change_beside(cache, lambda: cache.get(query(1) if lookup == "exact" else near(1)),
                        inside, release, change)
    if change == "invalidate":
        assert hit is None and reads[1:] == [None]
    elif change == "put":
        assert hit.value == {"key": 1, "v": "new"} and len(reads) == 2
    else:
        assert (hit.tier, hit.value, len(reads)) == ("l3", {"key": 1}, 1)
    cache.close()


def reads_under_the_lock(cache: mmcache.TieredCache) -> None:
    """Make ``cache`` read its store, and purge what it found expired, with the lock held
    (as before reads moved outside it)."""
    def run(steps):
        fetched = None
        with cache._lock:
            while True:
                try:
                    fetch = next(steps) if fetched is None else steps.send(fetched)
                except StopIteration as done:
                    cache._delete_from_stores(cache._expiring.__dict__.pop("entries", {}))
                    return done.value
                fetched = cache._fetch(fetch)
    cache._locked = run


@pytest.mark.parametrize("policy", ["lru", "lfu"])
@pytest.mark.parametrize("shared", [False, True], ids=["private", "shared"])
def test_answers_with_and_without_store_reads_outside_the_lock_are_the_same(
        tmp_path: Path, shared: bool, policy: str) -> None:
    """One thread, small L1 and L2 so that most answers come from the store: the same answers,
    state and metrics whether the store is read outside the lock or under it."""
    clock = FakeClock()

    def make(name: str) -> mmcache.TieredCache:
        l3 = {"backend": "sqlite", "path": str(tmp_path / name), "policy": policy,
              **({"shared": True} if shared else {"max_entries": 12})}
        return mmcache.TieredCache({**SEMANTIC, "l1": {"max_entries": 3, "policy": policy},
                                    "l2": {"max_entries": 6, "index": "flat", "policy": policy},
                                    "freshness": {"ttl": 50, "stale_while_revalidate": 20},
                                    "l3": l3}, clock=clock)

    outside, under = make("outside.db"), make("under.db")
    reads_under_the_lock(under)
    same_answers(outside, under, clock, n_ops=300, near_share=0.4)
    counts = [(m.hits, m.misses, m.evictions)
              for m in (cache.metrics.snapshot() for cache in (outside, under))]
    assert counts[0] == counts[1]
    assert sum(n for (tier, _), n in counts[0][0].items() if tier == "l3") > 20
    outside.close()
    under.close()


def test_a_get_whose_store_read_outlives_close_raises_closed(tmp_path: Path) -> None:
    """``close`` waits for a store read in flight outside the lock; that get then raises
    MMCacheError ("closed") rather than answering from a closed cache."""
    cache, slow_id = store_cache(tmp_path, shared=False)
    inside, release = pause_store_reads(cache, slow_id)
    reading = in_thread(lambda: cache.get(query(1)))
    assert inside.wait(WAIT)
    closing = in_thread(cache.close)
    deadline = time.monotonic() + WAIT
    while not cache._closed and time.monotonic() < deadline:  # close is waiting for the read
        time.sleep(0.001)
    release.set()
    for thread, _ in (reading, closing):
        thread.join(WAIT)
    assert isinstance(reading[1][0], MMCacheError) and "closed" in str(reading[1][0])
    assert closing[1] == [None] and cache.metrics.snapshot().errors == {}


# -- writes reach the store without the cache's lock (issue 26 item 3) ------------------------
@pytest.fixture(scope="module")
def redis_server(tmp_path_factory) -> Any:
    """URL of a private redis-server for this module's tests (skipped when none can start)."""
    with private_redis(tmp_path_factory.mktemp("redis")) as url:
        yield url


def write_cache(tmp_path: Path, backend: str,
                request: pytest.FixtureRequest) -> mmcache.TieredCache:
    """Memory L1 of one entry and L2 of two over an L3 (``private``/``shared`` SQLite or
    ``redis``; shared ones revalidate copies against a view up to a minute old, so a hit above
    the store needs no round trip), holding key 2 in L2 and L3 and key 0 in every tier."""
    if backend == "redis":
        url = request.getfixturevalue("redis_server")
        l3 = {"backend": "redis", "url": url,
              "options": {"prefix": f"w{time.monotonic_ns()}", "max_staleness": 60}}
    else:
        l3 = {"backend": "sqlite", "path": str(tmp_path / "l3.db")}
        if backend == "shared":
            l3.update(shared=True, options={"max_staleness": 60})
    cache = mmcache.TieredCache({**SEMANTIC, "l1": {"max_entries": 1},
                                 "l2": {"max_entries": 2, "index": "flat"}, "l3": l3})
    cache.put(query(2), {"key": 2})
    cache.put(query(0), {"key": 0})
    return cache


def pause_store_calls(cache: mmcache.TieredCache, call: str,
                      entry_id: str) -> tuple[threading.Event, threading.Event]:
    """Make every L3 store ``write`` (``call="write"``) or ``delete`` that touches ``entry_id``
    set the first event, then wait for the second, as a black-holed store would."""
    store, inside, release = cache.tier("l3").store, threading.Event(), threading.Event()
    inner = getattr(store, call)

    def paused(items, *args, **kwargs):
        if entry_id in {(item[0] if call == "write" else item).entry_id for item in items}:
            inside.set()
            release.wait(WAIT)
        return inner(items, *args, **kwargs)
    setattr(store, call, paused)
    return inside, release


def hits_beside(cache: mmcache.TieredCache, blocked: Callable[[], Any],
                inside: threading.Event, release: threading.Event,
                lookups: list[tuple[Query, str, int]], what: str) -> Any:
    """:func:`beside`, asserting meanwhile that each of ``lookups`` (query, tier, key) is a
    hit in that tier with that key's value, without waiting for ``blocked``."""

    def hits() -> None:
        for q, tier, key in lookups:
            reader, hit = in_thread(lambda q=q: cache.get(q))
            reader.join(WAIT / 5)
            assert not reader.is_alive(), f"an {tier.upper()} hit waited for another thread's {what}"
            assert (hit[0].tier, hit[0].value) == (tier, {"key": key})
    return beside(blocked, inside, release, hits)


BACKENDS = ["private", "shared", "redis"]


@pytest.mark.parametrize("batch", [False, True], ids=["put", "put_many"])
@pytest.mark.parametrize("backend", BACKENDS)
def test_hits_are_served_while_another_thread_is_inside_a_store_write(
        tmp_path: Path, request: pytest.FixtureRequest, backend: str, batch: bool) -> None:
    """An L1 hit and an L2 exact hit do not wait for a put stuck in the store; once it lands
    its value is served."""
    cache = write_cache(tmp_path, backend, request)
    slow_id = prepare(query(1), {}).key
    inside, release = pause_store_calls(cache, "write", slow_id)
    write = (lambda: cache.put_many([query(1), query(3)], [{"key": 1}, {"key": 3}])) if batch \
        else (lambda: cache.put(query(1), {"key": 1}))
    hits_beside(cache, write, inside, release,
                [(query(0), "l1", 0), (query(2), "l2", 2)], "store write")
    assert cache.get(query(1)).value == {"key": 1}
    cache.close()


def test_a_semantic_l2_hit_is_served_while_another_thread_is_inside_a_store_write(
        tmp_path: Path, request: pytest.FixtureRequest) -> None:
    cache = write_cache(tmp_path, "private", request)
    inside, release = pause_store_calls(cache, "write", prepare(query(1), {}).key)
    hits_beside(cache, lambda: cache.put(query(1), {"key": 1}), inside, release,
                [(near(2), "l2", 2)], "store write")
    cache.close()


@pytest.mark.parametrize("backend", BACKENDS)
def test_an_invalidate_stuck_in_the_store_does_not_block_gets_of_other_keys(
        tmp_path: Path, request: pytest.FixtureRequest, backend: str) -> None:
    cache = write_cache(tmp_path, backend, request)
    slow_id = prepare(query(2), {}).key  # in L2 and L3
    inside, release = pause_store_calls(cache, "delete", slow_id)
    lookups = [(query(0), "l1", 0)] + ([(near(0), "l2", 0)] if backend == "private" else [])
    assert hits_beside(cache, lambda: cache.invalidate(query(2)), inside, release, lookups,
                       "invalidation") is True
    assert cache.get(query(2)) is None
    assert all(slow_id not in tier for tier in cache.tiers)
    cache.close()


@pytest.mark.parametrize("backend", ["private", "shared"])
def test_an_eviction_from_the_store_stuck_in_it_does_not_block_other_gets(
        tmp_path: Path, request: pytest.FixtureRequest, backend: str) -> None:
    """``evict("l3")`` deletes its victim (key 2, the least recent) without the lock: an L1
    hit is served while the store is stuck in that delete."""
    cache = write_cache(tmp_path, backend, request)
    victim = prepare(query(2), {}).key
    inside, release = pause_store_calls(cache, "delete", victim)
    assert l1_hit_beside(cache, lambda: cache.evict("l3"), inside, release, "eviction") == victim
    assert victim not in cache.tier("l3") and cache.metrics.snapshot().evictions["l3"] == 1
    cache.close()


@pytest.mark.parametrize("shared", [False, True], ids=["private", "shared"])
def test_the_purge_of_an_expired_entry_stuck_in_the_store_does_not_block_other_gets(
        tmp_path: Path, shared: bool) -> None:
    """A get that finds an entry past every window purges it from the store after its
    lookup, without the lock: an L1 hit of another key is served meanwhile, and the entry
    is gone from every tier once the store answers."""
    clock = FakeClock()
    l3 = {"backend": "sqlite", "path": str(tmp_path / "l3.db"), "shared": shared,
          "options": {"max_staleness": 60} if shared else {}}  # an L1 hit needs no round trip
    cache = mmcache.TieredCache({**SEMANTIC, "l2": {"index": "flat"}, "l3": l3}, clock=clock)
    expired_id = cache.put(query(1), {"key": 1}, ttl=10)
    cache.put(query(0), {"key": 0})
    clock.advance(10_000)
    inside, release = pause_store_calls(cache, "delete", expired_id)
    assert l1_hit_beside(cache, lambda: cache.get(query(1)), inside, release, "purge") is None
    assert all(expired_id not in tier for tier in cache.tiers)
    cache.close()


@pytest.mark.parametrize("change", ["put", "invalidate"])
@pytest.mark.parametrize("backend", ["private", "shared"])
def test_a_copy_above_the_store_is_not_served_while_a_write_of_its_key_is_in_flight(
        tmp_path: Path, request: pytest.FixtureRequest, backend: str, change: str) -> None:
    """Once a write has landed in the store, no get serves the copy it replaces from L1 or L2,
    even before the write is applied there: a get of the key meanwhile reads the store."""
    cache = write_cache(tmp_path, backend, request)
    tier, landed, release = cache.tier("l3"), threading.Event(), threading.Event()
    call = "put_landed" if change == "put" else "delete_landed"
    inner = getattr(tier, call)

    def land(*args, **kwargs):  # the store call returns, then waits before it is applied
        done = inner(*args, **kwargs)
        landed.set()
        release.wait(WAIT)
        return done
    setattr(tier, call, land)
    write = (lambda: cache.put(query(0), {"key": 0, "v": "new"})) if change == "put" \
        else (lambda: cache.invalidate(query(0)))
    held = in_thread(write)
    try:
        assert landed.wait(WAIT)
        hit = cache.get(query(0))
        assert (None if hit is None else hit.value) == \
            ({"key": 0, "v": "new"} if change == "put" else None)
    finally:
        release.set()
        held[0].join(WAIT)
    assert not isinstance(held[1][0], Exception), held[1][0]
    hit = cache.get(query(0))
    assert (None if hit is None else (hit.tier, hit.value)) == \
        (("l1", {"key": 0, "v": "new"}) if change == "put" else None)
    cache.close()


@pytest.mark.parametrize("second", ["put", "invalidate"])
@pytest.mark.parametrize("backend", ["private", "shared"])
def test_a_write_applied_after_a_later_one_of_its_key_does_not_undo_it(
        tmp_path: Path, request: pytest.FixtureRequest, backend: str, second: str) -> None:
    """A put lands in the store, then waits; a second write of the same key lands and is
    applied; the first one's late apply leaves the second's result in every tier."""
    cache = write_cache(tmp_path, backend, request)
    tier, landed, release = cache.tier("l3"), threading.Event(), threading.Event()
    inner = tier.put_landed

    def land(entries):
        done = inner(entries)
        if entries[0].value == {"key": 1, "v": "first"}:
            landed.set()
            release.wait(WAIT)
        return done
    tier.put_landed = land
    first = in_thread(lambda: cache.put(query(1), {"key": 1, "v": "first"}))
    try:
        assert landed.wait(WAIT)
        if second == "put":
            assert cache.put(query(1), {"key": 1, "v": "second"}) is not None
        else:
            assert cache.invalidate(query(1)) is True
    finally:
        release.set()
        first[0].join(WAIT)
    assert first[1][0] == prepare(query(1), {}).key
    expected = {"key": 1, "v": "second"} if second == "put" else None
    for _ in range(2):  # from the store, then from the copy above it
        hit = cache.get(query(1))
        assert (None if hit is None else hit.value) == expected
    stored = {t.name: [(e.value, e.version) for e in t.scan()
                       if e.entry_id == prepare(query(1), {}).key] for t in cache.tiers}
    if second == "put":
        version = stored["l3"][0][1]
        assert all(s == [(expected, version)] for s in stored.values()), stored
    else:
        assert all(s == [] for s in stored.values()), stored
    cache.close()


def same_key_puts(cache: mmcache.TieredCache, seed: int, start: threading.Barrier,
                  put_values: list, errors: list[str]) -> None:
    """Puts of key 1 (some in batches) and gets of it; a get may miss (its store read was
    overtaken by other threads' writes of the key on every try) but never serves a value not
    put, nor one of this thread's that its own later put had replaced."""
    start.wait()
    try:
        for i in range(40):
            value = {"key": 1, "by": seed, "i": i}
            put_values.append(value)  # before the put: a get may see it as soon as it lands
            if i % 5 == 4:
                cache.put_many([query(1), query(4 + seed)], [value, {"key": 4 + seed}])
            else:
                cache.put(query(1), value)
            hit = cache.get(query(1))
            if hit is not None and (hit.value not in put_values or
                                    (hit.value["by"] == seed and hit.value["i"] < i)):
                errors.append(f"thread {seed} op {i}: key 1 answered {hit.value}")
    except Exception as exc:  # noqa: BLE001 - every failure of a thread is the finding
        errors.append(f"thread {seed}: {exc!r}")


def jitter_store(cache: mmcache.TieredCache, seed: int) -> None:
    """Make the L3 store's writes, deletes and reads pause for a random short while, now and
    then (a slow store), so that threads' store calls and their applies interleave."""
    store, rng, lock = cache.tier("l3").store, np.random.default_rng(seed), threading.Lock()
    for name in ("write", "delete", "read"):
        inner = getattr(store, name)

        def slow(*args, inner=inner, **kwargs):
            with lock:
                pause = float(rng.random()) < 0.3
            if pause:
                time.sleep(0.002)
            return inner(*args, **kwargs)
        setattr(store, name, slow)


@pytest.mark.parametrize("backend", ["private", "shared"])
def test_concurrent_puts_of_one_key_end_with_one_value_everywhere(
        tmp_path: Path, request: pytest.FixtureRequest, backend: str) -> None:
    """Threads put the same key at once through a slow store: every get serves a value put,
    and at the end every tier holds the store's version of the key, which a get serves."""
    cache = write_cache(tmp_path, backend, request)
    jitter_store(cache, 5)
    put_values: list = []
    assert run_threads(cache, same_key_puts, put_values) == []
    key = prepare(query(1), {}).key
    stored = {t.name: [(e.value, e.version) for e in t.scan() if e.entry_id == key]
              for t in cache.tiers}
    [(value, version)] = stored["l3"]
    assert value in put_values and version == cache.tier("l3").known_version(key)
    assert all(s in ([], [(value, version)]) for s in stored.values()), stored
    assert cache.get(query(1)).value == value and cache.get(query(1)).value == value
    cache.close()


def storm(cache: mmcache.TieredCache, seed: int, start: threading.Barrier,
          counts: list, errors: list[str]) -> None:
    """Overlapping puts, batches, invalidations and gets of a few keys; what each did is
    counted in ``counts`` (items written, gets, invalidations that found the key)."""
    rng = np.random.default_rng(100 + seed)
    start.wait()
    mine = Counter()
    try:
        for i in range(120):
            key, op = int(rng.integers(8)), rng.random()
            if op < 0.35:
                mine["written"] += cache.put(query(key), {"key": key, "by": seed, "i": i}) \
                    is not None
            elif op < 0.45:
                keys = [int(k) for k in rng.integers(8, size=3)]
                ids = cache.put_many([query(k) for k in keys], [{"key": k} for k in keys])
                mine["written"] += sum(i is not None for i in ids)
            elif op < 0.85:
                hit = cache.get(query(key))
                mine["gets"] += 1
                if hit is not None and hit.value["key"] != key:
                    errors.append(f"thread {seed} op {i}: key {key} answered {hit.value}")
            else:
                cache.invalidate(query(key))
    except Exception as exc:  # noqa: BLE001 - every failure of a thread is the finding
        errors.append(f"thread {seed}: {exc!r}")
    counts.append(mine)


@pytest.mark.parametrize("backend", ["private", "shared"])
def test_usage_and_metrics_are_exact_after_a_storm_of_writes_through_a_slow_store(
        tmp_path: Path, request: pytest.FixtureRequest, backend: str) -> None:
    cache = write_cache(tmp_path, backend, request)
    cache.metrics.reset()
    jitter_store(cache, 9)
    counts: list = []
    assert run_threads(cache, storm, counts) == []
    total = sum(counts, Counter())
    for tier in cache.tiers:
        entries = list(tier.scan())
        assert cache.usage()[tier.name] == (len(entries), sum(e.size for e in entries))
        if tier.semantic:
            index = tier.index.index("shared", "text")
            assert {e.entry_id for e in entries} == (set() if index is None else set(index._slot))
    snap = cache.metrics.snapshot()
    assert snap.lookups == total["gets"] == snap.latency["get"].count
    assert snap.puts["l3"] == total["written"]  # the store (unlimited) admits every item
    assert not snap.errors and not snap.not_stored
    l3 = {e.entry_id: (e.version, e.value) for e in cache.tier("l3").scan()}
    for tier in cache.tiers[:2]:  # every copy above the store is the store's version
        for e in tier.scan():
            assert l3.get(e.entry_id) == (e.version, e.value), (tier.name, e.entry_id)
    assert not cache._writing and not cache._applied and not cache._reserved_dims
    cache.close()


@pytest.mark.parametrize("shared", [False, True], ids=["private", "shared"])
def test_an_l1_hit_is_served_while_another_thread_s_feedback_asks_the_store(
        tmp_path: Path, shared: bool) -> None:
    """Feedback on a semantic hit whose entry is now only in L3 asks the store whether it is
    still stored, without the cache's lock; the label still reaches the rule."""
    cache, slow_id = store_cache(tmp_path, shared)
    hit = cache.get(near(1))
    assert (hit.tier, hit.entry_id) == ("l3", slow_id)
    cache.put(query(0), {"key": 0})  # key 1 leaves L1 and L2 again
    labelled = []
    cache.thresholds.feedback = lambda *args, **kwargs: labelled.append(args[1])
    inside, release = pause_store_reads(cache, slow_id)
    assert l1_hit_beside(cache, lambda: cache.feedback(hit, True), inside, release,
                         "feedback") is True
    assert labelled == [slow_id]
    cache.close()


def test_close_waits_for_a_write_in_flight_and_refuses_new_ones(tmp_path: Path,
                                                                request: pytest.FixtureRequest
                                                                ) -> None:
    cache = write_cache(tmp_path, "private", request)
    inside, release = pause_store_calls(cache, "write", prepare(query(1), {}).key)
    writing = in_thread(lambda: cache.put(query(1), {"key": 1}))
    assert inside.wait(WAIT)
    closing = in_thread(cache.close)
    deadline = time.monotonic() + WAIT
    while not cache._closing and time.monotonic() < deadline:
        time.sleep(0.001)
    with pytest.raises(MMCacheError, match="closed"):
        cache.put(query(3), {"key": 3})
    closing[0].join(WAIT / 5)
    assert closing[0].is_alive(), "close did not wait for the write in flight"
    release.set()
    for thread, _ in (writing, closing):
        thread.join(WAIT)
    assert writing[1] == [prepare(query(1), {}).key] and closing[1] == [None]
    reopened = write_cache(tmp_path, "private", request)
    assert reopened.get(query(1)).value == {"key": 1} and reopened.get(query(3)) is None
    reopened.close()


def test_an_invalidate_the_store_fails_raises_and_drops_the_copies_above_it(
        tmp_path: Path, request: pytest.FixtureRequest) -> None:
    cache = write_cache(tmp_path, "private", request)
    key = prepare(query(0), {}).key

    def fail(removed):
        raise StorageError("the store is unreachable")
    cache.tier("l3").store.delete = fail
    with pytest.raises(StorageError):
        cache.invalidate(query(0))
    assert key not in cache.tier("l1") and key not in cache.tier("l2") and key in cache.tier("l3")
    assert not cache._writing and cache.get(query(0)).tier == "l3"  # what the store holds
    for tier in cache.tiers:
        entries = list(tier.scan())
        assert cache.usage()[tier.name] == (len(entries), sum(e.size for e in entries))
    cache.close()


# -- store reads are answered beside a write stuck in the store (issue 26 item 3) -------------
def read_cache(tmp_path: Path, backend: str,
               request: pytest.FixtureRequest) -> mmcache.TieredCache:
    """Memory L1 of one entry and L2 of two over an L3 (``private``/``shared`` SQLite or
    ``redis``) that revalidates every copy against the store (max_staleness 0), holding key 0
    in every tier, key 4 in L2 and L3, and keys 2 and 5 in L3 only."""
    if backend == "redis":
        l3 = {"backend": "redis", "url": request.getfixturevalue("redis_server"),
              "options": {"prefix": f"r{time.monotonic_ns()}"}}
    else:
        l3 = {"backend": "sqlite", "path": str(tmp_path / "l3.db"),
              "shared": backend == "shared"}
    cache = mmcache.TieredCache({**SEMANTIC, "l1": {"max_entries": 1},
                                 "l2": {"max_entries": 2, "index": "flat"}, "l3": l3})
    for key in (2, 5, 4, 0):
        cache.put(query(key), {"key": key})
    return cache


class _Rollback:
    """``set()`` ends the write transaction of another connection (the ``release`` of
    :func:`beside`)."""

    def __init__(self, db: Any) -> None:
        self.db = db

    def set(self) -> None:
        self.db.execute("ROLLBACK")
        self.db.close()


def block_store_writes(cache: mmcache.TieredCache, backend: str,
                       entry_id: str) -> tuple[threading.Event, Any]:
    """Make the L3 store write of ``entry_id`` stuck: on SQLite behind another connection
    holding the file's write lock (as another process would; the write waits in SQLite's busy
    handler), on Redis in the store call (a black-holed connection). The first is set once the
    write is on its way in; ``release.set()`` unblocks it."""
    if backend == "redis":
        return pause_store_calls(cache, "write", entry_id)
    import sqlite3
    store, inside = cache.tier("l3").store, threading.Event()
    blocker = sqlite3.connect(str(store.path), isolation_level=None, check_same_thread=False)
    blocker.execute("BEGIN IMMEDIATE")
    inner = store.write

    def write(items, *args, **kwargs):
        if entry_id in {item[0].entry_id for item in items}:
            inside.set()
        return inner(items, *args, **kwargs)
    store.write = write
    return inside, _Rollback(blocker)


@pytest.mark.parametrize("backend", BACKENDS)
def test_gets_that_need_the_store_are_answered_while_a_write_is_stuck_in_it(
        tmp_path: Path, request: pytest.FixtureRequest, backend: str) -> None:
    """An exact L3 hit, a semantic L3 hit and an L1 hit revalidated against the store (a
    shared one) read the store while another thread's put waits in it; once the put lands
    its value is served."""
    cache = read_cache(tmp_path, backend, request)
    slow_id = prepare(query(1), {}).key
    inside, release = block_store_writes(cache, backend, slow_id)
    hits_beside(cache, lambda: cache.put(query(1), {"key": 1}), inside, release,
                [(query(0), "l1", 0), (query(2), "l3", 2), (near(5), "l3", 5)],
                "store write")
    assert cache.get(query(1)).value == {"key": 1}
    for tier in cache.tiers:
        entries = list(tier.scan())
        assert cache.usage()[tier.name] == (len(entries), sum(e.size for e in entries))
    cache.close()


@pytest.mark.parametrize("backend", ["shared", "redis"])
def test_a_change_replayed_while_a_write_is_stuck_is_kept_after_it_lands(
        tmp_path: Path, request: pytest.FixtureRequest, backend: str) -> None:
    """While this cache's put of key 1 waits in the store, another client invalidates key 2
    and writes key 1 after it; a get meanwhile replays both. Once the put lands, the view
    keeps the later write of key 1 (not this put's) and forgets key 2: every copy served is
    the store's."""
    cache = read_cache(tmp_path, backend, request)
    l3 = cache.tier("l3")
    twin = type(l3)(**({"path": l3.path, "shared": True} if backend == "shared"
                       else {"url": l3.url, "prefix": l3.prefix}))
    slow = prepare(query(1), {})
    inner, landed, release = l3.store.write, threading.Event(), threading.Event()

    def write(items, *args, **kwargs):  # this put lands, then waits before it returns
        done = inner(items, *args, **kwargs)
        if slow.key in {item[0].entry_id for item in items}:
            landed.set()
            release.wait(WAIT)
        return done
    l3.store.write = write
    held = in_thread(lambda: cache.put(query(1), {"key": 1, "by": "stuck"}))
    try:
        assert landed.wait(WAIT)
        assert twin.delete(prepare(query(2), {}).key)
        later = dataclasses.replace(next(e for e in twin.scan() if e.entry_id == slow.key),
                                    value={"key": 1, "by": "later"}, version=None)
        twin.put(later)
        reader, hit = in_thread(lambda: cache.get(query(2)))
        reader.join(WAIT / 5)
        assert not reader.is_alive(), "a get waited for the store write in flight"
        assert hit == [None]
    finally:
        release.set()
        held[0].join(WAIT)
    assert not isinstance(held[1][0], Exception), held[1][0]
    assert l3.known_version(slow.key) == later.version
    assert l3.known_version(prepare(query(2), {}).key) is None
    hit = cache.get(query(1))
    assert hit.value == {"key": 1, "by": "later"}
    entries = list(l3.scan())
    assert cache.usage()["l3"] == (len(entries), sum(e.size for e in entries))
    assert sorted(l3.ids()) == sorted(e.entry_id for e in entries)
    twin.close()
    cache.close()
