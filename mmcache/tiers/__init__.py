"""Cache tiers: L1 exact memory, L2 semantic (FAISS), L3 persistent (SQLite) or remote (Redis).

Every tier implements :class:`mmcache.tiers.base.Tier`. :func:`make_store_tier`
builds the persistent/remote tier named by ``CacheConfig.l3.backend``; the Redis
backend is imported only when selected.
"""

from __future__ import annotations

from .base import Budget, Candidate, Capacity, Tier
from .memory import MemoryTier
from .semantic import SemanticTier
from .sqlite import SQLiteTier
from .vectors import IndexSpec, SemanticIndex, VectorIndex

__all__ = ["Budget", "Candidate", "Capacity", "IndexSpec", "MemoryTier", "SQLiteTier",
           "SemanticIndex", "SemanticTier", "Tier", "VectorIndex"]
