"""First-in, first-out eviction."""

from __future__ import annotations

from typing import Any, Hashable

from mmcache.policies.lru import LRU


class FIFO(LRU):
    """Evicts the key admitted earliest: LRU whose hits do not change the order."""

    name = "fifo"

    def access(self, key: Hashable, **hints: Any) -> None:
        pass
