"""mmcache.sim.invalidation_replay: the stated key-class model's transitions by hand, the
failed-wait surcharge, exact regret, and the replay (common random numbers, the oracle's zero
regret, fixed policies, the estimated policy converging to the oracle on a stationary class,
adapting after a shift), and refused input."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from mmcache.errors import ConfigError, InvalidInputError
from mmcache.sim.invalidation_mdp import (Action, CostParams, State, cost_matrix, fixed_policy,
                                          value_iteration)
from mmcache.sim.invalidation_replay import (KeyClass, Phase, arrivals, compare_over_seeds,
                                             compare_policies, policy_names, regret_per_request,
                                             replay)

H, S, L, F = State.HIT, State.STALE, State.MISS_LOADING, State.MISS_FAILED
P, B, Y = Action.PRELOAD, Action.BLOCK, Action.BYPASS
# volatile: its optimal policy serves stale values while it reloads (PRELOAD in STALE); BUSY
# (loads fail half the time, slower, dearer) also flips MISS_FAILED from BLOCK to PRELOAD
VOLATILE = KeyClass("volatile", rate_per_s=5.0, load_s=0.05, p_fail=0.01, p_update=0.2,
                    p_evict=0.05, failed_wait_ms=500.0)
BUSY = replace(VOLATILE, p_fail=0.5, load_s=0.2,
               costs=CostParams(backend_ms=400.0, blocked_wait_ms=150.0))
REPLAY = dict(window_s=60.0, resolve_every_s=5.0, cost_noise=0.2, seed=3)


def test_transitions_by_hand():
    kc = KeyClass("k", rate_per_s=4.0, load_s=0.25, p_fail=0.1, p_update=0.2, p_evict=0.0)
    assert kc.async_done == pytest.approx(0.5)  # 1 / (1 + 4 × 0.25)
    p = kc.transition()
    fresh = [0.8, 0.2, 0, 0]
    np.testing.assert_allclose(p[B, H], fresh)
    np.testing.assert_allclose(p[B, S], [0.9 * 0.8, 0.9 * 0.2 + 0.1, 0, 0])
    np.testing.assert_allclose(p[B, L], [0.9 * 0.8, 0.9 * 0.2, 0, 0.1])
    np.testing.assert_allclose(p[P, S], [0.45 * 0.8, 0.45 * 0.2 + 0.55, 0, 0])  # d(1-f) = 0.45
    np.testing.assert_allclose(p[P, F], [0.45 * 0.8, 0.45 * 0.2, 0.5, 0.05])
    np.testing.assert_allclose(p[Y, S], [0, 1, 0, 0])
    np.testing.assert_allclose(p[Y, F], [0, 0, 0, 1])
    np.testing.assert_allclose(p[Y, L], p[P, L])  # the load in flight runs on


def test_eviction_moves_held_mass_to_miss_failed():
    base = KeyClass("k", rate_per_s=4.0, load_s=0.25, p_fail=0.1, p_update=0.2)
    p0, p1 = base.transition(), replace(base, p_evict=0.1).transition()
    np.testing.assert_allclose(p1[:, :, :2], 0.9 * p0[:, :, :2])
    np.testing.assert_allclose(p1[:, :, F], p0[:, :, F] + 0.1 * p0[:, :, :2].sum(axis=2))
    np.testing.assert_allclose(p1.sum(axis=2), 1.0)
    assert value_iteration(replace(base, p_evict=0.1).mdp(), 0.9).iterations > 0  # a valid MDP


def test_a_certain_world_stays_a_hit_under_every_action():
    kc = KeyClass("k", rate_per_s=1.0, load_s=0.1, p_fail=0.0, p_update=0.0)
    np.testing.assert_array_equal(kc.transition()[:, H], np.tile(np.eye(4)[H], (3, 1)))


def test_failed_wait_surcharge_only_where_block_waits():
    kc = KeyClass("k", rate_per_s=1.0, load_s=0.1, p_fail=0.2, p_update=0.1, failed_wait_ms=50)
    extra = kc.cost() - cost_matrix()
    expected = np.zeros((4, 3))
    expected[[S, L, F], B] = 10.0  # 0.2 × 50
    np.testing.assert_allclose(extra, expected)


def test_regret_per_request_is_zero_for_the_optimum_and_positive_otherwise():
    mdp = VOLATILE.mdp()
    best = value_iteration(mdp, 0.99).policy
    assert regret_per_request(mdp, best, 0.99) == 0.0
    assert policy_names(best)["STALE"] == "PRELOAD"
    bypass = regret_per_request(mdp, fixed_policy(mdp, Y), 0.99)
    assert bypass > 100  # a stale entry is never refreshed: backend + load on every request
    for action in Action:
        assert regret_per_request(mdp, fixed_policy(mdp, action), 0.99) >= -1e-9


def test_arrivals_follow_each_phase_rate():
    phases = [Phase(0, replace(VOLATILE, rate_per_s=100.0)), Phase(50, VOLATILE)]
    times = arrivals(phases, 100.0, np.random.default_rng(0))
    assert np.all(np.diff(times) >= 0) and 0 <= times[0] and times[-1] < 100
    assert (times < 50).sum() == pytest.approx(5_000, rel=0.05)
    assert (times >= 50).sum() == pytest.approx(250, rel=0.2)


def test_replay_shares_arrivals_and_gives_the_oracle_zero_regret():
    phases = [Phase(0, VOLATILE), Phase(100, BUSY)]
    runs = {p: replay(phases, 200.0, p, **REPLAY) for p in ("oracle", "block", "estimated")}
    for run in runs.values():
        np.testing.assert_array_equal(run.times, runs["oracle"].times)
    assert (runs["oracle"].regret == 0).all()
    assert (runs["block"].actions == B).all() and runs["block"].solves == []
    oracle_policies = {tuple(value_iteration(p.key_class.mdp(), 0.99, 1e-6).policy)
                       for p in phases}
    assert set(runs["oracle"].in_force) == oracle_policies and len(oracle_policies) == 2
    before, after = (policy_names(value_iteration(p.key_class.mdp(), 0.99, 1e-6).policy)
                     for p in phases)
    assert (before["MISS_FAILED"], after["MISS_FAILED"]) == ("BLOCK", "PRELOAD")
    est = runs["estimated"]
    assert est.solves[0][0] == est.times[0]  # the first solve, from the prior
    gaps = np.diff([t for t, _ in est.solves])
    assert (gaps > 0).all() and (gaps < 10).all()  # about every 5 s (arrivals are 5/s)
    again = replay(phases, 200.0, "estimated", **REPLAY)
    np.testing.assert_array_equal(again.costs, est.costs)  # seeded


def test_estimated_policy_without_exploration_follows_its_greedy_policy():
    run = replay([Phase(0, VOLATILE)], 60.0, "estimated", epsilon=0.0, window_s=30.0,
                 resolve_every_s=5.0, seed=1)
    chosen = [pol[s] for pol, s in zip(run.in_force, run.states)]
    np.testing.assert_array_equal(run.actions, chosen)


def test_estimated_policy_learns_the_oracle_on_a_stationary_class():
    run = replay([Phase(0, VOLATILE)], 600.0, "estimated", window_s=300.0, resolve_every_s=10.0,
                 seed=0)
    oracle = tuple(value_iteration(VOLATILE.mdp(), 0.99, 1e-6).policy)
    late = run.times > 300
    agree = np.mean([pol == oracle for pol, m in zip(run.in_force, late) if m])
    assert agree > 0.8
    assert run.regret[late].mean() < 0.2 * regret_per_request(VOLATILE.mdp(),
                                                              fixed_policy(VOLATILE.mdp(), B), 0.99)


def test_compare_policies_table():
    phases = [Phase(0, VOLATILE), Phase(150, BUSY)]
    table, runs = compare_policies(phases, 300.0, phase_names=["before", "after"], **REPLAY)
    assert set(table.policy_name) == {"estimated", "oracle", "preload", "block", "bypass"}
    assert set(table.phase) == {"before", "after"}
    oracle = table[table.policy_name == "oracle"]
    assert (oracle.regret_ms == 0).all() and (oracle.excess_cost_ms == 0).all()
    assert (oracle.oracle_agreement == 1).all()
    assert (table.regret_ms >= -1e-9).all()
    for phase, rows in table.groupby("phase"):
        by = rows.set_index("policy_name")
        assert by.regret_ms["estimated"] < by.regret_ms[["preload", "block", "bypass"]].max()
        assert by.requests.nunique() == 1  # the same arrivals
    assert runs["oracle"].policy == "oracle"


def test_refused_input():
    with pytest.raises(ConfigError):
        KeyClass("k", rate_per_s=0.0, load_s=0.1, p_fail=0.1, p_update=0.1)
    with pytest.raises(ConfigError):
        KeyClass("k", rate_per_s=1.0, load_s=0.1, p_fail=1.5, p_update=0.1)
    with pytest.raises(ConfigError):
        KeyClass("k", rate_per_s=1.0, load_s=0.1, p_fail=0.1, p_update=0.1, failed_wait_ms=-1)
    phases = [Phase(0, VOLATILE)]
    with pytest.raises(ConfigError):
        replay(phases, 10.0, "lru", **REPLAY)
    with pytest.raises(ConfigError):
        replay(phases, 10.0, "oracle", window_s=0.0, resolve_every_s=1.0)
    with pytest.raises(ConfigError):
        replay(phases, 10.0, "estimated", window_s=1.0, resolve_every_s=1.0, epsilon=2.0)
    with pytest.raises(InvalidInputError):
        replay([Phase(1.0, VOLATILE)], 10.0, "oracle", **REPLAY)  # must start at 0
    with pytest.raises(InvalidInputError):
        replay([Phase(0, VOLATILE), Phase(20.0, BUSY)], 10.0, "oracle", **REPLAY)
    with pytest.raises(InvalidInputError):
        compare_policies(phases, 10.0, phase_names=["a", "b"], **REPLAY)


def test_compare_over_seeds_repeats_compare_policies_per_seed():
    phases = [Phase(0, VOLATILE), Phase(150, BUSY)]
    kwargs = {k: v for k, v in REPLAY.items() if k != "seed"}
    table, runs = compare_over_seeds(phases, 300.0, [3, 4], phase_names=["before", "after"],
                                     **kwargs)
    assert list(table.columns[:2]) == ["seed", "policy_name"] and set(runs) == {3, 4}
    one, _ = compare_policies(phases, 300.0, phase_names=["before", "after"], **REPLAY)
    same = table[table.seed == 3].drop(columns="seed").reset_index(drop=True)
    assert same.drop(columns="policy").equals(one.drop(columns="policy"))
    other = table[table.seed == 4].set_index(["policy_name", "phase"])
    assert not np.allclose(other.cost_ms, same.set_index(["policy_name", "phase"]).cost_ms)
    with pytest.raises(InvalidInputError):
        compare_over_seeds(phases, 300.0, [3, 3], **kwargs)
    with pytest.raises(InvalidInputError):
        compare_over_seeds(phases, 300.0, [3], **REPLAY)  # the seed comes from the seeds
