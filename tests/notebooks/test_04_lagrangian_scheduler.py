"""Notebook 04 in smoke mode: every controller's scores, the best fixed λ and the quality bars."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.notebook

NAME = "04_lagrangian_scheduler"
FIELDS = {"violation_area", "overshoot", "settling_windows", "steady_state_error",
          "mean_latency_ms", "p99_latency_ms", "hit_rate"}


@pytest.fixture(scope="module")
def metrics(smoke_metrics):
    return smoke_metrics(NAME)


def test_every_controller_has_consistent_scores(metrics):
    assert set(metrics["controllers"]) == {"fixed", "I", "PI", "PID", "PI-aim"}
    for scores in metrics["controllers"].values():
        assert FIELDS <= set(scores)
        assert scores["violation_area"] >= 0 and scores["overshoot"] >= 0
        assert 0 <= scores["settling_windows"] <= metrics["windows"]
        assert 0 <= scores["hit_rate"] <= 1
        assert 0 < scores["mean_latency_ms"] <= scores["p99_latency_ms"]
        # the area is at most the windows' summed shortfall below the target
        assert scores["violation_area"] <= metrics["windows"] * metrics["target"]


def test_the_target_lies_between_the_strictest_and_loosest_settings(metrics):
    rates = [row["hit_rate"] for row in metrics["static_settings"]]
    assert min(rates) < metrics["target"] < max(rates)


def test_best_fixed_lambda_and_gains_are_recorded(metrics):
    assert metrics["best_fixed_lambda"] >= 0
    assert metrics["gains"]["fixed"] == {"lam": metrics["best_fixed_lambda"]}
    assert {"kp", "ki"} <= set(metrics["gains"]["PI"]) and "kd" in metrics["gains"]["PID"]


def assert_verdict(v: dict) -> None:
    """A verdict record over the seeds: one of the three words, its effect inside its 95%
    interval."""
    assert set(v) == {"verdict", "effect", "ci95", "n", "test"}
    assert v["verdict"] in ("holds", "does not hold", "inconclusive")
    assert v["ci95"][0] <= v["effect"] <= v["ci95"][1] and v["n"] == 2   # the smoke run's seeds


def test_quality_bars_are_stated_and_match_the_scores(metrics):
    from mmcache.studies.verdicts import all_hold, any_holds

    bars = metrics["quality_bars"]
    assert set(bars) == {"violation_area_halved_vs_I", "raw_violation_area_halved_vs_I",
                         "adaptive_within_1pt_after_each_shift", "within_1pt_on_seed_mean",
                         "raw_within_1pt_after_each_shift", "raw_within_1pt_on_seed_mean"}
    for area in ("violation_area", "raw_violation_area"):
        bar = bars[f"{area}_halved_vs_I"]
        assert set(bar["challengers"]) == {"PI", "PID", "PI-aim"}
        for parts in bar["challengers"].values():
            assert_verdict(parts["area"])
            assert_verdict(parts["latency"])
            assert parts["verdict"] == all_hold([parts["area"], parts["latency"]])
        assert bar["verdict"] == any_holds(list(bar["challengers"].values()))
    for name in ("within_1pt_on_seed_mean", "raw_within_1pt_on_seed_mean"):
        ends = bars[name]["ends"]
        assert set(ends) == {"I", "PI", "PID", "PI-aim"}
        records = [v for by_end in ends.values() for v in by_end.values()]
        for v in records:
            assert_verdict(v)
        assert bars[name]["verdict"] == all_hold(records)
    for bar, ends in (("adaptive_within_1pt_after_each_shift", metrics["settled"]),
                      ("raw_within_1pt_after_each_shift", metrics["settled_raw"])):
        assert bars[bar] == all(s["within_band"] for k in ("I", "PI", "PID", "PI-aim")
                                for s in ends[k])


def test_lambda_scale_and_clamp_come_from_the_held_settings(metrics):
    rows = sorted(metrics["static_settings"], key=lambda r: r["hit_rate"])
    chord = (rows[-1]["error_rate"] - rows[0]["error_rate"]) / (
        rows[-1]["hit_rate"] - rows[0]["hit_rate"])
    assert metrics["objective_scale"] == pytest.approx(chord)
    assert metrics["gains"]["PI"]["lam_max"] == metrics["lam_max"] >= 2.0  # ≥ twice λ = 1's
    assert metrics["kd_cost_cut"] >= 0  # kd = 0 (PI) is on the kd line, so never beaten by it


def test_the_runs_mix_settings_and_the_argmin_alone_is_recorded_beside_them(metrics):
    assert 0 < metrics["mixed_window_share"] <= 1
    assert set(metrics["argmin_only"]) == {"I", "PI"}
    for name, unmixed in metrics["argmin_only"].items():
        assert unmixed["violation_area"] >= 0 and 0 <= unmixed["hit_rate"] <= 1
        assert unmixed.keys() <= metrics["controllers"][name].keys()


def test_the_noise_floor_and_the_one_sided_criterion_are_recorded(metrics):
    floor = metrics["noise_floor"]
    assert 0 < floor["judged_end_sd_last_window"] < floor["judged_end_sd_open_loop"]
    assert floor["ends_judged"] == 2 * len(metrics["seeds"]) * 4  # both ends, 4 adaptive
    assert 0 <= floor["all_ends_within_1pt_chance_bound"] <= 1
    assert floor["raw_area_on_target"] > 0
    one_sided, area_i = metrics["one_sided_criterion"], metrics["controllers"]["I"]
    assert {"kp", "ki"} <= set(one_sided["gains"]) and one_sided["violation_area"] >= 0
    assert one_sided["area_ratio_vs_I"]["violation_area"] == pytest.approx(
        one_sided["violation_area"] / max(area_i["violation_area"], 1e-12))
    assert all(0 <= share <= 1 for share in metrics["lambda_saturated_share"].values())


def test_the_needed_lambda_is_recorded_per_seed_and_phase(metrics):
    needed = metrics["needed_lambda"]
    assert len(needed["rows"]) == 2 * len(metrics["seeds"])
    low, high = needed["range"]
    assert 0 <= low <= high and needed["slope_range"][0] > 0
    assert {"kp", "ki"} <= set(metrics["gains"]["PI-aim"])


def test_the_study_says_at_which_backend_load_it_runs(metrics):
    """Only misses reach the inference servers: in each half the backend load is below the
    offered load, rises with it at the shift, and is lower under the looser setting (more hits)."""
    load = metrics["load"]
    before, after = load["offered"]
    strict, loose = (load["backend_by_offset"][k] for k in ("-0.1", "+0.1"))
    for b, a in (strict, loose):
        assert 0.0 < b < before and 0.0 < a < after and a > b
    assert loose[0] < strict[0] and loose[1] < strict[1]


def test_the_headline_is_recomputed_at_half_and_twice_the_assumed_text_inference(metrics):
    sensitivity = metrics["text_inference_sensitivity"]
    ratio, latency = sensitivity["pi_vs_i_violation_area"], sensitivity["pi_mean_latency_ms"]
    assert set(ratio) == set(latency) == {"0.5x", "1x", "2x"}
    # 1x reruns the evaluated controllers as they are: it reproduces the headline
    assert ratio["1x"] == pytest.approx(metrics["area_ratio_vs_I"]["judged"]["PI"])
    assert latency["1x"] == pytest.approx(metrics["controllers"]["PI"]["mean_latency_ms"])
    assert all(v >= 0 for v in ratio.values())
