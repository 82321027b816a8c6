"""LFU with dynamic aging (LFUDA), as libCacheSim's LFUDA."""

from __future__ import annotations

from collections import OrderedDict
from typing import Any, Hashable

from .base import EvictionPolicy


class LFUDA(EvictionPolicy):
    """LFU whose counts age: the count of the last victim (the "age") is added on every hit.

    A new key starts at age + 1; a hit adds the current age to its count. Keys of
    equal count leave in the order they reached it. Follows libCacheSim's LFUDA step
    for step, including its bookkeeping of the minimum count.
    """

    name = "lfuda"

    def __init__(self) -> None:
        self._freq: dict[Hashable, int] = {}
        self._buckets: dict[int, OrderedDict[Hashable, None]] = {1: OrderedDict()}
        self._min_freq = 0  # the age
        self._max_freq = 0

    def insert(self, key: Hashable, size: int, **hints: Any) -> None:
        freq = self._min_freq + 1
        self._freq[key] = freq
        self._bucket(freq)[key] = None

    def access(self, key: Hashable, **hints: Any) -> None:
        old = self._freq[key]
        new = old + self._min_freq
        self._freq[key] = new
        del self._buckets[old][key]
        if old == self._min_freq and not self._buckets[old]:
            self._raise_min_freq()
        self._bucket(new)[key] = None

    def evict(self) -> Hashable:
        freq = max(self._min_freq, 1)
        if not self._buckets.get(freq):  # stale minimum: take the lowest non-empty count
            freq = min(f for f, b in self._buckets.items() if b)
        bucket = self._buckets[freq]
        self._min_freq = freq
        key, _ = bucket.popitem(last=False)
        del self._freq[key]
        if not bucket:
            self._raise_min_freq()
        return key

    def remove(self, key: Hashable) -> None:
        freq = self._freq.pop(key)
        bucket = self._buckets[freq]
        del bucket[key]
        if freq == self._min_freq and not bucket:
            self._raise_min_freq()

    def _bucket(self, freq: int) -> OrderedDict[Hashable, None]:
        self._max_freq = max(self._max_freq, freq)
        return self._buckets.setdefault(freq, OrderedDict())

    def _raise_min_freq(self) -> None:
        """Move the minimum up to the next non-empty count (unchanged if there is none)."""
        for freq in range(self._min_freq + 1, self._max_freq + 1):
            if self._buckets.get(freq):
                self._min_freq = freq
                return

    def __contains__(self, key: Hashable) -> bool:
        return key in self._freq

    def __len__(self) -> int:
        return len(self._freq)
