"""The error-budget rule's prior fit on separable pairs, its ablation switch, and its guarantee
failing where its assumption (calibrated curves, or feedback) fails."""

from __future__ import annotations

import json

import numpy as np
import pytest

import mmcache
from mmcache.errors import ConfigError
from mmcache.thresholds import ErrorBudgetThreshold
from mmcache.thresholds.prior import FORMAT, fit_channel, load_priors
from prior_helpers import synthetic_priors, true_p


def write_priors(tmp_path, s, y, name="priors.json"):
    path = tmp_path / name
    path.write_text(json.dumps({"format": FORMAT, "provenance": {"data": "synthetic test"},
                                "priors": {"text/test": fit_channel(s, y)}}))
    return path


# -- the prior's fit ------------------------------------------------------------------------
def test_a_fit_on_separable_pairs_stays_finite_and_follows_the_data(tmp_path):
    """Every wrong pair below 0.8, every right one above: the fit is finite, its curve is
    near 0 below and near 1 above (not the near-1/2 plateau of an unregularised fit's
    vanishing Hessian), and the rule serves a fresh entry at 0.95 at its scope's first lookup."""
    s = np.random.default_rng(0).uniform(0.6, 1.0, 1000)
    prior = load_priors(write_priors(tmp_path, s, s > 0.8))["text/test"]
    assert np.isfinite(prior.mean).all() and np.isfinite(prior.cov).all()
    assert prior.p_correct(0.95) > 0.97 and prior.p_correct(0.65) < 0.03
    assert np.linalg.eigvalsh(np.array(prior.cov)).max() < 1e4
    rule = ErrorBudgetThreshold(0.02, write_priors(tmp_path, s, s > 0.8), {"text": "test"})
    assert rule.accepts({"text": 0.95}, "fresh", "s")
    assert not rule.accepts({"text": 0.7}, "fresh", "s")


def test_pairs_of_one_class_fit_a_curve_of_that_class(tmp_path):
    s = np.random.default_rng(1).uniform(0.6, 1.0, 500)
    right = load_priors(write_priors(tmp_path, s, np.ones(500, bool), "a.json"))["text/test"]
    wrong = load_priors(write_priors(tmp_path, s, np.zeros(500, bool), "b.json"))["text/test"]
    assert right.p_correct(0.7) > 0.95 and wrong.p_correct(0.95) < 0.05


# -- the guarantee and where it fails ----------------------------------------------------------
def stream_error(rule: ErrorBudgetThreshold, seed: int, feedback: bool, shift: float = 0.0,
                 n: int = 3000, entries: int = 200) -> tuple[float, float]:
    """Lookups at similarities in [0.75, 1] against ``entries`` entries; a served hit is right
    with probability true_p(s − shift) (``shift`` > 0: worse than the prior was fitted on);
    labels fed back at once if ``feedback``. Returns (hit rate, wrong answers ÷ lookups)."""
    rng = np.random.default_rng(seed)
    hits = wrong = 0
    for _ in range(n):
        entry, s = f"e{rng.integers(entries)}", float(rng.uniform(0.75, 1.0))
        correct = bool(rng.random() < true_p(np.array(s - shift)))
        if rule.accepts({"text": s}, entry, "s"):
            charged = rule.served({"text": s}, entry, "s")
            hits, wrong = hits + 1, wrong + (not correct)
            if feedback:
                rule.feedback({"text": s}, entry, correct, "s", charged)
        rule.observe_lookup("s", ("text",), {"text": s})
    return hits / n, wrong / n


def test_calibrated_curves_keep_the_budget_without_feedback(tmp_path):
    """The guarantee's case: curves fitted on pairs drawn as the stream is, no label fed back:
    the realised error over 3,000 lookups is within the budget plus sampling noise."""
    path = synthetic_priors(tmp_path)
    errors = [stream_error(ErrorBudgetThreshold(0.02, path, {"text": "test"}), seed, False)[1]
              for seed in range(4)]
    assert np.mean(errors) <= 0.02 + 0.005, errors


def test_a_miscalibrated_prior_without_feedback_shows_in_the_realised_error(tmp_path):
    """The stream's answers are worse than the prior's pairs (its curve shifted by 0.08 in
    similarity): with no feedback nothing corrects the ledger and the realised error passes
    the budget by far; immediate feedback brings it back near the budget."""
    path = synthetic_priors(tmp_path)
    blind = [stream_error(ErrorBudgetThreshold(0.02, path, {"text": "test"}), seed, False,
                          shift=0.08)[1] for seed in range(4)]
    told = [stream_error(ErrorBudgetThreshold(0.02, path, {"text": "test"}), seed, True,
                         shift=0.08)[1] for seed in range(4)]
    assert min(blind) > 2 * 0.02, blind
    assert np.mean(told) <= 0.02 + 0.01 < min(blind), (told, blind)


# -- the ablation switch ------------------------------------------------------------------------
@pytest.mark.parametrize("parts", ["both", "ledger", "curves"])
def test_each_part_alone_is_a_rule_that_serves(tmp_path, parts):
    path = synthetic_priors(tmp_path)
    hit_rate, error = stream_error(ErrorBudgetThreshold(0.02, path, {"text": "test"},
                                                        parts=parts), 0, True)
    assert hit_rate > 0.05 and error <= 0.03, (hit_rate, error)


def test_curves_alone_bound_each_hit_and_ignore_the_ledger(tmp_path):
    """``curves`` serves at the scope's first lookup whatever it has spent, but only a hit
    whose P(wrong) is within the budget; ``ledger`` serves a riskier hit once the allowance
    can take its expected cost, without the chance constraint."""
    path = synthetic_priors(tmp_path)
    curves = ErrorBudgetThreshold(0.02, path, {"text": "test"}, parts="curves")
    ledger = ErrorBudgetThreshold(0.02, path, {"text": "test"}, parts="ledger")
    both = ErrorBudgetThreshold(0.02, path, {"text": "test"})
    risky = 0.9                                             # P(wrong) ≈ 0.14
    assert curves.risk({"text": risky}) > 0.02
    assert not curves.accepts({"text": risky}, "e", "s")
    assert ledger.accepts({"text": risky}, "e", "s") != both.accepts({"text": risky}, "e", "s")
    assert curves.accepts({"text": 0.995}, "e", "s")


def test_parts_is_a_checked_config_key():
    with mmcache.TieredCache({"thresholds": {"rule": "error-budget", "parts": "curves"}}) as c:
        assert c.thresholds.parts == "curves"
    with pytest.raises(ConfigError, match="thresholds.parts"):
        mmcache.TieredCache({"thresholds": {"rule": "error-budget", "parts": "ledger alone"}})
