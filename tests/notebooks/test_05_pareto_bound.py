"""Notebook 05 in smoke mode: a convex bound at or below every measured configuration."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.notebook

NAME = "05_pareto_bound"


@pytest.fixture(scope="module")
def metrics(smoke_metrics):
    return smoke_metrics(NAME)


def test_sweep_was_timed(metrics):
    assert metrics["sweep_seconds_100"] > 0  # measured; the < 1 s bar is read, not asserted


def test_bound_hypervolume_covers_every_policy(metrics):
    hv, gap = metrics["hypervolume"], metrics["hypervolume_gap"]
    assert set(hv["measured"]) == set(gap) and len(gap) >= 2
    for policy, value in hv["measured"].items():
        assert 0 < value <= hv["bound"]
        assert 0.0 <= gap[policy] <= 1.0
        assert gap[policy] == pytest.approx(1 - value / hv["bound"])
        assert 0.0 <= metrics["hypervolume_gap_same_grid"][policy] <= gap[policy] + 1e-12
    assert all(0.0 <= g <= 1.0 for g in metrics["hypervolume_gap_by_threshold"].values())
    assert metrics["measured_below_bound"] == 0
    assert len(metrics["reference_point"]) == 3


def test_fitted_parameters_are_convex_with_their_errors(metrics):
    for fit in metrics["fit"].values():
        assert fit["l0"] > 0 and fit["alpha"] >= 0 and fit["beta"] >= 0 and fit["gamma"] >= 0
        assert fit["rmse"] >= 0 and 0 <= fit["relative_rmse"] < 1 and fit["r2"] <= 1
    assert metrics["fit"]["seed_form"]["gamma"] == 0.0
    # the consistency cost can only fit as well or better than the seed's form
    assert metrics["fit"]["with_consistency_cost"]["rmse"] <= \
        metrics["fit"]["seed_form"]["rmse"] + 1e-9
    bound = metrics["bound_model"]
    assert 0 < bound["envelope_factor"] <= 1
    assert bound["l0"] == pytest.approx(metrics["fit"]["with_consistency_cost"]["l0"]
                                        * bound["envelope_factor"])


def test_weighted_sum_agrees_with_epsilon_constraint(metrics):
    assert metrics["weighted_vs_epsilon_max_rel_diff"] < 1e-3


def test_hit_rate_latency_model(metrics):
    fit = metrics["hit_rate_latency"]
    assert 0 <= fit["hit_ms"] < fit["miss_ms"] and fit["rmse"] >= 0


def test_fitted_on_the_v2_latency_model_at_two_loads(metrics):
    data = metrics["data"]
    assert "measured encoders and tier lookups" in data["latency_model"]
    assert data["cycle_amplitude"] > 0 and data["burst_speedup"] > 1
    check = metrics["fit_at_check_load"]
    assert check["load"] > data["load"] and check["n_points"] > 4
    assert check["alpha"] >= 0 and check["beta"] >= 0 and check["gamma"] >= 0 and check["r2"] <= 1


def test_the_sweeps_say_at_which_backend_load_they_run(metrics):
    """Only misses reach the inference servers: every configuration's backend load is positive
    and below the offered load; the check sweep's arrivals are faster, so its servers run hotter
    for the same configurations (lru at the first threshold is in both)."""
    data, check = metrics["data"], metrics["fit_at_check_load"]
    low, high = data["backend_load_range"]
    check_low, check_high = check["backend_load_range"]
    assert 0.0 < low <= high < data["load"]
    assert 0.0 < check_low <= check_high < check["load"]
    assert check_high > high * data["load"] / check["load"]


def test_the_headline_is_recomputed_at_half_and_twice_the_assumed_text_inference(metrics):
    sensitivity = metrics["text_inference_sensitivity"]
    gaps = metrics["hypervolume_gap"]
    assert set(sensitivity) == {*gaps, "least_gap", "largest_gap"}
    for values in sensitivity.values():
        assert set(values) == {"0.5x", "1x", "2x"}
        assert all(0 <= v <= 1 for v in values.values())
    # 1x recomputes the sweep, fit and bound as they are: it reproduces the headline
    for policy, gap in gaps.items():
        assert sensitivity[policy]["1x"] == pytest.approx(gap, rel=1e-6)
    assert sensitivity["least_gap"]["1x"] == pytest.approx(min(gaps.values()), rel=1e-6)
