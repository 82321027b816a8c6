"""Cache tiers: L1 exact memory, L2 semantic (FAISS), L3 persistent (SQLite) or remote (Redis).

Every tier implements :class:`mmcache.tiers.base.Tier`. :func:`build_tiers` turns a
:class:`mmcache.CacheConfig` into the ordered tier list; the L3 backend named by
``l3.backend`` is built by :func:`make_store_tier`, which imports
``mmcache.tiers.redis`` only when ``backend: redis`` is selected and calls
``RedisTier(url=..., capacity=..., policy=..., spec=..., precheck=..., **l3.options)``.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

from ..config import tier_policy
from .base import Budget, Candidate, Capacity, Tier
from .memory import MemoryTier
from .semantic import SemanticTier
from .sqlite import SQLiteTier
from .vectors import IndexSpec, SemanticIndex, VectorIndex

if TYPE_CHECKING:
    from ..config import CacheConfig, SemanticTierConfig, StoreTierConfig


def index_spec(l2: "SemanticTierConfig") -> IndexSpec:
    """The vector-index settings of a semantic tier config."""
    return IndexSpec(index=l2.index, ann_factory=l2.ann_factory, ann_min_size=l2.ann_min_size,
                     ef_search=l2.ef_search, ef_construction=l2.ef_construction,
                     candidates=l2.candidates)


def make_store_tier(l3: "StoreTierConfig", spec: IndexSpec, precheck: bool = True) -> Tier | None:
    """The persistent/remote tier ``l3`` asks for (None when ``l3.backend`` is null)."""
    if l3.backend is None:
        return None
    capacity = Capacity(l3.max_entries, l3.max_bytes)
    policy = tier_policy(l3.policy, l3.policy_options, l3.max_bytes)
    if l3.backend == "sqlite":
        return SQLiteTier(l3.path, capacity, policy, spec, synchronous=l3.synchronous,
                          shared=l3.shared, precheck=precheck, **l3.options)
    module = importlib.import_module(f"{__name__}.{l3.backend}")
    return module.RedisTier(url=l3.url, capacity=capacity, policy=policy, spec=spec,
                            precheck=precheck, **l3.options)


def build_tiers(config: "CacheConfig") -> list[Tier]:
    """The enabled tiers of ``config`` in lookup order (L1, L2, L3)."""
    spec = index_spec(config.l2)
    precheck = config.guard.enabled
    tiers: list[Tier] = []
    if config.l1.enabled:
        tiers.append(MemoryTier(Capacity(config.l1.max_entries, config.l1.max_bytes),
                                tier_policy(config.l1.policy, config.l1.policy_options,
                                            config.l1.max_bytes)))
    if config.l2.enabled:
        tiers.append(SemanticTier(Capacity(config.l2.max_entries, config.l2.max_bytes),
                                  tier_policy(config.l2.policy, config.l2.policy_options,
                                              config.l2.max_bytes),
                                  spec, precheck=precheck))
    store = make_store_tier(config.l3, spec, precheck)
    if store is not None:
        tiers.append(store)
    return tiers


__all__ = ["Budget", "Candidate", "Capacity", "IndexSpec", "MemoryTier", "SQLiteTier",
           "SemanticIndex", "SemanticTier", "Tier", "VectorIndex", "build_tiers", "index_spec",
           "make_store_tier"]
