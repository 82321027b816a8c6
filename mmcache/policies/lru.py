"""Least-recently-used eviction."""

from __future__ import annotations

from collections import OrderedDict
from typing import Any, Hashable

from mmcache.policies.base import EvictionPolicy


class LRU(EvictionPolicy):
    """Evicts the key whose last access is oldest."""

    name = "lru"

    def __init__(self) -> None:
        self._order: OrderedDict[Hashable, None] = OrderedDict()

    def insert(self, key: Hashable, size: int, **hints: Any) -> None:
        self._order[key] = None

    def access(self, key: Hashable, **hints: Any) -> None:
        self._order.move_to_end(key)

    def evict(self) -> Hashable:
        key, _ = self._order.popitem(last=False)
        return key

    def remove(self, key: Hashable) -> None:
        del self._order[key]

    def __contains__(self, key: Hashable) -> bool:
        return key in self._order

    def __len__(self) -> int:
        return len(self._order)
