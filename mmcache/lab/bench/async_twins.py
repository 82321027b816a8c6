"""The asyncio twins' executor: the cache's own bounded pool against ``asyncio.to_thread``.

``python -m mmcache.lab.bench.async_twins [--quick]`` runs, side by side on one cache:

- **overhead**: the hop alone (a no-op through either executor), then an L1 exact hit through
  ``get`` (no loop), ``await cache.aget`` (the cache's executor) and ``await
  asyncio.to_thread(cache.get, q)`` (the loop's default executor), one call at a time and
  ``asyncio.gather``-ed in flights of 64: microseconds per call;
- **a stalled judge**: 48 concurrent lookups whose candidate goes to a verifier that sleeps
  0.3 s (a stand-in for a slow store or remote judge), through either executor, while the loop
  runs a 5 ms heartbeat and, 50 ms in, an unrelated job on the loop's default executor (what
  ``loop.getaddrinfo`` or any other ``to_thread`` caller uses): the heartbeat's longest gap,
  how long the unrelated job waited, and the wall time of the 48 lookups.

Synthetic unit vectors (STAND-IN); absolute times depend on the machine and its load.
"""

from __future__ import annotations

import argparse
import asyncio
import time
from typing import Any, Awaitable, Callable

import numpy as np

from mmcache.cache import ASYNC_WORKERS, TieredCache
from mmcache.lab.bench.ledger import Ratio, machine, record
from mmcache.lab.testing import near, unit
from mmcache.types import Query

SLOW_S = 0.3
STALLED = 48
FLIGHT = 64
DIM = 64


def _cache(verifier: Callable[[Query, Any], float] | None = None) -> TieredCache:
    return TieredCache({"l2": {"index": "flat"},
                        "thresholds": {"rule": "static", "delta": {"text": 0.2},
                                       "verifier_band": 1.0}}, verifier=verifier)


async def _per_call(call: Callable[[], Awaitable[Any]], n: int) -> float:
    start = time.perf_counter()
    for _ in range(n):
        await call()
    return (time.perf_counter() - start) / n * 1e6


async def _gathered(call: Callable[[], Awaitable[Any]], n: int) -> float:
    start = time.perf_counter()
    for _ in range(n // FLIGHT):
        await asyncio.gather(*(call() for _ in range(FLIGHT)))
    return (time.perf_counter() - start) / (n // FLIGHT * FLIGHT) * 1e6


async def overhead(n: int, rounds: int = 7) -> dict[str, float]:
    """Median microseconds per call over ``rounds`` interleaved rounds of ``n`` calls: a no-op
    hop and an L1 exact hit, sync and through each executor, one at a time and gathered."""
    q = Query(embeddings={"text": unit(np.random.default_rng(0), DIM)}, scope="s")
    async with _cache() as cache:
        await cache.aput(q, "answer")

        async def sync(n: int) -> float:
            start = time.perf_counter()
            for _ in range(n):
                cache.get(q)
            return (time.perf_counter() - start) / n * 1e6

        def noop() -> None:
            return None

        runs: dict[str, Callable[[int], Awaitable[float]]] = {"get (sync)": sync}
        for name, call in (("no-op, cache executor", lambda: cache._in_thread(noop)),
                           ("no-op, to_thread", lambda: asyncio.to_thread(noop)),
                           ("aget (cache executor)", lambda: cache.aget(q)),
                           ("to_thread(get)", lambda: asyncio.to_thread(cache.get, q))):
            runs[f"{name}, one at a time"] = lambda n, call=call: _per_call(call, n)
            runs[f"{name}, {FLIGHT} in flight"] = lambda n, call=call: _gathered(call, n)
        times: dict[str, list[float]] = {name: [] for name in runs}
        for _ in range(rounds):
            for name, run in runs.items():
                times[name].append(await run(n))
        return {name: float(np.median(t)) for name, t in times.items()}


async def stalled(use_to_thread: bool) -> dict[str, float]:
    """Heartbeat gap, an unrelated default-executor job's wait, and the lookups' wall time
    while ``STALLED`` lookups wait on a verifier that sleeps ``SLOW_S``."""
    rng = np.random.default_rng(1)
    stored = unit(rng, DIM)
    cache = _cache(verifier=lambda query, entry: (time.sleep(SLOW_S), 1.0)[1])
    cache.put(Query(embeddings={"text": stored}, scope="s"), "answer")
    queries = [Query(embeddings={"text": near(rng, stored, 0.95)}, scope="s")
               for _ in range(STALLED)]
    loop = asyncio.get_running_loop()
    gaps: list[float] = []
    done = asyncio.Event()

    async def heartbeat() -> None:
        last = time.perf_counter()
        while not done.is_set():
            await asyncio.sleep(0.005)
            now = time.perf_counter()
            gaps.append(now - last)
            last = now

    async def unrelated() -> float:
        await asyncio.sleep(0.05)
        start = time.perf_counter()
        await loop.run_in_executor(None, lambda: None)
        return time.perf_counter() - start

    beat = asyncio.create_task(heartbeat())
    other = asyncio.create_task(unrelated())
    start = time.perf_counter()
    lookup = (lambda q: asyncio.to_thread(cache.get, q)) if use_to_thread else cache.aget
    hits = await asyncio.gather(*(lookup(q) for q in queries))
    wall = time.perf_counter() - start
    waited = await other
    done.set()
    await beat
    await cache.aclose()
    assert all(h is not None and h.value == "answer" for h in hits)
    return {"heartbeat max gap ms": max(gaps) * 1e3, "unrelated job waited ms": waited * 1e3,
            f"{STALLED} judged lookups s": wall}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer calls")
    args = parser.parse_args(argv)
    started = machine()
    n = 320 if args.quick else 2560
    print(f"async twins: executor workers {ASYNC_WORKERS} (the cache's), "
          f"default executor {ASYNC_WORKERS} (min(32, cpus + 4))")
    print(f"overhead, median of 7 interleaved rounds of {n} calls (us per call):")
    us = asyncio.run(overhead(n))
    for name, value in us.items():
        print(f"  {name:<42} {value:8.1f}")
    print(f"a verifier that sleeps {SLOW_S} s, {STALLED} concurrent lookups:")
    rows = {}
    for label, flag in (("cache executor (aget)", False), ("asyncio.to_thread(get)", True)):
        rows[flag] = asyncio.run(stalled(flag))
        print(f"  {label:<24} " + ", ".join(f"{k} {v:.1f}" for k, v in rows[flag].items()))
    wait = "unrelated job waited ms"
    record("async_twins", [
        Ratio("await aget of an L1 hit over the sync get", us["aget (cache executor), one at a "
              "time"] / us["get (sync)"], "get() on the caller's thread"),
        Ratio("unrelated job's wait behind stalled lookups", rows[True][wait] / rows[False][wait],
              "asyncio.to_thread(get) over the cache's executor (aget)"),
    ], vars(args), started=started)


if __name__ == "__main__":
    main()
