"""Notebook 07 in smoke mode: the invalidation MDP's policies against the oracle (exact regret,
before and after the load shift), KV-cache allocation over ShareGPT conversations and tier
preemption (foreground lookups against background I/O on the tiers' channels) under load."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.notebook

NAME = "07_serving_path_studies"
POLICIES = {"estimated", "oracle", "preload", "block", "bypass"}
PHASES = {"before", "after"}
STATES = {"HIT", "STALE", "MISS_LOADING", "MISS_FAILED"}
STRATEGIES = {"fixed-256", "geometric-x1.3", "aligned-64", "paged-16"}
# value_iteration's bound: an exact regret is never below -(1 - γ)·γ·tol/2 (tol 1e-6)
REGRET_FLOOR = -1e-9
SCHEDULERS = {"none", "quotas", "threshold"}
PREEMPT_KEYS = {"lookups_per_s", "fg_p50_ms", "fg_p99_ms", "fg_mean_ms", "background_bytes",
                "background_completed_share", "prefetch_issued", "prefetch_useful",
                "prefetch_usefulness", "hits_gained", "frozen_share"}


@pytest.fixture(scope="module")
def metrics(smoke_metrics):
    return smoke_metrics(NAME)


def test_keys_are_present(metrics):
    assert metrics["smoke"] is True
    assert {"mdp", "kv_allocation", "preemption"} <= set(metrics)
    mdp = metrics["mdp"]
    assert "not measured" in mdp["model"]
    assert set(mdp["classes"]) == {"hot", "volatile"}
    for cls in mdp["classes"].values():
        for key in ("cost_ms", "regret_ms", "excess_cost_ms", "oracle_agreement"):
            assert set(cls[key]) == POLICIES, key
            assert all(set(v) == PHASES for v in cls[key].values()), key
        assert set(cls["policy"]) == {"oracle", "estimated"}
        for by_phase in cls["policy"].values():
            assert set(by_phase) == PHASES
            assert all(set(p) == STATES for p in by_phase.values())
        assert len(cls["window_sweep_regret_ms"]) >= 2 and cls["solves"] > 10
    kv = metrics["kv_allocation"]
    assert set(kv["strategies"]) == STRATEGIES
    assert kv["conversations"] == 50 and kv["turns"] > kv["conversations"]
    assert kv["bytes_per_token"] == 2 * 32 * 8 * 128 * 2  # the stated Llama-3-8B fp16 shape


def test_oracle_regret_is_zero_and_every_regret_non_negative(metrics):
    for name, cls in metrics["mdp"]["classes"].items():
        assert cls["regret_ms"]["oracle"] == {"before": 0.0, "after": 0.0}, name
        assert cls["excess_cost_ms"]["oracle"] == {"before": 0.0, "after": 0.0}, name
        assert cls["oracle_agreement"]["oracle"] == {"before": 1.0, "after": 1.0}, name
        for policy, by_phase in cls["regret_ms"].items():
            assert all(r >= REGRET_FLOOR for r in by_phase.values()), (name, policy)
        for by_phase in cls["window_sweep_regret_ms"].values():
            assert all(r >= REGRET_FLOOR for r in by_phase.values()), name
        assert all(c > 0 for by_phase in cls["cost_ms"].values() for c in by_phase.values())


def test_estimated_policy_beats_the_worst_fixed_policy(metrics):
    for name, cls in metrics["mdp"]["classes"].items():
        for phase in PHASES:
            worst = max(cls["regret_ms"][p][phase] for p in ("preload", "block", "bypass"))
            assert worst == cls["worst_fixed_regret_ms"][phase]
            assert cls["regret_ms"]["estimated"][phase] < worst, (name, phase)


def test_the_shift_changes_the_oracle_and_raises_its_cost(metrics):
    """The stated shift (loads fail half the time, slower and dearer) flips at least one
    decision of each class's oracle and makes every request dearer for it."""
    for name, cls in metrics["mdp"]["classes"].items():
        oracle = cls["policy"]["oracle"]
        assert oracle["before"] != oracle["after"], name
        assert cls["cost_ms"]["oracle"]["after"] > cls["cost_ms"]["oracle"]["before"], name
        assert cls["regret_ms"]["bypass"]["before"] > 100  # stale entries never refreshed


def test_paged_fragments_least_and_block_strategies_never_copy(metrics):
    s = metrics["kv_allocation"]["strategies"]
    assert s["paged-16"]["fragmentation_mean"] < s["fixed-256"]["fragmentation_mean"]
    assert s["paged-16"]["wasted_mib_mean"] < s["fixed-256"]["wasted_mib_mean"]
    for name in ("paged-16", "fixed-256"):
        assert s[name]["reallocations_per_turn"] == 0 and s[name]["copied_tokens_per_turn"] == 0
    for name in ("geometric-x1.3", "aligned-64"):
        assert s[name]["reallocations_per_turn"] > 0 and s[name]["copied_mib_per_turn"] > 0
    for r in s.values():
        assert 0 <= r["fragmentation_end"] <= 1 and 0 <= r["fragmentation_mean"] < 1
        assert r["wasted_mib_mean"] >= 0
    # paged wastes less than one 16-token block per conversation: 16 × 128 KiB = 2 MiB
    assert s["paged-16"]["wasted_mib_end"] < 2.0


FAILURE_CODES = {"MM-KEY-VERSION", "MM-ENCODER-IDENTITY", "MM-SCHEMA-VERSION",
                 "MM-ENTRY-UNREADABLE", "MM-CLOCK-SKEW"}


def test_each_injected_fault_raises_its_code_and_the_clean_run_none(metrics):
    failures = metrics["failure_codes"]
    assert "two processes" in failures["how"]
    assert set(failures["codes"]) == FAILURE_CODES
    for code, row in failures["codes"].items():
        assert row["count"] >= 1 and row["cause"] and row["fix"], code
    faults = failures["faults"]
    assert faults["clean"]["expected"] is None and faults["clean"]["seen"] == {}
    assert all(c == {} for c in faults["clean"]["counted"].values())
    for fault, run in faults.items():
        if fault == "clean":
            continue
        code, where = run["expected"], run["detected_by"]
        assert run["seen"] == {code: 1}, fault  # its code, once, and no other
        assert failures["codes"][code]["faults"] == [fault]
        if run["refused"][where] is None:  # the detecting cache opened: counted and exported
            assert run["counted"][where] == {code: 1}, fault
            assert run["prometheus"][where] == [
                f'mmcache_failure_events_total{{code="{code}",tier="l3"}} 1.0'], fault
        else:
            assert run["refused"][where] == code, fault
    assert failures["events"] == len(FAILURE_CODES)


def test_preemption_keys_and_ranges(metrics):
    pre = metrics["preemption"]
    assert "not measured" in pre["model"]
    loads = pre["loads"]
    assert loads == sorted(loads) and loads[0] < 1 < loads[-1]  # light to past saturation
    assert set(pre["schedulers"]) == SCHEDULERS
    params = pre["parameters"]
    assert {s["name"]: s["rule"] for s in params["schedulers"]} == {
        "none": "fifo", "quotas": "quotas", "threshold": "threshold"}
    by_name = {s["name"]: s for s in params["schedulers"]}
    assert by_name["quotas"]["foreground_share"] == 0.7  # the seed's parameters
    assert by_name["threshold"]["threshold_ms"] == 8.0
    for name, by_key in pre["schedulers"].items():
        assert set(by_key) == PREEMPT_KEYS, name
        assert all(len(v) == len(loads) for v in by_key.values()), name
        assert by_key["lookups_per_s"] == sorted(by_key["lookups_per_s"]), name
        for p50, p99 in zip(by_key["fg_p50_ms"], by_key["fg_p99_ms"]):
            assert 0 < p50 <= p99, name
        for key in ("background_completed_share", "prefetch_usefulness", "hits_gained",
                    "frozen_share"):
            assert all(0 <= v <= 1 for v in by_key[key]), (name, key)
    assert set(pre["schedulers"]["none"]["frozen_share"]) == {0.0}
    assert set(pre["schedulers"]["quotas"]["frozen_share"]) == {0.0}


def test_load_raises_the_tail_and_threshold_preemption_protects_it(metrics):
    s = metrics["preemption"]["schedulers"]
    none, quotas, threshold = s["none"], s["quotas"], s["threshold"]
    # no preemption: p99 non-decreasing in load (10 % slack for the draws at close loads), and
    # past saturation far above the light-load tail and the 8 ms threshold
    p99 = none["fg_p99_ms"]
    assert all(b >= 0.9 * a for a, b in zip(p99, p99[1:])), p99
    assert p99[-1] > 5 * p99[0] and p99[-1] > 8.0
    # at the highest load the threshold keeps the foreground tail below no preemption's, by
    # freezing background: it completes no more background work and is frozen part of the time
    assert threshold["fg_p99_ms"][-1] <= none["fg_p99_ms"][-1] / 2
    assert threshold["background_bytes"][-1] <= none["background_bytes"][-1]
    assert threshold["frozen_share"][-1] > 0
    # at the lightest load nothing is late: threshold behaves exactly as no preemption
    assert threshold["frozen_share"][0] == 0.0
    assert threshold["fg_p99_ms"][0] == none["fg_p99_ms"][0]
    # the hard 30 % background quota completes less background work than FIFO at every load
    # past the lightest, and its prefetches arrive late more often
    for k in range(1, len(metrics["preemption"]["loads"])):
        assert quotas["background_bytes"][k] <= none["background_bytes"][k], k
    assert quotas["prefetch_usefulness"][1] < none["prefetch_usefulness"][1]
