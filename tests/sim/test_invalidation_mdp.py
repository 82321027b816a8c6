"""mmcache.sim.invalidation_mdp: the solver against hand-solved chains, value iteration against
exact policy evaluation, regret, the sliding-window estimator, the cost table, bad input."""

from __future__ import annotations

import math

import numpy as np
import pytest

from mmcache.errors import ConfigError, InvalidInputError
from mmcache.sim.invalidation_mdp import (MDP, Action, CostParams, State, TransitionEstimator,
                                          cost_matrix, evaluate_policy, fixed_policy, regret,
                                          value_iteration)

TOL = 1e-10


def two_state_chain(p: float, q: float, c0: float, c1: float) -> MDP:
    """One action: state 0 moves to 1 with probability p, state 1 to 0 with probability q."""
    return MDP([[[1 - p, p], [q, 1 - q]]], [[c0], [c1]])


def test_solver_matches_the_closed_form_of_a_two_state_chain():
    """V = (I - γP)⁻¹ c, with the 2×2 inverse written out by hand."""
    p, q, c0, c1, g = 0.3, 0.6, 1.0, 5.0, 0.9
    a, b = 1 - g * (1 - p), 1 - g * (1 - q)  # I - γP = [[a, -γp], [-γq, b]]
    det = a * b - g * g * p * q
    expected = [(b * c0 + g * p * c1) / det, (g * q * c0 + a * c1) / det]
    mdp = two_state_chain(p, q, c0, c1)
    np.testing.assert_allclose(evaluate_policy(mdp, [0, 0], g), expected, rtol=1e-12)
    np.testing.assert_allclose(value_iteration(mdp, g, TOL).value, expected, atol=TOL)


def stay_or_leave(b: float) -> MDP:
    """State 0: action 0 stays there at cost 2, action 1 moves to state 1 at cost ``b``;
    state 1 is absorbing at cost 1 per step whatever the action."""
    transition = [[[1, 0], [0, 1]], [[0, 1], [0, 1]]]
    return MDP(transition, [[2.0, b], [1.0, 1.0]])


@pytest.mark.parametrize("b, best", [(10.9, 1), (11.1, 0)])
def test_optimal_policy_flips_where_the_hand_computed_cost_is_crossed(b, best):
    """From state 0, staying costs 2/(1-γ) = 20 and leaving b + γ/(1-γ) = b + 9 (γ = 0.9):
    leaving is optimal below b = 11, staying above."""
    solution = value_iteration(stay_or_leave(b), 0.9, TOL)
    assert solution.policy[0] == best
    assert solution.value[0] == pytest.approx(min(20.0, b + 9.0), abs=TOL)


def random_mdp(seed: int) -> MDP:
    """A seeded MDP of the cache's shape with the default cost table."""
    rng = np.random.default_rng(seed)
    return MDP(rng.dirichlet(np.ones(len(State)), size=(len(Action), len(State))), cost_matrix())


@pytest.mark.parametrize("discount", [0.5, 0.9, 0.99])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_value_iteration_agrees_with_the_exact_value_of_its_greedy_policy(seed, discount):
    mdp, tol = random_mdp(seed), 1e-6
    solution = value_iteration(mdp, discount, tol)
    exact = evaluate_policy(mdp, solution.policy, discount)
    assert np.abs(solution.value - exact).max() < tol
    assert solution.iterations >= 1


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_regret_is_nonnegative_for_fixed_policies_and_zero_for_the_optimum(seed):
    mdp, discount = random_mdp(seed), 0.9
    for action in Action:
        assert (regret(mdp, fixed_policy(mdp, action), discount, TOL) >= -TOL).all(), action
    optimal = value_iteration(mdp, discount, TOL).policy
    np.testing.assert_array_equal(regret(mdp, optimal, discount, TOL), 0.0)


def test_regret_is_positive_for_a_policy_that_is_worse():
    """In the stay-or-leave MDP at b = 5, staying costs 20 and leaving 14 from state 0."""
    np.testing.assert_allclose(regret(stay_or_leave(5.0), [0, 0], 0.9), [6.0, 0.0], atol=1e-9)


#: A transition matrix for PRELOAD, rows far from uniform.
KNOWN = np.array([[0.70, 0.20, 0.05, 0.05],
                  [0.50, 0.30, 0.15, 0.05],
                  [0.40, 0.10, 0.30, 0.20],
                  [0.10, 0.10, 0.20, 0.60]])


def test_estimator_recovers_a_known_transition_matrix():
    """20,000 events (5,000 per state, all inside the window): the standard error of an entry
    is at most √(0.25/5000) ≈ 0.007, so 0.02 is about three of them."""
    rng, n = np.random.default_rng(30), 20_000
    states = rng.integers(0, len(State), n)
    nexts = (rng.random(n)[:, None] > KNOWN.cumsum(axis=1)[states, :-1]).sum(axis=1)
    est = TransitionEstimator(window_s=10.0)
    for i, (s, t) in enumerate(zip(states, nexts)):
        est.observe(i * 1e-4, int(s), Action.PRELOAD, int(t), 1.0)
    assert len(est) == n
    mdp = est.estimate()
    assert np.abs(mdp.transition[Action.PRELOAD] - KNOWN).max() < 0.02
    np.testing.assert_array_equal(mdp.transition[Action.BYPASS], 0.25)


def test_estimator_forgets_events_older_than_the_window():
    est = TransitionEstimator(window_s=10.0)
    for t in range(5):
        est.observe(float(t), State.HIT, Action.BLOCK, State.STALE, 7.0)
    est.observe(14.0, State.HIT, Action.BLOCK, State.HIT, 3.0)  # drops t = 0..4 (<= 14 - 10)
    assert len(est) == 1
    mdp = est.estimate()
    np.testing.assert_allclose(mdp.transition[Action.BLOCK, State.HIT], [2 / 5, 1 / 5, 1 / 5, 1 / 5])
    assert mdp.cost[State.HIT, Action.BLOCK] == 3.0
    emptied = est.estimate(now=24.0)
    assert len(est) == 0
    np.testing.assert_array_equal(emptied.transition, 0.25)
    np.testing.assert_array_equal(emptied.cost, cost_matrix())


def test_estimator_keeps_events_just_inside_the_window():
    est = TransitionEstimator(window_s=10.0)
    est.observe(0.0, State.STALE, Action.PRELOAD, State.HIT, 1.0)
    est.estimate(now=9.999)
    assert len(est) == 1


def test_estimator_smooths_by_adding_one_and_averages_costs_with_a_prior():
    prior = np.full((len(State), len(Action)), 42.0)
    est = TransitionEstimator(prior_cost=prior)
    for time, nxt, cost in [(0.0, State.HIT, 1.0), (0.1, State.HIT, 2.0), (0.2, State.HIT, 3.0),
                            (0.3, State.MISS_FAILED, 10.0)]:
        est.observe(time, State.MISS_LOADING, Action.BLOCK, nxt, cost)
    mdp = est.estimate()
    np.testing.assert_allclose(mdp.transition[Action.BLOCK, State.MISS_LOADING],
                               [4 / 8, 1 / 8, 1 / 8, 2 / 8])
    np.testing.assert_array_equal(mdp.transition[Action.BLOCK, State.HIT], 0.25)
    assert mdp.cost[State.MISS_LOADING, Action.BLOCK] == 4.0
    assert mdp.cost[State.MISS_LOADING, Action.BYPASS] == 42.0


def test_estimator_refuses_time_going_backwards_and_bad_events():
    est = TransitionEstimator()
    est.observe(5.0, State.HIT, Action.PRELOAD, State.HIT, 1.0)
    with pytest.raises(InvalidInputError, match="backwards"):
        est.observe(4.0, State.HIT, Action.PRELOAD, State.HIT, 1.0)
    with pytest.raises(InvalidInputError, match="backwards"):
        est.estimate(now=4.0)
    with pytest.raises(InvalidInputError, match="state"):
        est.observe(6.0, 4, Action.PRELOAD, State.HIT, 1.0)
    with pytest.raises(InvalidInputError, match="cost"):
        est.observe(6.0, State.HIT, Action.PRELOAD, State.HIT, math.nan)
    assert len(est) == 1
    with pytest.raises(ConfigError, match="window_s"):
        TransitionEstimator(window_s=0.0)


def test_cost_matrix_follows_its_table():
    params = CostParams(hit_ms=1, backend_ms=100, blocked_wait_ms=30, staleness_penalty_ms=50,
                        backend_load_penalty_ms=10)
    expected = [[1 + 10, 1, 100 + 10],             # HIT
                [1 + 50 + 10, 100 + 10, 100 + 10],  # STALE
                [100 + 2 * 10, 30, 100 + 10],       # MISS_LOADING
                [100 + 2 * 10, 100 + 10, 100 + 10]]  # MISS_FAILED
    np.testing.assert_array_equal(cost_matrix(params), expected)
    with pytest.raises(ConfigError, match="backend_ms"):
        CostParams(backend_ms=-1.0)


GOOD_P = [[[0.5, 0.5], [0.2, 0.8]]]


@pytest.mark.parametrize("transition, cost, match", [
    ([[[0.5, 0.6], [0.2, 0.8]]], [[1.0], [1.0]], r"sums to"),
    ([[[1.5, -0.5], [0.2, 0.8]]], [[1.0], [1.0]], r"negative"),
    ([[[np.nan, 0.5], [0.2, 0.8]]], [[1.0], [1.0]], r"NaN"),
    (GOOD_P, [[np.nan], [1.0]], r"NaN"),
    (GOOD_P, [[1.0, 1.0], [1.0, 1.0]], r"shape \(states, actions\)"),
    ([[0.5, 0.5], [0.2, 0.8]], [[1.0], [1.0]], r"shape \(actions, states, states\)"),
    ([[[0.5, 0.5]]], [[1.0]], r"shape \(actions, states, states\)"),
])
def test_invalid_mdps_are_refused(transition, cost, match):
    with pytest.raises(InvalidInputError, match=match):
        MDP(transition, cost)


@pytest.mark.parametrize("discount", [0.0, 1.0, -0.1, 1.5, math.nan])
def test_discounts_outside_the_open_unit_interval_are_refused(discount):
    mdp = MDP(GOOD_P, [[1.0], [2.0]])
    with pytest.raises(ConfigError, match="discount"):
        value_iteration(mdp, discount)
    with pytest.raises(ConfigError, match="discount"):
        evaluate_policy(mdp, [0, 0], discount)


@pytest.mark.parametrize("policy", [[0], [0, 1], [0.0, 0.0]])
def test_invalid_policies_are_refused(policy):
    with pytest.raises(InvalidInputError, match="policy"):
        evaluate_policy(MDP(GOOD_P, [[1.0], [2.0]]), policy, 0.9)
