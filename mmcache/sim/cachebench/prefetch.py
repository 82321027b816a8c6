"""Reference-graph prefetch and warm-up (seed 002 §3.3, seed 001 §4.1) in the CacheBench-MM replay.

The *reference graph* is built from a training prefix of the stream only (never from the
requests it is measured on): one node per (intent, modality set), the unit a semantic tier
keys its answers by; an edge from each request's node to the next request's node, weighted
``exp(-Δt / τ)`` by the gap between their arrival times as seed 002 §3.3 weighs references
(τ = 300 s there). In the synthetic workload a session keeps its intent, so sessions add
self-loops, and consecutive sessions are drawn independently: the graph's PageRank
(``networkx.pagerank``) mostly ranks by recent popularity — a labelled property of this
workload, not of the method.

:func:`prefetch_replay` warms a cold cache before the measured part starts with every node
whose PageRank is at least ``threshold`` (the node's last training request as its stored
answer, the most central stored last, so recency-based policies keep it longest), then replays the rest of the stream, and measures the hit
ratio with and without, the p99 latency of the first requests after the cold start
(CacheWarmupLatencyP99) and the bytes prefetched that left the cache (evicted or expired)
or stayed to the end without a hit. Seed 002's absolute threshold (PageRank > 0.082) is
reachable only on graphs of at most 12 nodes (scores sum to 1): pass a threshold fitted to
the graph's size.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Sequence

import networkx as nx
import numpy as np

from mmcache.errors import ConfigError, check_number
from mmcache.sim.cachebench.engine import Replayer
from mmcache.sim.workload import MODALITY_SETS, Workload

#: Seed 002 §3.3's time constant of a reference's weight (seconds).
TAU_S = 300.0


def node_ids(workload: Workload) -> np.ndarray:
    """Each request's graph node: its (intent, modality set) as one integer."""
    return workload.intent.astype(np.int64) * len(MODALITY_SETS) + workload.modality_set


def reference_graph(workload: Workload, train_end: int, tau_s: float = TAU_S) -> nx.DiGraph:
    """The transition graph of requests ``[0, train_end)``: edge weights summed
    ``exp(-Δt / tau_s)`` over consecutive request pairs."""
    if not 2 <= train_end <= len(workload):
        raise ConfigError(f"train_end must be in [2, {len(workload)}], got {train_end!r}")
    if not tau_s > 0:
        raise ConfigError(f"tau_s must be positive, got {tau_s!r}")
    nodes = node_ids(workload)[:train_end]
    weights = np.exp(-np.diff(workload.time[:train_end]) / tau_s)
    graph = nx.DiGraph()
    graph.add_nodes_from(np.unique(nodes).tolist())
    for (a, b), w in _sum_edges(nodes[:-1], nodes[1:], weights).items():
        graph.add_edge(a, b, weight=w)
    return graph


def _sum_edges(src: np.ndarray, dst: np.ndarray, w: np.ndarray) -> dict[tuple[int, int], float]:
    pairs, inverse = np.unique(np.stack([src, dst], axis=1), axis=0, return_inverse=True)
    sums = np.bincount(inverse.ravel(), weights=w)
    return {(int(a), int(b)): float(s) for (a, b), s in zip(pairs, sums)}


def pagerank(graph: nx.DiGraph, damping: float = 0.85) -> dict[int, float]:
    """PageRank of every node (edge weights as transition weights; sums to 1)."""
    if not 0 < damping < 1:
        raise ConfigError(f"damping must be in (0, 1), got {damping!r}")
    if graph.number_of_nodes() == 0:
        raise ConfigError("pagerank of an empty graph")
    return nx.pagerank(graph, alpha=damping, weight="weight")


def prefetch_plan(workload: Workload, train_end: int, threshold: float, *,
                  tau_s: float = TAU_S) -> list[int]:
    """Training requests to prefetch, most central first: for each node of PageRank >=
    ``threshold``, its last request before ``train_end``."""
    scores = pagerank(reference_graph(workload, train_end, tau_s))
    nodes = node_ids(workload)[:train_end]
    last = {int(n): i for i, n in enumerate(nodes.tolist())}
    chosen = sorted((n for n, s in scores.items() if s >= threshold),
                    key=lambda n: (-scores[n], n))
    return [last[n] for n in chosen]


@dataclass
class PrefetchResult:
    """What :func:`prefetch_replay` measured on requests ``[train_end, n)``."""

    train_end: int
    threshold: float
    n_prefetched: int
    prefetched_bytes: int
    hit_ratio_on: float
    hit_ratio_off: float
    wasted_bytes: int
    unused_resident_bytes: int
    warmup_n: int
    warmup_p99_ms_on: float
    warmup_p99_ms_off: float
    hits_on: np.ndarray = field(repr=False)
    hits_off: np.ndarray = field(repr=False)
    warmup_ms_on: np.ndarray = field(repr=False)
    warmup_ms_off: np.ndarray = field(repr=False)

    def as_dict(self) -> dict[str, Any]:
        """The scalar fields, JSON-ready."""
        return {k: v for k, v in vars(self).items() if not isinstance(v, np.ndarray)}


def prefetch_replay(workload: Workload, tiers: Sequence[Any], latency: Any, *, train_end: int,
                    threshold: float, warmup_n: int = 1_000, ttl_s: float | None = None,
                    tau_s: float = TAU_S) -> PrefetchResult:
    """Replay requests ``[train_end, n)`` from a cold cache, without and with a PageRank
    warm-up (:func:`prefetch_plan`); the first ``warmup_n`` of them are the warm-up window."""

    if not 1 <= warmup_n <= len(workload) - train_end:
        raise ConfigError(f"warmup_n must be in [1, {len(workload) - train_end}], got {warmup_n!r}")
    check_number(threshold, "threshold", 0, strict=False)
    plan = prefetch_plan(workload, train_end, threshold, tau_s=tau_s)
    runs = {}
    for name, prefetch in (("off", []), ("on", plan)):
        replayer = Replayer(workload, tiers, latency, ttl_s=ttl_s)
        for i in reversed(prefetch):  # the most central last: the most recently used
            replayer.prefill(i)
        pending = {int(replayer.keys[i]): int(workload.size[i]) for i in prefetch}
        wasted = 0
        for i in range(train_end, len(workload)):
            replayer.serve(i)
            key = int(replayer.hit_key[i]) if replayer.hit_tier[i] >= 0 else int(replayer.keys[i])
            if replayer.hit_tier[i] >= 0:
                pending.pop(key, None)
            elif key in pending:  # its exact key missed: the prefetched copy had left unused
                wasted += pending.pop(key)
        resident = {k for t in replayer.state for k in t.entries}
        gone = sum(size for k, size in pending.items() if k not in resident)
        runs[name] = (replayer, wasted + gone, sum(pending.values()) - gone)
    measured = slice(train_end, len(workload))
    window = slice(train_end, train_end + warmup_n)
    (off, _, _), (on, wasted, unused) = runs["off"], runs["on"]
    return PrefetchResult(
        train_end=train_end, threshold=threshold, n_prefetched=len(plan),
        prefetched_bytes=int(workload.size[plan].sum()) if plan else 0,
        hit_ratio_on=float((on.hit_tier[measured] >= 0).mean()),
        hit_ratio_off=float((off.hit_tier[measured] >= 0).mean()),
        wasted_bytes=int(wasted), unused_resident_bytes=int(unused), warmup_n=warmup_n,
        warmup_p99_ms_on=float(np.percentile(on.lat_ms[window], 99)),
        warmup_p99_ms_off=float(np.percentile(off.lat_ms[window], 99)),
        hits_on=on.hit_tier[measured] >= 0, hits_off=off.hit_tier[measured] >= 0,
        warmup_ms_on=on.lat_ms[window].copy(), warmup_ms_off=off.lat_ms[window].copy())
