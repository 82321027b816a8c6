"""Notebook 07 in smoke mode: the invalidation MDP's policies against the oracle (exact regret,
before and after the load shift) and KV-cache allocation over ShareGPT conversations."""

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


@pytest.fixture(scope="module")
def metrics(smoke_metrics):
    return smoke_metrics(NAME)


def test_keys_are_present(metrics):
    assert metrics["smoke"] is True
    assert {"mdp", "kv_allocation"} <= set(metrics)
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
