"""Attention-entropy retention (seed 002 §1): low-entropy entries are evicted first.

The entropy ``H = −Σ α_i log α_i`` of an entry's attention weights arrives as a hint
(``entropy=`` a number, or ``attention=`` the weights, from which it is computed).
Entries with ``H < threshold`` (the seed's 0.35) are low priority: they are evicted,
in LRU order, before any other entry; the rest are evicted in LRU order. Entries
without a hint count as normal priority.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any, Hashable

import numpy as np

from mmcache.errors import ConfigError, InvalidInputError
from mmcache.policies.base import EvictionPolicy


def attention_entropy(attention: Any) -> float:
    """Shannon entropy (nats) of attention weights (normalised to sum 1; zeros ignored)."""
    alpha = np.asarray(attention, dtype=np.float64).ravel()
    if alpha.size == 0 or not np.all(np.isfinite(alpha)) or np.any(alpha < 0) \
            or alpha.sum() <= 0:
        raise InvalidInputError("attention weights must be finite, non-negative, not all zero")
    alpha = alpha / alpha.sum()
    nz = alpha[alpha > 0]
    return float(-(nz * np.log(nz)).sum())


class EntropyRetention(EvictionPolicy):
    """Two LRU lists, low-entropy first; an entry's class is re-read from each hint."""

    name = "entropy-retention"

    def __init__(self, threshold: float = 0.35) -> None:
        if not np.isfinite(threshold) or threshold < 0:
            raise ConfigError(f"entropy threshold must be finite and >= 0, got {threshold!r}")
        self.threshold = threshold
        self._low: OrderedDict[Hashable, None] = OrderedDict()
        self._normal: OrderedDict[Hashable, None] = OrderedDict()

    def _is_low(self, key: Hashable, hints: dict[str, Any]) -> bool:
        if hints.get("entropy") is not None:
            return float(hints["entropy"]) < self.threshold
        if hints.get("attention") is not None:
            return attention_entropy(hints["attention"]) < self.threshold
        return key in self._low  # no new signal: keep the class it had

    def insert(self, key: Hashable, size: int, **hints: Any) -> None:
        (self._low if self._is_low(key, hints) else self._normal)[key] = None

    def access(self, key: Hashable, **hints: Any) -> None:
        low = self._is_low(key, hints)
        self._low.pop(key, None)
        self._normal.pop(key, None)
        (self._low if low else self._normal)[key] = None

    def evict(self) -> Hashable:
        queue = self._low if self._low else self._normal
        key, _ = queue.popitem(last=False)
        return key

    def remove(self, key: Hashable) -> None:
        if self._low.pop(key, 0) is None:
            return
        del self._normal[key]

    def __contains__(self, key: Hashable) -> bool:
        return key in self._low or key in self._normal

    def __len__(self) -> int:
        return len(self._low) + len(self._normal)
