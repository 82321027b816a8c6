"""seed 000 §3.1 percentile-adaptive δ, fed by every lookup so it is not a ratchet.

δ(scope, modality) = 1 − percentile(window of nearest-neighbour similarities, p).

The seed's rule observes only accepted hits: every observed similarity is already
≥ 1 − δ, so the percentile can only rise and δ only shrink (a ratchet). Here the
window holds the nearest candidate's similarity of *every* lookup in the scope, hit
or miss: the cache searches down to ``1 − delta_max`` for this rule, and a lookup
with no candidate that high enters the window at that floor (censored: "at most").
The distribution observed therefore does not depend on the current δ.

Failure modes (notebook 02 shows them; none is hidden by the clip):

- It targets a hit *rate*, not correctness: about ``100 − p`` % of lookups whose
  nearest neighbour is above the floor become hits, whether or not they are right.
  A stream of novel queries (no true match) still gets that share of false hits; a
  stream of true repeats still misses ``p`` % of them.
- Traps (negations, swapped entities) score as high as paraphrases, so no δ it
  chooses separates them.
- After drift it re-tracks only as fast as the window turns over (``window``
  lookups); a new scope starts at the static ``delta`` until ``min_samples``.
- δ is clipped to ``[delta_min, delta_max]``; a scope pinned at a bound says so in
  :meth:`PercentileThreshold.deltas`.
- It keeps windows for the ``max_scopes`` scopes used most recently; a scope forgotten
  past that starts again at the static ``delta``.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import Mapping, Sequence

import numpy as np

from mmcache.thresholds.base import DEFAULT_DELTA, MAX_SCOPES, ThresholdRule, recent_scopes


@dataclass
class _Track:
    """One (scope, modality): its window of nearest similarities and, once the window holds
    ``min_samples``, its adapted δ."""

    window: deque[float]
    delta: float | None = None


class PercentileThreshold(ThresholdRule):
    """δ per (scope, modality) from the recent nearest-neighbour similarity distribution."""

    name = "percentile"

    def __init__(self, delta: Mapping[str, float] | None = None, percentile: float = 85.0,
                 window: int = 1000, min_samples: int = 50, delta_min: float = 0.01,
                 delta_max: float = 0.5, max_scopes: int = MAX_SCOPES) -> None:
        self.initial = dict(delta or {})
        self.percentile = percentile
        self.min_samples = min_samples
        self.delta_min, self.delta_max = delta_min, delta_max
        self._size = window
        #: scope -> modality -> its track (window and adapted δ), for the most recent scopes.
        self._scopes = recent_scopes(max_scopes)

    def floor(self, modality: str) -> float:
        return 1.0 - self.delta_max

    def threshold(self, modality: str, entry_id: str | None = None,
                  scope: str | None = None) -> float:
        return 1.0 - self.delta(modality, scope)

    def delta(self, modality: str, scope: str | None = None) -> float:
        """The current δ of ``modality`` in ``scope`` (the clipped static δ until it has data)."""
        track = self._scopes.get(scope or "", {}).get(modality)
        if track is not None and track.delta is not None:
            return track.delta
        return float(np.clip(self.initial.get(modality, DEFAULT_DELTA), self.delta_min,
                             self.delta_max))

    def observe_lookup(self, scope: str, modalities: Sequence[str],
                       nearest: Mapping[str, float] | None) -> None:
        for modality in modalities:
            sim = self.floor(modality) if nearest is None else max(
                float(nearest[modality]), self.floor(modality))
            tracks = self._scopes.setdefault(scope, {})
            track = tracks.get(modality)
            if track is None:
                track = tracks[modality] = _Track(deque(maxlen=self._size))
            track.window.append(sim)
            if len(track.window) >= self.min_samples:
                delta = 1.0 - float(np.percentile(np.fromiter(track.window, float),
                                                  self.percentile))
                track.delta = float(np.clip(delta, self.delta_min, self.delta_max))

    def deltas(self) -> dict[str, float]:
        """δ per modality (static start values) and per ``"scope/modality"`` once adapted."""
        out = {m: self.delta(m) for m in self.initial}
        out.update({f"{s}/{m}": t.delta for s, tracks in self._scopes.items()
                    for m, t in tracks.items() if t.delta is not None})
        return out
