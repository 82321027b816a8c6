"""δ-neighbour rules: when is a stored entry "the same" as a query?

A rule gives, per modality (and optionally per entry), the least cosine
similarity that counts as a hit; a multimodal query needs every one of its
modalities at or above its own threshold for the same entry. The cache searches
with :meth:`ThresholdRule.floor` (the loosest threshold any entry may have), checks
each candidate with :meth:`ThresholdRule.accepts`, and reports outcomes through
:meth:`ThresholdRule.observe`, so adaptive and per-entry rules (e.g. an
error-budgeted rule that learns from ``correct``) plug in by subclassing and
registering in :data:`RULES`. A rule's constructor names its parameters as the
``thresholds`` config keys they come from (:func:`mmcache.build.make_threshold`).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections import deque
from typing import Callable, Mapping

import numpy as np

#: δ for a modality the config does not list.
DEFAULT_DELTA = 0.1


class ThresholdRule(ABC):
    """Decides which similarities count as hits."""

    name: str = ""

    @abstractmethod
    def floor(self, modality: str) -> float:
        """The least similarity any entry could need on ``modality`` (the search floor)."""

    def threshold(self, modality: str, entry_id: str | None = None) -> float:
        """The least similarity ``entry_id`` needs on ``modality`` (default: the floor)."""
        return self.floor(modality)

    def accepts(self, similarities: Mapping[str, float], entry_id: str | None = None) -> bool:
        """Whether every modality's similarity reaches its threshold for this entry."""
        return all(s >= self.threshold(m, entry_id) for m, s in similarities.items())

    def observe(self, similarities: Mapping[str, float], entry_id: str,
                correct: bool | None = None) -> None:
        """Learn from a served hit (``correct`` is known only with ground truth)."""

    def forget(self, entry_id: str) -> None:
        """Drop per-entry state of a removed entry."""

    def deltas(self) -> dict[str, float]:
        """Current δ per modality (for metrics)."""
        return {}


class StaticThreshold(ThresholdRule):
    """A fixed δ per modality: a hit needs cosine ≥ 1 − δ."""

    name = "static"

    def __init__(self, delta: Mapping[str, float] | None = None) -> None:
        self.delta = dict(delta or {})

    def floor(self, modality: str) -> float:
        return 1.0 - self.delta.get(modality, DEFAULT_DELTA)

    def deltas(self) -> dict[str, float]:
        return dict(self.delta)


class PercentileThreshold(ThresholdRule):
    """seed 000 §3.1: δ = 1 − percentile(recent hit similarities, p), per modality.

    Starts at the static ``delta`` until ``min_samples`` hits were observed, keeps a
    sliding ``window`` of hit similarities and clips δ to ``[delta_min, delta_max]``.
    Because only hits are observed, a high ``percentile`` ratchets δ down towards
    ``delta_min`` (the rule as the seed states it; the clip bounds the drift).
    """

    name = "percentile"

    def __init__(self, delta: Mapping[str, float] | None = None, percentile: float = 85.0,
                 window: int = 1000, min_samples: int = 50, delta_min: float = 0.01,
                 delta_max: float = 0.5) -> None:
        self.initial = dict(delta or {})
        self.percentile = percentile
        self.min_samples = min_samples
        self.delta_min, self.delta_max = delta_min, delta_max
        self._window: dict[str, deque[float]] = {}
        self._size = window
        self._current: dict[str, float] = {}

    def floor(self, modality: str) -> float:
        return 1.0 - self.delta(modality)

    def delta(self, modality: str) -> float:
        """The current δ of ``modality``."""
        if modality in self._current:
            return self._current[modality]
        return float(np.clip(self.initial.get(modality, DEFAULT_DELTA), self.delta_min,
                             self.delta_max))

    def observe(self, similarities: Mapping[str, float], entry_id: str,
                correct: bool | None = None) -> None:
        for modality, sim in similarities.items():
            window = self._window.setdefault(modality, deque(maxlen=self._size))
            window.append(float(sim))
            if len(window) >= self.min_samples:
                delta = 1.0 - float(np.percentile(np.fromiter(window, float), self.percentile))
                self._current[modality] = float(np.clip(delta, self.delta_min, self.delta_max))

    def deltas(self) -> dict[str, float]:
        return {m: self.delta(m) for m in set(self.initial) | set(self._current)}


#: Rule name → rule factory, called with the ``thresholds`` settings its parameters name.
RULES: dict[str, Callable[..., ThresholdRule]] = {
    "static": StaticThreshold,
    "percentile": PercentileThreshold,
}
