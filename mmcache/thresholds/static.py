"""Static δ: a hit needs cosine ≥ 1 − δ on every modality (δ = 0: exact only)."""

from __future__ import annotations

from typing import Mapping

from mmcache.thresholds.base import DEFAULT_DELTA, NEVER, ThresholdRule


class StaticThreshold(ThresholdRule):
    """A fixed δ per modality on the cosine scale: hit when cosine ≥ 1 − δ.

    δ = 0 means exact keys only: no semantic candidate passes, not even one at
    cosine 1.0 (two different texts may share an embedding). δ = 2 accepts every
    candidate of the same scope and modality set.
    """

    name = "static"

    def __init__(self, delta: Mapping[str, float] | None = None) -> None:
        self.delta = dict(delta or {})

    def floor(self, modality: str) -> float:
        delta = self.delta.get(modality, DEFAULT_DELTA)
        return NEVER if delta == 0 else 1.0 - delta

    def deltas(self) -> dict[str, float]:
        return dict(self.delta)
