"""The Lagrangian dynamic-weight scheduler (seed 000 §3.2): dual control of a cache's levers.

The problem: minimise latency subject to constraints on what a window of requests
measured: hit rate ≥ target, and optionally error (false-hit) rate ≤ budget and p99
latency ≤ SLA. Its Lagrangian for a lever setting ``s`` is

    L(s, λ) = objective(s) / objective_scale + Σ_k λ_k · violation_k(s)

(the objective: mean latency, or with ``objective="error_rate"`` the false-hit rate)

where ``violation_k`` is ``target − value`` for an at-least constraint and
``value − target`` for an at-most one. Each λ_k comes from one :class:`Controller`
(fixed, the seed's I, PI, PID, PI-aim; see :data:`CONTROLLERS`), updated with every window's
measurement of its metric (or, for PI-aim, set from the value it aims at through the
mixture below).

The decision: the :class:`Scheduler` picks, per window, a setting from a declared finite
set of :class:`Levers` — the one minimising L under per-setting estimates (exponential
moving averages of the requests served with it). Settings never served are tried first, in
order; afterwards a share ``explore`` of windows uses a random setting, so estimates of
unused settings follow a changing workload (an estimate also carries the cache's state when
it was measured: in a cold cache the settings tried first look worse until they are used
again). Why a finite set with learned estimates: how a δ offset or an admission rate moves
hit rate and latency depends on the workload, so no fixed mapping λ → lever is honest, while
the argmin over a finite set is exact and needs no model. Its price: the chosen hit rate is
piecewise constant in λ, a staircase whose steps (neighbouring settings) can be wider than
the band a target is held to. ``mix=<constraint>`` removes the steps the way a Lagrangian
relaxation over discrete actions does, by randomising between neighbours (:meth:`Scheduler.
mixture`): on the lower convex hull of the settings' (constraint, objective) estimates, each
hull setting is served purely at its break-even multiplier (the λ at which it starts to win
the argmin) and between two break-evens the window is split between the two neighbours,
the looser one's share rising linearly in λ — so the expected constrained metric is
continuous and monotone in λ, and a controller can hold a target between two settings
without alternating. The split is deterministic (the first requests of the window with one
setting, the rest with the other), so the estimates learn each part's requests, the same in
replay and live; a finer grid of settings would narrow the steps too, but its estimates each
get fewer requests, so each is noisier, while the mix keeps the grid and needs no model.

Levers: a δ offset per modality (added to the threshold rule's δ: the cosine a semantic
hit needs is lowered by it), admission (the probability that a miss is stored) and tiers
not probed (``skip``: no lookup cost, no hits from them; live, through the cache's
``probe`` set of tiers consulted).

Where it runs, with the same :class:`Scheduler`: :meth:`Scheduler.replay` replays a
CacheBench-MM workload window by window (:class:`mmcache.cachebench.Replayer`), and
:meth:`Scheduler.attach` drives a live :class:`mmcache.TieredCache` from its metrics.

:func:`demonstrate` runs the four controllers on a :class:`FirstOrderPlant` (a known
response) and scores them with :func:`control_metrics`.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Mapping, Sequence

import numpy as np

from mmcache.errors import ConfigError, InvalidInputError
from mmcache.metrics import CacheMetrics, Histogram
from mmcache.thresholds import ThresholdRule
from mmcache.types import MODALITIES, Hit

if TYPE_CHECKING:
    from mmcache.cache import TieredCache
    from mmcache.cachebench import LatencyModel, Report, TierSpec
    from mmcache.neighbours import NeighbourTable
    from mmcache.workload import Workload

#: Constraint metrics of a window and whether each is an at-least (True) or at-most bound.
METRICS: Mapping[str, bool] = {"hit_rate": True, "error_rate": False, "p99_latency_ms": False}
#: What a :class:`Scheduler` can minimise.
OBJECTIVES = ("mean_latency_ms", "error_rate")


# -- controllers ---------------------------------------------------------------------------
class Controller(ABC):
    """Turns each window's measurement of one constrained metric into a multiplier λ ≥ 0.

    ``target`` is the bound; ``at_least`` says whether the metric must stay at or above
    it (hit rate) or at or below it (error rate, p99 latency).
    """

    name: str = ""
    #: Whether the controller sets ``aim`` (a value of its metric) rather than λ: a mixing
    #: :class:`Scheduler` then sets its λ (see :class:`AimPIController`).
    aims: bool = False

    def __init__(self, target: float, *, at_least: bool = True) -> None:
        self.target = _finite(target, "target", ConfigError)
        self.at_least = bool(at_least)
        self.reset()

    def violation(self, measurement: float) -> float:
        """How far ``measurement`` is on the wrong side of the target (negative: satisfied)."""
        return self.target - measurement if self.at_least else measurement - self.target

    def update(self, measurement: float) -> float:
        """Take one window's measurement; return the new λ (a bad measurement changes nothing)."""
        return self._step(_finite(measurement, "measurement", InvalidInputError))

    @abstractmethod
    def _step(self, measurement: float) -> float:
        """The update for a checked measurement; sets and returns ``self.lam``."""

    @abstractmethod
    def reset(self) -> None:
        """Back to the state before the first update."""


class FixedController(Controller):
    """A constant λ (the fixed-weights baseline)."""

    name = "fixed"

    def __init__(self, target: float, *, lam: float = 1.0, at_least: bool = True) -> None:
        self.fixed = _non_negative(lam, "lam")
        super().__init__(target, at_least=at_least)

    def _step(self, measurement: float) -> float:
        return self.lam

    def reset(self) -> None:
        self.lam = self.fixed


def cosine_lr(step: int, horizon: int, start: float = 0.05, end: float = 0.001) -> float:
    """Cosine-annealed learning rate: ``start`` at step 0, ``end`` from step ``horizon`` on."""
    progress = min(max(step, 0), horizon) / horizon
    return end + 0.5 * (start - end) * (1.0 + math.cos(math.pi * progress))


class IController(Controller):
    """The seed's dual ascent: λ ← max(0, λ + lr·violation), lr = :func:`cosine_lr` of the
    update count, from ``lr_start`` (0.05) to ``lr_end`` (0.001) over ``horizon`` windows."""

    name = "I"

    def __init__(self, target: float, *, lr_start: float = 0.05, lr_end: float = 0.001,
                 horizon: int = 1000, lam0: float = 0.0, at_least: bool = True) -> None:
        self.lr_start = _non_negative(lr_start, "lr_start")
        self.lr_end = _non_negative(lr_end, "lr_end")
        if isinstance(horizon, bool) or not isinstance(horizon, int) or horizon < 1:
            raise ConfigError(f"horizon must be a positive number of windows, got {horizon!r}")
        self.horizon = horizon
        self.lam0 = _non_negative(lam0, "lam0")
        super().__init__(target, at_least=at_least)

    def lr(self) -> float:
        """The learning rate of the next update."""
        return cosine_lr(self.steps, self.horizon, self.lr_start, self.lr_end)

    def _step(self, measurement: float) -> float:
        self.lam = max(0.0, self.lam + self.lr() * self.violation(measurement))
        self.steps += 1
        return self.lam

    def reset(self) -> None:
        self.lam, self.steps = self.lam0, 0


class PIDController(Controller):
    """PID Lagrangian (Stooke et al. 2020): λ = clip(kp·e + I + kd·D, 0, lam_max).

    ``e`` is the violation; the integral ``I ← clip(I + ki·e, 0, lam_max)`` is clamped, so a
    long infeasible stretch cannot wind it up beyond ``lam_max`` (anti-windup); ``D`` is the
    change of the measurement since the last window, signed as the violation's (derivative
    on the measurement, so a change of target gives no kick). After an infeasible stretch
    λ needs about ``(lam_max − λ*) / (ki · overshoot)`` windows to come back to the λ* the
    target needs, so set ``lam_max`` to a small multiple of the λ at which the decision
    stops changing. The default gains come from a grid search (kp 0.05–0.5, ki 0.01–0.2,
    kd 0–2) on :class:`FirstOrderPlant`'s defaults, where the derivative changes little;
    a real cache needs its own (λ's scale follows ``Scheduler.objective_scale``).
    """

    name = "PID"

    def __init__(self, target: float, *, kp: float = 0.5, ki: float = 0.05, kd: float = 0.5,
                 lam_max: float = 1.0, at_least: bool = True) -> None:
        self.kp, self.ki, self.kd = (_non_negative(v, n) for v, n in
                                     ((kp, "kp"), (ki, "ki"), (kd, "kd")))
        self.lam_max = _non_negative(lam_max, "lam_max")
        super().__init__(target, at_least=at_least)

    def _step(self, measurement: float) -> float:
        error = self.violation(measurement)
        self.integral = min(self.lam_max, max(0.0, self.integral + self.ki * error))
        change = 0.0 if self.previous is None else measurement - self.previous
        derivative = -change if self.at_least else change
        self.previous = measurement
        self.lam = min(self.lam_max, max(0.0, self.kp * error + self.integral
                                         + self.kd * derivative))
        return self.lam

    def reset(self) -> None:
        self.lam, self.integral, self.previous = 0.0, 0.0, None


class PIController(PIDController):
    """PID without the derivative term."""

    name = "PI"

    def __init__(self, target: float, *, kp: float = 0.5, ki: float = 0.05,
                 lam_max: float = 1.0, at_least: bool = True) -> None:
        super().__init__(target, kp=kp, ki=ki, kd=0.0, lam_max=lam_max, at_least=at_least)


class AimPIController(Controller):
    """PI on the constrained metric's own scale (a gain-scheduled dual update).

    Each window it sets ``aim``, the value a mixing :class:`Scheduler` is asked to reach in
    expectation: ``target + kp·e + I`` for an at-least bound (``target − …`` for an at-most
    one), ``e`` the violation, ``I ← clip(I + ki·e, −reach, reach)`` (anti-windup, in the
    metric's units); the scheduler sets ``lam`` to the multiplier whose mixture's expected
    value under its estimates is the aim (:meth:`Scheduler.multiplier`). Why: a PI on λ moves
    the metric by its gains times the slope of the mixture's expected value in λ, which
    differs by a factor of tens between streams, phases and segments of the hull, so one
    pair of gains is a fast loop on one stream and slower than a phase on another; on the
    metric's own scale the gains mean the same everywhere, and the estimates' map stands in
    for the inverse slope, the integral correcting what the estimates get wrong.
    """

    name = "PI-aim"
    aims = True

    def __init__(self, target: float, *, kp: float = 0.5, ki: float = 0.1, reach: float = 0.1,
                 at_least: bool = True) -> None:
        self.kp, self.ki, self.reach = (_non_negative(v, n) for v, n in
                                        ((kp, "kp"), (ki, "ki"), (reach, "reach")))
        super().__init__(target, at_least=at_least)

    def _step(self, measurement: float) -> float:
        error = self.violation(measurement)
        self.integral = min(self.reach, max(-self.reach, self.integral + self.ki * error))
        shift = self.kp * error + self.integral
        self.aim = self.target + shift if self.at_least else self.target - shift
        return self.lam

    def reset(self) -> None:
        self.lam, self.integral, self.aim = 0.0, 0.0, self.target


#: Controller name → factory ``(target, **params)``; add a controller by one class and a line.
CONTROLLERS: dict[str, Callable[..., Controller]] = {
    cls.name: cls for cls in (FixedController, IController, PIController, PIDController,
                              AimPIController)}


def make_controller(name: str, target: float, **params: Any) -> Controller:
    """Build the registered controller ``name`` for ``target``; ConfigError if unknown."""
    if name not in CONTROLLERS:
        raise ConfigError(f"unknown controller {name!r}; choose one of {sorted(CONTROLLERS)}")
    try:
        return CONTROLLERS[name](target, **params)
    except TypeError as exc:
        raise ConfigError(f"bad parameters for controller {name!r}: {exc}") from None


# -- levers and windows --------------------------------------------------------------------
@dataclass(frozen=True, eq=False)
class Levers:
    """One setting of the cache's levers: δ offsets per modality (added to the rule's δ,
    so positive loosens), the probability ``admit`` that a miss is stored, and the names
    of tiers not probed (``skip``; replay only)."""

    delta_offset: Mapping[str, float] = field(default_factory=dict)
    admit: float = 1.0
    skip: frozenset[str] = frozenset()

    def __post_init__(self) -> None:
        unknown = set(self.delta_offset) - set(MODALITIES)
        if unknown:
            raise ConfigError(f"delta_offset names unknown modalities {sorted(unknown)}; "
                              f"known: {list(MODALITIES)}")
        for modality, offset in self.delta_offset.items():
            if not -1.0 < _finite(offset, f"delta_offset[{modality!r}]", ConfigError) < 1.0:
                raise ConfigError(f"delta_offset[{modality!r}] must be in (-1, 1), got {offset}")
        if not 0.0 <= _finite(self.admit, "admit", ConfigError) <= 1.0:
            raise ConfigError(f"admit is a probability in [0, 1], got {self.admit}")
        if isinstance(self.skip, str) or not all(isinstance(t, str) for t in self.skip):
            raise ConfigError(f"skip is a collection of tier names, got {self.skip!r}")
        object.__setattr__(self, "delta_offset", dict(self.delta_offset))
        object.__setattr__(self, "skip", frozenset(self.skip))


@dataclass(frozen=True)
class WindowStats:
    """What one window of requests measured (rates are over its requests)."""

    requests: int
    hit_rate: float
    error_rate: float
    mean_latency_ms: float
    p99_latency_ms: float


# -- the scheduler -------------------------------------------------------------------------
class Scheduler:
    """Chooses a :class:`Levers` setting per window to minimise the Lagrangian (see module).

    ``settings``: the declared finite set; ``constraints``: metric name (a key of
    :data:`METRICS`) → its controller; ``objective_scale`` divides the objective in the
    Lagrangian (λ is in units of it per unit of violation; default: 1000 for latency, so
    seconds, 1 for the error rate), so it sets the λ a trade-off needs, and with it the
    gains and ``lam_max`` a controller needs — choose it so that λ ≈ 1 is the trade-off's
    scale (e.g. the objective's change per unit of the constraint across the settings, so
    that λ = 1 prices a unit of constraint at the settings' mean exchange rate);
    ``smoothing`` is
    the weight of the newest window in a setting's moving averages; ``signal_smoothing``
    the newest window's weight in the filtered measurement each controller is fed (the
    exponentially weighted mean of its constrained metric over the windows fed so far, the
    weights normalised so the first window is not over-weighted; 1: the raw window), for
    windows whose measurement is noisier than the band the constraint is held to; the
    controllers are fed from the first window chosen with every setting estimated (the
    windows that try untried settings are not theirs to answer for);
    ``explore`` the share of windows that use a random setting; ``seed`` seeds that choice.
    ``objective`` is what is minimised: ``"mean_latency_ms"`` (÷ ``objective_scale``) or
    ``"error_rate"`` (the false-hit rate ÷ ``objective_scale``: for workloads where every
    extra hit also cuts latency, so a hit-rate constraint only binds against errors).
    ``mix`` names the constraint whose λ mixes two neighbouring settings (see module and
    :meth:`mixture`); None: one setting per window, the Lagrangian's argmin. A controller
    that aims (:attr:`Controller.aims`) must be the mixed constraint's.
    """

    def __init__(self, settings: Sequence[Levers], constraints: Mapping[str, Controller], *,
                 objective_scale: float | None = None, smoothing: float = 0.3,
                 signal_smoothing: float = 1.0, explore: float = 0.05, seed: int = 0,
                 objective: str = "mean_latency_ms", mix: str | None = None) -> None:
        self.settings = list(settings)
        if not self.settings or not all(isinstance(s, Levers) for s in self.settings):
            raise ConfigError("settings must be a non-empty sequence of Levers")
        for metric, controller in constraints.items():
            if metric not in METRICS:
                raise ConfigError(f"unknown constraint metric {metric!r}; known: {list(METRICS)}")
            if not isinstance(controller, Controller) or controller.at_least != METRICS[metric]:
                raise ConfigError(f"constraint {metric!r} needs a Controller with at_least="
                                  f"{METRICS[metric]}")
        self.constraints = dict(constraints)
        if objective not in OBJECTIVES:
            raise ConfigError(f"unknown objective {objective!r}; choose one of {OBJECTIVES}")
        self.objective = objective
        if mix is not None and mix not in self.constraints:
            raise ConfigError(f"mix names constraint {mix!r}, not one of "
                              f"{sorted(self.constraints)}")
        self.mix = mix
        for metric, controller in self.constraints.items():
            if controller.aims and metric != mix:
                raise ConfigError(f"controller {controller.name!r} of {metric!r} sets an aim; "
                                  f"it needs Scheduler(mix={metric!r})")
        if objective_scale is None:
            objective_scale = 1000.0 if objective == "mean_latency_ms" else 1.0
        if not _finite(objective_scale, "objective_scale", ConfigError) > 0:
            raise ConfigError("objective_scale must be positive")
        for name, weight in (("smoothing", smoothing), ("signal_smoothing", signal_smoothing)):
            if not 0.0 < _finite(weight, name, ConfigError) <= 1.0:
                raise ConfigError(f"{name} is the newest window's weight, in (0, 1]")
        if not 0.0 <= _finite(explore, "explore", ConfigError) < 1.0:
            raise ConfigError("explore is a share of windows, in [0, 1)")
        self.objective_scale, self.smoothing, self.explore = \
            objective_scale, smoothing, explore
        self.signal_smoothing = signal_smoothing
        self.seed = seed
        self.reset()

    def reset(self) -> None:
        """Forget estimates, filtered signals, history and controller state; start again
        from setting 0."""
        for controller in self.constraints.values():
            controller.reset()
        self.estimates: list[dict[str, float] | None] = [None] * len(self.settings)
        self.choice, self.mixed_with, self.weight = 0, 0, 0.0
        self.filtered: dict[str, float] = {}
        self._fed_weight = 0.0  # the filter's sum of weights so far
        self.history: list[dict[str, Any]] = []
        self._rng = np.random.default_rng(self.seed)

    @property
    def levers(self) -> Levers:
        """The setting the next window starts with."""
        return self.settings[self.choice]

    def split(self, window: int) -> list[tuple[int, int]]:
        """The next window of ``window`` requests as (setting index, requests) parts, in
        order: :attr:`choice` for the first, :attr:`mixed_with` for the last
        round(:attr:`weight` · window); parts without requests left out."""
        mixed = int(round(self.weight * _window(window)))
        parts = [(self.choice, window - mixed), (self.mixed_with, mixed)]
        return [(k, n) for k, n in parts if n > 0]

    @property
    def lambdas(self) -> dict[str, float]:
        """Current multiplier per constrained metric."""
        return {metric: c.lam for metric, c in self.constraints.items()}

    def lagrangian(self, estimate: Mapping[str, float]) -> float:
        """L of a setting whose windows measured ``estimate`` (a :class:`WindowStats` dict)."""
        value = estimate[self.objective] / self.objective_scale
        for metric, controller in self.constraints.items():
            value += controller.lam * controller.violation(estimate[metric])
        return value

    def mixture(self) -> tuple[int, int, float]:
        """(a, b, w) at the current multipliers: serve setting ``a`` with weight 1 − w and
        ``b`` with weight w (every setting must have an estimate).

        The settings are points (x, y): x the mixed constraint's margin (−violation), y the
        objective ÷ ``objective_scale`` plus the other constraints' λ-terms, so L = y − λ·x.
        Along the lower convex hull from the least y (its most x on ties), each hull vertex
        v_i has a break-even μ_i, the slope from v_{i−1} (μ_0 = 0): the λ from which v_i
        minimises L. For μ_i ≤ λ < μ_{i+1}, a = v_i, b = v_{i+1} and w = (λ − μ_i) /
        (μ_{i+1} − μ_i); from the last μ on, its vertex alone. So x's expected value, and the
        objective's, are continuous and monotone in λ, each vertex pure at its break-even.
        """
        hull, breaks, _ = self._hull()
        lam = self.constraints[self.mix].lam
        i = int(np.searchsorted(breaks, lam, side="right")) - 1
        if i == len(hull) - 1:
            return hull[i], hull[i], 0.0
        return hull[i], hull[i + 1], (lam - breaks[i]) / (breaks[i + 1] - breaks[i])

    def multiplier(self, aim: float) -> float:
        """The λ at which :meth:`mixture`'s expected value of the mixed constraint's metric,
        under the estimates, is ``aim``: the inverse of that piecewise linear map; 0 below
        the first hull vertex's value, the last break-even above the last one's; a non-finite
        ``aim`` is an InvalidInputError."""
        aim = _finite(aim, "aim", InvalidInputError)
        hull, breaks, margins = self._hull()
        margin = -self.constraints[self.mix].violation(aim)
        xs = [margins[k] for k in hull]
        if margin <= xs[0]:
            return 0.0
        if margin >= xs[-1]:
            return breaks[-1]
        i = int(np.searchsorted(xs, margin, side="right")) - 1
        return breaks[i] + (margin - xs[i]) / (xs[i + 1] - xs[i]) * (breaks[i + 1] - breaks[i])

    def _hull(self) -> tuple[list[int], list[float], list[float]]:
        """(hull vertices in order, their break-evens, every setting's margin x): see
        :meth:`mixture`."""
        if self.mix is None:
            raise ConfigError("mixture() needs a Scheduler(mix=<constraint>)")
        controller = self.constraints[self.mix]
        margins = [-controller.violation(e[self.mix]) for e in self.estimates]
        points = [(x, self.lagrangian(e) + controller.lam * x)
                  for x, e in zip(margins, self.estimates)]
        vertex = min(range(len(points)), key=lambda k: (points[k][1], -points[k][0]))
        hull, breaks = [vertex], [0.0]
        while True:
            x0, y0 = points[hull[-1]]
            ahead = [k for k, (x, _) in enumerate(points) if x > x0]
            if not ahead:
                break
            slope = {k: (points[k][1] - y0) / (points[k][0] - x0) for k in ahead}
            vertex = min(ahead, key=lambda k: (slope[k], -points[k][0]))
            hull.append(vertex)
            breaks.append(max(slope[vertex], breaks[-1]))
        return hull, breaks, margins

    def observe(self, stats: WindowStats,
                parts: Sequence[tuple[int, WindowStats]] | None = None) -> Levers:
        """Learn from the window just served (as :meth:`split` said); return the setting the
        next one starts with.

        ``stats``: the whole window, fed (filtered) to the controllers once every setting was
        estimated when it started; ``parts``: (setting index, what its requests measured) per
        part of a split window (default: the whole window, served with :attr:`levers`). Each
        part moves its setting's estimates with weight ``smoothing`` × its share of the
        window's requests. An aiming controller's λ is then :meth:`multiplier` of its aim. A
        window without requests changes nothing.
        """
        if stats.requests == 0:
            return self.levers
        measured = _measured(stats)
        decided = all(e is not None for e in self.estimates)
        learned = [(k, part.requests, _measured(part)) for k, part in
                   (parts if parts is not None else [(self.choice, stats)]) if part.requests]
        for k, requests, values in learned:
            old, weight = self.estimates[k], self.smoothing * requests / stats.requests
            self.estimates[k] = values if old is None else {
                name: (1 - weight) * old[name] + weight * v for name, v in values.items()}
        if decided:
            self._feed(measured)
        self.history.append({"window": len(self.history), "setting": self.choice,
                             "mixed_with": self.mixed_with, "mix_weight": self.weight,
                             "requests": stats.requests, **measured,
                             **{f"filtered_{m}": v for m, v in self.filtered.items()},
                             **{f"lambda_{m}": lam for m, lam in self.lambdas.items()}})
        self.choice, self.mixed_with, self.weight = self._next_choice()
        return self.levers

    def _feed(self, measured: Mapping[str, float]) -> None:
        """Move each filtered measurement and update its controller (an aiming one's λ from
        its aim)."""
        self._fed_weight = (1 - self.signal_smoothing) * self._fed_weight + 1.0
        for metric, controller in self.constraints.items():
            old_signal = self.filtered.get(metric, measured[metric])
            self.filtered[metric] = old_signal + (measured[metric] - old_signal) / self._fed_weight
            controller.update(self.filtered[metric])
            if controller.aims:
                controller.lam = self.multiplier(controller.aim)

    def _next_choice(self) -> tuple[int, int, float]:
        untried = [k for k, e in enumerate(self.estimates) if e is None]
        if untried:
            return untried[0], untried[0], 0.0
        if self.explore and self._rng.random() < self.explore:
            k = int(self._rng.integers(len(self.settings)))
            return k, k, 0.0
        if self.mix is not None:
            return self.mixture()
        k = int(np.argmin([self.lagrangian(e) for e in self.estimates]))
        return k, k, 0.0

    def replay(self, workload: "Workload", tiers: Sequence["TierSpec"], *, window: int = 100,
               latency: "LatencyModel | None" = None, seed: int = 0,
               limits: bool = False, table: "NeighbourTable | None" = None) -> "Report":
        """Replay ``workload`` through CacheBench-MM ``tiers``, ``window`` requests at a time,
        with this scheduler's levers; returns the whole run's Report (windows: :attr:`history`).

        ``seed`` seeds the admission draws; ``limits=True`` adds the Report's ``limits``
        (the capacity's miss lower bound, Belady and the oracle-semantic cache, over the
        tiers' total capacity; they ignore the levers); ``table``: the workload's neighbour
        table at or below :func:`replay_cutoff`, to share one across replays (default: built at
        it). Served through the compiled kernel where :func:`compiles` says it serves the
        settings as the request-by-request path does.
        """
        from mmcache.cachebench import Replayer

        window = _window(window)
        replayer = Replayer(workload, tiers, latency, cutoff=replay_cutoff(tiers, self.settings),
                            table=table)
        names = {spec.name for spec in replayer.specs}
        unknown = set().union(*(s.skip for s in self.settings)) - names
        if unknown:
            raise ConfigError(f"settings skip tiers {sorted(unknown)} that the replay does not "
                              f"have; its tiers: {sorted(names)}")
        serve = _compiled_serve(replayer) if compiles(tiers, self.settings) else \
            _serve_each(replayer, np.random.default_rng(seed))
        n = len(workload)
        for start in range(0, n, window):
            parts, first = [], start
            for k, requests in self.split(min(window, n - start)):
                serve(first, first + requests, self.settings[k])
                parts.append((k, _replayed_window(replayer, slice(first, first + requests))))
                first += requests
            whole = parts[0][1] if len(parts) == 1 else \
                _replayed_window(replayer, slice(start, first))  # one part: the window's
            self.observe(whole, parts)
        return replayer.report(limits=limits)

    def attach(self, cache: "TieredCache", *, window: int = 100, miss_cost_ms: float = 0.0,
               seed: int = 0) -> "CacheAdapter":
        """Drive the live ``cache``: observe its metrics every ``window`` gets and set its
        levers (see :class:`CacheAdapter`)."""
        return CacheAdapter(self, cache, window=window, miss_cost_ms=miss_cost_ms, seed=seed)


def _measured(stats: WindowStats) -> dict[str, float]:
    """A window's objective and constraint metrics, checked finite."""
    measured = {"mean_latency_ms": stats.mean_latency_ms,
                **{metric: getattr(stats, metric) for metric in METRICS}}
    for name, value in measured.items():
        _finite(value, f"window {name}", InvalidInputError)
    return measured


def replay_cutoff(tiers: Sequence["TierSpec"], settings: Sequence[Levers]) -> float | None:
    """The neighbour-table cutoff under which every lookup of a :meth:`Scheduler.replay` of
    ``settings`` through ``tiers`` reads the table (:func:`mmcache.cachebench.loosest_floor`)."""
    from mmcache.cachebench import loosest_floor

    return loosest_floor(tiers, [s.delta_offset for s in settings])


def replay_table(workload: "Workload", tiers: Sequence["TierSpec"],
                 settings: Sequence[Levers]) -> "NeighbourTable":
    """The neighbour table of ``workload`` at :func:`replay_cutoff`: what every
    :meth:`Scheduler.replay` of ``settings`` (or of some of them) through ``tiers`` reads,
    built once to share across replays."""
    from mmcache.neighbours import neighbour_table

    return neighbour_table(workload, replay_cutoff(tiers, settings))


def compiles(tiers: Sequence["TierSpec"], settings: Sequence[Levers]) -> bool:
    """Whether :meth:`Scheduler.replay` of ``settings`` through ``tiers`` can serve its windows
    through the compiled kernel (:meth:`mmcache.cachebench.Replayer.serve_compiled`): every
    tier's policy is the kernel's, every setting admits every miss and skips no tier, and every
    lookup's floor is positive (the table's cutoff, :func:`replay_cutoff`, then covers it)."""
    from mmcache.tier_kernel import KERNEL_POLICIES

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
    """What the requests ``done`` of a :class:`mmcache.cachebench.Replayer` measured."""
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
        self.miss_cost_ms = _non_negative(miss_cost_ms, "miss_cost_ms")
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


# -- a plant with a known response, and the scores of a controlled run ---------------------
@dataclass
class FirstOrderPlant:
    """A first-order system: ``h ← h + rate·(g(λ) − h)`` with
    ``g(λ) = floor + (ceiling − floor)·(1 − exp(−λ / scale))`` increasing in λ.

    A stand-in for "the hit rate follows the levers with a lag": the cache needs a few
    windows to fill after a looser setting. A ``ceiling`` below the target makes the
    target unreachable.
    """

    rate: float = 0.1
    floor: float = 0.5
    ceiling: float = 0.99
    scale: float = 0.1
    h: float = 0.5

    def steady_state(self, lam: float) -> float:
        """g(λ): the hit rate λ leads to once the lag has passed."""
        return self.floor + (self.ceiling - self.floor) * (1.0 - math.exp(-lam / self.scale))

    def step(self, lam: float) -> float:
        """One window under ``lam``; returns the new hit rate."""
        self.h += self.rate * (self.steady_state(lam) - self.h)
        return self.h


def run_plant(controller: Controller, plant: FirstOrderPlant,
              windows: int) -> tuple[np.ndarray, np.ndarray]:
    """``windows`` steps of ``plant`` under ``controller``: (hit rate, λ) per window."""
    hits, lams = np.zeros(windows), np.zeros(windows)
    lam = controller.lam
    for t in range(windows):
        hits[t] = plant.step(lam)
        lam = lams[t] = controller.update(hits[t])
    return hits, lams


def control_metrics(values: Sequence[float], target: float, *, band: float = 0.01,
                    tail: float = 0.1) -> dict[str, float]:
    """Scores of an at-least metric's run (e.g. hit rate per window) against ``target``.

    ``violation_area``: Σ max(0, target − value); ``overshoot``: max(0, max value − target);
    ``settling_windows``: windows before the value enters ``target ± band`` for good (the
    run's length if it never does); ``steady_state_error``: target − the mean of the last
    ``tail`` share of windows (positive: below target).
    """
    v = np.asarray(values, dtype=float)
    if v.ndim != 1 or v.size == 0:
        raise InvalidInputError("values must be a non-empty 1-D sequence")
    outside = np.flatnonzero(np.abs(v - target) > band)
    last = v[-max(1, int(round(tail * v.size))):]
    return {"violation_area": float(np.maximum(0.0, target - v).sum()),
            "overshoot": float(max(0.0, v.max() - target)),
            "settling_windows": int(outside[-1] + 1) if outside.size else 0,
            "steady_state_error": float(target - last.mean())}


def demonstrate(target: float = 0.92, windows: int = 300,
                plant: Callable[[], FirstOrderPlant] = FirstOrderPlant,
                params: Mapping[str, Mapping[str, Any]] | None = None
                ) -> dict[str, dict[str, float]]:
    """The four registered controllers on a fresh ``plant()`` each: :func:`control_metrics`
    of their hit rates. ``params`` overrides a controller's parameters by name (defaults:
    the fixed λ is 1, the I controller's horizon is ``windows``, PI and PID their own)."""
    defaults = {"fixed": {"lam": 1.0}, "I": {"horizon": windows}, "PI": {}, "PID": {}}
    return {name: control_metrics(run_plant(
        make_controller(name, target, **{**given, **(params or {}).get(name, {})}),
        plant(), windows)[0], target) for name, given in defaults.items()}


# -- helpers -------------------------------------------------------------------------------
def _finite(value: Any, name: str, error: type[Exception]) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float, np.floating, np.integer)) \
            or not math.isfinite(value):
        raise error(f"{name} must be a finite number, got {value!r}")
    return float(value)


def _non_negative(value: Any, name: str) -> float:
    number = _finite(value, name, ConfigError)
    if number < 0:
        raise ConfigError(f"{name} must be >= 0, got {value!r}")
    return number


def _window(window: Any) -> int:
    if isinstance(window, bool) or not isinstance(window, int) or window < 1:
        raise ConfigError(f"window must be a positive number of requests, got {window!r}")
    return window


def _admits(rng: np.random.Generator, levers: Levers) -> bool:
    """A draw: whether a miss is stored under ``levers``."""
    return levers.admit >= 1.0 or rng.random() < levers.admit
