"""A discrete-event model of tier preemption: foreground lookups and background I/O sharing the
channels of a tier hierarchy (seed 002 §4.2).

**A model with stated parameters, not a measurement**: no device is read; every bandwidth,
size, rate and share below is a parameter (:class:`Traffic`, :class:`Scheduler`), and the
defaults are labelled assumptions.

Channels. Each tier of a CacheBench-MM hierarchy (:class:`mmcache.sim.cachebench.spec.TierSpec`;
default :data:`DEFAULT_CHANNELS`, :func:`~mmcache.sim.cachebench.spec.three_tier`'s GPU memory
over HBM, CPU DRAM over PCIe 4.0 x16 and NVMe, with their nominal assumed bandwidths) is one
channel moving ``bandwidth_gbps`` × 10⁹ bytes/s; the tier's ``lookup_us`` is added to every
foreground read from it (capacity, policy and match rule are not used). A channel is a fluid
server: at every moment it gives a rate to the oldest foreground transfer and to the oldest
background transfer waiting on it (each class first come, first served), the two rates summing
to at most its bandwidth; on the channel that carries background I/O (``source``) the scheduler
sets the split, every other channel serves its foreground reads first come first served at its
full bandwidth (no quota is set on a channel nothing competes for).

Foreground. Lookups arrive as a Poisson process (``lookups_per_s``); each reads ``read_bytes``
from a tier drawn from ``tier_shares`` (the hits' tier mix: misses go to model inference and
are outside this model). A read's end-to-end latency is its tier's lookup + its wait + its
transfer.

Background, on the ``source`` tier's channel only (the slowest link; the write into the upper
tier is not modelled):

* preloads: a Poisson process (``preload_per_s``) of ``preload_bytes`` transfers (bulk warm-up;
  no foreground read depends on them);
* prefetches: for each foreground read drawn from ``source``, with probability
  ``prefetch_share`` a prefetch of its item (``read_bytes``) is issued ``lead`` ms before the
  read (exponential, mean ``lead_ms``; none when that falls before time 0); wrong predictions
  (a Poisson process of prefetches of items never read) are added so that a share
  ``prefetch_precision`` of the issued prefetches is for an item that is read.

Usefulness: a prefetch is **useful** iff it completes before the read it predicts arrives; that
read is then served from ``target`` (a foreground hit gained in the upper tier) and leaves the
source channel alone. A late prefetch still completes (its bytes are background work done) and
its read goes to ``source``.

Schedulers (:class:`Scheduler`, data; :data:`DEFAULT_SCHEDULERS`):

* ``none`` (:func:`no_preemption`): one first-come-first-served queue per channel across both
  classes: the transfer that arrived first has the whole channel (a tie goes to foreground);
* ``quotas`` (:func:`fixed_quotas`): fixed shares, foreground ``foreground_share`` (the seed's
  70 %) and background the rest; a class with nothing waiting leaves its share unused (a hard
  cap) unless ``work_conserving``;
* ``threshold`` (:func:`threshold_preemption`): as ``none``, except that a channel freezes its
  background transfers (pausing the one in progress) as soon as a foreground read still waiting
  on it has been in flight for ``threshold_ms`` of end-to-end latency (the seed's 8 ms), and
  resumes them at the first foreground completion after which no foreground read waits or the
  oldest one waiting is younger than ``resume_ms`` (the hysteresis, ``resume_ms`` ≤
  ``threshold_ms``).

Horizon: arrivals fall in [0, ``duration_s``); the simulation runs until every foreground read
is served; background bytes count the transfers completed before ``duration_s``. One seed gives
every scheduler the same arrivals, tiers and leads (common random numbers). :func:`offered_load`
and :func:`at_load` relate the foreground rate to the source channel's offered load;
:func:`sweep` tabulates schedulers × loads. The event loop is :func:`run_streams`, which takes
the streams as stated arrays (per-lookup sizes, the transfer each lookup depends on, the tier it
reads from when that transfer is complete and when not): :func:`simulate` is one driver of it,
:mod:`mmcache.sim.preemption_replay` (the streams of a CacheBench-MM replay) another.
"""

from __future__ import annotations

import heapq
import math
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

import numpy as np

from mmcache.errors import ConfigError, InvalidInputError, check_number
from mmcache.sim.cachebench.spec import TierSpec, three_tier

#: The channels: CacheBench-MM's three tiers (GPU HBM, CPU DRAM over PCIe, NVMe) with their
#: nominal assumed bandwidths and lookups; the capacity passed is not used by this model.
DEFAULT_CHANNELS: tuple[TierSpec, ...] = three_tier(2 ** 30)

RULES = ("fifo", "quotas", "threshold")
FOREGROUND, BACKGROUND = 0, 1
MiB = 2 ** 20
# event kinds, in the order they are handled at one instant: completions first, so a read
# arriving when its prefetch completes finds it done, and a deadline met exactly is not late
_DONE, _ARRIVE, _ISSUE, _LATE = 0, 1, 2, 3


@dataclass(frozen=True)
class Scheduler:
    """How a channel splits its bandwidth between foreground reads and background transfers.

    ``rule``: ``"fifo"`` (first come first served across both classes), ``"quotas"`` (fixed
    shares: ``foreground_share`` and the rest; ``work_conserving`` lends an idle class's share
    to the other) or ``"threshold"`` (fifo, background frozen while a read is later than
    ``threshold_ms`` until the oldest waiting read is younger than ``resume_ms``).
    """

    name: str
    rule: str = "fifo"
    foreground_share: float = 0.7
    work_conserving: bool = False
    threshold_ms: float = 8.0
    resume_ms: float = 4.0

    def __post_init__(self) -> None:
        if not self.name.strip():
            raise ConfigError("a scheduler needs a name")
        if self.rule not in RULES:
            raise ConfigError(f"{self.name}: rule must be one of {RULES}, got {self.rule!r}")
        if not (math.isfinite(self.foreground_share) and 0 < self.foreground_share < 1):
            raise ConfigError(f"{self.name}: foreground_share must be in (0, 1), got "
                              f"{self.foreground_share!r}")
        if not (math.isfinite(self.threshold_ms) and self.threshold_ms > 0):
            raise ConfigError(f"{self.name}: threshold_ms must be a positive finite number, got "
                              f"{self.threshold_ms!r}")
        if not (math.isfinite(self.resume_ms) and 0 <= self.resume_ms <= self.threshold_ms):
            raise ConfigError(f"{self.name}: resume_ms must be in [0, threshold_ms], got "
                              f"{self.resume_ms!r}")

    def shares(self, fg_waiting: bool, bg_waiting: bool, fg_first: bool,
               frozen: bool) -> tuple[float, float]:
        """Shares of the channel given to the oldest foreground and the oldest background
        transfer, given which classes have one waiting, whether the foreground one arrived
        first (or at the same time) and whether background is frozen."""
        if self.rule == "quotas":
            fg, bg = self.foreground_share, 1 - self.foreground_share
            if self.work_conserving:
                fg, bg = (fg if bg_waiting else 1.0), (bg if fg_waiting else 1.0)
            return (fg if fg_waiting else 0.0), (bg if bg_waiting else 0.0)
        if self.rule == "threshold" and frozen:
            return (1.0 if fg_waiting else 0.0), 0.0
        if fg_waiting and (fg_first or not bg_waiting):
            return 1.0, 0.0
        return 0.0, (1.0 if bg_waiting else 0.0)


def no_preemption() -> Scheduler:
    """``none``: one FIFO queue per channel shared by foreground and background."""
    return Scheduler("none", "fifo")


def fixed_quotas(foreground_share: float = 0.7, *, work_conserving: bool = False) -> Scheduler:
    """``quotas``: the seed's fixed shares (inference 70 %, background 30 % of the channel)."""
    return Scheduler("quotas", "quotas", foreground_share=foreground_share,
                     work_conserving=work_conserving)


def threshold_preemption(threshold_ms: float = 8.0, resume_ms: float = 4.0) -> Scheduler:
    """``threshold``: the seed's preemption, background frozen past ``threshold_ms`` (8 ms)
    of foreground end-to-end latency, resumed below ``resume_ms``."""
    return Scheduler("threshold", "threshold", threshold_ms=threshold_ms, resume_ms=resume_ms)


#: The three compared schedulers with the seed's parameters.
DEFAULT_SCHEDULERS: tuple[Scheduler, ...] = (no_preemption(), fixed_quotas(),
                                             threshold_preemption())


@dataclass(frozen=True)
class Traffic:
    """The offered work (stated parameters; the defaults are assumptions, not measurements):
    foreground lookups per second and the tier mix they read from, the bytes of one read,
    background preloads (rate, bytes) and prefetches (the share of ``source`` reads prefetched,
    the precision of the predictions, the mean lead), the ``source`` tier background reads from,
    the ``target`` tier a useful prefetch serves from, the horizon and the seed."""

    lookups_per_s: float = 1000.0
    tier_shares: Mapping[str, float] = field(
        default_factory=lambda: {"L1-gpu": 0.3, "L2-cpu": 0.3, "L3-nvme": 0.4})
    read_bytes: int = 2 * MiB
    preload_per_s: float = 50.0
    preload_bytes: int = 8 * MiB
    prefetch_share: float = 0.5
    prefetch_precision: float = 0.5
    lead_ms: float = 20.0
    source: str = "L3-nvme"
    target: str = "L1-gpu"
    duration_s: float = 10.0
    seed: int = 0

    def __post_init__(self) -> None:
        check_number(self.lookups_per_s, "lookups_per_s", 0)
        check_number(self.preload_per_s, "preload_per_s", 0, strict=False)
        check_number(self.lead_ms, "lead_ms", 0)
        check_number(self.duration_s, "duration_s", 0)
        for name in ("read_bytes", "preload_bytes"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
                raise ConfigError(f"{name} must be a positive integer, got {value!r}")
        shares = dict(self.tier_shares)
        if not shares or any(not (math.isfinite(s) and s >= 0) for s in shares.values()) \
                or not math.isclose(sum(shares.values()), 1.0, abs_tol=1e-9):
            raise ConfigError(f"tier_shares must be non-negative shares summing to 1, got {shares}")
        if not shares.get(self.source, 0) > 0:
            raise ConfigError(f"the source tier {self.source!r} needs a positive share of the "
                              f"lookups (tier_shares: {shares})")
        if not 0 <= self.prefetch_share <= 1:
            raise ConfigError(f"prefetch_share must be in [0, 1], got {self.prefetch_share!r}")
        if not 0 < self.prefetch_precision <= 1:
            raise ConfigError(f"prefetch_precision must be in (0, 1], got "
                              f"{self.prefetch_precision!r}")
        if self.source == self.target:
            raise ConfigError(f"a prefetch must move data between two tiers; source and target "
                              f"are both {self.source!r}")
        object.__setattr__(self, "tier_shares", shares)

    def describe(self) -> dict[str, Any]:
        """The parameters, JSON-ready."""
        return {k: (dict(v) if isinstance(v, Mapping) else v) for k, v in vars(self).items()}


def _channel_index(traffic: Traffic, channels: Sequence[TierSpec]) -> dict[str, int]:
    """Channel index by tier name; raises unless every tier ``traffic`` names is a channel."""
    index = {c.name: k for k, c in enumerate(channels)}
    if not channels or len(index) != len(channels):
        raise ConfigError(f"channels must be a non-empty sequence of uniquely named tiers, got "
                          f"{[c.name for c in channels]}")
    unknown = sorted({*traffic.tier_shares, traffic.source, traffic.target} - set(index))
    if unknown:
        raise ConfigError(f"tiers {unknown} are not channels (channels: {list(index)})")
    return index


def _bytes_per_s(tier: TierSpec) -> float:
    return tier.bandwidth_gbps * 1e9


def offered_load(traffic: Traffic, channels: Sequence[TierSpec] = DEFAULT_CHANNELS) -> float:
    """Bytes per second offered to the source channel ÷ its bandwidth: every foreground read
    drawn from ``source`` (as if no prefetch were useful), every prefetch issued (right and
    wrong) and every preload."""
    index = _channel_index(traffic, channels)
    per_lookup, fixed = _load_terms(traffic)
    return (traffic.lookups_per_s * per_lookup + fixed) / _bytes_per_s(
        channels[index[traffic.source]])


def _load_terms(traffic: Traffic) -> tuple[float, float]:
    """(source-channel bytes per lookup per second, preload bytes per second)."""
    share = traffic.tier_shares[traffic.source]
    prefetched = traffic.prefetch_share / traffic.prefetch_precision
    return share * traffic.read_bytes * (1 + prefetched), traffic.preload_per_s * \
        traffic.preload_bytes


def at_load(traffic: Traffic, load: float,
            channels: Sequence[TierSpec] = DEFAULT_CHANNELS) -> Traffic:
    """``traffic`` with its lookup rate set so that its :func:`offered_load` is ``load``
    (background preloads unchanged; prefetches follow the lookups)."""
    check_number(load, "load", 0)
    index = _channel_index(traffic, channels)
    per_lookup, fixed = _load_terms(traffic)
    capacity = _bytes_per_s(channels[index[traffic.source]])
    rate = (load * capacity - fixed) / per_lookup
    if not rate > 0:
        raise ConfigError(f"load {load!r} is not above the preloads' own load "
                          f"{fixed / capacity:.3g}")
    return Traffic(**{**traffic.describe(), "lookups_per_s": rate})


@dataclass(frozen=True)
class Arrivals:
    """Arrival times in ms: each lookup's, the tier index (into the channels) it reads from
    without a prefetch, and its prefetch's issue time (NaN: none); the wrong prefetches'; the
    preloads'. :func:`draw_arrivals` draws them; tests may state them."""

    lookup_ms: np.ndarray
    lookup_tier: np.ndarray
    prefetch_ms: np.ndarray
    wrong_prefetch_ms: np.ndarray
    preload_ms: np.ndarray

    def check(self, duration_ms: float, n_channels: int) -> None:
        """Raises :class:`InvalidInputError` unless every time lies in [0, ``duration_ms``),
        every prefetch precedes its lookup and every tier index is a channel."""
        n = len(self.lookup_ms)
        if len(self.lookup_tier) != n or len(self.prefetch_ms) != n:
            raise InvalidInputError("lookup_ms, lookup_tier and prefetch_ms must have one entry "
                                    "per lookup")
        times = np.concatenate([self.lookup_ms, self.wrong_prefetch_ms, self.preload_ms,
                                self.prefetch_ms[~np.isnan(self.prefetch_ms)]])
        if not (np.isfinite(times).all() and (times >= 0).all() and (times < duration_ms).all()):
            raise InvalidInputError(f"arrival times must be finite and in [0, {duration_ms} ms)")
        if (self.prefetch_ms > self.lookup_ms).any():
            raise InvalidInputError("a prefetch must be issued no later than its lookup")
        tiers = np.asarray(self.lookup_tier)
        if n and not (np.issubdtype(tiers.dtype, np.integer) and tiers.min() >= 0
                      and tiers.max() < n_channels):
            raise InvalidInputError(f"lookup_tier must hold channel indices in [0, {n_channels})")


def draw_arrivals(traffic: Traffic, channels: Sequence[TierSpec] = DEFAULT_CHANNELS) -> Arrivals:
    """The seeded arrivals of ``traffic`` (Poisson processes over its horizon; independent
    streams for lookups, prefetch leads, wrong prefetches and preloads)."""
    index = _channel_index(traffic, channels)
    g_lookup, g_tier, g_lead, g_wrong, g_preload = (
        np.random.default_rng(s) for s in np.random.SeedSequence(traffic.seed).spawn(5))
    horizon = 1e3 * traffic.duration_s

    def poisson(rng: np.random.Generator, per_s: float) -> np.ndarray:
        return np.sort(rng.uniform(0.0, horizon, rng.poisson(per_s * traffic.duration_s)))

    lookup_ms = poisson(g_lookup, traffic.lookups_per_s)
    names = list(traffic.tier_shares)
    drawn = g_tier.choice(len(names), size=len(lookup_ms), p=list(traffic.tier_shares.values()))
    tier = np.array([index[n] for n in names])[drawn]
    covered = (tier == index[traffic.source]) & (g_lead.random(len(lookup_ms))
                                                 < traffic.prefetch_share)
    issue = lookup_ms - g_lead.exponential(traffic.lead_ms, len(lookup_ms))
    prefetch_ms = np.where(covered & (issue >= 0), issue, np.nan)
    wrong_per_s = (traffic.lookups_per_s * traffic.tier_shares[traffic.source]
                   * traffic.prefetch_share * (1 / traffic.prefetch_precision - 1))
    return Arrivals(lookup_ms, tier.astype(np.int64), prefetch_ms, poisson(g_wrong, wrong_per_s),
                    poisson(g_preload, traffic.preload_per_s))


class _Transfer:
    """One transfer waiting on a channel (a foreground read, a preload or a prefetch)."""

    __slots__ = ("kind", "ident", "arrival_ms", "size", "remaining")

    def __init__(self, kind: str, ident: int, arrival_ms: float, size: float) -> None:
        self.kind, self.ident, self.arrival_ms = kind, ident, arrival_ms
        self.size = self.remaining = float(size)


class _Channel:
    """A channel's two FIFO queues (foreground, background), the rates their heads get now,
    whether it carries background I/O and whether its background is frozen."""

    def __init__(self, tier: TierSpec, shared: bool) -> None:
        self.shared = shared  # carries background I/O: the scheduler splits it
        self.bytes_per_ms = _bytes_per_s(tier) / 1e3
        self.lookup_ms = tier.lookup_us / 1e3
        self.queues: tuple[deque[_Transfer], deque[_Transfer]] = (deque(), deque())
        self.rates = (0.0, 0.0)
        self.clock = 0.0
        self.version = 0
        self.frozen = False
        self.frozen_at = 0.0
        self.frozen_ms = 0.0

    def advance(self, now: float) -> None:
        """Move the heads' bytes at the current rates up to ``now``."""
        for cls in (FOREGROUND, BACKGROUND):
            if self.rates[cls] > 0:
                self.queues[cls][0].remaining -= self.rates[cls] * (now - self.clock)
        self.clock = now

    def set_frozen(self, frozen: bool, now: float, horizon_ms: float) -> None:
        """Freeze or resume background, counting frozen time inside the horizon."""
        if frozen and not self.frozen:
            self.frozen_at = now
        elif self.frozen and not frozen:
            self.frozen_ms += max(0.0, min(now, horizon_ms) - min(self.frozen_at, horizon_ms))
        self.frozen = frozen

    def reschedule(self, scheduler: Scheduler) -> tuple[float, int] | None:
        """New rates from ``scheduler``; the time of the next completion and its class."""
        fg, bg = self.queues
        fg_first = bool(fg) and (not bg or fg[0].arrival_ms <= bg[0].arrival_ms)
        shares = (scheduler.shares(bool(fg), bool(bg), fg_first, self.frozen) if self.shared
                  else (1.0 if fg else 0.0, 0.0))
        self.rates = (shares[0] * self.bytes_per_ms, shares[1] * self.bytes_per_ms)
        self.version += 1
        finishes = [(self.clock + max(0.0, q[0].remaining) / r, cls)
                    for cls, (q, r) in enumerate(zip(self.queues, self.rates)) if r > 0]
        return min(finishes) if finishes else None


@dataclass
class PreemptionResult:
    """One scheduler on one arrival stream: every lookup's end-to-end latency (ms) and the
    channel it was served from, background bytes completed inside the horizon by kind and
    offered, prefetches issued and useful, and the share of the horizon the source channel's
    background was frozen."""

    scheduler: str
    load: float
    lookups_per_s: float
    latency_ms: np.ndarray = field(repr=False)
    served_tier: np.ndarray = field(repr=False)
    preload_bytes: int
    prefetch_bytes: int
    background_offered_bytes: int
    prefetch_issued: int
    prefetch_useful: int
    frozen_share: float

    def row(self) -> dict[str, Any]:
        """The scalars, JSON-ready: foreground p50/p99/mean (ms), background bytes completed
        and their share of the offered, prefetch usefulness (useful ÷ issued) and hits gained
        (useful prefetches ÷ lookups)."""
        lat = self.latency_ms if len(self.latency_ms) else np.zeros(1)
        done = self.preload_bytes + self.prefetch_bytes
        return {"scheduler": self.scheduler, "load": self.load,
                "lookups_per_s": self.lookups_per_s, "lookups": len(self.latency_ms),
                "fg_p50_ms": float(np.percentile(lat, 50)),
                "fg_p99_ms": float(np.percentile(lat, 99)), "fg_mean_ms": float(lat.mean()),
                "background_bytes": done, "preload_bytes": self.preload_bytes,
                "prefetch_bytes": self.prefetch_bytes,
                "background_completed_share": done / max(1, self.background_offered_bytes),
                "prefetch_issued": self.prefetch_issued, "prefetch_useful": self.prefetch_useful,
                "prefetch_usefulness": self.prefetch_useful / max(1, self.prefetch_issued),
                "hits_gained": self.prefetch_useful / max(1, len(self.latency_ms)),
                "frozen_share": self.frozen_share}


def simulate(traffic: Traffic, scheduler: Scheduler,
             channels: Sequence[TierSpec] = DEFAULT_CHANNELS, *,
             arrivals: Arrivals | None = None) -> PreemptionResult:
    """Run ``arrivals`` (default: :func:`draw_arrivals` of ``traffic``) through ``channels``
    under ``scheduler`` (the module docstring states the model)."""
    if not isinstance(scheduler, Scheduler):
        raise ConfigError(f"scheduler must be a Scheduler, got {type(scheduler).__name__}")
    index = _channel_index(traffic, channels)
    horizon = 1e3 * traffic.duration_s
    arrivals = draw_arrivals(traffic, channels) if arrivals is None else arrivals
    arrivals.check(horizon, len(channels))
    src, dst = index[traffic.source], index[traffic.target]
    n = len(arrivals.lookup_ms)
    covered = ~np.isnan(arrivals.prefetch_ms)
    depends = np.full(n, -1, np.int64)  # the prefetch id predicting each lookup
    depends[covered] = np.arange(int(covered.sum()))
    prefetch_ms = np.concatenate([arrivals.prefetch_ms[covered], arrivals.wrong_prefetch_ms])
    bg_ms = np.concatenate([prefetch_ms, arrivals.preload_ms])
    bg_bytes = np.concatenate([np.full(len(prefetch_ms), traffic.read_bytes, np.int64),
                               np.full(len(arrivals.preload_ms), traffic.preload_bytes, np.int64)])
    bg_prefetch = np.arange(len(bg_ms)) < len(prefetch_ms)
    out = run_streams(channels, scheduler, horizon, src, arrivals.lookup_ms,
                      np.full(n, traffic.read_bytes, np.int64),
                      np.full(n, dst, np.int64), np.asarray(arrivals.lookup_tier, np.int64),
                      depends, bg_ms, bg_bytes, bg_prefetch)
    return PreemptionResult(
        scheduler=scheduler.name, load=offered_load(traffic, channels),
        lookups_per_s=traffic.lookups_per_s, latency_ms=out.latency_ms,
        served_tier=out.served_tier, preload_bytes=out.preload_bytes,
        prefetch_bytes=out.prefetch_bytes, background_offered_bytes=int(bg_bytes.sum()),
        prefetch_issued=int(bg_prefetch.sum()), prefetch_useful=out.prefetch_useful,
        frozen_share=out.frozen_share)


@dataclass
class StreamRun:
    """What :func:`run_streams` returns: per lookup its end-to-end latency (ms), the channel it
    was served from and whether the background transfer it depends on was complete at its
    arrival (``on_time``); per background transfer its completion time (ms; inf: never);
    background bytes completed inside the horizon, prefetches (and preloads) on time, and the
    share of the horizon the source channel's background was frozen."""

    latency_ms: np.ndarray = field(repr=False)
    served_tier: np.ndarray = field(repr=False)
    on_time: np.ndarray = field(repr=False)
    done_ms: np.ndarray = field(repr=False)
    preload_bytes: int
    prefetch_bytes: int
    prefetch_useful: int
    preload_useful: int
    frozen_share: float


def run_streams(channels: Sequence[TierSpec], scheduler: Scheduler, horizon_ms: float,
                source: int, lookup_ms: np.ndarray, lookup_bytes: np.ndarray,
                tier_ready: np.ndarray, tier_else: np.ndarray, depends: np.ndarray,
                bg_ms: np.ndarray, bg_bytes: np.ndarray, bg_prefetch: np.ndarray) -> StreamRun:
    """The model's engine on stated streams (the module docstring states the model; the
    channels are indices into ``channels``).

    Foreground lookup ``i`` arrives at ``lookup_ms[i]`` and reads ``lookup_bytes[i]`` from
    channel ``tier_ready[i]`` if background transfer ``depends[i]`` (-1: none) has completed by
    then, from ``tier_else[i]`` otherwise (and from ``tier_else[i]`` when it depends on none).
    Background transfer ``b`` (a prefetch where ``bg_prefetch[b]``, else a preload) of
    ``bg_bytes[b]`` is issued at ``bg_ms[b]`` on channel ``source``. Background bytes count the
    transfers completed before ``horizon_ms``; the run goes on until every lookup is served.
    Events at one instant are handled completions first, then arrivals (in lookup order), then
    issues (in transfer order)."""
    chans = [_Channel(t, k == source) for k, t in enumerate(channels)]
    n, n_bg = len(lookup_ms), len(bg_ms)
    latency, served = np.full(n, np.nan), np.full(n, -1, np.int64)
    on_time = np.zeros(n, bool)
    done_ms = np.full(n_bg, math.inf)
    events: list[tuple[float, int, int, Any, Any]] = []
    seq = 0

    def push(time: float, kind: int, a: Any, b: Any = None) -> None:
        nonlocal seq
        heapq.heappush(events, (time, kind, seq, a, b))
        seq += 1

    for i, t in enumerate(np.asarray(lookup_ms, float).tolist()):
        push(t, _ARRIVE, i)
    for b, t in enumerate(np.asarray(bg_ms, float).tolist()):
        push(t, _ISSUE, "prefetch" if bg_prefetch[b] else "preload", b)
    depends_of, ready_of, else_of = (np.asarray(a, np.int64).tolist()
                                     for a in (depends, tier_ready, tier_else))
    size_of, bg_size = np.asarray(lookup_bytes).tolist(), np.asarray(bg_bytes).tolist()

    def update(c: int) -> None:
        nxt = chans[c].reschedule(scheduler)
        if nxt is not None:
            push(nxt[0], _DONE, c, (chans[c].version, nxt[1]))

    done_bytes = {"preload": 0, "prefetch": 0}
    useful = {"preload": 0, "prefetch": 0}
    left = n
    while events and (left or events[0][0] < horizon_ms):
        now, kind, _, a, b = heapq.heappop(events)
        if kind == _DONE:
            ch = chans[a]
            if b[0] != ch.version:
                continue  # superseded by a later rate change
            ch.advance(now)
            for cls in (FOREGROUND, BACKGROUND):
                q = ch.queues[cls]
                if not (q and ch.rates[cls] > 0 and (cls == b[1] or q[0].remaining
                                                      <= 1e-9 * q[0].size)):
                    continue
                tr = q.popleft()
                if cls == FOREGROUND:
                    latency[tr.ident], left = now - tr.arrival_ms + ch.lookup_ms, left - 1
                    if ch.frozen and (not q or now - q[0].arrival_ms + ch.lookup_ms
                                      < scheduler.resume_ms):
                        ch.set_frozen(False, now, horizon_ms)
                else:
                    done_ms[tr.ident] = now
                    done_bytes[tr.kind] += int(tr.size) if now < horizon_ms else 0
            update(a)
        elif kind == _ARRIVE:
            pid = depends_of[a]
            c = else_of[a]
            if pid >= 0 and done_ms[pid] <= now:
                c, on_time[a] = ready_of[a], True
                useful["prefetch" if bg_prefetch[pid] else "preload"] += 1
            ch = chans[c]
            ch.advance(now)
            ch.queues[FOREGROUND].append(_Transfer("lookup", a, now, size_of[a]))
            served[a] = c
            if scheduler.rule == "threshold" and ch.shared:
                push(now + max(0.0, scheduler.threshold_ms - ch.lookup_ms), _LATE, c, a)
            update(c)
        elif kind == _ISSUE:
            ch = chans[source]
            ch.advance(now)
            ch.queues[BACKGROUND].append(_Transfer(a, b, now, bg_size[b]))
            update(source)
        else:  # _LATE: freeze if lookup b is still waiting on channel a
            ch = chans[a]
            if not ch.frozen and np.isnan(latency[b]):
                ch.advance(now)
                ch.set_frozen(True, now, horizon_ms)
                update(a)
    for ch in chans:
        ch.set_frozen(False, horizon_ms, horizon_ms)
    return StreamRun(latency_ms=latency, served_tier=served, on_time=on_time, done_ms=done_ms,
                     preload_bytes=done_bytes["preload"], prefetch_bytes=done_bytes["prefetch"],
                     prefetch_useful=useful["prefetch"], preload_useful=useful["preload"],
                     frozen_share=chans[source].frozen_ms / horizon_ms)


def sweep(traffic: Traffic, loads: Sequence[float],
          schedulers: Sequence[Scheduler] = DEFAULT_SCHEDULERS,
          channels: Sequence[TierSpec] = DEFAULT_CHANNELS) -> list[dict[str, Any]]:
    """One :meth:`PreemptionResult.row` per offered load (:func:`at_load`) and scheduler; every
    scheduler at a load sees the same arrivals."""
    if not loads:
        raise ConfigError("sweep needs at least one load")
    names = [s.name for s in schedulers]
    if not schedulers or len(set(names)) != len(names):
        raise ConfigError(f"schedulers must be non-empty and uniquely named, got {names}")
    at = [at_load(traffic, float(load), channels) for load in loads]  # raises before any run
    rows = []
    for t in at:
        arrivals = draw_arrivals(t, channels)
        rows += [simulate(t, s, channels, arrivals=arrivals).row() for s in schedulers]
    return rows
