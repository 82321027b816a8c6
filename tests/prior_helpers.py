"""A priors file fitted on a known synthetic curve, for the threshold-rule and feedback tests."""

from __future__ import annotations

import json

import numpy as np

from mmcache.thresholds.prior import FORMAT, fit_channel

#: The synthetic truth: P(correct | s) = σ(A + B·s) (0.5 at s = 0.85, 0.95 at s ≈ 0.95).
A, B = -25.0, 29.4


def true_p(s: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-(A + B * s)))


def synthetic_priors(tmp_path, channels=("text/test",), scale=(1.0, 0.0), seed=0):
    """A priors file fitted on pairs drawn from the known curve (similarities optionally
    rescaled s → scale[0]·s + scale[1], as another encoder would)."""
    rng = np.random.default_rng(seed)
    s = rng.uniform(0.6, 1.0, 4000)
    y = rng.random(4000) < true_p(s)
    priors = {c: fit_channel(s * scale[0] + scale[1], y) for c in channels}
    path = tmp_path / f"priors-{seed}-{scale[0]}.json"
    path.write_text(json.dumps({"format": FORMAT, "provenance": {"data": "synthetic test"},
                                "priors": priors}))
    return path
