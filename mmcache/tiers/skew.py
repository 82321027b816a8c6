"""The skew watch of seed 000 §2.4: per-shard request counts, and an alert for a hot shard.

A sharded store tells its :class:`SkewWatch` which shard every request went to. The watch
judges windows of ``window`` requests: a shard whose count in a window exceeds ``factor``
(1.8) times the window's mean over every shard of the store (idle shards included) is
skewed. Each skewed window adds one to the ``skew_alerts`` counter of that shard in the
metrics the store reports to, and a shard that becomes skewed is logged once as a warning
on the ``mmcache.skew`` logger (not again while it stays skewed). Windows are counted in
requests, not seconds, so a replayed workload is judged the same at any speed.
"""

from __future__ import annotations

import logging
import threading
from collections import Counter
from typing import Iterable

from mmcache.errors import ConfigError, check_number

#: A shard is skewed when its requests in a window exceed this many times the mean.
SKEW_FACTOR = 1.8
#: Requests per judged window.
SKEW_WINDOW = 1000

logger = logging.getLogger("mmcache.skew")


class SkewWatch:
    """Counts requests per shard in windows and names the shards over ``factor`` × the mean."""

    def __init__(self, shards: Iterable[str], factor: float = SKEW_FACTOR,
                 window: int = SKEW_WINDOW, where: str = "") -> None:
        if isinstance(window, bool) or not isinstance(window, int) or window < 1:
            raise ConfigError(f"skew_window must be a whole number of requests >= 1, "
                              f"got {window!r}")
        check_number(factor, "skew_factor", 1, strict=False)
        self.shards = set(shards)
        self.factor, self.window, self.where = float(factor), window, where
        #: The alert flag: the shards that were skewed in the last judged window.
        self.skewed: frozenset[str] = frozenset()
        self._counts: Counter[str] = Counter()
        #: Held while counting: a store's reads and writes count from several threads.
        self._lock = threading.Lock()

    def record(self, shard: str, n: int = 1) -> list[str]:
        """Count ``n`` requests to ``shard``; when that closes a window, return the shards
        skewed in it (else an empty list)."""
        with self._lock:
            self.shards.add(shard)
            self._counts[shard] += n
            if sum(self._counts.values()) < self.window:
                return []
            return self._judge()

    def _judge(self) -> list[str]:
        """Close the window: the shards over the limit, warning about newly skewed ones."""
        total = sum(self._counts.values())
        mean = total / len(self.shards)
        skewed = sorted(s for s, n in self._counts.items() if n > self.factor * mean)
        for shard in skewed:
            if shard not in self.skewed:
                logger.warning("shard %s of %s is skewed: %d of the last %d requests, over "
                               "%.1f x the mean of %.1f per shard (%d shards)", shard,
                               self.where or "the store", self._counts[shard], total,
                               self.factor, mean, len(self.shards))
        self.skewed = frozenset(skewed)
        self._counts.clear()
        return skewed
