"""A CacheBench-MM workload driven through a real :class:`mmcache.TieredCache` (the live-cache
driver), reported like a replay.
"""

from __future__ import annotations

from typing import Any, Mapping

import numpy as np

from mmcache.errors import ConfigError
from mmcache.sim.cachebench.engine import _RequestCosts
from mmcache.sim.cachebench.report import Report, build_report
from mmcache.sim.cachebench.spec import measured_cache_tier_costs
from mmcache.sim.latency import LatencyModel
from mmcache.sim.workload import Workload


def replay_cache(workload: Workload, cache: Any, latency: LatencyModel | None = None, *,
                 costs: Mapping[str, tuple[float, float]] | None = None,
                 scope: str = "cachebench", limits: bool = True) -> Report:
    """Replay ``workload`` through a :class:`mmcache.TieredCache` (every miss is ``put`` back).

    ``costs`` maps each tier name to ``(lookup_us, bandwidth_gbps)`` (default
    :func:`measured_cache_tier_costs`: lookups measured on this machine where
    ``mmcache/resources/latency_profile.json`` has them, nominal bandwidths). The stored value of an intent is a
    string of the workload's answer size that starts with the intent id, so a hit
    tells which answer it served. Latency: an exact hit (similarity 1 on every
    modality) pays the lookups of the tiers down to it; any other request pays
    every tier's lookup plus the encoder, then the hit tier's transfer or the
    model inference. Limits use the sum of the tiers' ``max_bytes`` when all are set.
    """
    latency = latency or LatencyModel()
    if costs is None:
        costs, cost_sources = measured_cache_tier_costs()
    else:
        costs, cost_sources = dict(costs), {n: "given by the caller" for n in costs}
    names = [t.name for t in cache.tiers]
    missing = [n for n in names if n not in costs]
    if missing:
        raise ConfigError(f"no (lookup_us, bandwidth_gbps) for tiers {missing}")
    lookups = np.cumsum([costs[n][0] for n in names])
    n = len(workload)
    hit_tier = np.full(n, -1, dtype=np.int16)
    false_hit = np.zeros(n, dtype=bool)
    lat_ms = np.zeros(n)
    draws = _RequestCosts(latency, workload, [])
    for i in range(n):
        intent, size = int(workload.intent[i]), int(workload.size[i])
        query = workload.query(i, scope=scope)
        hit = cache.get(query)
        if hit is None:
            lat_ms[i] = draws.miss_ms(i, lookups[-1] / 1000.0 + draws.encode_ms[i])
            cache.put(query, _answer(intent, size))
            continue
        k = names.index(hit.tier)
        exact = min(hit.similarities.values(), default=hit.similarity) >= 1.0
        lookup_ms = (lookups[k] if exact else lookups[-1]) / 1000.0
        lat_ms[i] = lookup_ms + (0.0 if exact else draws.encode_ms[i]) + \
            size / (costs[hit.tier][1] * 1e6)
        hit_tier[i] = k
        false_hit[i] = int(str(hit.value).split(":", 1)[0]) != intent
    budgets = [getattr(cache.config, n).max_bytes if hasattr(cache.config, n) else None
               for n in names]
    capacity = sum(budgets) if limits and None not in budgets else None
    policy = getattr(cache.config, names[0]).policy if hasattr(cache.config, names[0]) \
        else "lru"
    return build_report(workload, names, latency, hit_tier, false_hit, lat_ms, draws, capacity, policy,
                   {"tiered_cache_config": cache.config.to_dict(), "tier_costs": costs,
                    "tier_cost_sources": cost_sources})


def _answer(intent: int, size: int) -> str:
    """A stand-in answer of ``size`` characters that names its intent (synthetic payload)."""
    head = f"{intent}:"
    return head + "x" * max(0, size - len(head))
