"""``vcache-paper``: a reimplementation of vCache's per-entry rule from its paper only.

(arXiv 2502.03771; its code is CC BY-NC-ND and was not looked at.) Each entry fits its
own sigmoid P(correct | s) = σ(a + b·s) to the labelled observations of that entry
alone (a weak zero-mean Gaussian prior keeps the fit finite when all labels agree), and
may be served only after ``min_observations`` of them (the paper's cold start). A
candidate is served when the upper confidence bound of P(wrong | s) — the delta method
on the fit's covariance, ``z`` standard errors — is at most ``budget``. The paper
obtains observations by exploring (answering a lookup from the model and comparing);
here every labelled candidate reaches it through :meth:`feedback`, served or not.
This is the named baseline for side-by-side comparisons, not mmcache's rule.
"""

from __future__ import annotations

import math
from typing import Mapping

from mmcache.thresholds.base import ThresholdRule
from mmcache.thresholds.prior import features, linear_and_variance, posterior, sigmoid

#: The weak prior of an entry's own fit.
WEAK_PRIOR = ((0.0, 0.0), ((100.0, 0.0), (0.0, 100.0)))


class VCachePaperThreshold(ThresholdRule):
    """Per-entry sigmoid with a delta-method bound; no prior, no hit before observations."""

    name = "vcache-paper"

    def __init__(self, budget: float = 0.02, min_observations: int = 6, z: float = 1.645,
                 search_floor: float = 0.5) -> None:
        self.budget, self.min_observations, self.z = budget, min_observations, z
        self.search_floor = search_floor
        #: entry id -> ((min similarity, correct) observations, mean, cov).
        self._entries: dict[str, tuple[list, tuple, tuple]] = {}

    def floor(self, modality: str) -> float:
        return self.search_floor

    def upper_risk(self, similarity: float, entry_id: str | None) -> float:
        """Upper bound of P(wrong | similarity) for the entry (1 before enough observations)."""
        state = self._entries.get(entry_id) if entry_id is not None else None
        if state is None or len(state[0]) < self.min_observations:
            return 1.0
        _, mean, cov = state
        z, var = linear_and_variance(mean, cov, features(similarity))
        return 1.0 - sigmoid(z - self.z * math.sqrt(var))

    def accepts(self, similarities: Mapping[str, float], entry_id: str | None = None,
                scope: str | None = None, evidence: Mapping[str, float] | None = None) -> bool:
        s = min(min(similarities.values()), 1.0)  # checked on [s, 1]: monotone in s
        return s >= self.search_floor and all(
            self.upper_risk(s + k * (1.0 - s) / 8, entry_id) <= self.budget for k in range(9))

    def feedback(self, similarities: Mapping[str, float], entry_id: str, correct: bool,
                 scope: str | None = None, charged: float = 0.0) -> None:
        observations = list(self._entries.get(entry_id, ([],))[0])
        observations.append((float(min(similarities.values())), bool(correct)))
        mean, cov = posterior(*WEAK_PRIOR, [o[0] for o in observations],
                              [o[1] for o in observations])
        self._entries[entry_id] = (observations, mean, cov)

    def forget(self, entry_id: str) -> None:
        self._entries.pop(entry_id, None)
