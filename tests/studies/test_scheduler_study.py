"""Notebook 04's runner: the load shift, the prefix, the scores and the hindsight λ."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from mmcache.sim.latency import LatencyModel
from mmcache.sim.cachebench import TierSpec, at_load
from mmcache.errors import ConfigError
from mmcache.scheduler import replay_table
from mmcache.studies.scheduler_study import (exchange_rate, grid, hindsight_fixed, judged,
                                             needed_multiplier, offset_settings, run_controller,
                                             scores, settle_after_shifts, shift_load, window_noise)
from mmcache.sim.workload import generate


@pytest.fixture(scope="module")
def stream():
    return generate(n_queries=400, n_intents=40, n_variants=4, dim=32, seed=2)


def test_shift_load_sets_each_halfs_offered_load(stream):
    latency = LatencyModel(servers=2)
    shifted = shift_load(stream, latency, 0.5, 1.5)
    half = len(stream) // 2
    assert np.array_equal(shifted.time[:half + 1], at_load(stream, latency, 0.5).time[:half + 1])
    gaps = np.diff(shifted.time)
    assert gaps[half:].mean() == pytest.approx(gaps[:half - 1].mean() / 3, rel=0.3)
    assert np.all(gaps >= 0)
    with pytest.raises(ConfigError):
        shift_load(stream, latency, 0.5, 0.0)


def test_scores_and_settling_of_a_replayed_run(stream):
    tiers = [TierSpec("L1", int(stream.size.sum() // 3), match="semantic", threshold=0.9)]
    run = run_controller(stream, tiers, LatencyModel(), offset_settings([0.0, 0.1]), "PI",
                         0.5, window=40, signal_smoothing=0.5, objective_scale=0.2)
    out = scores(run, 0.5, smoothing=0.5, warmup=2, objective_scale=0.2)
    signal = judged(run, smoothing=0.5, warmup=2)
    assert len(run) == 10 and {"lam", "hit_rate", "error_rate", "filtered_hit_rate"} <= set(run)
    assert out["violation_area"] == pytest.approx(np.maximum(0, 0.5 - signal).sum())
    assert out["raw_violation_area"] == pytest.approx(np.maximum(0, 0.5 - run.hit_rate[2:]).sum())
    assert out["hit_rate"] == pytest.approx(run.hit_rate[2:].mean())  # equal windows
    assert (run.lam >= 0).all()
    assert out["cost"] == pytest.approx(out["error_rate"] / 0.2 + out["tracking_error"])
    weighted = scores(run, 0.5, smoothing=0.5, warmup=2, objective_scale=0.2, tracking_weight=3)
    assert weighted["cost"] == pytest.approx(out["cost"] + 2 * out["tracking_error"])
    shortfall = np.maximum(0, 0.5 - signal).mean()  # one-sided: windows above cost nothing
    assert out["lagrangian_cost"] == pytest.approx(out["error_rate"] / 0.2 + shortfall)
    assert out["lagrangian_cost"] <= out["cost"]
    assert out["lambda_step_sd"] == pytest.approx(run.lam[2:].diff().std())
    ends = settle_after_shifts(run, 0.5, smoothing=0.5, warmup=2)
    assert ends["at_end"] == pytest.approx(signal.iloc[-1])
    assert ends["before_shift"] == pytest.approx(signal.loc[4])
    assert ends["within_band"] == (abs(ends["before_shift"] - 0.5) <= 0.01
                                   and abs(ends["at_end"] - 0.5) <= 0.01)


def test_judged_is_the_weighted_mean_since_the_warmup():
    windows = pd.DataFrame({"hit_rate": [0.0, 0.0, 0.4, 0.8, 0.2]})
    signal = judged(windows, smoothing=0.5, warmup=2)
    assert list(signal.index) == [2, 3, 4]
    assert signal.loc[2] == pytest.approx(0.4)  # no weight left on the warm-up's windows
    assert signal.loc[3] == pytest.approx((0.4 * 0.5 + 0.8) / 1.5)
    assert judged(windows).tolist() == windows.hit_rate.tolist()
    restarted = judged(windows, smoothing=0.5, warmup=2, restart=4)
    assert restarted.loc[3] == pytest.approx(signal.loc[3])
    assert restarted.loc[4] == pytest.approx(0.2)  # nothing from before the shift
    assert signal.loc[4] == pytest.approx((0.4 * 0.25 + 0.8 * 0.5 + 0.2) / 1.75)  # carries it
    for bad in ({"warmup": 5}, {"warmup": -1}, {"smoothing": 0.0}, {"smoothing": 1.5},
                {"warmup": 2, "restart": 2}, {"restart": 5}):
        with pytest.raises(ConfigError):
            judged(windows, **bad)


def test_hindsight_fixed_takes_the_fewest_errors_among_feasible_lambdas():
    runs = pd.DataFrame({"lam": [0.0, 0.5, 1.0, 0.0, 0.5, 1.0],
                         "hit_rate": [0.2, 0.31, 0.4, 0.2, 0.29, 0.4],
                         "error_rate": [0.0, 0.01, 0.05, 0.0, 0.01, 0.05]})
    assert hindsight_fixed(runs, 0.3) == 0.5
    assert hindsight_fixed(runs, 0.35) == 1.0
    assert hindsight_fixed(runs, 0.9) == 1.0  # none feasible: the highest hit rate


def test_exchange_rate_is_the_chord_from_the_fewest_to_the_most_hits():
    held = pd.DataFrame({"hit_rate": [0.3, 0.2, 0.4], "error_rate": [0.01, 0.0, 0.05]})
    assert exchange_rate(held) == pytest.approx(0.25)
    with pytest.raises(ConfigError):
        exchange_rate(held.assign(error_rate=[0.0, 0.0, 0.0]))


def test_runs_mix_neighbouring_settings_unless_told_not_to(stream):
    tiers = [TierSpec("L1", int(stream.size.sum() // 3), match="semantic", threshold=0.9)]
    settings = offset_settings([0.0, 0.05, 0.1])

    def run(mix):
        return run_controller(stream, tiers, LatencyModel(), settings, "PI", 0.6, window=30,
                              params={"kp": 1.0, "ki": 0.1, "lam_max": 1.0},
                              objective_scale=0.2, mix=mix)
    mixed, argmin = run(True), run(False)
    assert ((mixed.mix_weight > 0) & (mixed.mix_weight < 1)).any()
    assert (mixed.mix_weight.between(0, 1)).all()
    assert (argmin.mix_weight == 0).all() and (argmin.setting == argmin.mixed_with).all()


def test_needed_multiplier_is_where_the_held_settings_hull_meets_the_target():
    # break-evens 0.1 (0.6 -> 0.7) and 0.2 (0.7 -> 0.8); the last setting is dominated
    held = [{"hit_rate": h, "error_rate": e} for h, e in
            ((0.6, 0.01), (0.7, 0.02), (0.8, 0.04), (0.65, 0.05))]
    settings = offset_settings([-0.1, 0.0, 0.1, 0.05])
    lam, slope = needed_multiplier(held, settings, 0.75)
    assert (lam, slope) == (pytest.approx(0.15), pytest.approx(1.0))  # 0.1 of hits per 0.1 of λ
    lam, slope = needed_multiplier(held, settings, 0.65, objective_scale=0.1)
    assert (lam, slope) == (pytest.approx(0.5), pytest.approx(0.1))  # λ's unit ten times finer


def test_window_noise_is_the_step_spread_of_each_phases_second_half():
    windows = pd.DataFrame({"hit_rate": [0.0, 0.2, 0.4, 0.3, 0.1, 0.5, 0.6, 0.4, 0.5]})
    # before: windows 1-4, second half 3-4 (step -0.2); after: 5-8, second half 7-8 (+0.1)
    steps = pd.Series([-0.2, 0.1])
    assert window_noise(windows, warmup=1, restart=5) == pytest.approx(steps.std() / np.sqrt(2))
    trend = pd.DataFrame({"hit_rate": np.linspace(0.1, 0.5, 20)})
    assert window_noise(trend, warmup=2, restart=10) == pytest.approx(0.0, abs=1e-12)


def test_grid_averages_the_scores_over_the_tuning_cases(stream):
    tiers = [TierSpec("L1", int(stream.size.sum() // 3), match="semantic", threshold=0.9)]
    other = generate(n_queries=400, n_intents=40, n_variants=4, dim=32, seed=3)
    settings = offset_settings([0.0, 0.1])
    common = dict(window=40, objective_scale=0.2, smoothing=0.5, warmup=2)
    table = grid({2: (stream, tiers), 3: (other, tiers)}, LatencyModel(), settings, "PI", 0.5,
                 {"ki": [0.1, 0.3]}, fixed={"kp": 1.0}, **common)
    assert table.ki.tolist() == [0.1, 0.3]
    each = [scores(run_controller(s, tiers, LatencyModel(), settings, "PI", 0.5, window=40,
                                  params={"kp": 1.0, "ki": 0.3}, seed=seed,
                                  signal_smoothing=0.5, objective_scale=0.2),
                   0.5, smoothing=0.5, warmup=2, objective_scale=0.2)["cost"]
            for seed, s in ((2, stream), (3, other))]
    assert table.cost.iloc[1] == pytest.approx(np.mean(each))


def test_a_shared_table_of_more_settings_gives_the_same_run(stream):
    tiers = [TierSpec("L1", int(stream.size.sum() // 3), match="semantic", threshold=0.9)]
    settings = offset_settings([0.0, 0.05, 0.1])
    shared = replay_table(stream, tiers, offset_settings([0.0, 0.05, 0.1, 0.15]))
    assert shared.cutoff == pytest.approx(0.75)

    def run(table):
        return run_controller(stream, tiers, LatencyModel(), settings, "PI", 0.6, window=30,
                              params={"kp": 1.0, "ki": 0.1, "lam_max": 1.0},
                              objective_scale=0.2, table=table)
    pd.testing.assert_frame_equal(run(shared), run(None), check_exact=True)
