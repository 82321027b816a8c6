"""``vcache``: vCache's verified decision rule (Schroeder et al., "vCache: Verified Semantic
Prompt Caching", arXiv 2502.03771), reimplemented as a baseline. Sources: the paper's
abstract and the authors' repository (``vcache/vcache_policy/strategies/verified.py``, CC
BY-NC-ND: read to understand the algorithm, nothing of it copied); the paper's full text was not
at hand here, so no section or equation number is cited and the choices below are ours.

What follows vCache (its verified decision policy):

- every entry keeps its own observations (similarity of a lookup to it, whether its answer
  was right for that lookup), and only an *explored* lookup adds one;
- an entry's curve is P(correct | s) = σ(γ (s − t)), with (t, γ) fitted to its
  observations, and an uncertainty on t (the delta method on the fit's covariance);
- a lookup whose nearest candidate is at similarity s is explored with probability
  τ = min over ε of 1 − δ / (1 − (1 − ε) · σ(γ̂ (s − t'_ε))), where t'_ε = t̂ + Φ⁻¹(1 − ε)·sd(t)
  is the upper (1 − ε) bound on t: the least exploration that keeps P(served and wrong) ≤ δ
  (``budget``) whichever ε the bound is taken at; otherwise the candidate is served;
- an explored lookup is answered by the model, compared with the candidate's answer, and
  labels the candidate's entry; the lookup becomes a new entry only when the two differ
  (the cache's growth; :func:`mmcache.studies.cache_stream.run_stream` does this, through
  ``TieredCache.get`` → a :class:`~mmcache.types.Hit` with ``explored=True`` →
  ``TieredCache.feedback``).

Where this module had to choose (vCache leaves it open, or mmcache differs):

- no observations: τ = 1 (nothing is known about the entry); no further cold start (vCache's
  code explores until an entry has 6 labels; here τ falls from the first label on);
- the fit is the maximum a posteriori one under a very weak Gaussian prior on σ(a + b·s)
  (:data:`FIT_PRIOR`, via :func:`~mmcache.thresholds.prior.posterior`), so it stays finite,
  with t = −a/b, γ = b; t̂ is clipped to the cosine range [−1, 1] and γ̂ to ≥ :data:`MIN_SLOPE`;
- labels *perfectly separated* (every correct one above every wrong one, or all of one
  kind): the delta-method variance collapses there (γ̂ grows without bound while the curvature
  vanishes; vCache's code substitutes a fixed variance per number of labels), so here the fit's
  uncertainty is taken from the labels: t sits in the gap they
  leave (from the largest wrong similarity, or the search floor, to the smallest correct one,
  or 1), t̂ at its middle, and sd(t) and γ̂ such that a lookup at the gap's edge is wrong with
  probability 1/(n + 2) after n labels (Laplace's rule of succession): τ therefore falls
  steadily as consistent labels accumulate and stays well above 0 after a handful;
- ε runs over :data:`EPSILONS` (1 % … 99 %);
- a multimodal candidate is judged at its smallest per-modality similarity, and only
  candidates at or above ``search_floor`` are considered (the cache searches down to it; a
  lookup whose nearest entry is below it is a plain miss, not explored);
- exploration draws from a generator seeded with ``seed``, so a run regenerates.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from statistics import NormalDist
from typing import Mapping, Sequence

import numpy as np

from mmcache.thresholds.base import ThresholdRule
from mmcache.thresholds.prior import linear_and_variance, posterior

#: The weak prior of an entry's own fit of σ(a + b·s): (mean, covariance) of (a, b).
FIT_PRIOR = ((0.0, 0.0), ((1e4, 0.0), (0.0, 1e4)))
#: The least slope γ̂ (a fit with no upward slope says nothing about where t is).
MIN_SLOPE = 1e-3
#: The ε at which the bound on t is taken; τ is the least over them.
EPSILONS = np.linspace(0.01, 0.99, 99)
_QUANTILES = np.array([NormalDist().inv_cdf(1.0 - e) for e in EPSILONS])


@dataclass(frozen=True)
class EntryFit:
    """An entry's curve σ(γ (s − t)): the estimate ``t``, its standard deviation ``sd_t``,
    the slope ``gamma``, and whether its labels were perfectly separated."""

    t: float
    sd_t: float
    gamma: float
    separated: bool


def fit_entry(observations: Sequence[tuple[float, bool]], floor: float) -> EntryFit:
    """The fit of an entry's ``(similarity, correct)`` observations (at least one; see the
    module docstring: the weak-prior fit and the delta method, or, under separation, the gap
    the labels leave above ``floor``)."""
    right = [s for s, ok in observations if ok]
    wrong = [s for s, ok in observations if not ok]
    if not wrong or not right or min(right) > max(wrong):
        return _separated_fit(len(observations), max(wrong, default=floor),
                              min(right, default=1.0))
    (a, b), cov = posterior(*FIT_PRIOR, [s for s, _ in observations],
                            [ok for _, ok in observations])
    gamma = max(b, MIN_SLOPE)
    # t = −a/b; its gradient in (a, b) is (−1/b, a/b²)
    _, var_t = linear_and_variance((0.0, 0.0), cov, (-1.0 / gamma, a / gamma ** 2))
    return EntryFit(min(max(-a / gamma, -1.0), 1.0), math.sqrt(var_t), gamma, False)


def _separated_fit(n: int, low: float, high: float) -> EntryFit:
    """t in the gap (``low``, ``high``) that n separated labels leave: t̂ at its middle, and
    P(wrong) at its edge 1/(n + 2), both as the bound on t and on the curve's slope."""
    half = max((high - low) / 2.0, 1e-6)
    edge = 1.0 - 1.0 / (n + 2)
    return EntryFit(low + half, half / NormalDist().inv_cdf(edge),
                    math.log(edge / (1.0 - edge)) / half, True)


def exploration_probability(fit: EntryFit | None, similarity: float, budget: float) -> float:
    """τ: the probability of exploring a candidate at ``similarity`` of an entry with ``fit``
    (None: no observations, τ = 1) so that P(served and wrong) stays within ``budget``."""
    if fit is None:
        return 1.0
    t_upper = fit.t + _QUANTILES * fit.sd_t
    z = np.clip(fit.gamma * (similarity - t_upper), -500.0, 500.0)
    correct_lower = (1.0 - EPSILONS) / (1.0 + np.exp(-z))
    tau = 1.0 - budget / (1.0 - correct_lower)
    return float(min(max(tau.min(), 0.0), 1.0))


class VCacheThreshold(ThresholdRule):
    """vCache's per-entry rule: explore with probability τ (see the module docstring), else
    serve the nearest candidate. Learns from every label :meth:`feedback` gives it (vCache's
    protocol labels only explored candidates)."""

    name = "vcache"

    def __init__(self, budget: float = 0.02, search_floor: float = 0.5, seed: int = 0) -> None:
        self.budget, self.search_floor = budget, search_floor
        self._rng = np.random.default_rng(seed)
        #: entry id -> its observations and their fit.
        self._entries: dict[str, tuple[tuple[tuple[float, bool], ...], EntryFit]] = {}

    def floor(self, modality: str) -> float:
        return self.search_floor

    def observations(self, entry_id: str) -> tuple[tuple[float, bool], ...]:
        """The entry's labelled ``(similarity, correct)`` observations, oldest first."""
        state = self._entries.get(entry_id)
        return () if state is None else state[0]

    def tau(self, similarities: Mapping[str, float], entry_id: str | None) -> float:
        """The exploration probability of a candidate of ``entry_id`` at ``similarities``."""
        state = self._entries.get(entry_id) if entry_id is not None else None
        return exploration_probability(None if state is None else state[1],
                                       _similarity(similarities), self.budget)

    def explores(self, similarities: Mapping[str, float], entry_id: str | None = None,
                 scope: str | None = None) -> bool:
        if _similarity(similarities) < self.search_floor:
            return False
        return bool(self._rng.random() < self.tau(similarities, entry_id))

    def accepts(self, similarities: Mapping[str, float], entry_id: str | None = None,
                scope: str | None = None, evidence: Mapping[str, float] | None = None) -> bool:
        """Serve any candidate above the search floor that :meth:`explores` did not take."""
        return _similarity(similarities) >= self.search_floor

    def feedback(self, similarities: Mapping[str, float], entry_id: str, correct: bool,
                 scope: str | None = None, charged: float = 0.0) -> None:
        observations = (*self.observations(entry_id), (_similarity(similarities), bool(correct)))
        self._entries[entry_id] = (observations, fit_entry(observations, self.search_floor))

    def forget(self, entry_id: str) -> None:
        self._entries.pop(entry_id, None)


def _similarity(similarities: Mapping[str, float]) -> float:
    """A candidate's similarity: its smallest per-modality cosine, at most 1."""
    return min(min(similarities.values()), 1.0)
