"""Threshold-rule cost: ``TieredCache.get`` with the static rule vs the error-budget rule.

``python -m mmcache.lab.bench.thresholds [--entries N] [--lookups M]`` builds two caches
over the same N entries (STAND-IN data: random 384-d unit vectors, the dimension of
MiniLM; default L1 + L2 with ``index: auto``, so HNSW at 10k), asks both the same M
queries in alternating chunks — half near an entry (cosine ≈ 0.99: candidates the rule
must judge), half random (misses) — and prints the mean get() time of each in µs and
their ratio (recorded in the benchmark ledger, ``runs/bench/thresholds.json``). The error-budget rule uses the shipped (text, minilm) prior with a loose
budget (0.5) so that its hit path, not only its miss path, is timed.

``--pairs`` instead replays the held-out (test) split of
:func:`mmcache.datasets.pairs.text_pairs` (seed 0, 600 prompts drawn; real ShareGPT
prompts with paraphrases, traps and novel prompts) through each rule at the rule level,
MiniLM similarities, in a fixed shuffled order: every pair is one lookup of a new entry
(cold start), served hits get their true label as feedback, and it prints per rule the
share of true pairs served and wrong answers served ÷ lookups.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from mmcache.cache import TieredCache
from mmcache.datasets.pairs import PairSizes, text_pairs
from mmcache.encoders import get_encoder
from mmcache.lab.bench.ledger import Ratio, machine, record
from mmcache.studies.priors import PRIOR_SEED
from mmcache.thresholds import (
    CalibratedThreshold,
    ErrorBudgetThreshold,
    StaticThreshold,
)
from mmcache.types import Query

DIM = 384
CHUNK = 50


def unit_rows(rng: np.random.Generator, n: int) -> np.ndarray:
    x = rng.normal(size=(n, DIM)).astype(np.float32)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def heldout_pairs() -> dict[str, dict[str, float]]:
    """Each rule on the held-out text pairs (see the module docstring)."""

    pairs = text_pairs("test", PRIOR_SEED, PairSizes(prompts=600))
    texts = sorted({p.query.text for p in pairs} | {p.cached.text for p in pairs})
    vectors = np.asarray(get_encoder("minilm").encode(texts), np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    row = {t: i for i, t in enumerate(texts)}
    order = np.random.default_rng(0).permutation(len(pairs))
    rules = {"static δ=0.1": lambda: StaticThreshold({"text": 0.1}),
             "static δ=0.03": lambda: StaticThreshold({"text": 0.03}),
             "calibrated P≥0.9": lambda: CalibratedThreshold(0.9, encoders={"text": "minilm"}),
             "error-budget 0.02": lambda: ErrorBudgetThreshold(0.02, encoders={"text": "minilm"})}
    same = sum(p.same for p in pairs)
    print(f"{len(pairs)} held-out text pairs ({same} should hit), MiniLM, one lookup each")
    results = {}
    for name, make in rules.items():
        rule, served_true, wrong = make(), 0, 0
        for i in order:
            pair = pairs[int(i)]
            sims = {"text": float(vectors[row[pair.query.text]] @ vectors[row[pair.cached.text]])}
            entry = f"e{i}"
            hit = rule.accepts(sims, entry, "s")
            charged = rule.served(sims, entry, "s") if hit else 0.0
            rule.observe_lookup("s", ("text",), sims)
            if hit:
                served_true += pair.same
                wrong += not pair.same
                rule.feedback(sims, entry, pair.same, "s", charged)
        results[name] = {"true_served": served_true / same, "error": wrong / len(pairs)}
        print(f"  {name:>18}: {served_true / same:6.1%} of true pairs served, "
              f"{wrong / len(pairs):6.2%} wrong answers per lookup")
    return results


def main(argv: list[str] | None = None) -> dict[str, float]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--entries", type=int, default=10_000)
    parser.add_argument("--lookups", type=int, default=2_000)
    parser.add_argument("--pairs", action="store_true")
    args = parser.parse_args(argv)
    if args.pairs:
        return heldout_pairs()
    started = machine()
    rng = np.random.default_rng(0)
    stored = unit_rows(rng, args.entries)
    picks = rng.integers(args.entries, size=args.lookups // 2)
    near = stored[picks] + 0.01 * unit_rows(rng, len(picks))
    queries = np.concatenate([near / np.linalg.norm(near, axis=1, keepdims=True),
                              unit_rows(rng, args.lookups - len(picks))])
    queries = queries[rng.permutation(len(queries))]
    rules = {"static": StaticThreshold({"text": 0.1}),
             "error-budget": ErrorBudgetThreshold(0.5, encoders={"text": "minilm"})}
    caches = {}
    for name, rule in rules.items():
        cache = TieredCache(threshold=rule)
        cache.put_many([Query(embeddings={"text": v}, scope="s") for v in stored],
                       [f"answer {i}" for i in range(args.entries)])
        cache.tier("l2").index.flush()  # timed lookups meet no backlog and no builder
        caches[name] = cache
    seconds = {name: 0.0 for name in caches}
    hits = {name: 0 for name in caches}
    for start in range(0, len(queries), CHUNK):
        for name, cache in caches.items():
            batch = [Query(embeddings={"text": v}, scope="s")
                     for v in queries[start:start + CHUNK]]
            t0 = time.perf_counter()
            answers = [cache.get(q) for q in batch]
            seconds[name] += time.perf_counter() - t0
            hits[name] += sum(a is not None for a in answers)
    result = {f"{name}_us": 1e6 * s / len(queries) for name, s in seconds.items()}
    result["ratio"] = result["error-budget_us"] / result["static_us"]
    print(f"{args.entries} entries, {len(queries)} lookups (STAND-IN random 384-d vectors)")
    for name in caches:
        print(f"  {name:>12}: {result[name + '_us']:8.1f} µs per get, {hits[name]} hits")
    print(f"  error-budget / static: {result['ratio']:.2f}")
    record("thresholds", [Ratio(f"get() with the error-budget rule, {args.entries:,} entries",
                                result["ratio"], "the same gets with a static threshold")],
           vars(args), started=started)
    for cache in caches.values():
        cache.close()
    return result


if __name__ == "__main__":
    main()
