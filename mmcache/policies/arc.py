"""Adaptive Replacement Cache (Megiddo & Modha, FAST'03): ``arc`` byte-sized as libCacheSim's
ARC, and ``arc-paper`` with the paper's adaptation step.

The paper counts in pages: a hit in ghost list B1 raises the target size ``p`` of T1 by
``max(|B2|/|B1|, 1)`` pages, a hit in B2 lowers it by ``max(|B1|/|B2|, 1)``. libCacheSim
measures the lists in bytes but keeps the step in bytes too (at least 1 byte per ghost
hit), so on a trace of KiB-sized objects ``p`` barely moves (on cloudPhysics it stays near
0). ``arc-paper`` counts the step in objects of the requested size: ``size ·
max(B2 bytes / B1 bytes, 1)`` bytes, which is the paper's rule exactly when every object
is one page; everything else is shared.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any, Hashable

from mmcache.errors import ConfigError
from mmcache.policies.base import EvictionPolicy


class ARC(EvictionPolicy):
    """Two LRU lists, T1 (seen once) and T2 (seen again), with ghost lists B1/B2 of evicted keys.

    A ghost hit moves the target size ``p`` of T1 (towards T1 for B1, away for B2) and
    re-admits the key into T2. Sizes are in bytes; ``capacity`` is the cache size.
    """

    name = "arc"
    needs_capacity = True

    def __init__(self, capacity: int) -> None:
        if capacity <= 0:
            raise ConfigError(f"ARC capacity must be positive, got {capacity!r}")
        self.capacity = capacity
        # Each list maps key -> size, oldest first.
        self._t1: OrderedDict[Hashable, int] = OrderedDict()
        self._t2: OrderedDict[Hashable, int] = OrderedDict()
        self._b1: OrderedDict[Hashable, int] = OrderedDict()
        self._b2: OrderedDict[Hashable, int] = OrderedDict()
        self._t1_bytes = self._t2_bytes = self._b1_bytes = self._b2_bytes = 0
        self.p = 0.0
        self._ghost_hit = 0  # 1 or 2 while admitting a key found in B1 or B2
        self._incoming = 0   # size of the key being admitted

    def on_miss(self, key: Hashable, size: int, **hints: Any) -> bool:
        self._incoming = size
        self._ghost_hit = 0
        if key in self._b1:
            self.p = min(self.p + self._step(size, self._b2_bytes / self._b1_bytes),
                         self.capacity)
            self._b1_bytes -= self._b1.pop(key)
            self._ghost_hit = 1
        elif key in self._b2:
            self.p = max(self.p - self._step(size, self._b1_bytes / self._b2_bytes), 0)
            self._b2_bytes -= self._b2.pop(key)
            self._ghost_hit = 2
        return True

    def _step(self, size: int, ratio: float) -> float:
        """How far a ghost hit moves ``p``: libCacheSim's ``max(ratio, 1)`` bytes."""
        return max(ratio, 1)

    def insert(self, key: Hashable, size: int, **hints: Any) -> None:
        if self._ghost_hit:
            self._t2[key] = size
            self._t2_bytes += size
            self._ghost_hit = 0
        else:
            self._t1[key] = size
            self._t1_bytes += size

    def access(self, key: Hashable, **hints: Any) -> None:
        if key in self._t1:
            size = self._t1.pop(key)
            self._t1_bytes -= size
            self._t2[key] = size
            self._t2_bytes += size
        else:
            self._t2.move_to_end(key)

    def evict(self) -> Hashable:
        if self._ghost_hit:
            return self._replace()
        if self._t1_bytes + self._b1_bytes + self._incoming > self.capacity:
            if self._b1_bytes > 0:
                _, size = self._b1.popitem(last=False)
                self._b1_bytes -= size
                return self._replace()
            key, size = self._t1.popitem(last=False)  # T1 alone fills the cache: no ghost
            self._t1_bytes -= size
            return key
        total = self._t1_bytes + self._b1_bytes + self._t2_bytes + self._b2_bytes
        if total >= 2 * self.capacity and self._b2_bytes > 0:
            _, size = self._b2.popitem(last=False)
            self._b2_bytes -= size
        return self._replace()

    def _replace(self) -> Hashable:
        """REPLACE of the paper: demote T1's LRU to B1 or T2's LRU to B2."""
        t1 = self._t1_bytes
        if (t1 > 0 and (t1 > self.p or (t1 == self.p and self._ghost_hit == 2))) \
                or self._t2_bytes == 0:
            key, size = self._t1.popitem(last=False)
            self._t1_bytes -= size
            self._b1[key] = size
            self._b1_bytes += size
        else:
            key, size = self._t2.popitem(last=False)
            self._t2_bytes -= size
            self._b2[key] = size
            self._b2_bytes += size
        return key

    def remove(self, key: Hashable) -> None:
        if key in self._t1:
            self._t1_bytes -= self._t1.pop(key)
        else:
            self._t2_bytes -= self._t2.pop(key)

    def __contains__(self, key: Hashable) -> bool:
        return key in self._t1 or key in self._t2

    def __len__(self) -> int:
        return len(self._t1) + len(self._t2)


class ARCPaper(ARC):
    """ARC with the paper's adaptation step: ``max(ratio, 1)`` objects of the requested size."""

    name = "arc-paper"

    def _step(self, size: int, ratio: float) -> float:
        return size * max(ratio, 1)
