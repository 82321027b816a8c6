"""Low Inter-reference Recency Set (Jiang & Zhang, SIGMETRICS'02), byte-sized as libCacheSim's LIRS."""

from __future__ import annotations

from collections import OrderedDict
from typing import Any, Hashable

from mmcache.errors import ConfigError
from mmcache.policies.base import EvictionPolicy


class LIRS(EvictionPolicy):
    """Keys with a short reuse distance (LIR, 99% of the bytes) are kept; the rest (HIR, 1%) cycle.

    Stack S orders recently seen keys (resident or not) by recency; queue Q holds the
    resident HIR keys; NH lists the non-resident HIR keys still in S. A key re-referenced
    while in S becomes LIR, and the LIR key at the bottom of S is demoted to Q. S is
    pruned so that its bottom is LIR and limited to twice the cache size. Follows
    libCacheSim's LIRS step for step; it may drop resident keys while serving a hit,
    reported through ``take_dropped()``.

    One departure from libCacheSim, on variable sizes only: a hit on a resident HIR key
    that is in Q but not in S makes room for LIR bytes first (libCacheSim's byte-sized
    step; the paper evicts nothing on this hit and the key stays resident HIR), and that
    can push the key itself out of Q. Here it then counts as evicted (the bytes are
    freed); libCacheSim still serves the key as a hit later, so its outcome for the key
    is the paper's while its bytes no longer add up (the evictions were made for a key it
    keeps outside Q). Ours keeps the byte accounting exact. On a log-normal-size Zipf trace at 1% of
    the working set this is a few misses in 10^4 (``tests/test_replay_bench.py``, where
    libcachesim also warns "object size too large").
    """

    name = "lirs"
    needs_capacity = True

    def __init__(self, capacity: int, hirs_ratio: float = 0.01) -> None:
        if capacity <= 0 or not 0 < hirs_ratio < 1:
            raise ConfigError("LIRS needs capacity > 0 and 0 < hirs_ratio < 1")
        self.capacity = capacity
        self.hirs_limit = max(1, int(hirs_ratio * capacity))
        self.lirs_limit = capacity - self.hirs_limit
        self._s: OrderedDict[Hashable, int] = OrderedDict()   # key -> size, bottom first
        self._lir: dict[Hashable, bool] = {}                  # for keys in S
        self._res: dict[Hashable, bool] = {}                  # for keys in S: resident?
        self._q: OrderedDict[Hashable, int] = OrderedDict()   # resident HIR keys, oldest first
        self._nh: OrderedDict[Hashable, int] = OrderedDict()  # non-resident HIR keys in S
        self._s_bytes = self.lirs_count = self.hirs_count = 0
        self._dropped: list[Hashable] = []
        self._incoming: Hashable | None = None

    # -- protocol ---------------------------------------------------------------------
    def access(self, key: Hashable, **hints: Any) -> None:
        self._touch(key)
        if key in self._s:
            if self._lir[key]:
                self._prune()
            else:
                self._hit_hir_in_s(key)
        else:
            self._hit_hir_in_q(key)
        self._limit_stack()

    def on_miss(self, key: Hashable, size: int, **hints: Any) -> bool:
        self._touch(key)
        admit = self._can_insert(key, size)
        if not admit:
            self._limit_stack()
        return admit

    def evict(self) -> Hashable:
        while not self._dropped:
            self._evict_step()
        return self._dropped.pop(0)

    def insert(self, key: Hashable, size: int, **hints: Any) -> None:
        if key in self._s:  # a non-resident HIR key in S comes back as LIR
            self._lir[key] = self._res[key] = True
            self.lirs_count += self._s[key]
        else:
            lir = self.lirs_count + size <= self.lirs_limit
            self._push_s(key, size, lir=lir)
            if lir:
                self.lirs_count += size
            else:
                self._q[key] = size
                self.hirs_count += size
        self._incoming = None
        self._limit_stack()

    def remove(self, key: Hashable) -> None:
        if key in self._s and self._lir[key]:
            self.lirs_count -= self._pop_s(key)
            self._prune()
            return
        if key in self._q:
            self.hirs_count -= self._q.pop(key)
        if key in self._s:
            self._pop_s(key)

    def take_dropped(self) -> list[Hashable]:
        dropped, self._dropped = self._dropped, []
        return dropped

    def __contains__(self, key: Hashable) -> bool:
        return key in self._q or (key in self._s and self._lir[key])

    def __len__(self) -> int:
        return len(self._q) + sum(self._lir.values())

    # -- libCacheSim's LIRS steps -------------------------------------------------------
    def _touch(self, key: Hashable) -> None:
        """Every request first moves its key to the top of S and of Q, where present."""
        self._incoming = key
        if key in self._s:
            self._s.move_to_end(key)
        if key in self._q:
            self._q.move_to_end(key)

    def _can_insert(self, key: Hashable, size: int) -> bool:
        if size > self.capacity:
            return False
        if key in self._s:  # non-resident HIR in S
            while self.lirs_count + self._s[key] > self.lirs_limit and self._evict_lir():
                pass
            self._nh.pop(key, None)
            return True
        if size > self.lirs_limit or size > self.hirs_limit:
            return False
        if self.lirs_count + size > self.lirs_limit and self.hirs_count + size > self.hirs_limit:
            while self.hirs_count + size > self.hirs_limit:
                self._evict_hir()
        return True

    def _evict_step(self) -> None:
        if self._incoming in self._s:
            while self.hirs_count >= self.hirs_limit and self._q:
                self._evict_hir()
            if not self._evict_lir() and not self._q:
                raise RuntimeError("LIRS: nothing left to evict")
        elif self._q:
            self._evict_hir()
        elif not self._evict_lir():  # every resident key is LIR: demote one to Q first
            raise RuntimeError("LIRS: nothing left to evict")

    def _hit_hir_in_s(self, key: Hashable) -> None:
        if key in self._q:
            self.hirs_count -= self._q.pop(key)
        size = self._s[key]
        while self.lirs_count + size > self.lirs_limit and self._evict_lir():
            pass
        self._lir[key] = True
        self.lirs_count += size

    def _hit_hir_in_q(self, key: Hashable) -> None:
        size = self._q[key]
        while self.lirs_count + size > self.lirs_limit and self._evict_lir():
            pass
        if key in self._q:
            self._push_s(key, size, lir=False)
        else:  # pushed out of Q meanwhile: evicted
            self._push_s(key, size, lir=False, resident=False)
            self._nh[key] = size

    def _evict_lir(self) -> bool:
        """Demote the LIR key at the bottom of S to Q (drop it if it cannot fit Q), then prune.

        S is pruned first, so its bottom is LIR (libCacheSim assumes so without checking;
        where it is not, it corrupts its counters). False when S holds no LIR key.
        """
        self._prune()
        if not self._s or not self._lir[next(iter(self._s))]:
            return False
        key, size = next(iter(self._s.items()))
        self._pop_s(key)
        self.lirs_count -= size
        if size <= self.hirs_limit:
            while self.hirs_count + size > self.hirs_limit:
                self._evict_hir()
            self._q[key] = size
            self.hirs_count += size
        else:
            self._dropped.append(key)
        self._prune()
        return True

    def _evict_hir(self) -> None:
        """Evict the oldest resident HIR key; it stays in S as non-resident."""
        key, size = self._q.popitem(last=False)
        self.hirs_count -= size
        if key in self._s:
            self._res[key] = False
            self._nh[key] = size
        self._dropped.append(key)

    def _prune(self) -> None:
        """Pop non-LIR keys off the bottom of S (never its top)."""
        s = self._s
        while len(s) > 1:
            key = next(iter(s))
            if self._lir[key]:
                break
            if not self._res[key]:
                self._nh.pop(key, None)
            self._pop_s(key)

    def _limit_stack(self) -> None:
        """Forget the oldest non-resident keys while S holds more than twice the capacity."""
        while self._s_bytes > 2 * self.capacity and self._nh:
            key, _ = self._nh.popitem(last=False)
            self._pop_s(key)

    def _push_s(self, key: Hashable, size: int, lir: bool, resident: bool = True) -> None:
        self._s[key] = size
        self._lir[key], self._res[key] = lir, resident
        self._s_bytes += size

    def _pop_s(self, key: Hashable) -> int:
        size = self._s.pop(key)
        del self._lir[key], self._res[key]
        self._s_bytes -= size
        return size
