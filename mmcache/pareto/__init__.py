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
hit_ms) · h``, fitted by :func:`fit_hit_rate_latency`."""

from mmcache.pareto.model import (
    CONVEXITY_CONDITIONS, CapacityLatencyModel, Domain, HitRateLatency, ModelFit,
    fit_hit_rate_latency, fit_model, lower_envelope)
from mmcache.pareto.bound import (
    Front, OBJECTIVES, ParetoBound, check_status, objectives, simplex_weights)
from mmcache.pareto.fronts import hypervolume, hypervolume_gap, non_dominated, supported

__all__ = [
    "CONVEXITY_CONDITIONS", "CapacityLatencyModel", "Domain", "Front", "HitRateLatency",
    "ModelFit", "OBJECTIVES", "ParetoBound", "check_status", "fit_hit_rate_latency", "fit_model",
    "hypervolume", "hypervolume_gap", "lower_envelope", "non_dominated", "objectives",
    "simplex_weights", "supported"]
