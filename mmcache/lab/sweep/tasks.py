"""Functions shipped for sweeps (``function: mmcache.lab.sweep.tasks:<name>`` in a spec)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from mmcache.paths import PROJECT_ROOT
from mmcache.sim.replay import read_oracle_general, simulate

DEFAULT_TRACE = "data/cloudPhysicsIO.oracleGeneral.bin"


def replay(policy: str, cache_size: int, trace: str = DEFAULT_TRACE,
           **policy_params: Any) -> dict[str, Any]:
    """Replay an ``oracleGeneral`` trace through one policy and cache size; returns its counts.

    ``trace`` is a path relative to the project root (or absolute);
    ``policy_params`` go to the policy (e.g. ``k=2`` for LRU-K).
    """
    res = simulate(read_oracle_general(PROJECT_ROOT / Path(trace)), policy=policy,
                   cache_size=cache_size, **policy_params)
    return {"n_req": res.n_req, "n_req_byte": res.n_req_byte, "miss_cnt": res.miss_cnt,
            "miss_byte": res.miss_byte, "miss_ratio": res.miss_ratio,
            "byte_miss_ratio": res.byte_miss_ratio}
