"""δ-neighbour rules: static and seed 000 §3.1 percentile-adaptive."""

from __future__ import annotations

import numpy as np
import pytest

from mmcache.build import make_threshold
from mmcache.config import ThresholdConfig
from mmcache.thresholds import (DEFAULT_DELTA, RULES, PercentileThreshold, StaticThreshold,
                                ThresholdRule)


def test_static_rule():
    rule = StaticThreshold({"text": 0.2})
    assert rule.floor("text") == pytest.approx(0.8)
    assert rule.floor("audio") == pytest.approx(1 - DEFAULT_DELTA)
    assert rule.accepts({"text": 0.85, "audio": 0.95})
    assert not rule.accepts({"text": 0.85, "audio": 0.85})


def test_percentile_rule_follows_the_seed_formula_and_clips():
    rule = PercentileThreshold({"text": 0.3}, percentile=85, window=100, min_samples=10,
                               delta_min=0.02, delta_max=0.4)
    assert rule.delta("text") == pytest.approx(0.3)      # prior until min_samples
    sims = np.linspace(0.7, 0.9, 10)
    for s in sims:
        rule.observe({"text": s}, "e")
    assert rule.delta("text") == pytest.approx(1 - np.percentile(sims, 85))
    for _ in range(100):                                 # window slides; clip at delta_min
        rule.observe({"text": 0.999}, "e")
    assert rule.delta("text") == pytest.approx(0.02)
    assert rule.deltas() == {"text": pytest.approx(0.02)}


def test_registry_builds_rules_from_config_and_accepts_new_ones():
    assert isinstance(make_threshold(ThresholdConfig()), StaticThreshold)
    assert isinstance(make_threshold(ThresholdConfig(rule="percentile")), PercentileThreshold)

    class PerEntry(ThresholdRule):
        name = "per-entry-test"

        def floor(self, modality):
            return 0.5

        def threshold(self, modality, entry_id=None):
            return 0.9 if entry_id == "strict" else 0.5

    rule = PerEntry()
    assert rule.accepts({"text": 0.6}, "lenient") and not rule.accepts({"text": 0.6}, "strict")
    assert set(RULES) >= {"static", "percentile"}
