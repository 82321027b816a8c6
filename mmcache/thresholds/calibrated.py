"""Calibrated rule: similarity → P(same answer) per (modality, encoder); hit when P ≥ level.

The curves are isotonic (default) or Platt fits on labelled pairs, read from a priors
file (:mod:`mmcache.thresholds.prior`), so one ``level`` means the same across
encoders. A multimodal candidate's probability is the product over its modalities
(treated as independent evidence), times the verifier's probability when the cache
passes one as ``evidence["verifier"]``. The curves are fitted offline; feedback does not
refit them (use the error-budget rule to learn online).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Mapping

import numpy as np

from mmcache.errors import ConfigError
from mmcache.thresholds.base import NEVER, ThresholdRule
from mmcache.thresholds.prior import ChannelPrior, channel_priors


class CalibratedThreshold(ThresholdRule):
    """Hit when Π_m P_m(s_m) · P_verifier ≥ ``level``; P_m a calibration curve per channel.

    ``encoders`` names each modality's encoder (the config's ``encoders`` section) and
    ``verifier`` the verifier stage (its channel's curve is the one conditioned on it); a
    modality whose channel has no curve in ``prior`` never hits (ConfigError at
    construction when ``encoders`` names such a channel).
    """

    name = "calibrated"

    def __init__(self, level: float = 0.9, prior: str | Path | None = None,
                 calibration: str = "isotonic", encoders: Mapping[str, str] | None = None,
                 verifier: str = "none") -> None:
        if calibration not in ("isotonic", "platt"):
            raise ConfigError(f"thresholds.calibration must be 'isotonic' or 'platt', "
                              f"got {calibration!r}")
        self.level = level
        self.calibration = calibration
        self.encoders = dict(encoders or {})
        self._curves = channel_priors(prior, self.encoders, verifier, "calibration")
        self._least = {m: self._least_similarity(c) for m, c in self._curves.items()}

    def probability(self, modality: str, similarity: float) -> float:
        """Calibrated P(same answer | similarity) on ``modality`` (0 without a curve)."""
        curve = self._curves.get(modality)
        if curve is None:
            return 0.0
        return curve.p_isotonic(similarity) if self.calibration == "isotonic" \
            else curve.p_correct(similarity)

    def floor(self, modality: str) -> float:
        return self._least.get(modality, NEVER)

    def accepts(self, similarities: Mapping[str, float], entry_id: str | None = None,
                scope: str | None = None, evidence: Mapping[str, float] | None = None) -> bool:
        p = math.prod(self.probability(m, s) for m, s in similarities.items())
        return p * (evidence or {}).get("verifier", 1.0) >= self.level

    def _least_similarity(self, curve: ChannelPrior) -> float:
        """The least cosine at which the curve reaches ``level`` (NEVER if it does not)."""
        grid = np.linspace(-1.0, 1.0, 4001)
        p = np.interp(grid, curve.iso_x, curve.iso_y) if self.calibration == "isotonic" \
            else 1.0 / (1.0 + np.exp(-(curve.mean[0] + curve.mean[1] * grid)))
        reached = np.nonzero(p >= self.level)[0]
        return float(grid[reached[0]]) if len(reached) else NEVER
