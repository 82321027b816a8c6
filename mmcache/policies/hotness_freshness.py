"""Hotness–freshness eviction (seed 002 §3.2): score = w_h·H + w_f·F, lowest score goes.

H (hotness) is updated on each hit: ``H ← H·decay + boost`` (admission counts as the
first hit; ``decay`` applies per hit, not per unit of time). F (freshness) is
``max(0.1, 1 − age/window)``, ``age`` = time since the key's last access.

``window`` and ``age`` are in the unit of the ``now`` hint: the request index in trace
replay (``mmcache.sim.replay``, ``mmcache.sim.cachebench``), **seconds** of the cache's clock in a
:class:`~mmcache.TieredCache` tier (set it there with e.g. ``{"l1": {"policy":
"hotness-freshness", "policy_options": {"window": 600}}}``), and a count of calls when
no ``now`` is given. Time never runs backwards: a ``now`` earlier than one already seen
counts as that latest one. The seed's defaults: decay 0.98, boost 0.2, weights 0.6/0.4
("balanced"; 0.3/0.7 is its "time-sensitive" mode); ``window`` 10 000.
"""

from __future__ import annotations

import heapq
import itertools
from collections import OrderedDict
from typing import Any, Hashable

from mmcache.errors import ConfigError
from mmcache.policies import _heap
from mmcache.policies.base import EvictionPolicy

FRESHNESS_FLOOR = 0.1


class HotnessFreshness(EvictionPolicy):
    """Evicts the lowest ``w_h·H + w_f·max(0.1, 1 − age/window)``, exactly, in O(log n).

    While a key is young, its score falls linearly with time, so young keys compare by
    the time-free ``w_h·H + w_f·t_last/window``; once ``age >= 0.9·window`` its score is
    the constant ``w_h·H + 0.1·w_f``. Young keys move to the old set in last-access order.
    """

    name = "hotness-freshness"

    def __init__(self, decay: float = 0.98, boost: float = 0.2, window: float = 10_000,
                 w_hot: float = 0.6, w_fresh: float = 0.4) -> None:
        if not 0 <= decay <= 1 or boost < 0 or window <= 0 or w_hot < 0 or w_fresh < 0:
            raise ConfigError("hotness-freshness needs 0<=decay<=1, boost>=0, window>0, "
                              "non-negative weights")
        self.decay, self.boost, self.window = decay, boost, float(window)
        self.w_hot, self.w_fresh = w_hot, w_fresh
        self._hot: dict[Hashable, float] = {}
        self._last: OrderedDict[Hashable, float] = OrderedDict()  # young keys, by last access
        self._old: set[Hashable] = set()
        self._young_heap: list[tuple[float, int, Hashable]] = []
        self._old_heap: list[tuple[float, int, Hashable]] = []
        self._entry: dict[Hashable, tuple[float, int]] = {}  # key -> live heap entry
        self._stamp = itertools.count()
        self._now = 0.0

    def score(self, key: Hashable, now: float | None = None) -> float:
        """The key's current score (higher is kept longer)."""
        now = self._now if now is None else now
        last = self._last.get(key, -float("inf"))
        fresh = max(FRESHNESS_FLOOR, 1.0 - (now - last) / self.window)
        return self.w_hot * self._hot[key] + self.w_fresh * fresh

    def on_miss(self, key: Hashable, size: int, **hints: Any) -> bool:
        if hints.get("now") is not None:  # evictions for this miss happen "now"
            self._now = max(self._now, float(hints["now"]))
        return True

    def insert(self, key: Hashable, size: int, **hints: Any) -> None:
        self._hot[key] = self.boost
        self._touch(key, hints)

    def access(self, key: Hashable, **hints: Any) -> None:
        self._hot[key] = self._hot[key] * self.decay + self.boost
        self._touch(key, hints)

    def _touch(self, key: Hashable, hints: dict[str, Any]) -> None:
        self._tick(hints)
        self._old.discard(key)
        self._last.pop(key, None)
        self._last[key] = self._now
        rank = (self.w_hot * self._hot[key] + self.w_fresh * self._now / self.window,
                next(self._stamp))
        self._entry[key] = rank
        _heap.push(self._young_heap, (*rank, key), len(self._last), self._ranks)

    def _tick(self, hints: dict[str, Any]) -> None:
        now = hints.get("now")
        self._now = max(self._now, float(now)) if now is not None else self._now + 1.0

    def evict(self) -> Hashable:
        self._age_out()
        young = self._peek(self._young_heap)
        old = self._peek(self._old_heap)
        offset = self.w_fresh * (1.0 - self._now / self.window)
        if old is None or (young is not None and young[0] + offset < old[0]):
            _, _, key = heapq.heappop(self._young_heap)
            del self._last[key]
        else:
            _, _, key = heapq.heappop(self._old_heap)
            self._old.discard(key)
        self._forget(key)
        return key

    def _age_out(self) -> None:
        """Move keys whose freshness hit the floor to the old set (score w_h·H + 0.1·w_f)."""
        limit = self._now - (1.0 - FRESHNESS_FLOOR) * self.window
        while self._last:
            key, last = next(iter(self._last.items()))
            if last > limit:
                break
            del self._last[key]
            self._old.add(key)
            rank = (self.w_hot * self._hot[key] + self.w_fresh * FRESHNESS_FLOOR,
                    next(self._stamp))
            self._entry[key] = rank
            _heap.push(self._old_heap, (*rank, key), len(self._old), self._ranks)

    def _peek(self, heap: list[tuple[float, int, Hashable]]) -> tuple[float, int, Hashable] | None:
        while heap and not self._ranks(heap[0]):
            heapq.heappop(heap)
        return heap[0] if heap else None

    def _ranks(self, item: tuple[float, int, Hashable]) -> bool:
        """Whether heap ``item`` is its key's current rank (else it is stale)."""
        return self._entry.get(item[2]) == item[:2]

    def remove(self, key: Hashable) -> None:
        self._last.pop(key, None)
        self._old.discard(key)
        self._forget(key)

    def _forget(self, key: Hashable) -> None:
        del self._hot[key], self._entry[key]

    def __contains__(self, key: Hashable) -> bool:
        return key in self._hot

    def __len__(self) -> int:
        return len(self._hot)
