"""Cache tiers: L1 exact memory, L2 semantic (FAISS), L3 persistent (SQLite) or remote (Redis).

Every tier implements :class:`mmcache.tiers.base.Tier`. :func:`mmcache.build.build_tiers`
turns a :class:`mmcache.CacheConfig` into the ordered tier list; nothing here reads the
config. ``mmcache.tiers.redis`` is imported only when a Redis tier is built.
"""

from __future__ import annotations

from mmcache.tiers.base import Budget, Candidate, Capacity, Tier
from mmcache.tiers.memory import MemoryTier
from mmcache.tiers.semantic import SemanticTier
from mmcache.tiers.sqlite import SQLiteTier
from mmcache.tiers.vectors import IndexSpec, SemanticIndex, VectorIndex

__all__ = ["Budget", "Candidate", "Capacity", "IndexSpec", "MemoryTier", "SQLiteTier",
           "SemanticIndex", "SemanticTier", "Tier", "VectorIndex"]
