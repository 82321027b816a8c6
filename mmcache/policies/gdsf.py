"""Greedy-Dual-Size-Frequency (GDSF, Cherkasova 1998), as libCacheSim's GDSF, with costs.

A key's priority is ``L + freq · cost · 1e6 / size``; ``cost`` is the ``cost`` hint (the
miss cost the key saves, e.g. its inference time), 1 when none was given, which is
libCacheSim's GDSF exactly. A hint on a hit replaces the key's cost.
"""

from __future__ import annotations

import heapq
import itertools
from typing import Any, Hashable

from mmcache.policies import _heap
from mmcache.policies.base import EvictionPolicy


class GDSF(EvictionPolicy):
    """Evicts the lowest priority ``L + freq * cost * 1e6 / size``; ``L`` is the last victim's
    priority.

    Equal priorities leave oldest-touched first. Like libCacheSim, a miss is inserted
    *before* making room, at the priority it had then: if it ranks lowest, it is the
    one that goes (``evict()`` returns None and the caller does not insert it).
    """

    name = "gdsf"

    def __init__(self) -> None:
        self._entry: dict[Hashable, tuple[float, int]] = {}  # key -> (priority, stamp)
        self._freq: dict[Hashable, int] = {}
        self._size: dict[Hashable, int] = {}
        self._cost: dict[Hashable, float] = {}
        self._heap: list[tuple[float, int, Hashable]] = []
        self._clock = itertools.count()
        self._last_evicted = 0.0
        self._pending: tuple[Hashable, float] | None = None  # the miss being admitted

    def on_miss(self, key: Hashable, size: int, **hints: Any) -> bool:
        self._pending = (key, self._last_evicted + _cost(hints) * 1.0e6 / size)
        return True

    def insert(self, key: Hashable, size: int, **hints: Any) -> None:
        self._freq[key] = 1
        self._size[key] = size
        self._cost[key] = _cost(hints)
        pending, self._pending = self._pending, None
        pri = pending[1] if pending is not None and pending[0] == key \
            else self._last_evicted + self._cost[key] * 1.0e6 / size
        self._push(key, pri)

    def access(self, key: Hashable, **hints: Any) -> None:
        self._freq[key] += 1
        self._cost[key] = _cost(hints, self._cost[key])
        self._push(key, self._last_evicted
                   + self._freq[key] * self._cost[key] * 1.0e6 / self._size[key])

    def _push(self, key: Hashable, pri: float) -> None:
        entry = (pri, next(self._clock))
        self._entry[key] = entry
        _heap.push(self._heap, (*entry, key), len(self._entry), self._ranks)

    def evict(self) -> Hashable | None:
        heap = self._heap
        while not self._ranks(heap[0]):
            heapq.heappop(heap)
        if self._pending is not None and heap[0][0] > self._pending[1]:
            self._last_evicted = self._pending[1]
            self._pending = None
            return None
        pri, _, key = heapq.heappop(heap)
        self._last_evicted = pri
        self._forget(key)
        return key

    def _ranks(self, item: tuple[float, int, Hashable]) -> bool:
        """Whether heap ``item`` is its key's current rank (else it is stale)."""
        return self._entry.get(item[2]) == item[:2]

    def remove(self, key: Hashable) -> None:
        self._forget(key)

    def _forget(self, key: Hashable) -> None:
        del self._entry[key], self._freq[key], self._size[key], self._cost[key]

    def __contains__(self, key: Hashable) -> bool:
        return key in self._entry

    def __len__(self) -> int:
        return len(self._entry)


def _cost(hints: dict[str, Any], default: float = 1.0) -> float:
    """The ``cost`` hint as a float, ``default`` when absent."""
    cost = hints.get("cost")
    return default if cost is None else float(cost)
