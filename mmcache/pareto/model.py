"""The convex capacity–latency–consistency model of seed 002 §2.1: L(C, I) = L0·exp(α/C) + β(1 − I)²
(+ γ·I), its domain, and fits of it (and of latency against hit rate) to measured points.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace
from typing import Any

import numpy as np
from scipy.optimize import least_squares

from mmcache.errors import ConfigError, ConvexityError, InvalidInputError

#: The conditions under which :class:`CapacityLatencyModel` is convex on its domain.
CONVEXITY_CONDITIONS = "L0 > 0, alpha >= 0, beta >= 0, gamma >= 0 and C > 0"


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
    latency = np.asarray(latency, dtype=float)
    factor = float(min(1.0, (latency / model.latency(capacity, consistency)).min()))
    # the scaled terms round apart from factor × latency: step down until none lies above
    while (model.scaled(factor).latency(capacity, consistency) > latency).any():
        factor = float(np.nextafter(factor, 0.0))
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
