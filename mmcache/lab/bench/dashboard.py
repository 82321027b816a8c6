"""Dashboard benchmark: a loop of ``get`` calls with ``cache.dashboard()`` attached ÷ the same
loop without it, side by side.

``python -m mmcache.lab.bench.dashboard [--gets 60000] [--refresh 0.5]`` fills a cache (L1,
flat L2, 1,000 entries of random 64-d unit vectors, a STAND-IN for embeddings) and times
every get (after a warm-up, in ABBA order, so drift cancels) with one dashboard listening
(its view rendered to HTML every ``refresh`` seconds into a stand-in widget, as a live one is
before it goes to the browser) or with it off the hook. It prints the ratio of the median get
times and records it (``runs/bench/dashboard.json``) against the target: at most 1.05.
Sending the rendered view to a browser over the kernel's comm channel is not part of the
measurement.
"""

from __future__ import annotations

import argparse
import time
from types import SimpleNamespace

import numpy as np

from mmcache.cache import TieredCache
from mmcache.lab.bench.ledger import Ratio, machine, record
from mmcache.types import Query

DIM = 64


def _queries(n: int, seed: int) -> list[Query]:
    vecs = np.random.default_rng(seed).standard_normal((n, DIM)).astype(np.float32)
    return [Query(text=f"question {i % 1000}", embeddings={"text": v}, scope="s")
            for i, v in enumerate(vecs / np.linalg.norm(vecs, axis=1, keepdims=True))]


def measure(gets: int, refresh_s: float) -> tuple[float, float, int]:
    """Median seconds per get with and without the dashboard listening, and how often it
    rendered."""
    cache = TieredCache({"l2": {"index": "flat"}})
    cache.put_many(_queries(1000, 0), [f"answer {i}" for i in range(1000)])
    queries = _queries(gets, 1)
    for q in queries[:1000]:  # warm up before anything is timed
        cache.get(q)
    board = cache.dashboard(refresh_s=refresh_s, live=False)
    board.widget = SimpleNamespace(value="")  # rendered as for a browser
    listening = cache.after_get
    spent: dict[bool, list[float]] = {True: [], False: []}
    for i, q in enumerate(queries):
        attached = i % 4 in (0, 3)  # ABBA: neither side always goes first
        cache.after_get = listening if attached else None
        began = time.perf_counter()
        cache.get(q)
        spent[attached].append(time.perf_counter() - began)
    cache.after_get = listening
    board.close()
    cache.close()
    return float(np.median(spent[True])), float(np.median(spent[False])), board.renders


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gets", type=int, default=60_000)
    parser.add_argument("--refresh", type=float, default=0.5)
    args = parser.parse_args(argv)
    started = machine()
    with_board, without, renders = measure(args.gets, args.refresh)
    ratio = with_board / without
    print(f"get with a dashboard {with_board * 1e6:.1f} µs, without {without * 1e6:.1f} µs: "
          f"ratio {ratio:.3f} ({renders} renders, refresh {args.refresh:g} s)")
    record("dashboard", [Ratio("get() with cache.dashboard() attached", ratio,
                               "the same cache without it", at_most=1.05)],
           vars(args), started=started)


if __name__ == "__main__":
    main()
