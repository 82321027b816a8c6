"""S3-FIFO (Yang et al., SOSP'23), as libCacheSim's S3FIFO."""

from __future__ import annotations

from collections import OrderedDict
from typing import Any, Hashable

from mmcache.errors import ConfigError
from mmcache.policies.base import EvictionPolicy


class S3FIFO(EvictionPolicy):
    """A small FIFO (10%) filters one-hit wonders; a main FIFO (2-bit CLOCK) keeps the rest.

    New keys enter the small queue (the main one if they are in the ghost FIFO of keys
    recently evicted from small). Evicting from small promotes a key hit at least
    ``move_to_main_threshold`` times to main, else sends it to the ghost. Evicting from
    main reinserts a hit key with its count decremented. Keys larger than the small
    queue are never admitted; before the first eviction, keys overflowing the small
    queue go to main. ``capacity`` is the cache size in bytes.
    """

    name = "s3fifo"
    needs_capacity = True

    def __init__(self, capacity: int, small_size_ratio: float = 0.1,
                 ghost_size_ratio: float = 0.9, move_to_main_threshold: int = 2) -> None:
        if capacity <= 0 or not 0 < small_size_ratio < 1 or ghost_size_ratio < 0 \
                or move_to_main_threshold < 1:
            raise ConfigError("S3-FIFO needs capacity > 0, 0 < small_size_ratio < 1, "
                              "ghost_size_ratio >= 0 and move_to_main_threshold >= 1")
        self.small_size = int(capacity * small_size_ratio)
        self.main_size = capacity - self.small_size
        self.ghost_size = int(capacity * ghost_size_ratio)
        self.threshold = move_to_main_threshold
        # key -> size, oldest first; self._freq holds resident keys' hit counts.
        self._small: OrderedDict[Hashable, int] = OrderedDict()
        self._main: OrderedDict[Hashable, int] = OrderedDict()
        self._ghost: OrderedDict[Hashable, int] = OrderedDict()
        self._small_bytes = self._main_bytes = self._ghost_bytes = 0
        self._freq: dict[Hashable, int] = {}
        self._ghost_hit = False
        self._has_evicted = False

    def on_miss(self, key: Hashable, size: int, **hints: Any) -> bool:
        self._ghost_hit = key in self._ghost
        if self._ghost_hit:
            self._ghost_bytes -= self._ghost.pop(key)
        return size < self.small_size or (self._ghost_hit and size <= self.small_size)

    def insert(self, key: Hashable, size: int, **hints: Any) -> None:
        if self._ghost_hit or (not self._has_evicted and self._small_bytes >= self.small_size):
            self._main[key] = size
            self._main_bytes += size
        else:
            self._small[key] = size
            self._small_bytes += size
        self._ghost_hit = False
        self._freq[key] = 0

    def access(self, key: Hashable, **hints: Any) -> None:
        self._freq[key] += 1

    def evict(self) -> Hashable:
        self._has_evicted = True
        if self._main_bytes > self.main_size or self._small_bytes == 0:
            return self._evict_main()
        return self._evict_small()

    def _evict_small(self) -> Hashable:
        while True:
            key, size = self._small.popitem(last=False)
            self._small_bytes -= size
            if self._freq[key] >= self.threshold:
                self._main[key] = size
                self._main_bytes += size
                self._freq[key] = 0
                if self._small_bytes == 0:
                    return self._evict_main()
                continue
            del self._freq[key]
            self._to_ghost(key, size)
            return key

    def _evict_main(self) -> Hashable:
        while True:
            key, size = self._main.popitem(last=False)
            freq = self._freq[key]
            if freq >= 1:
                self._main[key] = size
                self._freq[key] = min(freq, 3) - 1
                continue
            self._main_bytes -= size
            del self._freq[key]
            return key

    def _to_ghost(self, key: Hashable, size: int) -> None:
        if size > self.ghost_size:
            return
        while self._ghost_bytes + size > self.ghost_size:
            _, old = self._ghost.popitem(last=False)
            self._ghost_bytes -= old
        self._ghost[key] = size
        self._ghost_bytes += size

    def remove(self, key: Hashable) -> None:
        del self._freq[key]
        if key in self._small:
            self._small_bytes -= self._small.pop(key)
        else:
            self._main_bytes -= self._main.pop(key)

    def __contains__(self, key: Hashable) -> bool:
        return key in self._freq

    def __len__(self) -> int:
        return len(self._freq)
