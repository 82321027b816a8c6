"""LRU-K (O'Neil et al., SIGMOD'93): evict the key whose K-th most recent access is oldest."""

from __future__ import annotations

import heapq
import itertools
from collections import OrderedDict, deque
from typing import Any, Hashable

from mmcache.errors import ConfigError
from mmcache.policies import _heap
from mmcache.policies.base import EvictionPolicy


class LRUK(EvictionPolicy):
    """Keys seen fewer than ``k`` times since admission (infinite K-distance) go first, FIFO;
    then the key with the oldest K-th most recent access. History is dropped on eviction."""

    name = "lru-k"

    def __init__(self, k: int = 2) -> None:
        if not isinstance(k, int) or k < 1:
            raise ConfigError(f"LRU-K needs an integer k >= 1, got {k!r}")
        self.k = k
        self._clock = itertools.count()
        self._history: dict[Hashable, deque[int]] = {}
        self._young: OrderedDict[Hashable, None] = OrderedDict()  # < k accesses, FIFO
        self._heap: list[tuple[int, Hashable]] = []  # (k-th most recent access, key), lazy

    def insert(self, key: Hashable, size: int, **hints: Any) -> None:
        self._history[key] = deque([next(self._clock)], maxlen=self.k)
        self._file(key)

    def access(self, key: Hashable, **hints: Any) -> None:
        self._history[key].append(next(self._clock))
        self._file(key)

    def _file(self, key: Hashable) -> None:
        hist = self._history[key]
        if len(hist) < self.k:
            self._young[key] = None
        else:
            self._young.pop(key, None)
            _heap.push(self._heap, (hist[0], key), len(self._history) - len(self._young),
                       self._ranks)

    def evict(self) -> Hashable:
        if self._young:
            key, _ = self._young.popitem(last=False)
        else:
            while True:
                stamp, key = heapq.heappop(self._heap)
                if self._ranks((stamp, key)):
                    break
        del self._history[key]
        return key

    def _ranks(self, item: tuple[int, Hashable]) -> bool:
        """Whether heap ``item`` is its key's current rank (else it is stale)."""
        stamp, key = item
        hist = self._history.get(key)
        return hist is not None and len(hist) == self.k and hist[0] == stamp

    def remove(self, key: Hashable) -> None:
        del self._history[key]
        self._young.pop(key, None)

    def __contains__(self, key: Hashable) -> bool:
        return key in self._history

    def __len__(self) -> int:
        return len(self._history)
