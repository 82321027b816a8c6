"""Notebook 03 in smoke mode: every arm reports a collapse rate (learned and frozen real-encoder
features); entropy starts near log(n_keys)."""

from __future__ import annotations

import math

import pytest

pytestmark = pytest.mark.notebook

NAME = "03_cold_start_collapse"
SINGLES = {"baseline", "xavier", "xavier_0.1", "clip_1.0", "warmup", "qk_layernorm",
           "sigma_reparam"}


@pytest.fixture(scope="module")
def metrics(smoke_metrics):
    return smoke_metrics(NAME)


def test_every_arm_has_a_collapse_rate_per_learning_rate(metrics):
    arms = metrics["arms"]
    assert SINGLES <= set(arms)
    assert any(a.startswith("seed_combo") for a in arms) and any(a.startswith("best_pair") for a in arms)
    assert len(arms) == len(SINGLES) + 2
    mults = {f"{m}x" for m in metrics["lr_multipliers"]}
    for arm in arms:
        assert set(metrics["collapse_rate"][arm]) == mults, arm
        assert all(0.0 <= r <= 1.0 for r in metrics["collapse_rate"][arm].values()), arm
        assert 0.0 <= metrics["collapse_rate_per_arm"][arm] <= 1.0
    assert metrics["n_runs"] == len(arms) * len(mults) * metrics["seeds"]


def test_attention_starts_near_uniform_over_all_keys(metrics):
    assert metrics["n_keys"] == 16 + 6                 # image patches + caption words
    assert metrics["log_n_keys"] == pytest.approx(math.log(22))
    assert metrics["entropy_init_mean"] == pytest.approx(metrics["log_n_keys"], rel=0.15)
    for arm, ent in metrics["entropy_init_by_arm"].items():
        assert 0.8 * metrics["log_n_keys"] < ent <= metrics["log_n_keys"] + 1e-3, arm


def test_learning_rates_are_multiples_of_the_tuned_baseline(metrics):
    assert metrics["tuned_lr"] in metrics["tune_lrs"]
    assert metrics["lrs"] == pytest.approx([metrics["tuned_lr"] * m for m in metrics["lr_multipliers"]])
    tuning = metrics["tuning"]            # the recorded rate, checked against the tuning rule
    assert tuning["recorded_lr"] == metrics["tuned_lr"]
    assert tuning["would_choose"] in metrics["tune_lrs"]
    assert tuning["agrees"] == (tuning["would_choose"] == metrics["tuned_lr"])
    assert set(tuning["relative_gap"]) == {f"{lr:g}" for lr in metrics["tune_lrs"]}


def test_best_pair_combines_two_distinct_remedies(metrics):
    a, b = metrics["best_pair"]
    assert a != b and {a, b} <= SINGLES - {"baseline"}
    assert set(metrics["best_pair"]) != {"xavier_0.1", "clip_1.0"}   # the seed's own pair
    assert metrics["best_arm"] in metrics["arms"] and metrics["best_arm"] != "baseline"


def test_runs_trained_and_verdict_is_computed(metrics):
    for arm, by_lr in metrics["final_loss"].items():
        for mult, loss in by_lr.items():
            diverged = metrics["diverged_rate"][arm][mult]
            assert diverged > 0 or (math.isfinite(loss) and 0.0 < loss < 10.0), (arm, mult)
    assert metrics["final_acc"]["baseline"]["1x"] > 2 / 16     # chance is 1/16 per batch
    for arm, effect in {**metrics["remedy_effects"], **metrics["frozen_remedy_effects"]}.items():
        for name in ("helps", "lower_loss"):
            assert_verdict(effect[name]), (arm, name)
    seed_arm = next(a for a in metrics["arms"] if a.startswith("seed_combo"))
    assert metrics["seed_remedy"] == metrics["remedy_effects"][seed_arm]
    assert metrics["weights"].startswith("none") and "make_scenes" in metrics["data"]


def assert_verdict(v: dict) -> None:
    """A verdict record: one of the three words, an effect inside its 95% interval, n, a test;
    one seed per cell (a smoke run) is too few for any but "inconclusive"."""
    assert set(v) == {"verdict", "effect", "ci95", "n", "test"}
    assert v["verdict"] in ("holds", "does not hold", "inconclusive")
    assert v["ci95"][0] <= v["effect"] <= v["ci95"][1] and v["n"] >= 1
    assert v["test"].startswith("sign test over")
    assert v["verdict"] == "inconclusive"


FROZEN_ARMS = 4   # baseline, the seed's remedy, QK-layernorm, the best pair


def test_frozen_feature_sweep_reports_a_rate_per_arm_and_learning_rate(metrics):
    from mmcache.studies.collapse import FROZEN, LEARNED

    assert metrics["features"] == LEARNED
    assert metrics["frozen_features"] == FROZEN != LEARNED
    assert metrics["frozen_run_features"] == [FROZEN]        # every frozen run is labelled so
    assert "MiniLM" in FROZEN and "Whisper" in FROZEN
    assert metrics["frozen_encoders"][0].startswith("minilm:all-MiniLM-L6-v2/")
    assert metrics["frozen_encoders"][1].startswith("whisper:tiny.en/")
    assert "espeak-ng" in metrics["frozen_data"]
    arms = metrics["frozen_arms"]
    assert len(arms) == FROZEN_ARMS and arms[0] == "baseline" and "qk_layernorm" in arms
    assert any(a.startswith("seed_combo") for a in arms) and any(a.startswith("best_pair") for a in arms)
    assert set(arms) <= set(metrics["arms"])
    assert metrics["frozen_lr_multipliers"] == [16, 32]
    assert metrics["frozen_lrs"] == pytest.approx([metrics["tuned_lr"] * 16, metrics["tuned_lr"] * 32])
    mults = {f"{m}x" for m in metrics["frozen_lr_multipliers"]}
    assert set(metrics["frozen_collapse_rate"]) == set(arms)
    for arm in arms:
        rates = metrics["frozen_collapse_rate"][arm]
        assert set(rates) == mults, arm
        assert all(0.0 <= r <= 1.0 for r in rates.values()), arm
    assert metrics["frozen_n_runs"] == len(arms) * len(mults) * metrics["frozen_seeds"]


def test_frozen_attention_starts_near_uniform_over_three_key_groups(metrics):
    assert metrics["frozen_n_keys"] == 16 + 16 + 6             # patches + audio frames + words
    assert metrics["frozen_entropy_init_mean"] == pytest.approx(math.log(38), rel=0.15)
    for arm, mass in metrics["frozen_final_mass"].items():
        assert set(mass) == {"image", "audio", "text"}, arm
        assert sum(mass.values()) == pytest.approx(1.0, abs=1e-4), arm


def test_frozen_conclusions_compare_the_two_feature_sources(metrics):
    from mmcache.studies.verdicts import replicates

    conclusions = metrics["frozen_conclusions"]
    assert set(conclusions) == {"seed_remedy_helps", "qk_layernorm_helps"}
    seed_arm = next(a for a in metrics["frozen_arms"] if a.startswith("seed_combo"))
    for question, arm in [("seed_remedy_helps", seed_arm), ("qk_layernorm_helps", "qk_layernorm")]:
        c = conclusions[question]
        assert c["learned"] == metrics["remedy_effects"][arm]["helps"]
        assert c["frozen"] == metrics["frozen_remedy_effects"][arm]["helps"]
        assert c["verdict"] == replicates(c["learned"], c["frozen"])
    assert 0.0 < metrics["frozen_runtime_s"] < metrics["runtime_s"]
