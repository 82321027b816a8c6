"""δ-neighbour rules: edge cases, monotonicity, budgets on synthetic streams, priors, feedback."""

from __future__ import annotations

import json
import math
import re

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from mmcache.build import make_threshold
from mmcache.config import ThresholdConfig
from mmcache.errors import ConfigError, PriorFileError
from mmcache.thresholds import (DEFAULT_DELTA, RULES, CalibratedThreshold, ErrorBudgetThreshold,
                                PercentileThreshold, StaticThreshold, ThresholdRule,
                                VCacheThreshold)
from mmcache.thresholds.prior import (PRIORS_PATH, FORMAT, channel, load_priors,
                                      sigmoid)
from mmcache.studies.threshold_study import STUDY_ENCODERS
from prior_helpers import synthetic_priors, true_p

# -- static --------------------------------------------------------------------------------
def test_static_rule():
    rule = StaticThreshold({"text": 0.2})
    assert rule.floor("text") == pytest.approx(0.8)
    assert rule.floor("audio") == pytest.approx(1 - DEFAULT_DELTA)
    assert rule.accepts({"text": 0.85, "audio": 0.95})
    assert not rule.accepts({"text": 0.85, "audio": 0.85})


def test_delta_zero_is_exact_only_and_delta_two_accepts_everything():
    exact = StaticThreshold({"text": 0.0})
    assert exact.floor("text") == math.inf
    assert not exact.accepts({"text": 1.0})
    assert not exact.accepts({"text": 1.0000001})
    anything = StaticThreshold({"text": 2.0})
    assert anything.accepts({"text": -1.0})
    assert ThresholdConfig(delta={"text": 0.0}).delta == {"text": 0.0}   # valid config


# -- percentile ----------------------------------------------------------------------------
def test_percentile_rule_follows_the_seed_formula_over_every_lookup():
    rule = PercentileThreshold({"text": 0.3}, percentile=85, window=100, min_samples=10,
                               delta_min=0.02, delta_max=0.4)
    assert rule.delta("text", "a") == pytest.approx(0.3)     # static start until min_samples
    sims = np.linspace(0.7, 0.9, 10)
    for s in sims:
        rule.observe_lookup("a", ("text",), {"text": s})
    assert rule.delta("text", "a") == pytest.approx(1 - np.percentile(sims, 85))
    assert rule.delta("text", "b") == pytest.approx(0.3)     # scoped: b saw nothing


def test_percentile_is_not_a_ratchet_delta_grows_when_lookups_get_farther():
    rule = PercentileThreshold({"text": 0.1}, percentile=80, window=50, min_samples=10,
                               delta_min=0.01, delta_max=0.5)
    for _ in range(50):
        rule.observe_lookup("s", ("text",), {"text": 0.97})
    tight = rule.delta("text", "s")
    for _ in range(50):                                     # misses count too
        rule.observe_lookup("s", ("text",), None)
    assert rule.delta("text", "s") > tight
    assert rule.delta("text", "s") == pytest.approx(0.5)    # censored at the search floor
    assert rule.floor("text") == pytest.approx(0.5)         # searches down to 1 - delta_max


def test_percentile_keeps_the_most_recent_scopes_only():
    rule = PercentileThreshold({"text": 0.3}, window=10, min_samples=2, max_scopes=3)
    for scope in ("a", "b", "c", "a", "d"):                 # d pushes out b, used least recently
        for s in (0.9, 0.92):
            rule.observe_lookup(scope, ("text",), {"text": s})
    assert {k.split("/")[0] for k in rule.deltas() if "/" in k} == {"a", "c", "d"}
    assert rule.delta("text", "b") == pytest.approx(0.3)   # forgotten: the static start again
    assert rule.delta("text", "a") < 0.3
    assert len(rule._scopes) == 3


# -- calibrated ----------------------------------------------------------------------------
def test_calibrated_level_means_the_same_across_encoders(tmp_path):
    """Two encoders whose similarities live on different scales get different cosine
    thresholds but the same true precision at the threshold."""
    wide = CalibratedThreshold(0.9, synthetic_priors(tmp_path), encoders={"text": "test"})
    narrow = CalibratedThreshold(0.9, synthetic_priors(tmp_path, scale=(0.5, 0.3)),
                                 encoders={"text": "test"})
    t_wide, t_narrow = wide.floor("text"), narrow.floor("text")
    assert t_narrow < t_wide - 0.05
    truth_wide, truth_narrow = true_p(t_wide), true_p((t_narrow - 0.3) / 0.5)
    assert truth_wide == pytest.approx(0.9, abs=0.04)
    assert truth_narrow == pytest.approx(0.9, abs=0.04)
    assert wide.accepts({"text": t_wide + 0.01}) and not wide.accepts({"text": t_wide - 0.01})
    assert not wide.accepts({"text": t_wide + 0.01}, evidence={"verifier": 0.5})


def test_calibrated_needs_a_curve_for_every_configured_channel(tmp_path):
    with pytest.raises(ConfigError, match="text/other"):
        CalibratedThreshold(0.9, synthetic_priors(tmp_path), encoders={"text": "other"})


# -- error budget --------------------------------------------------------------------------
def run_stream(rule: ThresholdRule, seed: int, n: int = 3000, entries: int = 200,
               novel: float = 0.3) -> tuple[float, float]:
    """Lookups against ``entries`` entries with labels drawn from the known curve; every
    served hit gets feedback. Returns (hit rate, wrong answers served ÷ lookups)."""
    rng = np.random.default_rng(seed)
    hits = wrong = 0
    for _ in range(n):
        entry = f"e{rng.integers(entries)}"
        s = float(rng.uniform(0.3, 0.8) if rng.random() < novel else rng.uniform(0.75, 1.0))
        correct = bool(rng.random() < true_p(s))
        served = rule.accepts({"text": s}, entry, "s")
        charged = rule.served({"text": s}, entry, "s") if served else 0.0
        rule.observe_lookup("s", ("text",), {"text": s})
        if served:
            hits += 1
            wrong += not correct
            rule.feedback({"text": s}, entry, correct, "s", charged)
    return hits / n, wrong / n


@pytest.mark.parametrize("budget", [0.01, 0.02, 0.05])
def test_error_budget_is_respected_on_synthetic_streams(tmp_path, budget):
    """Realised error ≤ budget + 0.01 (sampling noise of 3000 lookups) on every seed, and
    the mean over seeds ≤ budget + 0.003."""
    path = synthetic_priors(tmp_path)
    results = [run_stream(ErrorBudgetThreshold(budget, path, {"text": "test"}), seed)
               for seed in range(8)]
    errors = [e for _, e in results]
    assert max(errors) <= budget + 0.01, errors
    assert np.mean(errors) <= budget + 0.003, errors
    assert min(h for h, _ in results) > 0.03               # it does serve


@pytest.mark.parametrize("n", [30, 120])
def test_error_budget_is_respected_on_short_streams(tmp_path, n):
    """The starting credit is an advance, repaid once the scope has seen ``credit`` lookups:
    over many short streams (as long as a modality's held-out pairs) the mean realised error
    stays within the budget (an added credit would give budget·(n + credit)/n), and the
    rule still serves. The chance constraint is off here (tail = max_risk), so that the
    expected-error ledger alone is measured."""
    path = synthetic_priors(tmp_path)
    results = [run_stream(ErrorBudgetThreshold(0.05, path, {"text": "test"}, tail=0.5), seed,
                          n=n, entries=n, novel=0.0) for seed in range(100)]
    errors = [e for _, e in results]
    # measured 0.040 (n = 30) and 0.047 (n = 120); an added credit gives 0.053 and 0.051
    assert np.mean(errors) <= 0.05, np.mean(errors)
    assert np.mean([h for h, _ in results]) > 0.2


def worst_prefix_error(rule: ErrorBudgetThreshold, s: float, n: int) -> float:
    """Lookups at similarity ``s`` on fresh entries whose every served hit is wrong: the
    highest wrong answers ÷ lookups after any lookup."""
    wrong, worst = 0, 0.0
    for i in range(n):
        if rule.accepts({"text": s}, f"e{i}", "s"):
            charged = rule.served({"text": s}, f"e{i}", "s")
            wrong += 1
            rule.feedback({"text": s}, f"e{i}", False, "s", charged)
        rule.observe_lookup("s", ("text",), {"text": s})
        worst = max(worst, wrong / (i + 1))
    return worst


@pytest.mark.parametrize("budget", [0.02, 0.05])
def test_a_risky_hit_is_served_only_if_the_budget_absorbs_it_being_wrong(tmp_path, budget):
    """P(wrong) ≈ 0.36 at s = 0.87 (above ``tail``), every served hit wrong: the realised
    error never exceeds the budget after any lookup; without the chance constraint
    (tail = max_risk) the same stream overshoots it, by up to one answer."""
    path = synthetic_priors(tmp_path)
    rule = ErrorBudgetThreshold(budget, path, {"text": "test"})
    assert rule.tail < rule.risk({"text": 0.87}) < rule.max_risk
    assert 0 < worst_prefix_error(rule, 0.87, 400) <= budget
    loose = ErrorBudgetThreshold(budget, path, {"text": "test"}, tail=0.5)
    assert worst_prefix_error(loose, 0.87, 400) > budget


def test_error_budget_serves_a_new_entry_at_its_first_lookup(tmp_path):
    """An entry without feedback is priced by the pooled curve (P(wrong | 0.99) ≈ 0.016
    here, within ``tail``): served at the scope's first lookup. At s = 0.93 (P(wrong) ≈
    0.09, above ``tail``) only once the scope's allowance can absorb one wrong answer; at
    0.80 (≈ 0.81, above ``max_risk``) never."""
    path = synthetic_priors(tmp_path)
    rule = ErrorBudgetThreshold(0.02, path, {"text": "test"})
    assert rule.risk({"text": 0.99}) == pytest.approx(1 - float(true_p(np.array(0.99))),
                                                      abs=0.01)
    assert rule.accepts({"text": 0.99}, "fresh", "s")
    assert not rule.accepts({"text": 0.93}, "fresh", "s")
    for _ in range(50):
        rule.observe_lookup("s", ("text",), None)          # 0.02 · 51 ≥ one wrong answer
    assert rule.accepts({"text": 0.93}, "fresh", "s")
    assert not rule.accepts({"text": 0.80}, "fresh", "s")


def test_wrong_feedback_makes_that_entry_stricter_and_stops_it(tmp_path):
    rule = ErrorBudgetThreshold(0.02, synthetic_priors(tmp_path), {"text": "test"})
    for _ in range(200):
        rule.observe_lookup("s", ("text",), None)          # plenty of budget
    before = rule.threshold("text", "bad", "s")
    rule.feedback({"text": 0.97}, "bad", False)           # explored labels: no ledger change
    assert rule.threshold("text", "bad", "s") > before
    assert rule.threshold("text", "other", "s") == pytest.approx(before)  # per entry
    for _ in range(5):
        rule.feedback({"text": 0.97}, "bad", False)
    assert not rule.accepts({"text": 0.97}, "bad", "s")
    assert not rule.accepts({"text": 0.99}, "bad", "s")
    rule.forget("bad")
    assert rule.threshold("text", "bad", "s") == pytest.approx(before)


def test_error_budget_without_a_prior_channel_never_serves_cold(tmp_path):
    rule = ErrorBudgetThreshold(0.02, synthetic_priors(tmp_path), {"text": "test"})
    assert not rule.accepts({"image": 0.999}, "e", "s")     # no image prior: P = 1/2


@pytest.mark.parametrize("encoders, verifier, missing", [
    ({"text": "test", "image": "clip"}, "none", "image/clip"),
    ({"text": "test"}, "edits", "text/test+edits"),     # only the unconditioned curve shipped
])
def test_error_budget_needs_a_prior_for_every_configured_channel(tmp_path, encoders, verifier,
                                                                 missing):
    with pytest.raises(ConfigError, match=re.escape(missing)) as err:
        ErrorBudgetThreshold(0.02, synthetic_priors(tmp_path), encoders, verifier=verifier)
    assert "make priors" in str(err.value) and "text/test" in str(err.value)


# -- every rule ----------------------------------------------------------------------------
def stateful_rules(tmp_path) -> list[ThresholdRule]:
    path = synthetic_priors(tmp_path)
    percentile = PercentileThreshold(min_samples=5)
    for s in (0.7, 0.8, 0.9, 0.95, 0.99):
        percentile.observe_lookup("s", ("text",), {"text": s})
    budget = ErrorBudgetThreshold(0.02, path, {"text": "test"})
    vcache = VCacheThreshold(0.05)
    for s, ok in [(0.95, True), (0.9, True), (0.7, False), (0.99, True), (0.8, False),
                  (0.97, True), (0.98, False)]:
        budget.feedback({"text": s}, "e", ok)
        vcache.feedback({"text": s}, "e", ok)
    for _ in range(30):
        budget.observe_lookup("s", ("text",), None)
    return [StaticThreshold({"text": 0.15}), percentile,
            CalibratedThreshold(0.8, path, encoders={"text": "test"}), budget, vcache]


@pytest.fixture(scope="module")
def rules(tmp_path_factory):
    return stateful_rules(tmp_path_factory.mktemp("rules"))


@settings(max_examples=200, deadline=None)
@given(s1=st.floats(-1, 1), s2=st.floats(-1, 1))
def test_higher_similarity_never_turns_a_hit_into_a_miss(rules, s1, s2):
    low, high = sorted((s1, s2))
    for rule in rules:
        if rule.accepts({"text": low}, "e", "s"):
            assert rule.accepts({"text": high}, "e", "s"), rule.name


def test_error_budget_keeps_ledgers_for_the_most_recent_scopes_only(tmp_path):
    rule = ErrorBudgetThreshold(0.02, synthetic_priors(tmp_path), {"text": "test"},
                                max_scopes=100)
    for i in range(1000):                                  # a client cycling through scopes
        rule.observe_lookup(f"tenant-{i}", ("text",), None)
        rule.served({"text": 0.99}, "e", f"tenant-{i}")
    assert len(rule._ledger) == 100
    assert rule.realised("tenant-999")[0] == 1 and rule.realised("tenant-0") == (0, 0.0)


@pytest.mark.parametrize("bad", [0, -1, 2.5, True, None])
def test_max_scopes_must_be_a_positive_integer(bad):
    with pytest.raises(ConfigError, match="thresholds.max_scopes"):
        PercentileThreshold(max_scopes=bad)
    with pytest.raises(ConfigError, match="thresholds.max_scopes"):
        make_threshold(ThresholdConfig(rule="percentile", max_scopes=bad))


def test_registry_builds_every_rule_from_config(tmp_path):
    path = str(synthetic_priors(tmp_path))
    enc = {"text": "test"}
    for name, cls in [("static", StaticThreshold), ("percentile", PercentileThreshold),
                      ("calibrated", CalibratedThreshold), ("error-budget", ErrorBudgetThreshold),
                      ("vcache", VCacheThreshold)]:
        rule = make_threshold(ThresholdConfig(rule=name, prior=path, budget=0.05), enc)
        assert isinstance(rule, cls) and rule.name == name
    budgeted = make_threshold(ThresholdConfig(rule="error-budget", prior=path, budget=0.05,
                                              tail=0.2), enc)
    assert (budgeted.budget, budgeted.tail) == (0.05, 0.2)
    assert set(RULES) == {"static", "percentile", "calibrated", "error-budget", "vcache"}


# -- priors --------------------------------------------------------------------------------
def test_the_shipped_prior_loads_with_its_provenance():
    priors = load_priors()
    assert "text/minilm" in priors
    text = priors["text/minilm"]
    assert text.n_pairs > 100
    assert text.p_correct(0.99) > text.p_correct(0.5)
    verified = priors["text/minilm+edits"]                # conditioned on the edits verifier
    assert verified.n_pairs < text.n_pairs
    provenance = json.loads(PRIORS_PATH.read_text())["provenance"]
    assert {"encoders", "data", "split", "conditioned_on", "date", "command"} <= set(provenance)
    assert provenance["split"] == "train"
    assert provenance["conditioned_on"]["text/minilm+edits"].startswith("verifier edits")
    for modality, (encoder, _) in STUDY_ENCODERS.items():   # every channel, or named missing
        shipped = {channel(modality, encoder, v) in priors for v in ("none", "edits")}
        assert shipped == {modality not in provenance["missing_encoders"]}


@pytest.mark.parametrize("content, match", [
    (None, "cannot be read"),
    ("{not json", "not JSON"),
    (json.dumps({"format": "other", "priors": {}}), "format"),
    (json.dumps({"format": FORMAT, "priors": {"text/x": {"logistic": {}}}}), "malformed"),
    (json.dumps({"format": FORMAT, "priors": {"text/x": {
        "n_pairs": 3, "logistic": {"mean": [0, 1], "cov": [[1, 0], [0, -1]]},
        "isotonic": {"x": [0, 1], "y": [0, 1]}}}}), "malformed"),
])
def test_a_bad_or_missing_prior_file_is_a_typed_error(tmp_path, content, match):
    path = tmp_path / "priors.json"
    if content is not None:
        path.write_text(content)
    with pytest.raises(PriorFileError, match=match) as err:
        ErrorBudgetThreshold(0.02, path, {"text": "x"})
    assert "make priors" in str(err.value) and str(path) in str(err.value)


def test_fitted_logistic_recovers_the_known_curve(tmp_path):
    prior = load_priors(synthetic_priors(tmp_path))["text/test"]
    for s in (0.8, 0.85, 0.9, 0.95):
        assert prior.p_correct(s) == pytest.approx(float(true_p(np.array(s))), abs=0.05)
    assert sigmoid(-800) == 0.0 and sigmoid(800) == 1.0
