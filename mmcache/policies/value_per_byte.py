"""Value-per-byte eviction: keep what saves the most miss cost per byte of cache.

An entry's value is ``P(reuse) × miss cost ÷ size``. ``P(reuse)`` is estimated online
from the key's request count n since admission with Laplace's rule of succession,
``n / (n + 1)``; the miss cost comes from the ``cost`` hint (e.g. inference
milliseconds; default 1.0). As in GreedyDual, the value of the last victim (``L``)
is added to every priority on admission or hit, so entries that stop being used age
out. The lowest ``L + value`` goes; ties leave oldest-touched first.
"""

from __future__ import annotations

import heapq
import itertools
import math
from typing import Any, Hashable

from mmcache.errors import ConfigError
from mmcache.policies import _heap
from mmcache.policies.base import EvictionPolicy


class ValuePerByte(EvictionPolicy):
    """Evicts the lowest ``L + P(reuse)·cost/size``."""

    name = "value-per-byte"

    def __init__(self, default_cost: float = 1.0) -> None:
        if not math.isfinite(default_cost) or default_cost <= 0:
            raise ConfigError(f"default_cost must be finite and > 0, got {default_cost!r}")
        self.default_cost = default_cost
        self._count: dict[Hashable, int] = {}
        self._size: dict[Hashable, int] = {}
        self._cost: dict[Hashable, float] = {}
        self._entry: dict[Hashable, tuple[float, int]] = {}
        self._heap: list[tuple[float, int, Hashable]] = []
        self._stamp = itertools.count()
        self._aging = 0.0

    def value(self, key: Hashable) -> float:
        """The key's current value per byte, without aging."""
        n = self._count[key]
        return n / (n + 1) * self._cost[key] / self._size[key]

    def insert(self, key: Hashable, size: int, **hints: Any) -> None:
        cost = self._read_cost(hints)
        self._count[key] = 1
        self._size[key] = max(int(size), 1)
        self._cost[key] = cost
        self._push(key)

    def access(self, key: Hashable, **hints: Any) -> None:
        cost = self._read_cost(hints) if hints.get("cost") is not None else self._cost[key]
        self._count[key] += 1
        self._cost[key] = cost
        self._push(key)

    def _read_cost(self, hints: dict[str, Any]) -> float:
        cost = hints.get("cost")
        if cost is None:
            return self.default_cost
        cost = float(cost)
        if not math.isfinite(cost) or cost < 0:
            raise ConfigError(f"miss cost must be finite and >= 0, got {cost!r}")
        return cost

    def _push(self, key: Hashable) -> None:
        entry = (self._aging + self.value(key), next(self._stamp))
        self._entry[key] = entry
        _heap.push(self._heap, (*entry, key), len(self._entry), self._ranks)

    def evict(self) -> Hashable:
        heap = self._heap
        while not self._ranks(heap[0]):
            heapq.heappop(heap)
        pri, _, key = heapq.heappop(heap)
        self._aging = pri
        self._forget(key)
        return key

    def _ranks(self, item: tuple[float, int, Hashable]) -> bool:
        """Whether heap ``item`` is its key's current rank (else it is stale)."""
        return self._entry.get(item[2]) == item[:2]

    def remove(self, key: Hashable) -> None:
        self._forget(key)

    def _forget(self, key: Hashable) -> None:
        del self._count[key], self._size[key], self._cost[key], self._entry[key]

    def __contains__(self, key: Hashable) -> bool:
        return key in self._entry

    def __len__(self) -> int:
        return len(self._entry)
