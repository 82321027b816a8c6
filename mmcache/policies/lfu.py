"""Least-frequently-used eviction, as libCacheSim's LFU."""

from __future__ import annotations

from collections import OrderedDict
from typing import Any, Hashable

from mmcache.policies.base import EvictionPolicy


class LFU(EvictionPolicy):
    """Evicts a key with the fewest hits since it was admitted.

    Counts start at 1 on admission and are forgotten on eviction. Among keys of the
    lowest count, the one that reached that count first goes first.
    """

    name = "lfu"

    def __init__(self) -> None:
        self._freq: dict[Hashable, int] = {}
        self._buckets: dict[int, OrderedDict[Hashable, None]] = {1: OrderedDict()}
        self._min_freq = 1
        self._max_freq = 1

    def insert(self, key: Hashable, size: int, **hints: Any) -> None:
        self._freq[key] = 1
        self._buckets[1][key] = None
        self._min_freq = 1

    def access(self, key: Hashable, **hints: Any) -> None:
        old = self._freq[key]
        self._freq[key] = new = old + 1
        self._max_freq = max(self._max_freq, new)
        del self._buckets[old][key]
        self._buckets.setdefault(new, OrderedDict())[key] = None
        if old == self._min_freq and not self._buckets[old]:
            self._raise_min_freq()

    def evict(self) -> Hashable:
        bucket = self._buckets[self._min_freq]
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
