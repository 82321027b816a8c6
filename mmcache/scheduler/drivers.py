"""Drivers that run a :class:`~mmcache.scheduler.decision.Scheduler` over a CacheBench-MM replay
or a live :class:`mmcache.TieredCache`, window by window.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, Callable, Mapping, Sequence

import numpy as np

from mmcache.errors import ConfigError, check_number
from mmcache.metrics import CacheMetrics, Histogram
from mmcache.thresholds import ThresholdRule
from mmcache.types import Hit

if TYPE_CHECKING:
    from mmcache.cache import TieredCache
    from mmcache.scheduler.decision import Scheduler
    from mmcache.sim.cachebench import TierSpec
    from mmcache.sim.cachebench.neighbours import NeighbourTable
    from mmcache.sim.workload import Workload
from mmcache.scheduler.controllers import _window
from mmcache.scheduler.levers import Levers, WindowStats
from mmcache.sim.cachebench import loosest_floor
from mmcache.sim.cachebench.kernel import KERNEL_POLICIES
from mmcache.sim.cachebench.neighbours import neighbour_table


def replay_cutoff(tiers: Sequence["TierSpec"], settings: Sequence[Levers]) -> float | None:
    """The neighbour-table cutoff under which every lookup of a :meth:`Scheduler.replay` of
    ``settings`` through ``tiers`` reads the table (:func:`mmcache.sim.cachebench.loosest_floor`)."""

    return loosest_floor(tiers, [s.delta_offset for s in settings])


def replay_table(workload: "Workload", tiers: Sequence["TierSpec"],
                 settings: Sequence[Levers]) -> "NeighbourTable":
    """The neighbour table of ``workload`` at :func:`replay_cutoff`: what every
    :meth:`Scheduler.replay` of ``settings`` (or of some of them) through ``tiers`` reads,
    built once to share across replays."""

    return neighbour_table(workload, replay_cutoff(tiers, settings))


def compiles(tiers: Sequence["TierSpec"], settings: Sequence[Levers]) -> bool:
    """Whether :meth:`Scheduler.replay` of ``settings`` through ``tiers`` can serve its windows
    through the compiled kernel (:meth:`mmcache.sim.cachebench.Replayer.serve_compiled`): every
    tier's policy is the kernel's, every setting admits every miss and skips no tier, and every
    lookup's floor is positive (the table's cutoff, :func:`replay_cutoff`, then covers it)."""

    lowest = replay_cutoff(tiers, settings)
    return (all(t.policy in KERNEL_POLICIES for t in tiers) and (lowest is None or lowest > 0)
            and all(s.admit >= 1.0 and not s.skip for s in settings))


def _compiled_serve(replayer: Any) -> Callable[[int, int, Levers], None]:
    """``serve(start, stop, levers)``: the requests ``start`` to ``stop`` - 1 (the next ones)
    through the compiled kernel, with ``levers``' offsets."""
    def serve(start: int, stop: int, levers: Levers) -> None:
        replayer.serve_compiled(stop, levers.delta_offset)
    return serve


def _serve_each(replayer: Any, rng: np.random.Generator) -> Callable[[int, int, Levers], None]:
    """``serve(start, stop, levers)``: the requests ``start`` to ``stop`` - 1 one at a time
    (``Replayer.serve``) with ``levers``, admission drawn from ``rng``."""
    def serve(start: int, stop: int, levers: Levers) -> None:
        for i in range(start, stop):
            replayer.serve(i, levers.delta_offset, _admits(rng, levers), levers.skip)
    return serve


def _replayed_window(replayer: Any, done: slice) -> WindowStats:
    """What the requests ``done`` of a :class:`mmcache.sim.cachebench.Replayer` measured."""
    lat = replayer.lat_ms[done]
    return WindowStats(requests=int(lat.shape[0]),
                       hit_rate=float((replayer.hit_tier[done] >= 0).mean()),
                       error_rate=float(replayer.false_hit[done].mean()),
                       mean_latency_ms=float(lat.mean()),
                       p99_latency_ms=float(np.percentile(lat, 99)))


class OffsetThreshold(ThresholdRule):
    """A threshold rule with per-modality δ offsets added to another rule's δ.

    Anything else (e.g. a rule's own feedback method) is the inner rule's.
    """

    name = "offset"

    def __init__(self, inner: ThresholdRule) -> None:
        self.inner = inner
        self.offsets: dict[str, float] = {}

    def floor(self, modality: str) -> float:
        return self.inner.floor(modality) - self.offsets.get(modality, 0.0)

    def threshold(self, modality: str, entry_id: str | None = None,
                  scope: str | None = None) -> float:
        return self.inner.threshold(modality, entry_id, scope) - self.offsets.get(modality, 0.0)

    def accepts(self, similarities: Mapping[str, float], entry_id: str | None = None,
                scope: str | None = None, evidence: Mapping[str, float] | None = None) -> bool:
        return self.inner.accepts(self._shifted(similarities), entry_id, scope, evidence)

    def served(self, similarities: Mapping[str, float], entry_id: str, scope: str,
               evidence: Mapping[str, float] | None = None) -> float:
        return self.inner.served(self._shifted(similarities), entry_id, scope, evidence)

    def observe_lookup(self, scope: str, modalities: Sequence[str],
                       nearest: Mapping[str, float] | None) -> None:
        self.inner.observe_lookup(scope, modalities, nearest)

    def feedback(self, similarities: Mapping[str, float], entry_id: str, correct: bool,
                 scope: str | None = None, charged: float = 0.0) -> None:
        self.inner.feedback(similarities, entry_id, correct, scope, charged)

    def _shifted(self, similarities: Mapping[str, float]) -> dict[str, float]:
        return {m: s + self.offsets.get(m, 0.0) for m, s in similarities.items()}

    def forget(self, entry_id: str) -> None:
        self.inner.forget(entry_id)

    def deltas(self) -> dict[str, float]:
        return {m: 1.0 - self.floor(m) for m in set(self.inner.deltas()) | set(self.offsets)}

    def __getattr__(self, name: str) -> Any:
        if name == "inner":  # not set yet (e.g. while unpickling)
            raise AttributeError(name)
        return getattr(self.inner, name)


class CacheAdapter:
    """A :class:`Scheduler` attached to a live TieredCache.

    It wraps the cache's threshold rule in an :class:`OffsetThreshold` and, through the
    cache's ``after_get`` hook, every ``window`` gets reads the window's hit rate, error
    rate (false hits ÷ lookups) and latency from ``cache.metrics.snapshot()`` and applies
    the scheduler's next levers (a split window: each part's levers in turn, a snapshot at
    the switch giving each part's own measurement). Latency is the cache's own get latency plus
    ``miss_cost_ms`` (an assumed origin cost) per miss for the mean; the p99 is the get
    histogram's bucket bound. A setting's ``skip`` becomes the cache's ``probe`` (the
    tiers a get consults). The cache does not decide which misses are stored, its
    caller does: ask :meth:`admit` before putting a miss. ``detach()`` restores the rule
    and probes every tier again.
    """

    def __init__(self, scheduler: Scheduler, cache: "TieredCache", *, window: int,
                 miss_cost_ms: float, seed: int) -> None:
        self.window = _window(window)
        self.miss_cost_ms = check_number(miss_cost_ms, "miss_cost_ms", 0, strict=False)
        names = {tier.name for tier in cache.tiers}
        unknown = set().union(*(s.skip for s in scheduler.settings)) - names
        if unknown:
            raise ConfigError(f"settings skip tiers {sorted(unknown)} that the cache does not "
                              f"have; its tiers: {sorted(names)}")
        self._names = names
        if cache.after_get is not None:
            raise ConfigError("this cache already has an after_get hook (another scheduler?); "
                              "detach it first")
        self.scheduler, self.cache = scheduler, cache
        self.rule = OffsetThreshold(cache.thresholds)
        self._rng = np.random.default_rng(seed)
        cache.thresholds = self.rule
        cache.after_get = self._after_get
        self._start_window(cache.metrics.snapshot())

    def admit(self) -> bool:
        """Whether to store the miss just seen (a draw with the current ``admit`` probability)."""
        return _admits(self._rng, self.levers)

    def detach(self) -> None:
        """Stop driving the cache and give it back its own threshold rule."""
        self.cache.after_get = None
        self.cache.thresholds = self.rule.inner
        self.cache.probe = None

    def _start_window(self, now: CacheMetrics) -> None:
        self._window_start = now
        self._parts = self.scheduler.split(self.window)
        self._measured: list[tuple[int, WindowStats]] = []
        self._start_part(now)

    def _start_part(self, now: CacheMetrics) -> None:
        self._part_start, self._gets = now, 0
        self._apply(self.scheduler.settings[self._parts[len(self._measured)][0]])

    def _after_get(self, hit: Hit | None) -> None:
        self._gets += 1
        setting, requests = self._parts[len(self._measured)]
        if self._gets < requests:
            return
        now = self.cache.metrics.snapshot()
        self._measured.append((setting, window_stats(self._part_start, now, self.miss_cost_ms)))
        if len(self._measured) < len(self._parts):
            self._start_part(now)
            return
        self.scheduler.observe(window_stats(self._window_start, now, self.miss_cost_ms),
                               self._measured)
        self._start_window(now)

    def _apply(self, levers: Levers) -> None:
        self.levers = levers
        self.rule.offsets = dict(levers.delta_offset)
        self.cache.probe = self._names - levers.skip if levers.skip else None


def window_stats(before: CacheMetrics, after: CacheMetrics,
                 miss_cost_ms: float = 0.0) -> WindowStats:
    """The window between two metrics snapshots of one cache (see :class:`CacheAdapter`);
    when the metrics were reset in between, the window is what ``after`` counted."""
    if _lookups(after) < _lookups(before):
        before = CacheMetrics()
    hits = sum(after.hits.values()) - sum(before.hits.values())
    misses = sum(after.misses.values()) - sum(before.misses.values())
    false = sum(after.false_hits.values()) - sum(before.false_hits.values())
    lookups = hits + misses
    gets = _histogram_delta(before.latency.get("get"), after.latency.get("get"))
    if lookups == 0:
        return WindowStats(0, math.nan, math.nan, math.nan, math.nan)
    mean_get_ms = 1000.0 * gets.sum / gets.count if gets.count else 0.0
    return WindowStats(requests=lookups, hit_rate=hits / lookups, error_rate=false / lookups,
                       mean_latency_ms=mean_get_ms + miss_cost_ms * misses / lookups,
                       p99_latency_ms=1000.0 * gets.quantile(0.99) if gets.count else 0.0)


def _lookups(metrics: CacheMetrics) -> int:
    return sum(metrics.hits.values()) + sum(metrics.misses.values())


def _histogram_delta(before: Histogram | None, after: Histogram | None) -> Histogram:
    """The observations ``after`` has beyond ``before`` (same buckets)."""
    if after is None:
        return Histogram()
    old = before or Histogram(after.buckets)
    delta = Histogram(after.buckets)
    delta.counts = [a - b for a, b in zip(after.counts, old.counts)]
    delta.sum, delta.count = after.sum - old.sum, after.count - old.count
    return delta


def _admits(rng: np.random.Generator, levers: Levers) -> bool:
    """A draw: whether a miss is stored under ``levers``."""
    return levers.admit >= 1.0 or rng.random() < levers.admit
