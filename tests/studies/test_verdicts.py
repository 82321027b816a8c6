"""Verdicts over seeds: holds / does not hold / inconclusive by the 95% interval."""

from __future__ import annotations

import math

import pytest

from mmcache.errors import InvalidInputError
from mmcache.studies.verdicts import (VERDICTS, all_hold, any_holds, describe, interval,
                                      mean_difference, mean_within, replicates, sign_test,
                                      verdict_of_interval)


def test_the_rule_reads_the_whole_interval():
    assert verdict_of_interval(-0.4, -0.6, -0.2, 8, "t", claim="below")["verdict"] == "holds"
    assert verdict_of_interval(0.4, 0.2, 0.6, 8, "t", claim="below")["verdict"] == "does not hold"
    assert verdict_of_interval(-0.1, -0.3, 0.1, 8, "t", claim="below")["verdict"] == "inconclusive"
    assert verdict_of_interval(0.4, 0.2, 0.6, 8, "t", claim="above")["verdict"] == "holds"
    assert verdict_of_interval(0.0, 0.0, 0.0, 8, "t", claim="above")["verdict"] == "inconclusive"
    assert verdict_of_interval(1.2, 1.1, 1.3, 8, "t", claim="above", line=1.0)["verdict"] == "holds"


def test_a_clear_paired_effect_holds_and_its_opposite_does_not():
    treated, control = [0] * 10, [1] * 10          # 0/1 outcomes: treated collapses never
    v = sign_test(treated, control, claim="below")
    assert v["verdict"] == "holds" and v["effect"] == -1.0 and v["n"] == 10
    assert v["ci95"][1] < 0 and v["test"] == "sign test over 10 paired seeds"
    assert sign_test(control, treated, claim="below")["verdict"] == "does not hold"
    assert set(v) == {"verdict", "effect", "ci95", "n", "test"}


def test_few_or_mixed_pairs_are_inconclusive():
    assert sign_test([0] * 5, [1] * 5, claim="below")["verdict"] == "inconclusive"  # p = 0.06
    assert sign_test([0] * 6, [1] * 6, claim="below")["verdict"] == "holds"         # p = 0.03
    mixed = sign_test([0, 1, 0, 1, 1, 0], [1, 0, 1, 1, 0, 0], claim="below")
    assert mixed["verdict"] == "inconclusive" and mixed["ci95"][0] < 0 < mixed["ci95"][1]
    tied = sign_test([1, 1], [1, 1], claim="below")
    assert tied["verdict"] == "inconclusive" and tied["ci95"] == [0.0, 0.0]


def test_the_sign_test_effect_is_the_rate_difference_for_0_1_outcomes():
    v = sign_test([1, 0, 0, 0], [1, 1, 1, 0], claim="below", pairs="paired runs")
    assert v["effect"] == pytest.approx(0.25 - 0.75)
    assert v["ci95"][0] <= v["effect"] <= v["ci95"][1] and v["test"].endswith("paired runs")
    assert sign_test([1.0, math.inf], [2.0, 3.0], claim="below")["effect"] == 0.0  # inf: worst


def test_mean_difference_uses_the_t_interval_and_the_factor():
    v = mean_difference([1.0, 1.2, 0.9, 1.1], [2.0, 2.1, 1.9, 2.2], claim="below", factor=0.9)
    mean, low, high = interval([1.0 - 1.8, 1.2 - 1.89, 0.9 - 1.71, 1.1 - 1.98])
    assert v["verdict"] == "holds" and v["effect"] == pytest.approx(mean)
    assert v["ci95"] == pytest.approx([low, high]) and v["test"].startswith("paired t-interval")
    noisy = mean_difference([1.0, 3.0, 0.0], [2.0, 1.0, 1.5], claim="below")
    assert noisy["verdict"] == "inconclusive"


def test_mean_within_a_band():
    assert mean_within([0.35, 0.352, 0.349, 0.351], 0.345, 0.355)["verdict"] == "holds"
    assert mean_within([0.30, 0.302, 0.299], 0.345, 0.355)["verdict"] == "does not hold"
    wide = mean_within([0.34, 0.36, 0.35], 0.345, 0.355)
    assert wide["verdict"] == "inconclusive" and wide["test"] == "t-interval over 3 seeds"
    with pytest.raises(InvalidInputError):
        mean_within([0.35, 0.35], 0.355, 0.345)
    with pytest.raises(InvalidInputError):               # one seed: no spread to test with
        mean_within([0.35], 0.345, 0.355)
    with pytest.raises(InvalidInputError):
        mean_difference([1.0], [2.0], claim="below")


def test_combinations():
    h, n, i = ({"verdict": w} for w in VERDICTS)
    assert all_hold([h, h]) == "holds" and all_hold([h, i]) == "inconclusive"
    assert all_hold([i, n]) == "does not hold"
    assert any_holds([n, h]) == "holds" and any_holds([n, n]) == "does not hold"
    assert any_holds([n, i]) == "inconclusive"
    assert replicates(h, h) == "holds" and replicates(n, n) == "holds"
    assert replicates(h, n) == "does not hold" and replicates(h, i) == "inconclusive"


def test_describe_prints_the_interval_and_the_test():
    v = verdict_of_interval(-0.42, -0.61, -0.2, 8, "sign test over 8 paired seeds", claim="below")
    assert describe(v) == ("**holds** (effect −0.42, 95% CI −0.61 to −0.20, "
                           "sign test over 8 paired seeds)")


@pytest.mark.parametrize("treated, control", [
    ([], []), ([0, 1], [1]), ([math.nan, 0], [1, 1]), ([0, 1], [1, math.nan])])
def test_bad_paired_outcomes_are_refused(treated, control):
    with pytest.raises(InvalidInputError):
        sign_test(treated, control, claim="below")
    with pytest.raises(InvalidInputError):
        mean_difference(treated, control, claim="below")


def test_bad_intervals_and_claims_are_refused():
    with pytest.raises(InvalidInputError):
        verdict_of_interval(math.nan, -1, 1, 3, "t", claim="below")
    with pytest.raises(InvalidInputError):
        verdict_of_interval(0, 1, -1, 3, "t", claim="below")
    with pytest.raises(InvalidInputError):
        verdict_of_interval(0, -1, 1, 3, "t", claim="sideways")
    with pytest.raises(InvalidInputError):
        mean_difference([math.inf], [0.0], claim="below")
    with pytest.raises(InvalidInputError):
        all_hold([])
