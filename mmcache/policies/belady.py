"""Belady's MIN (the offline optimum for unit sizes): evict the key needed furthest in the future."""

from __future__ import annotations

import heapq
import itertools
from typing import Any, Hashable

from mmcache.policies.base import EvictionPolicy

#: Priority offset for keys never requested again; ranks them above any request index.
NEVER = 1 << 62


def belady_priority(next_access: int, stamp: int) -> int:
    """Eviction priority (largest goes first) of a key whose next request is ``next_access``.

    Keys never requested again (``next_access == -1``) rank above all others, the
    earliest-touched (smallest ``stamp``) first, as libCacheSim's Belady leaves them.
    """
    return NEVER - stamp if next_access < 0 else next_access


class Belady(EvictionPolicy):
    """Oracle: needs the ``next_access`` hint (request index of the key's next request, -1 none).

    Like libCacheSim's Belady it admits every miss and evicts before inserting.
    """

    name = "belady"

    def __init__(self) -> None:
        self._pri: dict[Hashable, int] = {}
        self._heap: list[tuple[int, Hashable]] = []  # (-priority, key), lazily deleted
        self._clock = itertools.count()

    def insert(self, key: Hashable, size: int, **hints: Any) -> None:
        self._set(key, hints)

    def access(self, key: Hashable, **hints: Any) -> None:
        self._set(key, hints)

    def _set(self, key: Hashable, hints: dict[str, Any]) -> None:
        pri = belady_priority(int(hints.get("next_access", -1)), next(self._clock))
        self._pri[key] = pri
        heapq.heappush(self._heap, (-pri, key))

    def furthest(self) -> int:
        """Priority of the resident key that would be evicted next (-1 when empty)."""
        while self._heap and self._pri.get(self._heap[0][1]) != -self._heap[0][0]:
            heapq.heappop(self._heap)
        return -self._heap[0][0] if self._heap else -1

    def evict(self) -> Hashable:
        self.furthest()
        _, key = heapq.heappop(self._heap)
        del self._pri[key]
        return key

    def remove(self, key: Hashable) -> None:
        del self._pri[key]

    def __contains__(self, key: Hashable) -> bool:
        return key in self._pri

    def __len__(self) -> int:
        return len(self._pri)


class BeladyBypass(Belady):
    """Belady that may refuse admission (MIN proper; optimal for unit sizes): a miss is not
    cached when it is never requested again, or when it does not fit the free space
    (``free`` hint, bytes; 0 if absent) and its next request comes after that of every
    resident key."""

    name = "belady-bypass"

    def on_miss(self, key: Hashable, size: int, **hints: Any) -> bool:
        nxt = int(hints.get("next_access", -1))
        if nxt < 0:
            return False
        return size <= int(hints.get("free", 0)) or not nxt > self.furthest() >= 0
