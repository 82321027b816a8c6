"""The limits of a workload's trace: its lower bound on misses, and its misses under the first
tier's policy and under Belady.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from mmcache.sim.workload import Workload


def replay_limits(workload: Workload, capacity_bytes: int, policy: str = "lru", *,
                  cross_modal: bool = False) -> dict[str, Any]:
    """Limits on ``workload`` at ``capacity_bytes``, as miss ratios.

    Exact keys: ``opt_lower_miss_ratio``, a lower bound no cache can beat
    (:func:`mmcache.sim.bounds.lower_bound`), and ``belady_miss_ratio``, Belady's, a
    heuristic when sizes vary (``sizes_vary``). The oracle semantic cache (ground-truth
    equivalence within a modality, zero false hits; keyed by intent and modality, as
    the tiers search one index per modality): ``oracle_semantic_opt_lower_miss_ratio``
    and its misses under ``policy`` and Belady (``oracle_semantic_miss_ratio``,
    ``oracle_semantic_belady_miss_ratio``). With ``cross_modal`` (for a cache that
    retrieves across modalities) the same three keyed by intent alone, prefixed
    ``cross_modal_``. ``lower_bound_method`` names the bound each lower ratio used.
    """
    from mmcache.sim.bounds import lower_bound
    from mmcache.sim.replay import simulate

    exact = workload.to_trace("exact")
    oracles = {"oracle_semantic_": workload.to_trace("intent-modality")}
    if cross_modal:
        oracles["cross_modal_oracle_semantic_"] = workload.to_trace("intent")
    low = lower_bound(exact, capacity_bytes)
    out: dict[str, Any] = {
        "opt_lower_miss_ratio": low.misses / exact.n_req,
        "belady_miss_ratio": simulate(exact, "belady", capacity_bytes).miss_ratio,
        "sizes_vary": bool(np.unique(exact.obj_size).shape[0] > 1),
        "lower_bound_method": {"exact": low.method}}
    for prefix, trace in oracles.items():
        low = lower_bound(trace, capacity_bytes)
        out[f"{prefix}opt_lower_miss_ratio"] = low.misses / trace.n_req
        out[f"{prefix}miss_ratio"] = simulate(trace, policy, capacity_bytes).miss_ratio
        out[f"{prefix}belady_miss_ratio"] = simulate(trace, "belady", capacity_bytes).miss_ratio
        out["lower_bound_method"][prefix.rstrip("_")] = low.method
    return out
