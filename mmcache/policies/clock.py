"""CLOCK (FIFO with reinsertion, second chance), as libCacheSim's Clock."""

from __future__ import annotations

from collections import OrderedDict
from typing import Any, Hashable

from mmcache.errors import ConfigError
from mmcache.policies.base import EvictionPolicy


class Clock(EvictionPolicy):
    """A FIFO whose oldest key, if it was hit since it last passed the hand, goes back to the head.

    Each key keeps an ``n_bit_counter``-bit counter (1 bit: the classic reference bit),
    0 on insert, +1 per hit up to its maximum; the hand decrements it on each pass.
    """

    name = "clock"

    def __init__(self, n_bit_counter: int = 1) -> None:
        if not isinstance(n_bit_counter, int) or not 1 <= n_bit_counter <= 16:
            raise ConfigError(f"n_bit_counter must be an int in 1..16, got {n_bit_counter!r}")
        self.max_freq = (1 << n_bit_counter) - 1
        self._freq: OrderedDict[Hashable, int] = OrderedDict()  # oldest first

    def insert(self, key: Hashable, size: int, **hints: Any) -> None:
        self._freq[key] = 0

    def access(self, key: Hashable, **hints: Any) -> None:
        self._freq[key] = min(self._freq[key] + 1, self.max_freq)

    def evict(self) -> Hashable:
        freq = self._freq
        while True:
            key = next(iter(freq))
            if freq[key] == 0:
                del freq[key]
                return key
            freq[key] -= 1
            freq.move_to_end(key)

    def remove(self, key: Hashable) -> None:
        del self._freq[key]

    def __contains__(self, key: Hashable) -> bool:
        return key in self._freq

    def __len__(self) -> int:
        return len(self._freq)
