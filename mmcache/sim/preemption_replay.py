"""Tier preemption driven by a CacheBench-MM replay: the foreground and background streams of
:mod:`mmcache.sim.preemption`'s discrete-event model taken from what a replay did, request by
request, instead of stated rates and shares.

**A model, not a measurement**: the replay is CacheBench-MM's (:class:`mmcache.sim.cachebench.
engine.Replayer`, a synthetic workload); the channels are the replay's tiers with their nominal
assumed bandwidths and lookups; no device is read.

:func:`replay_streams` serves requests ``[train_end, n)`` of a workload from a cold cache (as
:func:`mmcache.sim.cachebench.prefetch.prefetch_replay` does) and records:

* **foreground**: each hit, at its arrival (the workload's time, from the first measured
  request), reads its entry's bytes from the tier that served it (a miss goes to model inference
  and moves nothing over a tier's channel: it is outside the model, as is the write-through of
  its answer);
* **background**, all read from the ``source`` tier's channel (the slowest link; the write into
  the upper tiers is not modelled): **preloads**, the warm-up's answers (``preload``: request
  indices of the training prefix, e.g. :func:`mmcache.sim.cachebench.prefetch.prefetch_plan`'s
  PageRank warm-up), stored before the first measured request and issued at its arrival; and
  **prefetches**, the answers a prefetcher (``prefetch``, e.g. :func:`pagerank_prefetcher`) asks
  for after each served request, at most ``budget`` per request and only for an answer no tier
  holds, issued at that request's arrival;
* for each preload and prefetch, whether the replay **used** it: its entry was hit (the hit that
  request recorded, ``hit_key``) before it left every tier; the first such hit *depends* on it.
  An answer that is evicted, or whose exact key misses (its copy had left), is never used.

The replay stores a prefetched answer at once; the model then times it. :func:`simulate_replay`
runs the streams through :func:`mmcache.sim.preemption.run_streams` under one scheduler at one
offered load: a lookup that depends on a transfer not complete at its arrival (**late**) reads
from the ``source`` channel instead of the tier the replay served it from; a prefetch is
**useful** iff the replay used it *and* it completed before the hit that used it arrived
(``prefetch_usefulness``: useful ÷ issued; ``replay_usefulness``: used ÷ issued, the bound no
scheduler passes). The **offered load** is the bytes per second offered to the source channel
(every lookup that reads from it when every transfer is late, and every preload and prefetch)
÷ its bandwidth, over the horizon (the measured requests' span plus one mean gap); a load is
reached by scaling every arrival time (which requests hit does not depend on time without a
TTL: one replay serves every load). :func:`replay_sweep` tabulates schedulers × loads.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Iterable, Sequence

import numpy as np

from mmcache.errors import ConfigError, InvalidInputError, check_number
from mmcache.sim.cachebench.engine import Replayer
from mmcache.sim.cachebench.prefetch import TAU_S, node_ids, pagerank, reference_graph
from mmcache.sim.cachebench.spec import TierSpec
from mmcache.sim.preemption import DEFAULT_SCHEDULERS, Scheduler, run_streams
from mmcache.sim.workload import Workload


@dataclass(frozen=True)
class ReplayStreams:
    """The model's streams from one replay (times in ms from the first measured request, before
    any load scaling; tiers and channels by index into ``tiers``).

    Per hit (foreground lookup): the request (workload index), arrival, bytes, the tier that
    served it, and the background transfer it depends on (-1: none). Per background transfer:
    issue time, bytes, whether it is a prefetch (else a preload), whether the replay used it.
    ``requests``: the measured requests; ``span_ms``: the horizon before scaling (their span
    plus one mean gap)."""

    tiers: tuple[TierSpec, ...]
    lookup_request: np.ndarray
    lookup_ms: np.ndarray
    lookup_bytes: np.ndarray
    lookup_tier: np.ndarray
    depends: np.ndarray
    bg_ms: np.ndarray
    bg_bytes: np.ndarray
    bg_prefetch: np.ndarray
    bg_used: np.ndarray
    requests: int
    span_ms: float

    def check(self) -> None:
        """Raises :class:`InvalidInputError` unless the arrays agree: one entry per lookup and
        per transfer, times in [0, ``span_ms``), positive bytes, tiers among ``tiers``, each
        transfer depended on by at most one lookup (after its issue), exactly when used."""
        n, b = len(self.lookup_ms), len(self.bg_ms)
        if not (len(self.lookup_request) == len(self.lookup_bytes) == len(self.lookup_tier)
                == len(self.depends) == n and len(self.bg_bytes) == len(self.bg_prefetch)
                == len(self.bg_used) == b):
            raise InvalidInputError("one entry per lookup and per background transfer")
        if not self.span_ms > 0 or self.requests < n:
            raise InvalidInputError(f"span_ms must be positive and requests >= lookups, got "
                                    f"{self.span_ms!r}, {self.requests!r}")
        times = np.concatenate([self.lookup_ms, self.bg_ms]).astype(float)
        if not (np.isfinite(times).all() and (times >= 0).all()
                and (times < self.span_ms).all()):
            raise InvalidInputError(f"times must be in [0, {self.span_ms} ms)")
        if (np.asarray(self.lookup_bytes) < 1).any() or (np.asarray(self.bg_bytes) < 1).any():
            raise InvalidInputError("every transfer moves at least one byte")
        tier = np.asarray(self.lookup_tier)
        if n and (tier.min() < 0 or tier.max() >= len(self.tiers)):
            raise InvalidInputError(f"lookup_tier must index the {len(self.tiers)} tiers")
        dep = np.asarray(self.depends)
        on = dep[dep >= 0]
        if (dep >= b).any() or len(np.unique(on)) != len(on) \
                or not np.array_equal(np.sort(on), np.flatnonzero(self.bg_used)):
            raise InvalidInputError("each used transfer has exactly one dependent lookup, and "
                                    "only used ones")
        if (np.asarray(self.bg_ms)[on] > np.asarray(self.lookup_ms)[dep >= 0]).any():
            raise InvalidInputError("a lookup cannot depend on a transfer issued after it")

    def describe(self, source: str | None = None) -> dict[str, Any]:
        """Counts and bytes, JSON-ready; ``source_foreground_share``: the foreground's share of
        the bytes offered to the ``source`` channel (default: the last tier), the part of its
        load no freezing of background removes."""
        pre = np.asarray(self.bg_prefetch, bool)
        src = _source_index(self, source)
        fg_src = int(np.sum(self.lookup_bytes[_else_tier(self, src) == src]))
        bg = int(np.sum(self.bg_bytes))
        return {"source": self.tiers[src].name, "source_foreground_bytes": fg_src,
                "source_foreground_share": fg_src / max(1, fg_src + bg),"requests": self.requests, "hits": int(len(self.lookup_ms)),
                "hit_rate": len(self.lookup_ms) / max(1, self.requests),
                "hits_per_tier": {t.name: int((self.lookup_tier == k).sum())
                                  for k, t in enumerate(self.tiers)},
                "hit_bytes": int(np.sum(self.lookup_bytes)),
                "preloads": int((~pre).sum()), "preload_bytes": int(self.bg_bytes[~pre].sum()),
                "preloads_used": int(self.bg_used[~pre].sum()),
                "prefetches": int(pre.sum()), "prefetch_bytes": int(self.bg_bytes[pre].sum()),
                "prefetches_used": int(self.bg_used[pre].sum()), "span_ms": self.span_ms}


def pagerank_prefetcher(workload: Workload, train_end: int, candidates: int = 16,
                        tau_s: float = TAU_S) -> Callable[[int], list[int]]:
    """A prefetcher for :func:`replay_streams`: the reference graph of the training prefix
    (:func:`mmcache.sim.cachebench.prefetch.reference_graph`), its ``candidates`` most central
    nodes by PageRank; called after request ``t`` is served, it returns, most central first, the
    latest request seen so far (up to ``t``) of each of those nodes, whose answer stands for it
    (:mod:`mmcache.sim.prefill`'s ``pagerank`` method)."""
    if isinstance(candidates, bool) or not isinstance(candidates, int) or candidates < 1:
        raise ConfigError(f"candidates must be a positive int, got {candidates!r}")
    ranks = pagerank(reference_graph(workload, train_end, tau_s))
    central = sorted(ranks, key=lambda v: (-ranks[v], v))[:candidates]
    nodes = node_ids(workload).tolist()
    last = {nodes[j]: j for j in range(train_end)}

    def pick(t: int) -> list[int]:
        last[nodes[t]] = t
        return [last[v] for v in central if v in last]

    return pick


def replay_streams(workload: Workload, tiers: Sequence[TierSpec], *, train_end: int,
                   preload: Sequence[int] = (), prefetch: Callable[[int], Iterable[int]] | None
                   = None, budget: int = 1, latency: Any = None, table: Any = None
                   ) -> ReplayStreams:
    """Serve requests ``[train_end, n)`` of ``workload`` through ``tiers`` from a cold cache and
    return the model's streams (the module docstring states them). ``preload``: requests of the
    prefix whose answers are stored first (most central first: stored in reverse, so the first
    is the most recently used; issued in order); ``prefetch(t)``: after request ``t`` is served,
    requests whose answers to store, the first ``budget`` no tier holds; ``table``: a neighbour
    table to share."""
    n = len(workload)
    if not 1 <= train_end < n:
        raise ConfigError(f"train_end must be in [1, {n}), got {train_end!r}")
    if isinstance(budget, bool) or not isinstance(budget, int) or budget < 0:
        raise ConfigError(f"budget must be a non-negative int, got {budget!r}")
    preload = [int(i) for i in preload]
    if any(not 0 <= i < train_end for i in preload):
        raise ConfigError(f"preloads must be requests of the prefix [0, {train_end})")
    replayer = Replayer(workload, tiers, latency, table=table)
    keys, size = replayer.keys.tolist(), workload.size.tolist()
    start_s = float(workload.time[train_end])
    at_ms = (1e3 * (workload.time - start_s)).tolist()
    state = replayer.state
    bg: list[tuple[float, int, bool]] = []  # (issue ms, bytes, prefetch)
    pending: dict[int, int] = {}  # key -> the transfer whose stored copy is still unused
    for i in reversed(preload):
        replayer.prefill(i)
    for i in preload:
        pending[keys[i]] = len(bg)
        bg.append((0.0, int(size[i]), False))
    used = set()
    lookups: list[tuple[int, float, int, int, int]] = []
    for t in range(train_end, n):
        replayer.serve(t)
        k = int(replayer.hit_tier[t])
        if k >= 0:
            key = int(replayer.hit_key[t])
            dep = pending.pop(key, -1)
            if dep >= 0:
                used.add(dep)
            entry = next((s.entries[key] for s in (state[k], *state) if key in s.entries), None)
            lookups.append((t, at_ms[t], int(entry[0]) if entry else int(size[t]), k, dep))
        else:
            pending.pop(keys[t], None)  # its exact key missed: the stored copy had left
        if prefetch is None or budget == 0:
            continue
        done = 0
        for j in prefetch(t):
            if done == budget:
                break
            j = int(j)
            if not 0 <= j <= t:
                raise ConfigError(f"the prefetcher may name requests seen so far (<= {t}), "
                                  f"got {j}")
            if any(keys[j] in s.entries for s in state):
                continue
            replayer.prefill(j)
            pending[keys[j]] = len(bg)
            bg.append((at_ms[t], int(size[j]), True))
            done += 1
    measured = n - train_end
    span = at_ms[-1] + (at_ms[-1] / max(1, measured - 1) if measured > 1 else 1.0)
    cols = list(zip(*lookups)) if lookups else [[]] * 5
    bg_cols = list(zip(*bg)) if bg else [[]] * 3
    streams = ReplayStreams(
        tiers=tuple(replayer.specs), lookup_request=np.array(cols[0], np.int64),
        lookup_ms=np.array(cols[1], float), lookup_bytes=np.array(cols[2], np.int64),
        lookup_tier=np.array(cols[3], np.int64), depends=np.array(cols[4], np.int64),
        bg_ms=np.array(bg_cols[0], float), bg_bytes=np.array(bg_cols[1], np.int64),
        bg_prefetch=np.array(bg_cols[2], bool),
        bg_used=np.isin(np.arange(len(bg)), sorted(used)), requests=measured,
        span_ms=float(max(span, 1e-9)))
    streams.check()
    return streams


def _source_index(streams: ReplayStreams, source: str | None) -> int:
    names = [t.name for t in streams.tiers]
    name = names[-1] if source is None else source
    if name not in names:
        raise ConfigError(f"source {name!r} is not one of the replay's tiers {names}")
    return names.index(name)


def _else_tier(streams: ReplayStreams, src: int) -> np.ndarray:
    """The tier each lookup reads from when its transfer is late: the source for a dependent
    one, its own otherwise."""
    return np.where(streams.depends >= 0, src, streams.lookup_tier).astype(np.int64)


def replay_offered_load(streams: ReplayStreams, source: str | None = None) -> float:
    """Bytes per second offered to the ``source`` tier's channel (default: the last tier) ÷ its
    bandwidth, at the replay's own arrival times (the module docstring defines it)."""
    src = _source_index(streams, source)
    on_src = _else_tier(streams, src) == src
    offered = float(streams.lookup_bytes[on_src].sum() + streams.bg_bytes.sum())
    return offered / (1e-3 * streams.span_ms) / (streams.tiers[src].bandwidth_gbps * 1e9)


def simulate_replay(streams: ReplayStreams, scheduler: Scheduler, load: float, *,
                    source: str | None = None) -> dict[str, Any]:
    """``streams`` at offered ``load`` (every arrival time scaled) through their tiers'
    channels under ``scheduler``; one row: foreground p50/p99/mean (ms) over the hits, background
    bytes completed inside the horizon and their share of the offered, prefetches (and preloads)
    issued, used by the replay, useful (used and on time) and late, usefulness (useful ÷ issued)
    beside the replay's (used ÷ issued), and the share of the horizon the source channel's
    background was frozen."""
    if not isinstance(scheduler, Scheduler):
        raise ConfigError(f"scheduler must be a Scheduler, got {type(scheduler).__name__}")
    check_number(load, "load", 0)
    src = _source_index(streams, source)
    base = replay_offered_load(streams, source)
    if not base > 0:
        raise ConfigError("the replay offers nothing to the source channel")
    scale = base / load
    horizon = streams.span_ms * scale
    out = run_streams(streams.tiers, scheduler, horizon, src, streams.lookup_ms * scale,
                      streams.lookup_bytes, streams.lookup_tier, _else_tier(streams, src),
                      streams.depends, streams.bg_ms * scale, streams.bg_bytes,
                      streams.bg_prefetch)
    lat = out.latency_ms if len(out.latency_ms) else np.zeros(1)
    pre = np.asarray(streams.bg_prefetch, bool)
    dep = streams.depends >= 0
    late = dep & ~out.on_time
    dep_prefetch = np.zeros(len(dep), bool)
    dep_prefetch[dep] = pre[streams.depends[dep]]
    done = out.preload_bytes + out.prefetch_bytes
    issued, used = int(pre.sum()), int(streams.bg_used[pre].sum())
    return {"scheduler": scheduler.name, "load": float(load), "time_scale": scale,
            "requests_per_s": streams.requests / (1e-3 * horizon),
            "lookups": int(len(out.latency_ms)),
            "fg_p50_ms": float(np.percentile(lat, 50)), "fg_p99_ms": float(np.percentile(lat, 99)),
            "fg_mean_ms": float(lat.mean()), "background_bytes": done,
            "preload_bytes": out.preload_bytes, "prefetch_bytes": out.prefetch_bytes,
            "background_completed_share": done / max(1, int(streams.bg_bytes.sum())),
            "prefetch_issued": issued, "prefetch_used": used,
            "prefetch_useful": out.prefetch_useful,
            "prefetch_late": int((late & dep_prefetch).sum()),
            "prefetch_usefulness": out.prefetch_useful / max(1, issued),
            "replay_usefulness": used / max(1, issued),
            "preload_issued": int((~pre).sum()), "preload_used": int(streams.bg_used[~pre].sum()),
            "preload_useful": out.preload_useful,
            "late_share": float(late.sum() / max(1, len(out.latency_ms))),
            "frozen_share": out.frozen_share}


def replay_sweep(streams: ReplayStreams, loads: Sequence[float],
                 schedulers: Sequence[Scheduler] = DEFAULT_SCHEDULERS, *,
                 source: str | None = None) -> list[dict[str, Any]]:
    """One :func:`simulate_replay` row per load and scheduler (the same streams throughout)."""
    if not loads:
        raise ConfigError("replay_sweep needs at least one load")
    names = [s.name for s in schedulers]
    if not schedulers or len(set(names)) != len(names):
        raise ConfigError(f"schedulers must be non-empty and uniquely named, got {names}")
    for load in loads:
        check_number(load, "load", 0)
    return [simulate_replay(streams, s, float(load), source=source) for load in loads
            for s in schedulers]
