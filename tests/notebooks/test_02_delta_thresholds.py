"""Notebook 02 in smoke mode: budgets respected, baselines side by side, the seed's sweep."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.notebook

NAME = "02_delta_thresholds"
BUDGETS = ("0.01", "0.02", "0.05")


@pytest.fixture(scope="module")
def metrics(smoke_metrics):
    return smoke_metrics(NAME)


def _rates(block):
    assert 0.0 <= block["realised_error"] <= block["hit_rate"] <= 1.0
    return block["hit_rate"], block["realised_error"]


def test_error_budget_rule_with_verifier_stays_near_its_budgets(metrics):
    assert set(metrics["budgets"]) == set(BUDGETS)
    assert "text" in metrics["compared_modalities"]
    hits = []
    for b in BUDGETS:
        hit_rate, error = _rates(metrics["budgets"][b])
        # smoke streams are ~100 lookups: allow one wrong answer beyond the budget
        assert error <= float(b) + 1.0 / metrics["n_pairs"]["text"]
        hits.append(hit_rate)
    assert hits == sorted(hits)  # a looser budget never serves less
    assert hits[1] > 0


def test_every_modality_keeps_the_2pc_budget_on_its_worst_seed(metrics):
    per_modality = metrics["per_modality_0.02"]
    assert set(per_modality) == set(metrics["n_pairs"])
    for m, row in per_modality.items():
        assert row is not None, f"{m}: the error-budget rule did not run"
        assert row["realised_error"] <= row["worst_error"]
        # smoke streams are short: allow one wrong answer beyond the budget
        assert row["worst_error"] <= 0.02 + 1.0 / metrics["n_pairs"][m], m
    priors = metrics["prior_p_correct_at_0.99"]
    assert set(priors) == set(metrics["n_pairs"]) and all(0 < p < 1 for p in priors.values())


def test_baselines_are_side_by_side(metrics):
    static = metrics["best_static_hindsight"]["0.02"]
    _rates(static)
    assert static["realised_error"] <= 0.02 and 0.0 <= static["delta"] <= 2.0
    _rates(metrics["vcache"])
    if metrics["gptcache"] is None:
        assert "gptcache" in metrics["absent"]  # marked absent, not faked
    else:  # cos >= 0.6 serves the traps: far above any budget
        _, error = _rates(metrics["gptcache"])
        assert error > 0.05


def test_cold_start_entries_can_hit(metrics):
    assert metrics["cold_start_hit_rate"] > 0
    assert 0.0 <= metrics["cold_start_hit_rate_vcache"] <= 1.0


def test_verifier_catches_text_traps_and_spares_rewrites(metrics):
    by_kind = metrics["verifier"]["rejected_by_kind"]
    assert by_kind["text/negation"] > 0.8 and by_kind["text/paraphrase"] < 0.2
    assert 0.0 <= metrics["verifier"]["precision"] <= 1.0


def test_seed_delta_sweep_when_clip_is_present(metrics):
    if "image" not in metrics["n_pairs"]:
        pytest.skip("the offline CLIP is not trained here (`make models`): no image pairs")
    sweep = metrics["delta_sweep"]
    assert len(sweep) == 13 and sweep[0]["threshold"] == pytest.approx(0.65)
    rates = [row["hit_rate"] for row in sweep]
    assert rates == sorted(rates, reverse=True)


def test_quality_bars_are_reported_and_data_is_named(metrics):
    assert len(metrics["quality_bars"]) == 4
    for name, bar in metrics["quality_bars"].items():
        assert bar is None or bar["verdict"] in ("holds", "does not hold", "inconclusive"), name
        assert bar is None or "test" in bar, name
        if bar is not None and "ci95" in bar:
            low, high = bar["ci95"]
            assert low <= bar["effect"] <= high, name
    weights = metrics["provenance"]["weights"]
    assert weights["text"].startswith("minilm:") and "whisper" in weights["audio"]
    assert "ShareGPT" in metrics["provenance"]["data"]


def test_external_questions_go_through_the_cache_with_every_rule_and_seed(metrics):
    ext = metrics["external"]["contradish"]
    assert ext["questions"] == 60 and ext["wordings"] > 60 and "MIT" in ext["data"]
    rules = ext["rules"]
    verified = {r for r in rules if r.startswith("static δ=") and r.endswith(" verifier")}
    assert {"contract config", "contract + edits verifier (band 0.05)",
            "contract + edits verifier (every candidate)", "static δ=0.1", "static δ=0.3",
            "edits verifier alone", "pairs verifier alone"} | verified == set(rules)
    assert {r.split(" + ")[1] for r in verified} == {"edits verifier", "pairs verifier"}
    assert len(ext["runs"]) == len(rules) * len(ext["seeds"])
    for row in ext["runs"]:
        assert 0.0 <= row["error_low"] <= row["error"] <= row["error_high"] <= 1.0
        assert row["wrong"] <= row["served"] <= row["lookups"]
        assert row["exact_hits"] == 0  # every wording is looked up once
    # a wider static threshold serves at least as many lookups, on the same streams
    assert rules["static δ=0.3"]["hit_rate"] >= rules["static δ=0.1"]["hit_rate"]
    for key in ("static_chosen_on_train", "static_oracle_on_test"):
        assert ext[key] is None or ext[key] in rules


def test_the_probe_pairs_go_through_the_cache_one_scope_each(metrics):
    own = metrics["external"]["pairs_file"]
    assert own["file"] == "near_misses.jsonl" and own["pairs"] == 41  # every 6th of 242
    assert 0 < own["same"] < own["pairs"] and sum(own["kinds"].values()) == own["pairs"]
    rules = own["rules"]
    assert {"contract config", "contract + edits verifier", "static δ=0.1",
            "static δ=0.3"} <= set(rules)
    verified = [r for r in rules if r.endswith("pairs verifier")]
    assert len(verified) == 1
    for row in rules.values():
        assert row["lookups"] == own["pairs"] and row["should_hit"] == own["same"]
        assert 0.0 <= row["error_low"] <= row["error"] <= row["error_high"] <= 1.0
    # a verifier only takes hits away from the same static threshold
    delta = verified[0].removesuffix(" + pairs verifier")
    assert rules[verified[0]]["served"] <= rules[delta]["served"]
    assert rules["static δ=0.3"]["served"] >= rules["static δ=0.1"]["served"]


def test_feedback_regimes_run_every_rule_on_the_same_test_streams(metrics):
    ext = metrics["external"]["contradish"]
    fb = ext["feedback_regimes"]
    assert metrics["feedback_regimes"] == fb
    assert set(fb["regimes"]) == {"none", "sampled", "immediate"}
    sampled = fb["regimes"]["sampled"]
    assert 0.0 < sampled["rate"] < 1.0 and sampled["delay"] > 0
    assert fb["regimes"]["immediate"] == {"feedback": "immediate", "rate": 1.0, "delay": 0}
    assert fb["seeds"] == ext["seeds"]
    rules = fb["rules"]
    assert {"contract config", "vcache", fb["static"]} == set(rules)
    assert fb["static"] in ext["rules"]
    assert len(fb["runs"]) == 3 * len(rules) * len(fb["seeds"])
    for rule, by_regime in rules.items():
        assert set(by_regime) == set(fb["regimes"]), rule
        # no feedback through the regime path is the no-feedback table's row, number for number
        if rule in ext["rules"]:
            for key, value in ext["rules"][rule].items():
                assert by_regime["none"][key] == pytest.approx(value, rel=1e-12), (rule, key)
        assert by_regime["none"]["labels"] == 0
        assert by_regime["sampled"]["labels"] <= by_regime["immediate"]["labels"]
        for row in by_regime.values():
            assert 0.0 <= row["error"] <= row["hit_rate"] <= 1.0
            assert row["error"] <= row["error_high_worst"] <= 1.0
            assert row["verifier_calls"] == 0   # none of these rules has a verifier
    for row in fb["runs"]:
        # immediate feedback labels every served hit (none is pending at the end: delay 0)
        if row["regime"] == "immediate":
            assert row["labels"] == row["served"]
        else:
            assert row["labels"] <= row["served"]
        if row["regime"] == "none":
            assert row["labels"] == 0
    static = rules[fb["static"]]
    # a static δ does not learn: only what its labels cost changes
    assert static["none"]["hit_rate"] == static["sampled"]["hit_rate"] == \
        static["immediate"]["hit_rate"]
    if static["immediate"]["hit_rate"] > 0:
        assert static["immediate"]["labels"] > 0
    # vcache labels the misses it explores in every regime; no other rule explores
    for rule, by_regime in rules.items():
        assert all((row["explored_labels"] > 0) == (rule == "vcache")
                   for row in by_regime.values()), rule


def test_the_ablation_runs_each_part_with_and_without_the_verifier(metrics):
    ablation = metrics["ablation"]
    arms = {(r["parts"], r["verifier"]) for r in ablation["development"]}
    assert arms == {(p, v) for p in ("both", "ledger", "curves") for v in ("none", "edits")}
    for row in ablation["development"]:
        _rates(row)
    external = ablation["contradish"]
    assert len(external) == 12
    contract = metrics["external"]["contradish"]["rules"]["contract config"]
    for key, row in external.items():
        assert 0.0 <= row["error"] <= row["hit_rate"] <= 1.0, key
        assert row["lookups"] == contract["lookups"]
        assert (row["labels"] == 0) == key.endswith("/none") or row["hit_rate"] == 0, key
    # `both` without a verifier and without feedback is the contract config itself
    assert external["both/none"]["hit_rate"] == pytest.approx(contract["hit_rate"], rel=1e-12)


def test_many_requests_runs_the_contract_the_chosen_static_and_vcache(metrics):
    many = metrics["many_requests"]
    fb = metrics["feedback_regimes"]
    assert set(many["rules"]) == {"contract config", "vcache", fb["static"]}
    assert many["static"] == fb["static"] and many["seeds"] == fb["seeds"]
    assert len(many["runs"]) == len(many["rules"]) * len(many["seeds"])
    for row in many["runs"]:
        assert row["lookups"] == many["lookups"]
        assert 0.0 <= row["error"] <= row["hit_rate"] <= 1.0
        assert row["labels"] == 0 and row["verifier_calls"] == 0
        assert (row["explored_labels"] > 0) == (row["rule"] == "vcache")
    # popular questions come back: repeated wordings are exact hits for every rule
    assert all(row["exact_hits"] > 0 for row in many["rules"].values())
