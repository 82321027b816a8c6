"""Fronts of minimised objectives: hypervolume (pymoo), the gap between a bound and measured
points, non-dominated and supported points.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from scipy.optimize import linprog

from mmcache.errors import InvalidInputError


def hypervolume(F: Any, ref: Any) -> float:
    """Hypervolume dominated by the rows of ``F`` (minimised objectives) up to ``ref``.

    Rows that do not dominate ``ref`` strictly add nothing. pymoo's HV, computed by moocore.
    """
    # deferred: the hypervolume library loads only for a hypervolume
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
    # deferred: the hypervolume library loads only for a hypervolume
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


def _objective_matrix(F: Any) -> np.ndarray:
    points = np.asarray(F, dtype=float)
    if points.ndim != 2 or points.shape[0] == 0 or points.shape[1] < 2 \
            or not np.isfinite(points).all():
        raise InvalidInputError(f"objectives must be a finite (n, k) array with n >= 1, k >= 2, "
                                f"got shape {points.shape}")
    return points
