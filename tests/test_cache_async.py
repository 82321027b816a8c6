"""The asyncio twins (``aget``, ``aput``, ``aput_many``, ``afeedback``, ``aclose``, ``async with``)
under a running event loop: the same answers and errors as the synchronous calls they run, a loop
that keeps ticking while a call blocks, and defined outcomes for cancellation and close."""

from __future__ import annotations

import asyncio
import contextvars
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Awaitable, Callable

import numpy as np
import pytest

import mmcache
from mmcache.encoders.base import HashingTestEncoder
from mmcache.errors import (ConfigError, InvalidEmbeddingError, InvalidInputError, MMCacheError,
                            MissingScopeError, SerializationError, StorageError, UnknownHitError)
from mmcache.inputs import prepare
from mmcache.lab.testing import FakeClock, near, unit
from mmcache.types import Hit, Query

from cache_helpers import snapshot

WAIT = 5.0  # seconds any wait lasts at most: a regression fails, it never hangs
DIM = 16
RNG = np.random.default_rng(27)
VECTORS = [unit(RNG, DIM) for _ in range(24)]


def run(coro: Awaitable[Any]) -> Any:
    """Run ``coro`` on a fresh event loop, failing (not hanging) after 60 s."""
    return asyncio.run(asyncio.wait_for(coro, 60))


def async_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("mmcache-async")]


def key_query(key: int, scope: str = "s") -> Query:
    return Query(embeddings={"text": VECTORS[key]}, scope=scope)


def stored_ids(path: Path) -> set[str]:
    """The entry ids a closed cache left in its SQLite file (reopened without L1/L2)."""
    with mmcache.TieredCache({"l1": {"enabled": False}, "l2": {"enabled": False},
                              "l3": {"backend": "sqlite", "path": str(path)}}) as reopened:
        return set(reopened.tier("l3").ids())


def tier_state(cache: mmcache.TieredCache) -> Any:
    """The snapshot's order-independent part: each tier's entries, usage, guard, dims, covers."""
    tiers, _orders, usage, guard, _rule, dims, covered, _served = snapshot(cache)
    return tiers, usage, guard, dims, covered


class GatedEncoder(HashingTestEncoder):
    """Encodes like its parent, but a text starting with "slow" waits for ``release``."""

    def __init__(self) -> None:
        super().__init__("text", dim=DIM)
        self.entered, self.release = threading.Event(), threading.Event()

    def encode(self, inputs):
        if any(str(x).startswith("slow") for x in inputs):
            self.entered.set()
            self.release.wait(WAIT)
        return super().encode(inputs)


async def until(event: threading.Event) -> None:
    """Wait for a thread's event without blocking the loop."""
    deadline = time.monotonic() + WAIT
    while not event.is_set():
        assert time.monotonic() < deadline, "the worker thread never got there"
        await asyncio.sleep(0.005)


class Heartbeat:
    """A task ticking every 10 ms; ``max_gap`` is the longest the loop kept it waiting."""

    def __init__(self) -> None:
        self.gaps: list[float] = []
        self._stop = asyncio.Event()
        self._task = asyncio.create_task(self._beat())

    async def _beat(self) -> None:
        last = time.perf_counter()
        while not self._stop.is_set():
            await asyncio.sleep(0.01)
            now = time.perf_counter()
            self.gaps.append(now - last)
            last = now

    async def stop(self) -> float:
        self._stop.set()
        await self._task
        return max(self.gaps)


# -- many tasks, one cache: the state sequential sync calls give -------------------------------
CONFIG = {"l1": {"max_entries": 1000}, "l2": {"max_entries": 1000, "index": "flat"}}


def sqlite_config(path: Path) -> dict[str, Any]:
    return {**CONFIG, "l3": {"backend": "sqlite", "path": str(path), "max_entries": 1000}}


def test_concurrent_aputs_and_agets_on_the_same_keys_end_as_sequential_sync_calls(tmp_path):
    """16 tasks each put every key (some through aput_many) and get each twice, in orders of
    their own, with a thread switch forced every microsecond; a key's value does not depend on
    its writer, so the final state must equal one sync put per key in a fresh cache."""
    keys, tasks = len(VECTORS), 16
    value = {k: {"key": k, "pad": "p" * k} for k in range(keys)}
    clock = FakeClock()
    reference = mmcache.TieredCache(sqlite_config(tmp_path / "ref.db"), clock=clock)
    for k in range(keys):
        reference.put(key_query(k), value[k], hints={"cost": 1.0 + k})
    workers: set[str] = set()
    wrong: list[str] = []

    async def worker(cache: mmcache.TieredCache, seed: int) -> None:
        rng = np.random.default_rng(seed)
        ops = [("put", int(k)) for k in rng.permutation(keys)] + \
              [("get", int(k)) for k in rng.integers(keys, size=2 * keys)]
        rng.shuffle(ops)
        batch: list[int] = []
        for op, k in ops:
            if op == "get":
                hit = await cache.aget(key_query(k))
                if hit is not None and hit.value != value[k]:
                    wrong.append(f"task {seed}: key {k} answered {hit.value}")
            elif rng.random() < 0.3:
                batch.append(k)
                if len(batch) == 3:
                    await cache.aput_many([key_query(b) for b in batch], [value[b] for b in batch],
                                          hints=[{"cost": 1.0 + b} for b in batch])
                    batch = []
            else:
                assert await cache.aput(key_query(k), value[k], hints={"cost": 1.0 + k}) == \
                    prepare(key_query(k), {}).key
        if batch:
            await cache.aput_many([key_query(b) for b in batch], [value[b] for b in batch],
                                  hints=[{"cost": 1.0 + b} for b in batch])

    async def main() -> mmcache.TieredCache:
        cache = mmcache.TieredCache(sqlite_config(tmp_path / "async.db"), clock=clock)
        cache.after_get = lambda hit: workers.add(threading.current_thread().name)
        await asyncio.gather(*(worker(cache, seed) for seed in range(tasks)))
        return cache

    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        cache = run(main())
    finally:
        sys.setswitchinterval(interval)
    assert wrong == []
    assert len(workers) > 1 and all(w.startswith("mmcache-async") for w in workers), workers
    assert tier_state(cache) == tier_state(reference)
    for k in range(keys):
        hit = cache.get(key_query(k))
        assert hit.tier == "l1" and hit.value == value[k]
    cache.close()
    reference.close()


def test_concurrent_writers_of_different_values_leave_every_tier_agreeing(tmp_path):
    """Writers race on the same keys with values of their own: whichever wins a key, L1, L2 and
    L3 hold that same value (no torn write through the tiers), as some serial order would."""
    keys, tasks = 8, 12

    async def main() -> mmcache.TieredCache:
        cache = mmcache.TieredCache(sqlite_config(tmp_path / "c.db"))
        await asyncio.gather(*(cache.aput(key_query(k), {"key": k, "by": t})
                               for t in range(tasks) for k in range(keys)))
        return cache

    cache = run(main())
    for k in range(keys):
        key = prepare(key_query(k), {}).key
        values = [tier.get("s", key).value for tier in cache.tiers]
        assert values[0]["key"] == k and values == [values[0]] * len(values), values
        assert cache.get(key_query(k)).value == values[0]
    cache.close()


# -- the loop is never blocked -----------------------------------------------------------------
SLOW_S = 0.3


def judged_cache(verifier: Callable[[Query, Any], float], **kwargs: Any) -> mmcache.TieredCache:
    """A cache whose every semantic candidate goes to ``verifier``; one entry is stored."""
    cache = mmcache.TieredCache({"l2": {"index": "flat"},
                                 "thresholds": {"rule": "static", "delta": {"text": 0.2},
                                                "verifier_band": 1.0}},
                                verifier=verifier, **kwargs)
    cache.put(key_query(0), "answer")
    return cache


def slow_judge(query: Query, entry: Any) -> float:
    time.sleep(SLOW_S)
    return 1.0


def test_the_loop_keeps_ticking_while_slow_verifier_calls_run():
    cache = judged_cache(slow_judge)
    queries = [Query(embeddings={"text": near(RNG, VECTORS[0], 0.95)}, scope="s")
               for _ in range(4)]

    async def main() -> tuple[list[Hit | None], float, float]:
        beat = Heartbeat()
        start = time.perf_counter()
        hits = await asyncio.gather(*(cache.aget(q) for q in queries))
        wall = time.perf_counter() - start
        return hits, wall, await beat.stop()

    hits, wall, gap = run(main())
    assert all(h is not None and h.value == "answer" and h.tier == "l2" for h in hits)
    assert gap < SLOW_S / 2, f"the loop stalled {gap:.3f} s behind a verifier call"
    assert wall < 3 * SLOW_S, f"4 judged lookups took {wall:.2f} s: they did not overlap"
    cache.close()


def test_the_loop_keeps_ticking_while_a_slow_store_write_holds_the_lock(tmp_path, monkeypatch):
    cache = mmcache.TieredCache(sqlite_config(tmp_path / "c.db"))
    store_put = cache.tier("l3").put_many

    def slow_put_many(entries):
        time.sleep(SLOW_S)
        return store_put(entries)

    monkeypatch.setattr(cache.tier("l3"), "put_many", slow_put_many)

    async def main() -> float:
        beat = Heartbeat()
        await asyncio.gather(cache.aput(key_query(1), "one"), cache.aput(key_query(2), "two"))
        return await beat.stop()

    gap = run(main())
    assert gap < SLOW_S / 2, f"the loop stalled {gap:.3f} s behind a store write"
    assert cache.get(key_query(1)).value == "one" and cache.get(key_query(2)).value == "two"
    cache.close()


def test_stalled_lookups_leave_the_loops_default_executor_free():
    """The twins run on the cache's executor, not the loop's default one: while more judged
    lookups than it has workers wait on a slow verifier, an unrelated ``run_in_executor(None,
    ...)`` (what ``getaddrinfo`` and ``asyncio.to_thread`` use) still runs at once."""
    cache = judged_cache(slow_judge, async_workers=2)
    queries = [Query(embeddings={"text": near(RNG, VECTORS[0], 0.95)}, scope="s")
               for _ in range(8)]

    async def main() -> float:
        loop = asyncio.get_running_loop()
        with ThreadPoolExecutor(2) as default:
            loop.set_default_executor(default)
            lookups = asyncio.gather(*(cache.aget(q) for q in queries))
            await asyncio.sleep(0.05)
            start = time.perf_counter()
            await loop.run_in_executor(None, lambda: None)
            waited = time.perf_counter() - start
            assert all(h is not None for h in await lookups)
            return waited

    waited = run(main())
    assert waited < SLOW_S / 2, f"an unrelated default-executor job waited {waited:.3f} s"
    cache.close()


def test_the_executor_is_bounded_by_async_workers():
    running, most = [0], [0]
    count = threading.Lock()

    def judge(query: Query, entry: Any) -> float:
        with count:
            running[0] += 1
            most[0] = max(most[0], running[0])
        time.sleep(0.05)
        with count:
            running[0] -= 1
        return 1.0

    cache = judged_cache(judge, async_workers=2)
    queries = [Query(embeddings={"text": near(RNG, VECTORS[0], 0.95)}, scope="s")
               for _ in range(8)]

    async def main() -> list[Hit | None]:
        async with cache:
            return await asyncio.gather(*(cache.aget(q) for q in queries))

    assert all(h is not None for h in run(main()))
    assert most[0] == 2
    for bad in (0, -1, True, 2.0, "2"):
        with pytest.raises(ConfigError, match="async_workers"):
            mmcache.TieredCache(async_workers=bad)


def test_a_cache_used_only_synchronously_starts_no_thread():
    before = set(async_threads())
    with mmcache.TieredCache() as cache:
        cache.put(key_query(0), "x")
        assert cache.get(key_query(0)).value == "x"
        assert set(async_threads()) == before


def test_the_call_runs_in_the_callers_contextvars():
    request = contextvars.ContextVar("request", default="none")
    seen: list[str] = []

    def judge(query: Query, entry: Any) -> float:
        seen.append(request.get())
        return 1.0

    cache = judged_cache(judge)

    async def one(name: str) -> None:
        request.set(name)
        await cache.aget(Query(embeddings={"text": near(RNG, VECTORS[0], 0.95)}, scope="s"))

    async def main() -> None:
        async with cache:
            await asyncio.gather(one("a"), one("b"))

    run(main())
    assert sorted(seen) == ["a", "b"]


# -- the same typed errors, and the cache left as it was ---------------------------------------
@pytest.fixture
def filled(tmp_path):
    cache = mmcache.TieredCache(sqlite_config(tmp_path / "c.db"))
    cache.put(key_query(0), {"v": 0})
    cache.put(key_query(1), "one")
    yield cache
    cache.close()


NAN = np.full(DIM, np.nan, np.float32)
BAD_CALLS: dict[str, tuple[str, tuple, dict, type[Exception]]] = {
    "put nan embedding": ("put", (Query(embeddings={"text": NAN}, scope="s"), "x"), {},
                          InvalidEmbeddingError),
    "put wrong dimension": ("put", (Query(embeddings={"text": unit(RNG, DIM + 1)}, scope="s"),
                                    "x"), {}, InvalidEmbeddingError),
    "put unserialisable value": ("put", (key_query(5), object()), {}, SerializationError),
    "put bad ttl": ("put", (key_query(5), "x"), {"ttl": -1}, InvalidInputError),
    "put bad hint": ("put", (key_query(5), "x"), {"hints": {"cost": 0}}, InvalidInputError),
    "put no scope": ("put", (Query(embeddings={"text": VECTORS[5]}, scope=None), "x"), {},
                     MissingScopeError),
    "put_many bad item": ("put_many", ([key_query(5), Query(embeddings={"text": NAN}, scope="s")],
                                       ["x", "y"]), {}, InvalidEmbeddingError),
    "put_many lengths": ("put_many", ([key_query(5)], ["x", "y"]), {}, InvalidInputError),
    "get bad degrade": ("get", (key_query(0),), {"degrade": "keyword-proxy"}, ConfigError),
    "get nan embedding": ("get", (Query(embeddings={"text": NAN}, scope="s"),), {},
                          InvalidEmbeddingError),
    "feedback not a hit": ("feedback", ("not a hit", True), {}, UnknownHitError),
    "feedback non-bool": ("feedback", (Hit("x", "l1", 1.0, "id"), 1), {}, InvalidInputError),
}


@pytest.mark.parametrize("case", list(BAD_CALLS), ids=list(BAD_CALLS))
def test_async_twins_raise_the_sync_calls_typed_errors_and_change_nothing(filled, case):
    name, args, kwargs, expected = BAD_CALLS[case]
    before = snapshot(filled)
    with pytest.raises(expected) as sync_error:
        getattr(filled, name)(*args, **kwargs)
    assert snapshot(filled) == before
    with pytest.raises(expected) as async_error:
        run(getattr(filled, "a" + name)(*args, **kwargs))
    assert type(async_error.value) is type(sync_error.value)
    assert str(async_error.value) == str(sync_error.value)
    assert snapshot(filled) == before


def test_a_failing_store_raises_its_own_error_object_and_leaves_the_tiers_unchanged(
        filled, monkeypatch):
    failure = StorageError("disk full (simulated)")

    def broken(entries):
        raise failure

    before = snapshot(filled)
    monkeypatch.setattr(filled.tier("l3"), "put_many", broken)
    assert run(filled.aput(key_query(5), "x")) is None       # degraded by default
    filled.config.l3.on_error = "raise"
    with pytest.raises(StorageError) as raised:
        run(filled.aput(key_query(5), "x"))
    assert raised.value is failure
    with pytest.raises(StorageError):
        run(filled.aput_many([key_query(6), key_query(7)], ["x", "y"]))
    monkeypatch.undo()
    assert snapshot(filled) == before


def test_afeedback_labels_a_hit_aget_served():
    cache = judged_cache(lambda query, entry: 1.0)

    async def main() -> None:
        async with cache:
            hit = await cache.aget(Query(embeddings={"text": near(RNG, VECTORS[0], 0.95)},
                                         scope="s"))
            assert hit is not None and hit.tier == "l2"
            assert await cache.afeedback(hit, correct=True) is True
            with pytest.raises(UnknownHitError):
                await cache.afeedback(hit, correct=True)   # labelled once

    run(main())


# -- async with, aclose and close --------------------------------------------------------------
def test_async_with_closes_the_cache_and_its_threads(tmp_path):
    path = tmp_path / "c.db"

    async def main() -> mmcache.TieredCache:
        async with mmcache.TieredCache(sqlite_config(path)) as cache:
            assert await cache.aput(key_query(3), "three") is not None
            assert (await cache.aget(key_query(3))).value == "three"
            assert async_threads()
        assert not async_threads()
        with pytest.raises(MMCacheError, match="closed"):
            await cache.aget(key_query(3))
        return cache

    cache = run(main())
    with pytest.raises(MMCacheError, match="closed"):
        cache.get(key_query(3))
    assert prepare(key_query(3), {}).key in stored_ids(path)


def test_async_with_closes_when_its_body_raises(tmp_path):
    async def main() -> mmcache.TieredCache:
        cache = mmcache.TieredCache(sqlite_config(tmp_path / "c.db"))
        with pytest.raises(KeyError):
            async with cache:
                await cache.aput(key_query(3), "three")
                raise KeyError("the body failed")
        return cache

    cache = run(main())
    with pytest.raises(MMCacheError, match="closed"):
        cache.get(key_query(3))
    assert not async_threads()


def test_aclose_waits_for_calls_in_flight_and_refuses_new_ones(tmp_path):
    encoder = GatedEncoder()
    path = tmp_path / "c.db"
    slow = Query(text="slow question", scope="s")

    async def main() -> None:
        cache = mmcache.TieredCache(sqlite_config(path), encoders={"text": encoder})
        put = asyncio.create_task(cache.aput(slow, "slow answer"))
        await until(encoder.entered)
        closing = asyncio.create_task(cache.aclose())
        await asyncio.sleep(0.1)
        assert not closing.done(), "aclose did not wait for the put in flight"
        with pytest.raises(MMCacheError, match="closing"):
            await cache.aget(key_query(0))
        assert cache.get(key_query(0)) is None   # the sync side stays open until the close
        encoder.release.set()
        assert await put == prepare(slow, {}).key
        await closing
        assert not async_threads()
        with pytest.raises(MMCacheError, match="closed"):
            cache.get(slow)

    run(main())
    assert prepare(slow, {}).key in stored_ids(path)


def test_close_while_calls_are_in_flight_fails_them_and_stores_nothing(tmp_path):
    """A sync close() does not wait: the call blocked in its encoder and the call queued
    behind it (one worker) both raise MMCacheError, and neither reached the store."""
    encoder = GatedEncoder()
    path = tmp_path / "c.db"
    slow, queued = Query(text="slow question", scope="s"), key_query(4)

    async def main() -> None:
        cache = mmcache.TieredCache(sqlite_config(path), encoders={"text": encoder},
                                    async_workers=1)
        first = asyncio.create_task(cache.aput(slow, "slow answer"))
        await until(encoder.entered)
        second = asyncio.create_task(cache.aput(queued, "queued answer"))
        await asyncio.sleep(0.05)
        start = time.perf_counter()
        cache.close()
        assert time.perf_counter() - start < 1.0, "close waited for the calls in flight"
        encoder.release.set()
        for task in (first, second):
            with pytest.raises(MMCacheError, match="closed"):
                await task
        deadline = time.monotonic() + WAIT
        while async_threads() and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        assert not async_threads(), "the executor's threads outlived close"
        await cache.aclose()   # a no-op on a closed cache

    run(main())
    assert not {prepare(slow, {}).key, prepare(queued, {}).key} & stored_ids(path)


# -- cancellation -------------------------------------------------------------------------------
def test_a_cancelled_aput_is_still_stored_running_or_queued(tmp_path):
    """Cancelling the caller abandons only the wait: the put blocked in its encoder and the one
    queued behind it (one worker) both run to the end and are stored; a cancelled aget still
    counts its lookup. The cancellation itself does not wait for the thread."""
    encoder = GatedEncoder()
    path = tmp_path / "c.db"
    slow, queued = Query(text="slow question", scope="s"), key_query(4)

    async def main() -> None:
        cache = mmcache.TieredCache(sqlite_config(path), encoders={"text": encoder},
                                    async_workers=1)
        first = asyncio.create_task(cache.aput(slow, "slow answer"))
        await until(encoder.entered)
        second = asyncio.create_task(cache.aput(queued, "queued answer"))
        third = asyncio.create_task(cache.aget(queued))
        await asyncio.sleep(0.05)
        start = time.perf_counter()
        for task in (first, second, third):
            task.cancel()
        for task in (first, second, third):
            with pytest.raises(asyncio.CancelledError):
                await task
        assert time.perf_counter() - start < 1.0, "cancelling waited for the thread"
        assert cache.get(queued) is None   # not yet: the worker is still in the encoder
        encoder.release.set()
        await cache.aclose()               # waits for the three abandoned calls

    run(main())
    assert {prepare(slow, {}).key, prepare(queued, {}).key} <= stored_ids(path)
    with mmcache.TieredCache(sqlite_config(path), encoders={"text": encoder}) as reopened:
        assert reopened.get(slow).value == "slow answer"
        assert reopened.get(queued).value == "queued answer"


def test_cancelled_calls_leave_the_state_sequential_calls_give(tmp_path):
    """Many aputs and agets, every other one cancelled just after it started: once the abandoned
    calls have finished, the cache holds what one sync put per key gives."""
    clock = FakeClock()
    keys = range(len(VECTORS))

    async def main() -> tuple[Any, list[Any]]:
        cache = mmcache.TieredCache(sqlite_config(tmp_path / "c.db"), clock=clock,
                                    async_workers=3)
        calls = [cache.aput(key_query(k), {"key": k}) for k in keys] + \
                [cache.aget(key_query(k)) for k in keys]
        order = np.random.default_rng(5).permutation(len(calls))
        tasks = [asyncio.create_task(calls[i]) for i in order]
        await asyncio.sleep(0)   # every call is submitted to the executor
        for task in tasks[::2]:
            task.cancel()
        results = await asyncio.gather(*tasks, return_exceptions=True)
        deadline = time.monotonic() + WAIT
        while cache._in_flight and time.monotonic() < deadline:   # the abandoned calls end
            await asyncio.sleep(0.01)
        state = tier_state(cache)
        await cache.aclose()
        return state, results

    state, results = run(main())
    assert sum(isinstance(r, asyncio.CancelledError) for r in results) == len(results) // 2
    assert not [r for r in results if isinstance(r, Exception)]
    with mmcache.TieredCache(sqlite_config(tmp_path / "ref.db"), clock=clock) as reference:
        for k in keys:
            reference.put(key_query(k), {"key": k})
        assert state == tier_state(reference)
