"""Notebook 03 in smoke mode: every arm reports a collapse rate; entropy starts near log(n_keys)."""

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
    assert isinstance(metrics["seed_remedy_works"], bool)
    assert metrics["seed_remedy"]["works"] == metrics["seed_remedy_works"]
    assert metrics["seed_remedy"]["prevents"] == metrics["seed_remedy_prevents"]
    assert metrics["weights"].startswith("none") and "make_scenes" in metrics["data"]
