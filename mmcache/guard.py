"""Penetration guard: cheap tests that prove a lookup must miss, so it can be skipped.

* :class:`ExactKeyFilter` — a Bloom filter (``rbloom``) over the exact keys put
  into this process's cache. "Not in the filter" proves an exact miss in every
  tier this process alone writes; false positives only cost a normal lookup.
* :class:`SphericalCap` — the smallest known cap (centre, angular radius) that
  holds every vector of one index. By the triangle inequality on the sphere no
  member can be more similar to ``q`` than ``cos(max(0, angle(q, centre) - radius))``;
  when that bound is below the hit threshold the ANN search is skipped.
"""

from __future__ import annotations

import math

import numpy as np
from rbloom import Bloom

#: Slack on the cap radius (radians) so float rounding never turns a hit into a skip.
CAP_SLACK = 1e-4


class ExactKeyFilter:
    """Bloom filter over exact keys; ``might_contain(key) is False`` is a guaranteed miss."""

    def __init__(self, expected_items: int = 1_000_000, error_rate: float = 0.01) -> None:
        self._bloom = Bloom(expected_items, error_rate)
        self.expected_items = expected_items
        self.error_rate = error_rate

    def add(self, key: str) -> None:
        """Record that ``key`` may now be cached."""
        self._bloom.add(key)

    def might_contain(self, key: str) -> bool:
        """False only when ``key`` was never added."""
        return key in self._bloom

    def clear(self) -> None:
        """Forget every key (used when the tiers are rebuilt)."""
        self._bloom.clear()


class SphericalCap:
    """A cap on the unit sphere that contains every vector of one index."""

    def __init__(self) -> None:
        self.centre: np.ndarray | None = None
        self.radius = 0.0

    def include(self, vector: np.ndarray) -> None:
        """Grow the cap to contain the unit vector ``vector``."""
        if self.centre is None:
            self.centre, self.radius = vector.copy(), 0.0
        else:
            self.radius = max(self.radius, _angle(float(self.centre @ vector)))

    def refit(self, vectors: np.ndarray) -> None:
        """Recentre on the mean direction of ``vectors`` (rows, unit norm) and refit the radius."""
        if len(vectors) == 0:
            self.centre, self.radius = None, 0.0
            return
        mean = vectors.mean(axis=0, dtype=np.float64)
        norm = float(np.linalg.norm(mean))
        centre = (mean / norm).astype(np.float32) if norm > 1e-6 else vectors[0].copy()
        self.centre = centre
        self.radius = _angle(float(np.min(vectors @ centre)))

    def may_reach(self, query: np.ndarray, floor: float) -> bool:
        """False when no vector in the cap can have cosine similarity ≥ ``floor`` with ``query``."""
        if self.centre is None:
            return False
        gap = _angle(float(self.centre @ query)) - self.radius - CAP_SLACK
        return gap <= 0.0 or math.cos(gap) >= floor


def _angle(cosine: float) -> float:
    return math.acos(max(-1.0, min(1.0, cosine)))
