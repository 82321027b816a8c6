"""Notebook 04's runner: the load shift, the prefix, the scores and the hindsight λ."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from mmcache.cachebench import LatencyModel, TierSpec, offered_load
from mmcache.errors import ConfigError
from mmcache.scheduler_study import (head, hindsight_fixed, offset_settings, run_controller,
                                     scores, settle_after_shifts, shift_load)
from mmcache.workload import generate


@pytest.fixture(scope="module")
def stream():
    return generate(n_queries=400, n_intents=40, n_variants=4, dim=32, seed=2)


def test_shift_load_sets_each_halfs_offered_load(stream):
    latency = LatencyModel(servers=2)
    shifted = shift_load(stream, latency, 0.5, 1.5)
    half = len(stream) // 2
    assert offered_load(head(shifted, half), latency) == pytest.approx(0.5, rel=0.15)  # halves differ a little
    gaps = np.diff(shifted.time)
    assert gaps[half:].mean() == pytest.approx(gaps[:half - 1].mean() / 3, rel=0.3)
    assert np.all(gaps >= 0)
    with pytest.raises(ConfigError):
        shift_load(stream, latency, 0.5, 0.0)


def test_head_keeps_the_same_draws(stream):
    first = head(stream, 100)
    assert len(first) == 100 and np.array_equal(first.intent, stream.intent[:100])
    assert np.array_equal(first.vectors(7)[0], stream.vectors(7)[0])
    with pytest.raises(ConfigError):
        head(stream, 0)


def test_scores_and_settling_of_a_replayed_run(stream):
    tiers = [TierSpec("L1", int(stream.size.sum() // 3), match="semantic", threshold=0.9)]
    run = run_controller(stream, tiers, LatencyModel(), offset_settings([0.0, 0.1]), "PI",
                         0.5, window=40)
    out = scores(run, 0.5)
    assert len(run) == 10 and {"lam", "hit_rate", "error_rate"} <= set(run)
    assert out["violation_area"] == pytest.approx(np.maximum(0, 0.5 - run.hit_rate).sum())
    assert out["hit_rate"] == pytest.approx(run.hit_rate.mean())  # equal windows
    assert (run.lam >= 0).all()
    ends = settle_after_shifts(run, 0.5, tail=2)
    assert ends["at_end"] == pytest.approx(run.hit_rate.iloc[-2:].mean())
    assert ends["within_band"] == (abs(ends["before_shift"] - 0.5) <= 0.01
                                   and abs(ends["at_end"] - 0.5) <= 0.01)


def test_hindsight_fixed_takes_the_fewest_errors_among_feasible_lambdas():
    runs = pd.DataFrame({"lam": [0.0, 0.5, 1.0, 0.0, 0.5, 1.0],
                         "hit_rate": [0.2, 0.31, 0.4, 0.2, 0.29, 0.4],
                         "error_rate": [0.0, 0.01, 0.05, 0.0, 0.01, 0.05]})
    assert hindsight_fixed(runs, 0.3) == 0.5
    assert hindsight_fixed(runs, 0.35) == 1.0
    assert hindsight_fixed(runs, 0.9) == 1.0  # none feasible: the highest hit rate
