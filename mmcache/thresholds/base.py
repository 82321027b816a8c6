"""The one interface every δ-neighbour rule implements.

Scale: similarities are cosines of L2-normalised embeddings, in [−1, 1]; a static
δ means "hit when cosine ≥ 1 − δ", so δ = 0 is exact only and δ = 2 accepts every
candidate. Probabilistic rules (calibrated, error-budget, vcache) decide on
P(same answer | evidence) instead, and expose the least similarity they would
accept as :meth:`ThresholdRule.threshold`, so the cache's search floor and the
verifier band are in the same cosine units for every rule.

The cache calls, per lookup: :meth:`floor` (search floor per modality),
:meth:`explores` and then, unless it explored, :meth:`accepts` for each candidate
(``evidence`` may carry the verifier's
probability under ``"verifier"``), :meth:`served` for the candidate it serves, and
:meth:`observe_lookup` with the nearest candidate's similarities of every lookup,
hit or miss (None when the search found nothing above the floor).
``TieredCache.feedback`` reaches :meth:`feedback` with the hit's scope and what
:meth:`served` charged for it, so a budgeted rule settles exactly the amount it charged.
A candidate the rule explores is not served: ``get`` returns it marked ``Hit.explored``, for
the caller to answer from the model and label with ``feedback`` (charged 0).
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from typing import Mapping, Sequence

from cachetools import LRUCache

from mmcache.errors import ConfigError

#: δ for a modality the config does not list.
DEFAULT_DELTA = 0.1
#: A threshold no similarity reaches (the rule never accepts on that modality).
NEVER = math.inf
#: Scopes whose state a rule keeps (``thresholds.max_scopes``): past it, the scope used least
#: recently is forgotten and starts again as a new scope.
MAX_SCOPES = 10_000


def recent_scopes(max_scopes: int) -> LRUCache:
    """A mapping of per-scope state that keeps the ``max_scopes`` scopes used most recently."""
    if not isinstance(max_scopes, int) or isinstance(max_scopes, bool) or max_scopes < 1:
        raise ConfigError(f"thresholds.max_scopes must be a positive integer, got {max_scopes!r}")
    return LRUCache(maxsize=max_scopes)


class ThresholdRule(ABC):
    """Decides which candidates count as hits; learns from lookups and feedback."""

    name: str = ""

    @abstractmethod
    def floor(self, modality: str) -> float:
        """The least similarity any entry of any scope could need on ``modality``."""

    def threshold(self, modality: str, entry_id: str | None = None,
                  scope: str | None = None) -> float:
        """The least similarity ``entry_id`` needs on ``modality`` now (default: the floor)."""
        return self.floor(modality)

    def explores(self, similarities: Mapping[str, float], entry_id: str | None = None,
                 scope: str | None = None) -> bool:
        """Whether to explore this candidate instead of deciding on it: the cache serves
        nothing and hands the candidate back for the caller to label (default: never)."""
        return False

    def accepts(self, similarities: Mapping[str, float], entry_id: str | None = None,
                scope: str | None = None, evidence: Mapping[str, float] | None = None) -> bool:
        """Whether the candidate is a hit: every modality at or above its threshold."""
        return all(s >= self.threshold(m, entry_id, scope) for m, s in similarities.items())

    def margin(self, similarities: Mapping[str, float], entry_id: str | None = None,
               scope: str | None = None) -> float:
        """How far (in cosine) the candidate's weakest modality is above its threshold."""
        return min(s - self.threshold(m, entry_id, scope) for m, s in similarities.items())

    def served(self, similarities: Mapping[str, float], entry_id: str, scope: str,
               evidence: Mapping[str, float] | None = None) -> float:
        """The cache served this candidate; returns what it charged the scope's budget (an
        error-budgeted rule: its P(wrong); others: 0), to hand back to :meth:`feedback`."""
        return 0.0

    def observe_lookup(self, scope: str, modalities: Sequence[str],
                       nearest: Mapping[str, float] | None) -> None:
        """One lookup happened; ``nearest``: its best candidate's similarities, if any."""

    def feedback(self, similarities: Mapping[str, float], entry_id: str, correct: bool,
                 scope: str | None = None, charged: float = 0.0) -> None:
        """A label for a candidate of ``entry_id`` at ``similarities`` (served or explored);
        for a served hit, its ``scope`` and ``charged`` (what :meth:`served` returned)."""

    def forget(self, entry_id: str) -> None:
        """Drop per-entry state of a removed entry."""

    def deltas(self) -> dict[str, float]:
        """Current δ per modality (for metrics)."""
        return {}

    def scope_state(self, scope: str, modalities: Sequence[str]) -> dict[str, float]:
        """What the rule holds for ``scope`` now, by name (for the dashboard): the least
        similarity a candidate of a new entry needs on each of ``modalities``."""
        return {f"{m}: a new entry needs cosine ≥": self.threshold(m, None, scope)
                for m in modalities}
