"""SIEVE (Zhang et al., NSDI'24), as libCacheSim's Sieve."""

from __future__ import annotations

from typing import Any, Hashable

from mmcache.policies._dlist import DList
from mmcache.policies.base import EvictionPolicy


class Sieve(EvictionPolicy):
    """A FIFO queue with a hand that sweeps from old to new, sparing (and clearing) visited keys.

    New keys enter at the head unvisited; a hit marks a key visited. The hand keeps
    its place between evictions and wraps to the tail when it passes the head.
    """

    name = "sieve"

    def __init__(self) -> None:
        self._queue = DList()
        self._visited: dict[Hashable, bool] = {}
        self._hand: Hashable | None = None

    def insert(self, key: Hashable, size: int, **hints: Any) -> None:
        self._queue.push_head(key)
        self._visited[key] = False

    def access(self, key: Hashable, **hints: Any) -> None:
        self._visited[key] = True

    def evict(self) -> Hashable:
        queue, visited = self._queue, self._visited
        key = queue.tail if self._hand is None else self._hand
        while visited[key]:
            visited[key] = False
            key = queue.newer(key)
            if key is None:
                key = queue.tail
        self._hand = queue.newer(key)
        self._forget(key)
        return key

    def remove(self, key: Hashable) -> None:
        if key == self._hand:
            self._hand = self._queue.newer(key)
        self._forget(key)

    def _forget(self, key: Hashable) -> None:
        self._queue.unlink(key)
        del self._visited[key]

    def __contains__(self, key: Hashable) -> bool:
        return key in self._visited

    def __len__(self) -> int:
        return len(self._visited)
