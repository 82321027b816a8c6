"""The convex Pareto bound: :class:`ParetoBound` solves the weighted-sum and ε-constraint
scalarisations of the model with cvxpy Parameters (compiled once, re-solved per point).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import cvxpy as cp
import numpy as np

from mmcache.errors import InvalidInputError, SolverError
from mmcache.pareto.model import CapacityLatencyModel, Domain

#: The objectives every front and measured point lists, in this order (all minimised).
OBJECTIVES = ("capacity", "latency", "inconsistency")


_SOLVER = cp.CLARABEL

#: Clarabel settings tried in turn until a solve is optimal: an ε-bound within ~1e-6 of the
#: domain's edge leaves a sliver of a feasible set, where the default settings (presolve and
#: equilibration on) sometimes stop at ``optimal_inaccurate``; each fallback turns one off.
_SETTINGS: tuple[dict[str, bool], ...] = ({}, {"presolve_enable": False},
                                          {"equilibrate_enable": False})


#: Upper bound on the normalised capacity and latency epigraphs (both at most 1 on the
#: domain): it never binds, so it makes no constraint degenerate, yet leaves nothing unbounded.
_SLACK = 2.0


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
        """Solve ``problem`` and return (C, I); :class:`SolverError` unless one of
        :data:`_SETTINGS` reaches an optimal status."""
        for settings in _SETTINGS:
            try:
                problem.solve(solver=_SOLVER, **settings)
            except cp.error.SolverError as err:
                raise SolverError(f"{_SOLVER} failed at {point}: {err}") from err
            if problem.status == cp.OPTIMAL:
                break
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
