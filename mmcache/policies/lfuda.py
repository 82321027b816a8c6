"""LFU with dynamic aging (LFUDA), as libCacheSim's LFUDA."""

from __future__ import annotations

from bisect import bisect_left, bisect_right, insort
from collections import OrderedDict
from typing import Any, Hashable

from mmcache.policies.base import EvictionPolicy


class LFUDA(EvictionPolicy):
    """LFU whose counts age: the count of the last victim (the "age") is added on every hit.

    A new key starts at age + 1; a hit adds the current age to its count. Keys of
    equal count leave in the order they reached it. Follows libCacheSim's LFUDA step
    for step, including its bookkeeping of the minimum count; where libCacheSim scans
    every count above the minimum for the next non-empty one (counts can grow very
    large), this keeps the non-empty counts sorted and looks the successor up.
    """

    name = "lfuda"

    def __init__(self) -> None:
        self._freq: dict[Hashable, int] = {}
        self._buckets: dict[int, OrderedDict[Hashable, None]] = {1: OrderedDict()}
        self._min_freq = 0  # the age
        self._nonempty: list[int] = []  # sorted counts whose bucket holds keys

    def insert(self, key: Hashable, size: int, **hints: Any) -> None:
        freq = self._min_freq + 1
        self._freq[key] = freq
        self._add(key, freq)

    def access(self, key: Hashable, **hints: Any) -> None:
        old = self._freq[key]
        new = old + self._min_freq
        self._freq[key] = new
        self._discard(key, old)
        if old == self._min_freq and not self._buckets[old]:
            self._raise_min_freq()
        self._add(key, new)

    def evict(self) -> Hashable:
        freq = max(self._min_freq, 1)
        if not self._buckets.get(freq):  # stale minimum: take the lowest non-empty count
            freq = self._nonempty[0]
        self._min_freq = freq
        key = next(iter(self._buckets[freq]))
        self._discard(key, freq)
        del self._freq[key]
        if not self._buckets[freq]:
            self._raise_min_freq()
        return key

    def remove(self, key: Hashable) -> None:
        freq = self._freq.pop(key)
        self._discard(key, freq)
        if freq == self._min_freq and not self._buckets[freq]:
            self._raise_min_freq()

    def _add(self, key: Hashable, freq: int) -> None:
        bucket = self._buckets.setdefault(freq, OrderedDict())
        if not bucket:
            insort(self._nonempty, freq)
        bucket[key] = None

    def _discard(self, key: Hashable, freq: int) -> None:
        bucket = self._buckets[freq]
        del bucket[key]
        if not bucket:
            del self._nonempty[bisect_left(self._nonempty, freq)]

    def _raise_min_freq(self) -> None:
        """Move the minimum up to the next non-empty count (unchanged if there is none)."""
        i = bisect_right(self._nonempty, self._min_freq)
        if i < len(self._nonempty):
            self._min_freq = self._nonempty[i]

    def __contains__(self, key: Hashable) -> bool:
        return key in self._freq

    def __len__(self) -> int:
        return len(self._freq)
