"""The Lagrangian decision (seed 000 §3.2): per window, the setting of the cache's levers that
minimises latency + λ·(target − hit rate), with λ from a controller.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Mapping, Sequence

import numpy as np

from mmcache.errors import ConfigError, InvalidInputError, check_number
from mmcache.types import fmt, html_card, html_fields, html_table, safe_display

if TYPE_CHECKING:
    import pandas as pd

    from mmcache.cache import TieredCache
    from mmcache.sim.cachebench import Report, TierSpec
    from mmcache.sim.cachebench.neighbours import NeighbourTable
    from mmcache.sim.latency import LatencyModel
    from mmcache.sim.workload import Workload
from mmcache.scheduler.controllers import Controller, _window
from mmcache.scheduler.drivers import (
    CacheAdapter,
    _compiled_serve,
    _replayed_window,
    _serve_each,
    compiles,
    replay_cutoff,
)
from mmcache.scheduler.levers import Levers, WindowStats
from mmcache.sim.cachebench import Replayer

#: Constraint metrics of a window and whether each is an at-least (True) or at-most bound.
METRICS: Mapping[str, bool] = {"hit_rate": True, "error_rate": False, "p99_latency_ms": False}


#: What a :class:`Scheduler` can minimise.
OBJECTIVES = ("mean_latency_ms", "error_rate")


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
        if not check_number(objective_scale, "objective_scale") > 0:
            raise ConfigError("objective_scale must be positive")
        for name, weight in (("smoothing", smoothing), ("signal_smoothing", signal_smoothing)):
            if not 0.0 < check_number(weight, name) <= 1.0:
                raise ConfigError(f"{name} is the newest window's weight, in (0, 1]")
        if not 0.0 <= check_number(explore, "explore") < 1.0:
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
        aim = check_number(aim, "aim", error=InvalidInputError)
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

    # -- display -----------------------------------------------------------------------------
    def to_dataframe(self) -> "pd.DataFrame":
        """:attr:`history` as a table: one row per window observed (setting, mix, requests,
        measured metrics, filtered signals, λ per constraint)."""
        import pandas as pd  # deferred: pandas only for this export

        return pd.DataFrame(self.history)

    def __repr__(self) -> str:
        return safe_display(lambda: (
            f"Scheduler({len(self.settings)} settings, objective={self.objective!r}, "
            "constraints={" + ", ".join(f"{m}: {c!r}" for m, c in self.constraints.items())
            + f"}}, mix={self.mix!r}, windows={len(self.history)}, choice={self.choice})"), self)

    def _repr_html_(self) -> str:
        return safe_display(self._html, self, as_html=True)

    def _html(self) -> str:
        fields = html_fields([
            ("objective", f"{self.objective} ÷ {fmt(self.objective_scale)}"),
            ("mix", self.mix or "none (one setting per window)"),
            ("smoothing / signal smoothing", f"{fmt(self.smoothing)} / "
                                             f"{fmt(self.signal_smoothing)}"),
            ("explore", self.explore), ("seed", self.seed), ("windows observed", len(self.history)),
            ("next window", f"setting {self.choice}" + (
                f" + {fmt(self.weight)} of setting {self.mixed_with}" if self.weight else ""))],
            caption="Settings")
        controllers = html_table(
            ["constraint", "controller", "bound", "λ", "state", "parameters"],
            [[metric, c.name or type(c).__name__, f"{'≥' if c.at_least else '≤'} "
              f"{fmt(c.target)}", getattr(c, "lam", None),
              ", ".join(f"{k}={fmt(v)}" for k, v in c.state().items() if k != "lam"),
              ", ".join(f"{k}={fmt(v)}" for k, v in c.parameters().items())]
             for metric, c in self.constraints.items()], caption="Constraints and controllers")
        names = ("hit_rate", "error_rate", "mean_latency_ms", "p99_latency_ms")
        settings = html_table(
            ["#", "δ offset", "admit", "skip", *(f"est. {n}" for n in names), "L(λ)", "next"],
            [[k, ", ".join(f"{m}={fmt(v)}" for m, v in s.delta_offset.items()) or "—",
              s.admit, ", ".join(sorted(s.skip)) or "—",
              *((None if e is None else e.get(n)) for n in names),
              None if e is None else self.lagrangian(e),
              "◀" if k in (self.choice, self.mixed_with) and (k == self.choice or self.weight)
              else ""]
             for k, (s, e) in enumerate(zip(self.settings, self.estimates))],
            caption="Lever settings and their estimates")
        last = html_fields(list(self.history[-1].items()),
                           caption="Last window") if self.history else ""
        return html_card("Scheduler (Lagrangian)", fields, controllers, settings, last,
                         note="plain data: .to_dataframe() (the windows), .history")

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
        check_number(value, f"window {name}", error=InvalidInputError)
    return measured
