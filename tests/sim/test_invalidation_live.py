"""mmcache.sim.invalidation_live: states read from a real TieredCache, what each action does to
it, the live estimator against the replay's on the same key class, determinism, bad input."""

from __future__ import annotations

import numpy as np
import pytest

from mmcache.errors import ConfigError, InvalidInputError
from mmcache.sim.invalidation_live import (live_cache, max_transition_gap, observe_state,
                                           phase_table, run_live, window_estimates,
                                           compare_live_replay)
from mmcache.sim.invalidation_mdp import Action, State
from mmcache.sim.invalidation_replay import KeyClass, Phase
from mmcache.types import Query

QUIET = KeyClass("quiet", rate_per_s=10, load_s=0.02, p_fail=0.0, p_update=0.0)
HOT = KeyClass("hot", rate_per_s=10, load_s=0.02, p_fail=0.1, p_update=0.2, p_evict=0.1)


def test_states_are_read_from_the_cache_answer_on_a_hand_made_sequence():
    now = [0.0]
    calls = []
    cache = live_cache(lambda: now[0], lambda q, h: calls.append(h.freshness), ttl_s=1.0)
    q = Query(text="k", scope="s")
    assert observe_state(cache.get(q), loading=False) == State.MISS_FAILED
    assert observe_state(cache.get(q), loading=True) == State.MISS_LOADING
    cache.put(q, "v")
    assert observe_state(cache.get(q), loading=False) == State.HIT
    now[0] = 2.0  # past the ttl: served stale, and on_stale asked for a refresh
    assert observe_state(cache.get(q), loading=False) == State.STALE
    assert calls == ["stale-while-revalidate"]
    assert observe_state(cache.get(q), loading=True) == State.STALE  # an entry held wins
    assert cache.invalidate(q)
    assert observe_state(cache.get(q), loading=False) == State.MISS_FAILED
    cache.close()


def fixed(action: Action) -> tuple[int, ...]:
    return (int(action),) * len(State)


def test_bypass_never_puts():
    run = run_live([Phase(0, HOT)], 30.0, window_s=10, resolve_every_s=5, epsilon=0.0,
                   warm=False, policy=fixed(Action.BYPASS))["key"]
    assert run.counters["puts"] == 0
    assert (run.states == State.MISS_FAILED).all()
    assert (run.actions == Action.BYPASS).all()
    assert run.counters["backend_calls"] == len(run.states)


def test_block_puts_and_the_next_request_hits():
    run = run_live([Phase(0, QUIET)], 20.0, window_s=10, resolve_every_s=5, epsilon=0.0,
                   warm=False, policy=fixed(Action.BLOCK))["key"]
    assert run.states[0] == State.MISS_FAILED
    assert run.counters["puts"] == 1  # the first request's blocking load, then only hits
    assert (run.states[1:] == State.HIT).all()


def test_preload_on_a_miss_loads_asynchronously_and_later_hits():
    run = run_live([Phase(0, QUIET)], 20.0, window_s=10, resolve_every_s=5, epsilon=0.0,
                   warm=False, policy=fixed(Action.PRELOAD))["key"]
    assert run.states[0] == State.MISS_FAILED
    first_hit = int(np.argmax(run.states == State.HIT))
    assert first_hit >= 1 and (run.states[1:first_hit] == State.MISS_LOADING).all()
    assert (run.states[first_hit:] == State.HIT).all()
    assert run.counters["puts"] >= 1


def test_stale_entries_are_refreshed_through_on_stale():
    kc = KeyClass("volatile", rate_per_s=10, load_s=0.01, p_fail=0.0, p_update=0.5)
    run = run_live([Phase(0, kc)], 30.0, window_s=10, resolve_every_s=5, epsilon=0.0,
                   policy=fixed(Action.PRELOAD))["key"]
    assert (run.states == State.STALE).any()
    assert run.counters["on_stale_refreshes"] > 0
    assert not np.isin(run.states, [State.MISS_LOADING, State.MISS_FAILED]).any()


def test_live_and_replay_estimates_agree_on_the_same_key_class():
    """Uniformly random actions (ε = 1) over 800 s at 10 requests/s, one window for the whole
    stream: every row seen at least 200 times is within 0.1 of the true transitions, and of
    the replay's estimate (the module docstring lists where the live chain departs)."""
    table, runs = compare_live_replay([Phase(0, HOT)], 800.0, window_s=800.0,
                                      resolve_every_s=100.0, epsilon=1.0, seed=0,
                                      min_row_count=200)
    assert set(table.source) == {"live", "replay"}
    assert (table.max_dp_vs_true < 0.1).all(), table
    assert (table.max_dp_vs_other < 0.1).all(), table
    live, replay = table.set_index("source").cost_ms[["live", "replay"]]
    assert abs(live - replay) / replay < 0.05
    assert np.array_equal(runs["live"].times, runs["replay"].times)  # the same arrivals


def test_the_estimated_policy_learns_on_the_live_cache():
    shift = KeyClass("hot", rate_per_s=20, load_s=0.02, p_fail=0.05, p_update=0.1)
    runs = run_live({"a": [Phase(0, shift)], "b": [Phase(0, HOT)]}, 120.0, window_s=60,
                    resolve_every_s=10, epsilon=0.05, seed=1)
    table = phase_table(runs)
    assert list(table.key) == ["a", "b"]
    for run in runs.values():
        late = run.times > 60
        assert run.regret[late].mean() <= run.regret[~late].mean() + 1e-9
        assert len(run.solves) >= 10


def test_a_seed_gives_the_same_run():
    kwargs = dict(window_s=20, resolve_every_s=5, epsilon=0.1, seed=7)
    a, b = (run_live([Phase(0, HOT), Phase(30, QUIET)], 60.0, **kwargs)["key"] for _ in range(2))
    for name in ("times", "phase", "states", "actions", "costs", "regret"):
        np.testing.assert_array_equal(getattr(a, name), getattr(b, name))
    assert a.solves == b.solves and a.counters == b.counters
    c = run_live([Phase(0, HOT), Phase(30, QUIET)], 60.0, **{**kwargs, "seed": 8})["key"]
    assert not np.array_equal(a.states, c.states) or a.times.size != c.times.size


def test_window_estimates_read_a_run_and_the_gap_is_nan_without_rows():
    run = run_live([Phase(0, HOT)], 20.0, window_s=20, resolve_every_s=5, epsilon=1.0)["key"]
    est = window_estimates(run.times, run.phase, run.states, run.actions, run.costs, 20.0)
    mdp, counts = est[0]
    assert counts.sum() == len(run.states) - 1
    assert np.isnan(max_transition_gap(mdp, mdp, counts, min_row_count=10 ** 6))
    assert max_transition_gap(mdp, mdp, counts, counts, 1) == 0.0


@pytest.mark.parametrize("kwargs, error", [
    ({"window_s": 0}, ConfigError), ({"resolve_every_s": float("nan")}, ConfigError),
    ({"discount": 1.0}, ConfigError), ({"epsilon": 1.5}, ConfigError),
    ({"ttl_s": 0}, ConfigError), ({"wall_latency_weight": -1}, ConfigError),
    ({"policy": (0, 1, 2)}, InvalidInputError), ({"policy": (0, 1, 2, 3)}, InvalidInputError),
])
def test_bad_parameters_raise(kwargs, error):
    base = dict(window_s=10, resolve_every_s=5)
    with pytest.raises(error):
        run_live([Phase(0, HOT)], 10.0, **{**base, **kwargs})


def test_bad_streams_raise():
    with pytest.raises(InvalidInputError):
        run_live({}, 10.0, window_s=10, resolve_every_s=5)
    with pytest.raises(InvalidInputError):
        run_live([Phase(1, HOT)], 10.0, window_s=10, resolve_every_s=5)
    with pytest.raises(InvalidInputError):
        run_live({"": [Phase(0, HOT)]}, 10.0, window_s=10, resolve_every_s=5)
    with pytest.raises(ConfigError):
        run_live([Phase(0, HOT)], -1.0, window_s=10, resolve_every_s=5)
    with pytest.raises(ConfigError):
        compare_live_replay([Phase(0, HOT)], 10.0, window_s=10, resolve_every_s=5,
                            min_row_count=0)
    with pytest.raises(InvalidInputError):
        compare_live_replay([Phase(0, HOT)], 10.0, window_s=10, resolve_every_s=5,
                            phase_names=["a", "b"])
