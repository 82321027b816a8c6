"""Penetration-guard benchmark: ``TieredCache.get`` with the guard on ÷ off, side by side.

``python -m mmcache.lab.bench.guard [--quick]`` builds two caches over the same
entries (L1 + exact flat L2 + SQLite L3), one with ``guard.enabled`` and one
without, asks both the same queries in alternating chunks, and prints per data
set: how many lookups the Bloom filter (exact lookups) and the spherical-cap
bound (vector search) skipped, the mean get() time of each cache and their
ratio, and how many answers differ (the guard may only skip guaranteed misses,
so this must be 0).

Data sets: ``minilm-prompts`` — real all-MiniLM-L6-v2 embeddings of ShareGPT
prompts (no licence stated), queries are held-out prompts; ``random`` —
isotropic random unit vectors (STAND-IN, the guard's worst case); ``clustered``
— STAND-IN: each scope's entries lie in one narrow cone, queries come from other
cones (the guard's best case).
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np

from mmcache.cache import TieredCache
from mmcache.datasets.prompts import load_prompts
from mmcache.encoders import get_encoder
from mmcache.lab.bench.ledger import Ratio, machine, record
from mmcache.types import Query

CHUNK = 25
COSINE = 0.9


def _unit(x: np.ndarray) -> np.ndarray:
    return (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)


def random_set(n: int, n_queries: int, dim: int, rng: np.random.Generator):
    """Isotropic stored vectors and queries (STAND-IN)."""
    return _unit(rng.standard_normal((n, dim))), _unit(rng.standard_normal((n_queries, dim)))


def clustered_set(n: int, n_queries: int, dim: int, rng: np.random.Generator):
    """Stored vectors in one cone (cos ≥ ~0.8 to its axis); queries from random other cones."""
    axis = _unit(rng.standard_normal((1, dim)))[0]
    stored = _unit(axis + 0.35 * _unit(rng.standard_normal((n, dim))))
    others = _unit(rng.standard_normal((n_queries, dim)))
    queries = _unit(others + 0.35 * _unit(rng.standard_normal((n_queries, dim))))
    return stored, queries


def minilm_set(n: int, n_queries: int):
    """Real MiniLM embeddings of ShareGPT prompts: ``n`` stored, ``n_queries`` held out."""

    texts = load_prompts(n + n_queries)
    vecs = _unit(np.asarray(get_encoder("minilm").encode(texts), dtype=np.float32))
    return vecs[:n], vecs[n:]


def run(stored: np.ndarray, queries: np.ndarray, workdir: Path) -> dict[str, float]:
    """Time both caches over the same entries and queries; count skips and disagreements."""
    caches = {}
    for name, enabled in (("on", True), ("off", False)):
        caches[name] = TieredCache({
            "l2": {"index": "flat"}, "guard": {"enabled": enabled},
            "l3": {"backend": "sqlite", "path": str(workdir / f"guard-{name}.db"),
                   "synchronous": "OFF"},
            "thresholds": {"delta": {"text": 1 - COSINE}}})
        for i, vec in enumerate(stored):
            caches[name].put(Query(embeddings={"text": vec}, scope="s"), i)
        caches[name].metrics.reset()
    seconds = {"on": 0.0, "off": 0.0}
    answers: dict[str, list] = {"on": [], "off": []}
    for start in range(0, len(queries), CHUNK):
        chunk = [Query(embeddings={"text": q}, scope="s") for q in queries[start:start + CHUNK]]
        for name in (("on", "off") if start // CHUNK % 2 else ("off", "on")):
            t = time.perf_counter()
            got = [caches[name].get(q) for q in chunk]
            seconds[name] += time.perf_counter() - t
            answers[name] += [None if h is None else h.entry_id for h in got]
    skips = caches["on"].metrics.guard_skips
    out = {"lookups": len(queries),
           "hits": sum(a is not None for a in answers["on"]),
           "cap_skips_l2": skips["l2:cap"], "bloom_skips_l3": skips["l3:bloom"],
           "get_us_on": 1e6 * seconds["on"] / len(queries),
           "get_us_off": 1e6 * seconds["off"] / len(queries),
           "disagreements": sum(a != b for a, b in zip(answers["on"], answers["off"]))}
    out["ratio_off_over_on"] = out["get_us_off"] / out["get_us_on"]
    for cache in caches.values():
        cache.close()
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes (seconds)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--sets", nargs="+", default=["random", "clustered", "minilm"],
                        choices=["random", "clustered", "minilm"], help="data sets to run")
    args = parser.parse_args(argv)
    started = machine()
    ratios = []
    n, n_queries, n_text = (2_000, 200, 500) if args.quick else (20_000, 1_000, 3_000)
    rng = np.random.default_rng(args.seed)
    sets = {"random": ("random (stand-in)", lambda: random_set(n, n_queries, 384, rng)),
            "clustered": ("clustered (stand-in)",
                          lambda: clustered_set(n, n_queries, 384, rng)),
            "minilm": ("minilm-prompts (real)", lambda: minilm_set(n_text, n_queries))}
    print(f"guard on vs off; exact flat L2, SQLite L3 (synchronous=OFF), cos >= {COSINE}, "
          "faiss on one thread")
    with tempfile.TemporaryDirectory() as tmp:
        for key in args.sets:
            name, make = sets[key]
            stored, queries = make()
            workdir = Path(tmp) / key          # fresh stores per data set
            workdir.mkdir()
            r = run(stored, queries, workdir)
            print(f"{name:24s} n={len(stored):6d} lookups={r['lookups']} hits={r['hits']} "
                  f"cap skips={r['cap_skips_l2']} bloom skips={r['bloom_skips_l3']} "
                  f"get on={r['get_us_on']:.0f}us off={r['get_us_off']:.0f}us "
                  f"off/on={r['ratio_off_over_on']:.2f} disagreements={r['disagreements']}",
                  flush=True)
            ratios += [Ratio(f"get speed-up, {name}", r["ratio_off_over_on"], "guard off"),
                       Ratio(f"answers changed, {name}", r["disagreements"] / r["lookups"],
                             "guard off", unit="fraction", at_most=0.0)]
    record("guard", ratios, vars(args), started=started)


if __name__ == "__main__":
    main()
