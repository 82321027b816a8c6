"""Convex Pareto bound of the capacity–latency–consistency trade-off, and hypervolume.

The model (seed 002 §2.1, plus the consistency-cost term its prose names: "consistency ↑ ⇒
synchronisation overhead surges"; ``gamma = 0`` is the seed's form exactly)::

    L(C, I) = L0 · exp(α / C) + β · (1 − I)² + γ · I²

with capacity ``C`` > 0, consistency level ``I`` ∈ [0, 1] and mean latency ``L``.
**Convexity conditions**: L0 > 0, α ≥ 0, β ≥ 0, γ ≥ 0 and C > 0 on the whole domain
(exp(α/C) is convex in C for α ≥ 0, C > 0; each square term is convex for a non-negative
weight). :meth:`CapacityLatencyModel.check_convex` raises :class:`ConvexityError` naming
the term that breaks them.

The three objectives, all minimised: capacity ``C``, latency ``L(C, I)`` and
inconsistency ``1 − I``. :class:`ParetoBound` compiles two cvxpy problems once, with
the weights, the ε-bounds and the model's parameters as cvxpy Parameters (DPP), and
re-solves them for every point: the weighted sum over the simplex, and the ε-constraint
method (least latency at capacity ≤ ε_C and inconsistency ≤ ε_I). Every solve's status
is checked (:class:`SolverError` unless optimal). A weighted sum finds only the supported
points of a front (those on its convex hull); :func:`supported` tells which points of a
measured front a weighted sum could find at all.

:func:`hypervolume` is pymoo's HV (computed by moocore) of minimised objectives.

The latency–hit-rate model of seed 000 §3.2 (the objective of its Lagrangian scheduler,
``E[latency]`` as a function of the hit rate ``h``): ``L(h) = miss_ms − (miss_ms −
hit_ms) · h``, fitted by :func:`fit_hit_rate_latency`.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace
from typing import Any, Sequence

import cvxpy as cp
import numpy as np
from scipy.optimize import least_squares, linprog

from mmcache.errors import ConfigError, ConvexityError, InvalidInputError, SolverError

#: The objectives every front and measured point lists, in this order (all minimised).
OBJECTIVES = ("capacity", "latency", "inconsistency")
#: The conditions under which :class:`CapacityLatencyModel` is convex on its domain.
CONVEXITY_CONDITIONS = "L0 > 0, alpha >= 0, beta >= 0, gamma >= 0 and C > 0"
_SOLVER = cp.CLARABEL
#: Upper bound on the normalised capacity and latency epigraphs (both at most 1 on the
#: domain): it never binds, so it makes no constraint degenerate, yet leaves nothing unbounded.
_SLACK = 2.0


@dataclass(frozen=True)
class CapacityLatencyModel:
    """L(C, I) = l0·exp(alpha/C) + beta·(1 − I)² + gamma·I² (units: those of the data)."""

    l0: float
    alpha: float
    beta: float
    gamma: float = 0.0

    def latency(self, capacity: Any, consistency: Any) -> np.ndarray:
        """The model's latency at each (capacity, consistency) pair (broadcasting)."""
        c, i = np.asarray(capacity, dtype=float), np.asarray(consistency, dtype=float)
        return (self.l0 * np.exp(self.alpha / c) + self.beta * (1.0 - i) ** 2
                + self.gamma * i ** 2)

    def check_convex(self) -> None:
        """Raise :class:`ConvexityError` naming the first term that breaks convexity."""
        terms = [("L0·exp(α/C)", "L0", self.l0, self.l0 > 0,
                  "needs L0 > 0 (a positive base latency; the problem is built on log L0)"),
                 ("L0·exp(α/C)", "α", self.alpha, self.alpha >= 0,
                  "is concave in C where C > −α/2 for α < 0 (capacity would raise latency)"),
                 ("β·(1 − I)²", "β", self.beta, self.beta >= 0, "is concave for β < 0"),
                 ("γ·I²", "γ", self.gamma, self.gamma >= 0, "is concave for γ < 0")]
        for term, name, value, ok, why in terms:
            if not (np.isfinite(value) and ok):
                raise ConvexityError(
                    f"term {term} with {name} = {value!r} {why}, so the Pareto problem is not "
                    f"convex (not DCP); convexity needs {CONVEXITY_CONDITIONS}. Refit with "
                    f"bounds {name} >= 0 (fit_model does), or drop the term.")

    def scaled(self, factor: float) -> CapacityLatencyModel:
        """This model with its latency multiplied by ``factor`` (α unchanged)."""
        return replace(self, l0=self.l0 * factor, beta=self.beta * factor,
                       gamma=self.gamma * factor)


@dataclass(frozen=True)
class Domain:
    """The box the fronts range over: capacity in [c_min, c_max], consistency in [i_min, i_max]."""

    c_min: float
    c_max: float
    i_min: float = 0.0
    i_max: float = 1.0

    def __post_init__(self) -> None:
        if not self.c_min > 0:
            raise ConvexityError(f"c_min = {self.c_min!r}: exp(α/C) is convex only for C > 0, "
                                 "so the capacity range must start above 0")
        if not self.c_min < self.c_max:
            raise ConfigError(f"need c_min < c_max, got {self.c_min!r} and {self.c_max!r}")
        if not 0.0 <= self.i_min < self.i_max <= 1.0:
            raise ConfigError(f"need 0 <= i_min < i_max <= 1, got {self.i_min!r}, {self.i_max!r}")


@dataclass(frozen=True)
class Front:
    """Solutions of a sweep: per point its capacity, consistency and model latency."""

    capacity: np.ndarray
    consistency: np.ndarray
    latency: np.ndarray

    def objectives(self) -> np.ndarray:
        """(n, 3) array of the minimised objectives :data:`OBJECTIVES`."""
        return objectives(self.capacity, self.latency, self.consistency)


def objectives(capacity: Any, latency: Any, consistency: Any) -> np.ndarray:
    """Stack (capacity, latency, 1 − consistency) into the (n, 3) minimised objectives."""
    return np.column_stack([np.asarray(capacity, dtype=float).ravel(),
                            np.asarray(latency, dtype=float).ravel(),
                            1.0 - np.asarray(consistency, dtype=float).ravel()])


class ParetoBound:
    """The model's Pareto front over a :class:`Domain`, by weighted sums and ε-constraints.

    Weights act on objectives normalised by the domain: C / c_max, L / L_max and 1 − I,
    where L_max is the model's largest latency on the domain. Both problems are compiled
    on the first solve and re-solved for every further point (DPP); a new model
    (:meth:`set_model`) changes Parameter values only.
    """

    def __init__(self, model: CapacityLatencyModel, domain: Domain) -> None:
        self.domain = domain
        # v = c_max / C (normalised inverse capacity) carries the exp term. The weighted sum
        # prices capacity through q >= 1 / v (C / c_max); the ε-constraint bounds v directly
        # (C <= ε ⇔ v >= c_max / ε), so an ε at c_min pins v by linear bounds, not through
        # the cone. q and the latency epigraph t are bounded (never binding), so no variable
        # is free to drift: the drift left Clarabel at optimal_inaccurate.
        self._v, self._q = cp.Variable(pos=True), cp.Variable()
        self._i, self._t = cp.Variable(), cp.Variable()
        self._log_l0 = cp.Parameter()
        self._alpha = cp.Parameter(nonneg=True)
        self._beta = cp.Parameter(nonneg=True)
        self._gamma = cp.Parameter(nonneg=True)
        self._weights = cp.Parameter(len(OBJECTIVES), nonneg=True)
        self._eps = cp.Parameter(2)  # (c_max / capacity bound, inconsistency bound)
        d, v, q, i, t = domain, self._v, self._q, self._i, self._t
        latency = (cp.exp(self._log_l0 + self._alpha * v) + self._beta * cp.square(1 - i)
                   + self._gamma * cp.square(i))
        box = [v >= 1, v <= d.c_max / d.c_min, i >= d.i_min, i <= d.i_max, latency <= t,
               t <= _SLACK]
        w = self._weights
        self._weighted = cp.Problem(cp.Minimize(w[0] * q + w[1] * t + w[2] * (1 - i)),
                                    box + [cp.inv_pos(v) <= q, q <= _SLACK])
        self._constrained = cp.Problem(cp.Minimize(t),
                                       box + [v >= self._eps[0], 1 - i <= self._eps[1]])
        self.set_model(model)

    def set_model(self, model: CapacityLatencyModel) -> None:
        """Use ``model`` from now on; :class:`ConvexityError` if it is not convex."""
        model.check_convex()
        d = self.domain
        corners = model.latency([d.c_min, d.c_min], [d.i_min, d.i_max])
        self.model, self.latency_scale = model, float(corners.max())
        self._log_l0.value = np.log(model.l0 / self.latency_scale)
        self._alpha.value = model.alpha / d.c_max
        self._beta.value = model.beta / self.latency_scale
        self._gamma.value = model.gamma / self.latency_scale

    def weighted_sum(self, weights: Any) -> Front:
        """One solution per row of ``weights`` ((n, 3), non-negative, each row summing to 1)."""
        weights = np.asarray(weights, dtype=float)
        if weights.ndim != 2 or weights.shape[1] != len(OBJECTIVES) or (weights < 0).any() \
                or not np.allclose(weights.sum(axis=1), 1.0):
            raise InvalidInputError(f"weights must be an (n, {len(OBJECTIVES)}) array of points "
                                    "on the simplex (non-negative rows summing to 1)")
        solutions = []
        for row in weights:
            self._weights.value = row
            solutions.append(self._solve(self._weighted, f"weights {row.tolist()}"))
        return self._front(solutions)

    def epsilon_constraint(self, max_capacity: Any, max_inconsistency: Any) -> Front:
        """Least latency with capacity ≤ ``max_capacity`` and 1 − I ≤ ``max_inconsistency``
        (paired element-wise; broadcast)."""
        caps, incs = np.broadcast_arrays(np.asarray(max_capacity, dtype=float).ravel(),
                                         np.asarray(max_inconsistency, dtype=float).ravel())
        if not (np.isfinite(np.r_[caps, incs]).all() and (caps > 0).all()):
            raise InvalidInputError("ε-bounds must be finite, with capacity bounds above 0")
        solutions = []
        for eps in zip(caps, incs):
            self._eps.value = np.array([self.domain.c_max / eps[0], eps[1]])
            solutions.append(self._solve(self._constrained, f"epsilon {list(map(float, eps))}"))
        return self._front(solutions)

    def _solve(self, problem: cp.Problem, point: str) -> tuple[float, float]:
        """Solve ``problem`` and return (C, I); :class:`SolverError` unless it is optimal."""
        try:
            problem.solve(solver=_SOLVER)
        except cp.error.SolverError as err:
            raise SolverError(f"{_SOLVER} failed at {point}: {err}") from err
        check_status(problem.status, point)
        return self.domain.c_max / float(self._v.value), float(self._i.value)

    def _front(self, solutions: Sequence[tuple[float, float]]) -> Front:
        """The solutions, clipped into the domain (solver tolerance), with the model's latency."""
        d = self.domain
        c = np.clip([s[0] for s in solutions], d.c_min, d.c_max)
        i = np.clip([s[1] for s in solutions], d.i_min, d.i_max)
        return Front(c, i, self.model.latency(c, i))


def check_status(status: str, point: str) -> None:
    """Raise :class:`SolverError` unless a solve's ``status`` is ``optimal``."""
    if status != cp.OPTIMAL:
        raise SolverError(f"the solver returned status {status!r} at {point}, not optimal: "
                          "an infeasible ε-bound (below the domain), an ε-bound that pins a "
                          "variable to the domain's edge (within ~1e-8), or a badly scaled model")


def simplex_weights(n_points: int, n_objectives: int = len(OBJECTIVES), *,
                    seed: int = 0) -> np.ndarray:
    """``n_points`` seeded weight vectors drawn uniformly from the simplex (the vertices first)."""
    if n_points < n_objectives:
        raise InvalidInputError(f"need at least {n_objectives} weight vectors, got {n_points}")
    rng = np.random.default_rng(seed)
    inner = rng.dirichlet(np.ones(n_objectives), n_points - n_objectives)
    return np.vstack([np.eye(n_objectives), inner])


def hypervolume(F: Any, ref: Any) -> float:
    """Hypervolume dominated by the rows of ``F`` (minimised objectives) up to ``ref``.

    Rows that do not dominate ``ref`` strictly add nothing. pymoo's HV, computed by moocore.
    """
    from pymoo.indicators.hv import HV

    points, ref = _objective_matrix(F), np.asarray(ref, dtype=float).ravel()
    if ref.shape[0] != points.shape[1] or not np.isfinite(ref).all():
        raise InvalidInputError(f"ref must be a finite point with {points.shape[1]} objectives, "
                                f"got {ref.tolist()}")
    return float(HV(ref_point=ref)(points))


def hypervolume_gap(bound: Any, measured: Any, ref: Any) -> float:
    """(HV(bound) − HV(measured)) / HV(bound): the share of the bound's hypervolume that the
    measured points miss (negative where they beat the bound)."""
    hv_bound = hypervolume(bound, ref)
    if hv_bound <= 0:
        raise InvalidInputError("the bound's points dominate none of the space up to ref; "
                                "pick a reference point beyond them")
    return (hv_bound - hypervolume(measured, ref)) / hv_bound


def non_dominated(F: Any) -> np.ndarray:
    """Boolean mask of the rows of ``F`` (minimised) that no other row dominates."""
    import moocore

    return np.asarray(moocore.is_nondominated(_objective_matrix(F)), dtype=bool)


def supported(F: Any) -> np.ndarray:
    """Boolean mask of the rows of ``F`` some weighted sum (weights on the simplex) minimises:
    the points a weighted-sum sweep can find. A non-dominated row that is not supported lies
    inside the front's convex hull (a non-convex stretch of the front)."""
    points = _objective_matrix(F)
    n, k = points.shape
    mask = np.zeros(n, dtype=bool)
    for j in range(n):  # feasible w >= 0, sum w = 1, w·(F_j − F_q) <= 0 for every q?
        result = linprog(np.zeros(k), A_ub=points[j] - points, b_ub=np.zeros(n),
                         A_eq=np.ones((1, k)), b_eq=[1.0], bounds=(0, None), method="highs")
        mask[j] = result.status == 0
    return mask


@dataclass(frozen=True)
class ModelFit:
    """A least-squares fit of :class:`CapacityLatencyModel` and its quality on the data."""

    model: CapacityLatencyModel
    rmse: float
    relative_rmse: float
    r2: float
    n_points: int
    at_bound: tuple[str, ...]

    def as_dict(self) -> dict[str, Any]:
        """Parameters and fit errors, JSON-ready."""
        return {**asdict(self.model), "rmse": self.rmse, "relative_rmse": self.relative_rmse,
                "r2": self.r2, "n_points": self.n_points, "at_bound": list(self.at_bound)}


def fit_model(capacity: Any, consistency: Any, latency: Any, *,
              consistency_cost: bool = True) -> ModelFit:
    """Fit L0, α, β (and γ unless ``consistency_cost=False``: the seed's form) to measured
    latencies by least squares on relative residuals, with L0 > 0 and α, β, γ ≥ 0 as bounds.

    ``at_bound`` names the parameters the fit pinned at 0 (the data pushes them negative).
    """
    c, i, lat = (np.asarray(v, dtype=float).ravel() for v in (capacity, consistency, latency))
    names = ("l0", "alpha", "beta", "gamma") if consistency_cost else ("l0", "alpha", "beta")
    if not (c.shape == i.shape == lat.shape) or c.size <= len(names):
        raise InvalidInputError(f"need equally long capacity, consistency and latency with more "
                                f"than {len(names)} points, got {c.size}, {i.size}, {lat.size}")
    if not (np.isfinite(np.r_[c, i, lat]).all() and (c > 0).all() and (lat > 0).all()):
        raise InvalidInputError("capacities and latencies must be finite and positive")

    def model_of(x: np.ndarray) -> CapacityLatencyModel:
        return CapacityLatencyModel(*map(float, x))

    def residuals(x: np.ndarray) -> np.ndarray:
        return model_of(x).latency(c, i) / lat - 1.0

    spread = float(np.ptp(lat)) or float(lat.min())
    x0 = np.array([lat.min(), c.min(), 0.1 * spread, 0.1 * spread][:len(names)])
    lower = np.array([1e-12 * lat.min()] + [0.0] * (len(names) - 1))
    result = least_squares(residuals, x0, bounds=(lower, np.inf), x_scale="jac")
    model = model_of(result.x)
    err = model.latency(c, i) - lat
    tiny = 1e-9 * np.maximum(1.0, np.abs(x0))
    return ModelFit(model, rmse=float(np.sqrt(np.mean(err ** 2))),
                    relative_rmse=float(np.sqrt(np.mean((err / lat) ** 2))),
                    r2=float(1.0 - np.sum(err ** 2) / np.sum((lat - lat.mean()) ** 2)),
                    n_points=int(c.size),
                    at_bound=tuple(n for n, v, t in zip(names[1:], result.x[1:], tiny[1:])
                                   if v <= t))


def lower_envelope(model: CapacityLatencyModel, capacity: Any, consistency: Any,
                   latency: Any) -> tuple[CapacityLatencyModel, float]:
    """``model`` scaled down (by the returned factor ≤ 1) until it lies at or below every
    measured latency: an empirical bound over the measured configurations."""
    ratio = np.asarray(latency, dtype=float) / model.latency(capacity, consistency)
    factor = float(min(1.0, ratio.min()))
    return model.scaled(factor), factor


@dataclass(frozen=True)
class HitRateLatency:
    """Seed 000 §3.2's latency as a function of hit rate: miss_ms − (miss_ms − hit_ms)·h."""

    hit_ms: float
    miss_ms: float
    rmse: float

    def latency(self, hit_rate: Any) -> np.ndarray:
        """Modelled mean latency at each hit rate."""
        return self.miss_ms - (self.miss_ms - self.hit_ms) * np.asarray(hit_rate, dtype=float)


def fit_hit_rate_latency(hit_rate: Any, latency: Any) -> HitRateLatency:
    """Least-squares fit (hit_ms, miss_ms ≥ 0) of mean latency against hit rate."""
    h, lat = (np.asarray(v, dtype=float).ravel() for v in (hit_rate, latency))
    if h.shape != lat.shape or h.size < 2 or np.ptp(h) == 0:
        raise InvalidInputError("need equally long hit rates and latencies with at least two "
                                "distinct hit rates")
    design = np.column_stack([h, 1.0 - h])  # latency = hit_ms·h + miss_ms·(1 − h)
    result = least_squares(lambda x: design @ x - lat, np.full(2, lat.mean()), bounds=(0, np.inf))
    err = design @ result.x - lat
    return HitRateLatency(float(result.x[0]), float(result.x[1]), float(np.sqrt(np.mean(err ** 2))))


def _objective_matrix(F: Any) -> np.ndarray:
    points = np.asarray(F, dtype=float)
    if points.ndim != 2 or points.shape[0] == 0 or points.shape[1] < 2 \
            or not np.isfinite(points).all():
        raise InvalidInputError(f"objectives must be a finite (n, k) array with n >= 1, k >= 2, "
                                f"got shape {points.shape}")
    return points
