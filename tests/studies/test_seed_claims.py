"""The seeds' headline claims re-tested (mmcache.studies.seed_claims): the verdict logic on
hand-made numbers, the claim table's fields, and one small A/B replayed end to end."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from mmcache.errors import ConfigError, InvalidInputError
from mmcache.sim.cachebench import replay, three_tier
from mmcache.studies import seed_claims as sc
from mmcache.studies.seed_claims import CLAIMS, VERDICTS, Claim, Criterion, judge, verdict


@pytest.mark.parametrize("low, high, expected", [
    (9.0, 12.0, "reproduced"), (8.65, 8.65, "reproduced"), (1.0, 8.0, "not reproduced"),
    (5.0, 10.0, "inconclusive")])
def test_at_least_verdicts(low, high, expected):
    assert verdict(Criterion("at_least", 8.65), low, high) == expected


@pytest.mark.parametrize("low, high, expected", [
    (-60.0, -30.0, "reproduced"), (-10.0, 5.0, "not reproduced"), (-30.0, 0.0, "inconclusive")])
def test_at_most_verdicts(low, high, expected):
    assert verdict(Criterion("at_most", -20.5), low, high) == expected


@pytest.mark.parametrize("low, high, expected", [
    (17.0, 25.0, "reproduced"), (28.0, 30.0, "not reproduced"), (1.0, 16.0, "not reproduced"),
    (15.0, 18.0, "inconclusive"), (10.0, 30.0, "inconclusive")])
def test_within_verdicts(low, high, expected):
    assert verdict(Criterion("within", (16.5, 27.5)), low, high) == expected


def test_a_necessary_condition_never_reproduces():
    necessary = Criterion("at_least", 92.4, necessary=True)
    assert verdict(necessary, 93.0, 95.0) == "inconclusive"
    assert verdict(necessary, 30.0, 40.0) == "not reproduced"
    assert verdict(None, 0.0, 1.0) == "not testable here"


def test_judge_states_mean_interval_and_closest_number():
    c = Claim("x", "002 §4.4", "a claim", "an experiment", "gain", "pp", 17.3,
              Criterion("at_least", 8.65))
    j = judge(c, [1.0, 2.0, 3.0])
    assert j.mean == 2.0 and j.low < 2.0 < j.high
    half = 4.302652729911275 * 1.0 / math.sqrt(3)  # t(0.975, 2) × sd / √n
    assert j.low == pytest.approx(2.0 - half) and j.high == pytest.approx(2.0 + half)
    assert j.verdict == "not reproduced"
    assert j.statement.startswith("not reproduced (closest measured: 2.00 pp (95% interval")
    assert judge(c, [9.0, 9.0]).verdict == "reproduced"  # no spread: the interval is the point
    assert judge(c, [2.0, 20.0]).verdict == "inconclusive"
    d = j.as_dict()
    assert d["seed_value"] == 17.3 and d["interval"] == [j.low, j.high] and d["how"]


def test_bad_inputs_are_refused():
    with pytest.raises(ConfigError):
        Criterion("about", 1.0)
    with pytest.raises(ConfigError):
        Criterion("within", 1.0)
    with pytest.raises(ConfigError):
        Claim("x", "000", "t", "e", "m", "%", 1.0)  # neither a criterion nor a reason
    with pytest.raises(InvalidInputError):
        sc.interval([])


def test_the_claim_table():
    ids = [c.id for c in CLAIMS]
    assert len(set(ids)) == len(ids)
    assert {"ab_hit_rate", "ab_p99", "prefetch_gain", "scheduler_hit_rate", "kv_fixed_256",
            "kv_geometric", "kv_geometric_first_turn"} <= set(ids)
    for c in CLAIMS:
        assert c.seed[:3] in {"000", "001", "002"} and "§" in c.seed, c.id
        assert c.text and c.metric and c.experiment, c.id
        if c.criterion is None:
            assert c.not_testable, c.id
        else:
            assert c.seed_value is not None and c.not_testable is None, c.id
    # the seeds' numbers as they state them
    assert sc.claim("ab_hit_rate").seed_value == pytest.approx(89.6 - 72.3)
    assert sc.claim("ab_p99").seed_value == pytest.approx(100 * (126 / 214 - 1))
    assert sc.claim("prefetch_gain").seed_value == 23.7
    assert (sc.claim("kv_fixed_256").seed_value, sc.claim("kv_geometric").seed_value) == (22, 8.4)
    assert "22%" in sc.claim("kv_fixed_256").text and "8.4%" in sc.claim("kv_geometric").text
    assert sc.claim("scheduler_hit_rate").criterion.necessary
    assert len(sc.claims_table()) == len(CLAIMS)
    with pytest.raises(ConfigError):
        sc.claim("nope")


def test_small_ab_end_to_end():
    spec = sc.StreamSpec(n_queries=600, n_intents=60)
    runs = sc.ab_test([0, 1], spec)
    assert set(runs) == {0, 1}
    for run in runs.values():
        assert set(sc.AB_ARMS) <= set(run)
        for arm in sc.AB_ARMS:
            assert 0 <= run[arm]["hit_rate"] <= 1 and run[arm]["p99_ms"] > 0, arm
            assert run[arm]["requests"] == 600 and run[arm]["qps"] > 0
    # arm A, served request by request, is the plain replay (the compiled kernel) of the stream
    stream, model, capacity, ttl = spec.build(0)
    assert runs[0]["A: lru"]["hit_rate"] == replay(stream, three_tier(capacity), model,
                                                   limits=False, ttl_s=ttl).hit_rate
    # the four arms replay one stream: the same requests, the same arrival rate
    for run in runs.values():
        assert len({run[arm]["qps"] for arm in sc.AB_ARMS}) == 1
    judged = sc.judge_all(ab=runs)
    assert {"ab_hit_rate", "ab_p99"} <= set(judged)
    assert {j.verdict for j in judged.values()} <= set(VERDICTS)
    effects = sc.ab_effects(runs)
    assert judged["ab_hit_rate"].samples == pytest.approx(effects["ab_hit_rate"])
    assert all(j.verdict == "not testable here" for cid, j in judged.items()
               if sc.claim(cid).criterion is None)


def test_kv_claims_read_kv_allocation():
    kv = pd.DataFrame([{"strategy": s, "fragmentation_mean": f, "fragmentation_end": f / 2}
                       for s, f in (("fixed-256", 0.2), ("geometric-x1.3", 0.084),
                                    ("aligned-64", 0.1), ("paged-16", 0.01))])
    frag = sc.kv_fragmentation(kv)
    assert frag["fixed-256"]["fragmentation_mean"] == pytest.approx(20.0)
    judged = sc.judge_all(kv=frag)
    assert judged["kv_fixed_256"].verdict == "reproduced"  # 20% in [16.5, 27.5]
    assert judged["kv_geometric"].verdict == "reproduced"  # 8.4% exactly
    assert judged["kv_aligned_64"].details["aligned-64_fragmentation_mean_pct"] == \
        pytest.approx(10.0)
