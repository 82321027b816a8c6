"""mmcache.sim.contention: the seed's occupancy formula on hand-computed values and its unit
issue (8 × the utilisation for a bandwidth in GB/s); the consistent occupancy is offered bytes ÷
bandwidth; the simulated link's mean delays match M/D/1, the FCFS burst ("supercustomer") M/G/1
and Cobham's priority formulas on long seeded runs; priority lowers the tokens' delay; bad
parameters raise ConfigError; a seed fixes a run."""

from __future__ import annotations

import math

import numpy as np
import pytest

from mmcache.errors import ConfigError
from mmcache.sim.contention import (DISCIPLINES, SEED_CONFIGS, Link, Traffic, analytic,
                                    arrivals, at_utilisation, consistent_occupancy,
                                    consistent_occupancy_of, seed_occupancy, seed_occupancy_of,
                                    simulate, sweep, utilisation)

LINK = Link(32.0)


def test_seed_formula_by_hand():
    # 10 MTPS × 8 B = 0.08 MB/ms; 4 MB per 1 ms window; 32 / 8 = 4: (0.08 + 4) / 4 = 102 %
    assert seed_occupancy(32, 10, 4, 1) == pytest.approx(102.0)
    # 125 MTPS × 8 B = 1 MB/ms on "8" (÷ 8 = 1): 100 %
    assert seed_occupancy(8, 125, 0) == pytest.approx(100.0)
    # a 2 MB feature every 4 ms = 0.5 MB/ms, no tokens, on 16: 0.5 / 2 = 25 %
    assert seed_occupancy(16, 0, 2, 4) == pytest.approx(25.0)


def test_consistent_occupancy_is_the_seed_formula_over_8():
    # the same inputs in GB/s: (0.08 + 4) GB/s on 32 GB/s = 12.75 %
    assert consistent_occupancy(32, 10, 4, 1) == pytest.approx(12.75)
    for args in [(32, 10, 4, 1), (8, 125, 0, 1), (16, 0, 2, 4), (25, 300, 1.18, 0.5)]:
        assert seed_occupancy(*args) == pytest.approx(8 * consistent_occupancy(*args))
    # bytes per token is a parameter of the consistent one: 16 B doubles the tokens' part
    assert consistent_occupancy(8, 125, 0, token_bytes=16) == pytest.approx(25.0)


def test_consistent_occupancy_is_offered_bytes_over_bandwidth():
    t = Traffic(token_rate_mtps=200.0, tokens_per_packet=512, streams=2, bursts_per_s=300.0,
                features_per_burst=4, feature_mb=1.5)
    offered = 200e6 * 8 + 2 * 300 * 4 * 1.5e6  # bytes per second
    assert utilisation(LINK, t) == pytest.approx(offered / 32e9)
    assert consistent_occupancy_of(LINK, t) == pytest.approx(100 * offered / 32e9)
    assert seed_occupancy_of(LINK, t) == pytest.approx(800 * offered / 32e9)
    for rho in (0.1, 0.5, 0.97):
        scaled = at_utilisation(t, LINK, rho)
        assert utilisation(LINK, scaled) == pytest.approx(rho)
        assert consistent_occupancy_of(LINK, scaled) == pytest.approx(100 * rho)
        assert scaled.token_rate_mtps == t.token_rate_mtps  # only the bursts scale


def test_arrivals_are_poisson_and_bursts_carry_k_features():
    t = Traffic(token_rate_mtps=10.0, streams=2, bursts_per_s=500.0, features_per_burst=3,
                duration_s=10.0)
    tokens, feats, position = arrivals(t)
    assert tokens.size == pytest.approx(t.packets_per_s * 10, rel=0.05)
    assert feats.size % 3 == 0 and feats.size / 3 == pytest.approx(1000 * 10, rel=0.05)
    assert (feats[0::3] == feats[2::3]).all() and position[:6].tolist() == [1, 2, 3, 1, 2, 3]
    assert (tokens[1:] >= tokens[:-1]).all() and feats.max() < 10


def test_md1_mean_matches_pollaczek_khinchine():
    """Token packets alone: M/D/1 at ρ = 0.5, W = ρ s / (2 (1 − ρ)) = s / 2."""
    t = Traffic(token_rate_mtps=10.0, streams=0, bursts_per_s=0.0, duration_s=40.0, seed=3)
    link = Link(2 * t.token_gb_per_s)  # ρ = 0.5
    s = link.transfer_ms(t.packet_bytes)
    got = simulate(link, t, "fcfs")
    assert got.features == 0 and math.isnan(got.feature_mean_ms)
    assert analytic(link, t)["token_mean_ms"] == pytest.approx(s + s / 2)
    assert got.token_mean_ms == pytest.approx(s + s / 2, rel=0.02)


@pytest.mark.parametrize("rho", [0.3, 0.6, 0.8])
def test_fcfs_bursts_match_the_supercustomer_mean(rho):
    t = at_utilisation(Traffic(token_rate_mtps=100.0, streams=1, features_per_burst=4,
                               duration_s=30.0, seed=1), LINK, rho)
    got, want = simulate(LINK, t, "fcfs"), analytic(LINK, t, "fcfs")
    assert got.feature_increase_mean_ms == pytest.approx(want["feature_increase_mean_ms"],
                                                         rel=0.05)
    assert got.feature_mean_ms == pytest.approx(want["feature_mean_ms"], rel=0.05)
    assert got.token_mean_ms == pytest.approx(want["token_mean_ms"], rel=0.05)


def test_priority_tokens_match_cobham_and_single_features_too():
    t = at_utilisation(Traffic(token_rate_mtps=300.0, streams=1, features_per_burst=1,
                               duration_s=30.0, seed=2), LINK, 0.7)
    got, want = simulate(LINK, t, "priority"), analytic(LINK, t, "priority")
    assert got.token_mean_ms == pytest.approx(want["token_mean_ms"], rel=0.03)
    assert got.feature_increase_mean_ms == pytest.approx(want["feature_increase_mean_ms"],
                                                         rel=0.05)
    bursty = analytic(LINK, replace_k(t, 8), "priority")
    assert math.isnan(bursty["feature_mean_ms"])  # no closed form given for bursts under priority


def replace_k(t: Traffic, k: int) -> Traffic:
    return at_utilisation(Traffic(**{**t.describe(), "features_per_burst": k}), LINK, 0.7)


@pytest.mark.parametrize("name", list(SEED_CONFIGS))
def test_priority_lowers_token_delay_and_latency_grows_faster_than_load(name):
    base = Traffic(**SEED_CONFIGS[name]["traffic"], duration_s=2.0)
    increase = []
    for rho in (0.3, 0.6, 0.9):
        t = at_utilisation(base, LINK, rho)
        fcfs, prio = simulate(LINK, t, "fcfs"), simulate(LINK, t, "priority")
        assert prio.token_mean_ms < fcfs.token_mean_ms and prio.token_p99_ms <= fcfs.token_p99_ms
        assert prio.feature_increase_mean_ms >= fcfs.feature_increase_mean_ms * 0.99
        increase.append(fcfs.feature_increase_mean_ms)
    assert increase[0] < increase[1] < increase[2]
    # from 0.6 to 0.9 the load grows by half; the delay, like 1 / (1 − ρ), far more
    assert increase[2] / increase[1] > 2.5


def test_sweep_rows_hold_both_occupancies_and_both_disciplines():
    configs = {n: Traffic(**c["traffic"], duration_s=0.5) for n, c in SEED_CONFIGS.items()}
    rows = sweep(LINK, configs, [0.2, 0.9])
    assert len(rows) == 2 * 2 * len(DISCIPLINES)
    for r in rows:
        assert r["consistent_occupancy_pct"] == pytest.approx(100 * r["utilisation"])
        assert r["seed_occupancy_pct"] == pytest.approx(8 * r["consistent_occupancy_pct"])
        assert r["feature_increase_p99_ms"] >= r["feature_increase_mean_ms"] >= 0
        assert r["analytic_token_mean_ms"] > 0


def test_a_seed_fixes_the_run():
    t = Traffic(duration_s=0.5, seed=7)
    assert simulate(LINK, t, "priority") == simulate(LINK, t, "priority")
    assert simulate(LINK, t) != simulate(LINK, Traffic(duration_s=0.5, seed=8))
    # the tokens' generator is the burst rate's own: scaling the bursts keeps token arrivals
    assert (arrivals(t)[0] == arrivals(at_utilisation(t, LINK, 0.8))[0]).all()


@pytest.mark.parametrize("make", [
    lambda: Link(0.0),
    lambda: Link(float("inf")),
    lambda: Traffic(token_rate_mtps=-1.0),
    lambda: Traffic(tokens_per_packet=0),
    lambda: Traffic(features_per_burst=2.5),
    lambda: Traffic(feature_mb=0.0),
    lambda: Traffic(duration_s=float("nan")),
    lambda: Traffic(streams=-1),
    lambda: Traffic(token_rate_mtps=0.0, bursts_per_s=0.0),
    lambda: seed_occupancy(0, 1, 1),
    lambda: seed_occupancy(32, 1, 1, interval_ms=0),
    lambda: consistent_occupancy(32, 1, 1, token_bytes=0),
    lambda: simulate(LINK, Traffic(), "lifo"),
    lambda: analytic(LINK, Traffic(), "round-robin"),
    lambda: analytic(LINK, at_utilisation(Traffic(), LINK, 1.2)),
    lambda: at_utilisation(Traffic(token_rate_mtps=4000.0), LINK, 0.5),  # tokens alone: 1.0
    lambda: at_utilisation(Traffic(streams=0), LINK, 0.5),
    lambda: sweep(LINK, {}, [0.5]),
    lambda: sweep(LINK, {"x": Traffic()}, [0.5], ["lifo"]),
])
def test_bad_parameters_raise_config_error(make):
    with pytest.raises(ConfigError):
        make()


@pytest.mark.parametrize("make, message", [
    (lambda: Link(True), r"bandwidth_gb_per_s must be a finite number > 0\.0, got True"),
    (lambda: Link("32"), r"bandwidth_gb_per_s must be a finite number > 0\.0, got '32'"),
    (lambda: Link(math.inf), r"bandwidth_gb_per_s must be a finite number > 0\.0, got inf"),
    (lambda: Traffic(feature_mb=0.0), r"feature_mb must be a finite number > 0\.0"),
    (lambda: Traffic(token_rate_mtps=-1.0), r"token_rate_mtps must be a finite number >= 0\.0"),
    (lambda: Traffic(streams=-1), r"streams must be an integer >= 0, got -1"),
    (lambda: Traffic(token_bytes=2.0), r"token_bytes must be an integer >= 1, got 2\.0"),
])
def test_bad_numbers_name_the_parameter_and_its_bound(make, message):
    with pytest.raises(ConfigError, match=message):
        make()


def test_numpy_scalars_are_numbers_and_counts():
    assert Link(np.float32(32.0)).bandwidth_gb_per_s == 32.0
    assert Traffic(streams=np.int64(2), feature_mb=np.float64(1.0)).streams == 2
