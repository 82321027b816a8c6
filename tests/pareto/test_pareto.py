"""mmcache.pareto: convex fronts (weighted sum, ε-constraint), hypervolume, fits, errors."""

from __future__ import annotations

import numpy as np
import pytest

from mmcache.errors import ConvexityError, InvalidInputError, MMCacheError, SolverError
from mmcache.pareto import (CapacityLatencyModel, Domain, ParetoBound, check_status, fit_model,
                            fit_hit_rate_latency, hypervolume, hypervolume_gap, lower_envelope,
                            non_dominated, objectives, simplex_weights, supported)

MODEL = CapacityLatencyModel(l0=100.0, alpha=2.0, beta=30.0, gamma=80.0)
DOMAIN = Domain(c_min=0.5, c_max=20.0)
SOLVER_TOL = 1e-5  # Clarabel's default feasibility/gap tolerances are ~1e-8; leave margin


@pytest.fixture(scope="module")
def bound() -> ParetoBound:
    return ParetoBound(MODEL, DOMAIN)


# --- hypervolume: hand-computed values ---------------------------------------------------

def test_hypervolume_2d_staircase() -> None:
    # x in [1,2]: y from 3 to 4 (1); [2,3]: 2..4 (2); [3,4]: 1..4 (3)
    assert hypervolume([[1, 3], [2, 2], [3, 1]], [4, 4]) == pytest.approx(6.0)


def test_hypervolume_3d_box_and_union() -> None:
    assert hypervolume([[1, 1, 1]], [2, 3, 4]) == pytest.approx(1 * 2 * 3)
    # boxes 2·2·1 and 1·1·2 overlap in [1,2]^3 (volume 1)
    assert hypervolume([[0, 0, 1], [1, 1, 0]], [2, 2, 2]) == pytest.approx(4 + 2 - 1)


def test_hypervolume_ignores_dominated_points_and_points_beyond_ref() -> None:
    base = hypervolume([[1, 3], [2, 2], [3, 1]], [4, 4])
    assert hypervolume([[1, 3], [2, 2], [3, 1], [3, 3], [5, 0.5]], [4, 4]) == pytest.approx(base)
    assert hypervolume([[5, 5]], [4, 4]) == 0.0


def test_hypervolume_rejects_bad_input() -> None:
    with pytest.raises(InvalidInputError):
        hypervolume([[1, 2, 3]], [4, 4])
    with pytest.raises(InvalidInputError):
        hypervolume([[1, np.nan]], [4, 4])
    with pytest.raises(InvalidInputError):
        hypervolume([1, 2], [4, 4])


def test_hypervolume_gap_is_the_missing_share() -> None:
    gap = hypervolume_gap([[1, 1]], [[2, 2]], [3, 3])
    assert gap == pytest.approx((4 - 1) / 4)
    assert hypervolume_gap([[1, 1]], [[1, 1]], [3, 3]) == pytest.approx(0.0)


# --- fronts --------------------------------------------------------------------------------

def test_weighted_sum_front_is_non_dominated(bound: ParetoBound) -> None:
    weights = simplex_weights(60, seed=1)
    weights = weights[(weights > 1e-3).all(axis=1)]  # strictly positive weights: Pareto optimal
    F = bound.weighted_sum(weights).objectives()
    scaled = F / F.max(axis=0)
    # no solution dominates another by more than the solver's tolerance
    for j in range(len(F)):
        better = (scaled <= scaled[j] - SOLVER_TOL).all(axis=1)
        assert not better.any()
    assert non_dominated(np.round(scaled, 4)).sum() >= 0.9 * len(F)


def test_front_is_monotone_in_each_trade_off(bound: ParetoBound) -> None:
    caps = np.linspace(DOMAIN.c_min, DOMAIN.c_max, 12)
    by_capacity = bound.epsilon_constraint(caps, 0.5)
    assert (np.diff(by_capacity.latency) <= SOLVER_TOL * MODEL.l0).all()
    assert np.diff(by_capacity.latency).min() < -1.0  # capacity really buys latency
    slack = np.linspace(0.0, 1.0, 12)
    by_slack = bound.epsilon_constraint(DOMAIN.c_max, slack)
    assert (np.diff(by_slack.latency) <= SOLVER_TOL * MODEL.l0).all()
    # a heavier latency weight (capacity and consistency weights in fixed ratio) never raises
    # the latency of the solution
    w_lat = np.linspace(0.05, 0.9, 10)
    path = np.column_stack([(1 - w_lat) / 2, w_lat, (1 - w_lat) / 2])
    assert (np.diff(bound.weighted_sum(path).latency) <= SOLVER_TOL * MODEL.l0).all()


def test_weighted_sum_and_epsilon_constraint_agree_on_a_convex_instance(bound) -> None:
    weights = simplex_weights(25, seed=2)
    weights = weights[(weights > 0.02).all(axis=1)]
    ws = bound.weighted_sum(weights)
    ec = bound.epsilon_constraint(ws.capacity + 1e-7, 1 - ws.consistency + 1e-7)
    np.testing.assert_allclose(ec.latency, ws.latency, rtol=1e-4)
    np.testing.assert_allclose(ec.capacity, ws.capacity, rtol=1e-3)


def test_front_solutions_lie_in_the_domain(bound: ParetoBound) -> None:
    front = bound.weighted_sum(simplex_weights(20, seed=3))
    assert (front.capacity >= DOMAIN.c_min).all() and (front.capacity <= DOMAIN.c_max).all()
    assert (front.consistency >= 0).all() and (front.consistency <= 1).all()
    np.testing.assert_allclose(front.latency, MODEL.latency(front.capacity, front.consistency))


def test_vertex_weights_reach_the_extremes(bound: ParetoBound) -> None:
    front = bound.weighted_sum(np.eye(3))
    assert front.capacity[0] == pytest.approx(DOMAIN.c_min, rel=1e-4)  # capacity only
    assert front.consistency[2] == pytest.approx(1.0, abs=1e-4)  # consistency only
    # latency only: C = c_max, I at the quadratic's minimum β / (β + γ)
    assert front.capacity[1] == pytest.approx(DOMAIN.c_max, rel=1e-4)
    assert front.consistency[1] == pytest.approx(MODEL.beta / (MODEL.beta + MODEL.gamma),
                                                 abs=1e-3)


def test_seed_form_without_consistency_cost_has_no_consistency_trade_off() -> None:
    seed_form = ParetoBound(CapacityLatencyModel(100.0, 2.0, 30.0), DOMAIN)
    front = seed_form.weighted_sum(simplex_weights(15, seed=4)[3:])
    np.testing.assert_allclose(front.consistency, 1.0, atol=1e-4)  # I = 1 wins everything


# --- convexity and solver status -----------------------------------------------------------

def test_both_problems_are_dpp_so_they_compile_once(bound: ParetoBound) -> None:
    assert bound._weighted.is_dcp(dpp=True) and bound._constrained.is_dcp(dpp=True)


@pytest.mark.parametrize("params, term", [
    ({"alpha": -1.0}, "α/C"), ({"beta": -0.5}, "β·(1 − I)²"), ({"gamma": -2.0}, "γ·I²"),
    ({"l0": 0.0}, "L0")])
def test_non_convex_parameters_raise_an_explained_error(params, term) -> None:
    model = CapacityLatencyModel(**{"l0": 1.0, "alpha": 1.0, "beta": 1.0, "gamma": 1.0,
                                    **params})
    with pytest.raises(ConvexityError) as err:
        ParetoBound(model, DOMAIN)
    message = str(err.value)
    assert term in message and "not convex" in message and ">= 0" in message
    assert isinstance(err.value, MMCacheError) and isinstance(err.value, ValueError)


def test_set_model_rejects_a_non_convex_model_and_keeps_the_old_one() -> None:
    bound = ParetoBound(MODEL, DOMAIN)
    with pytest.raises(ConvexityError):
        bound.set_model(CapacityLatencyModel(1.0, 1.0, -1.0))
    assert bound.model == MODEL
    bound.weighted_sum(np.eye(3))  # still solvable


def test_capacity_domain_must_be_positive() -> None:
    with pytest.raises(ConvexityError, match="C > 0"):
        Domain(c_min=0.0, c_max=1.0)


def test_infeasible_epsilon_raises_solver_error(bound: ParetoBound) -> None:
    with pytest.raises(SolverError, match="infeasible"):
        bound.epsilon_constraint(DOMAIN.c_min / 2, 0.5)


def test_every_solve_checks_its_status(monkeypatch) -> None:
    import mmcache.pareto.bound as pareto

    seen = []
    monkeypatch.setattr(pareto, "check_status",
                        lambda status, point: seen.append(status) or check_status(status, point))
    bound = ParetoBound(MODEL, DOMAIN)
    bound.weighted_sum(simplex_weights(7))
    bound.epsilon_constraint([5.0, 10.0], 0.3)
    assert seen == ["optimal"] * 9
    with pytest.raises(SolverError, match="optimal_inaccurate"):
        check_status("optimal_inaccurate", "a test point")


def test_weights_must_lie_on_the_simplex(bound: ParetoBound) -> None:
    with pytest.raises(InvalidInputError):
        bound.weighted_sum([[0.5, 0.5, 0.5]])
    with pytest.raises(InvalidInputError):
        bound.weighted_sum([[1.5, -0.5, 0.0]])


def test_simplex_weights() -> None:
    w = simplex_weights(100, seed=0)
    assert w.shape == (100, 3) and (w >= 0).all()
    np.testing.assert_allclose(w.sum(axis=1), 1.0)
    np.testing.assert_array_equal(w[:3], np.eye(3))


# --- fits, envelopes, supported points -----------------------------------------------------

def _grid(model, noise=0.0, seed=0):
    c, i = np.meshgrid(np.linspace(0.5, 10, 8), np.linspace(0, 1, 6))
    lat = model.latency(c, i) * (1 + noise * np.random.default_rng(seed).standard_normal(c.shape))
    return c.ravel(), i.ravel(), lat.ravel()


def test_fit_recovers_known_parameters() -> None:
    fit = fit_model(*_grid(MODEL))
    for name in ("l0", "alpha", "beta", "gamma"):
        assert getattr(fit.model, name) == pytest.approx(getattr(MODEL, name), rel=1e-3)
    assert fit.relative_rmse < 1e-6 and fit.r2 > 0.999999 and fit.at_bound == ()


def test_fit_pins_parameters_the_data_wants_negative() -> None:
    c, i, _ = _grid(MODEL)
    lat = CapacityLatencyModel(100.0, 2.0, 0.0, 80.0).latency(c, i) - 20.0 * (1 - i) ** 2
    fit = fit_model(c, i, lat)
    assert "beta" in fit.at_bound and fit.model.beta == pytest.approx(0.0, abs=1e-6)
    seed_form = fit_model(c, i, lat, consistency_cost=False)
    assert seed_form.model.gamma == 0.0 and seed_form.relative_rmse > fit.relative_rmse
    assert set(seed_form.as_dict()) >= {"l0", "alpha", "beta", "gamma", "rmse", "r2"}


def test_fit_rejects_bad_data() -> None:
    with pytest.raises(InvalidInputError):
        fit_model([1, 2], [0, 1], [1, 2])
    with pytest.raises(InvalidInputError):
        fit_model([0, 1, 2, 3, 4], [0, 1, 0, 1, 0], [1, 2, 3, 4, 5])


@pytest.mark.parametrize("seed", range(30))
def test_lower_envelope_lies_at_or_below_every_measurement(seed: int) -> None:
    c, i, lat = _grid(MODEL, noise=0.05, seed=seed)
    env, factor = lower_envelope(MODEL, c, i, lat)
    assert 0 < factor < 1 and env == MODEL.scaled(factor)
    assert (env.latency(c, i) <= lat).all()  # exactly: notebook 05 counts points below it
    assert np.isclose(env.latency(c, i) / lat, 1.0).any()  # touches the data


def test_lower_envelope_of_a_fit() -> None:
    c, i, lat = _grid(MODEL, noise=0.05, seed=1)
    env, factor = lower_envelope(fit_model(c, i, lat).model, c, i, lat)
    assert 0 < factor < 1 and (env.latency(c, i) <= lat).all()


def test_supported_marks_the_convex_hull_only() -> None:
    # (2, 2) is non-dominated but lies above the segment from (1, 2.5) to (4, 0)
    F = np.array([[0, 4], [1, 2.5], [2, 2], [4, 0], [3, 3]])
    assert non_dominated(F).tolist() == [True, True, True, True, False]
    assert supported(F).tolist() == [True, True, False, True, False]


def test_hit_rate_latency_fit() -> None:
    h = np.linspace(0.1, 0.8, 9)
    fit = fit_hit_rate_latency(h, 500.0 - 480.0 * h)
    assert fit.hit_ms == pytest.approx(20.0) and fit.miss_ms == pytest.approx(500.0)
    assert fit.rmse < 1e-6
    np.testing.assert_allclose(fit.latency([0.0, 1.0]), [500.0, 20.0])


def test_objectives_stack_inconsistency() -> None:
    np.testing.assert_allclose(objectives([1, 2], [10, 20], [0.25, 1.0]),
                               [[1, 10, 0.75], [2, 20, 0.0]])


# --- conditioning: instances that left Clarabel at optimal_inaccurate before the rescaling --

# Found by a random sweep over model parameters: a capacity term that barely moves latency
# (α/C ~ 1e-3 — an unbounded epigraph of 1/C drifted) and ε-bounds exactly at c_min (C pinned
# through the cone).
ILL_CONDITIONED = [
    (CapacityLatencyModel(1.327, 2.23e-4, 757.9, 43.63), Domain(0.1879, 4.771, 0.0, 0.8647)),
    (CapacityLatencyModel(292.7, 1.219e-3, 0.0, 879.0), Domain(0.02114, 4.011, 0.0, 0.8403)),
    (CapacityLatencyModel(2.653, 0.5454, 194.0, 2.362), Domain(0.5265, 12.36, 0.0, 0.9551)),
]


@pytest.mark.parametrize("model, domain", ILL_CONDITIONED)
def test_badly_scaled_models_solve_to_optimal(model, domain) -> None:
    bound = ParetoBound(model, domain)
    front = bound.weighted_sum(simplex_weights(30))  # raises SolverError unless all optimal
    assert (front.capacity >= domain.c_min).all() and (front.capacity <= domain.c_max).all()
    caps, slack = np.meshgrid(np.geomspace(domain.c_min, domain.c_max, 6),
                              np.linspace(1 - domain.i_max, 1 - domain.i_min, 6))
    eps = bound.epsilon_constraint(caps.ravel(), slack.ravel())
    assert (eps.capacity <= caps.ravel() * (1 + 1e-6)).all()
    # the ε solutions are the model's minima at their bounds: C at its bound, I as high as allowed
    # unless the I² cost pulls it lower
    i_best = np.clip(model.beta / (model.beta + model.gamma), 1 - slack.ravel(), domain.i_max)
    np.testing.assert_allclose(eps.latency, model.latency(caps.ravel(), i_best), rtol=1e-5)


@pytest.mark.parametrize("margin", [1e-9, 3e-9, 1e-8, 3e-8])
def test_epsilon_bounds_a_sliver_inside_the_domain_edge_solve_to_optimal(margin: float) -> None:
    # notebook 05's check: ε-bounds just above weighted-sum solutions that lie on the edge
    # i = i_max; Clarabel's default settings stopped at optimal_inaccurate on a few of them
    model = CapacityLatencyModel(139.48, 0.11639, 21.969, 59.877)
    domain = Domain(c_min=0.29778, c_max=3.5733, i_min=0.0, i_max=14 / 15)
    caps, slack = np.meshgrid(np.geomspace(domain.c_min, domain.c_max, 60),
                              np.linspace(1 - domain.i_max, 1 - domain.i_min, 15))
    caps, slack = caps.ravel() + margin, slack.ravel() + margin
    front = ParetoBound(model, domain).epsilon_constraint(caps, slack)  # SolverError unless optimal
    i_best = np.clip(model.beta / (model.beta + model.gamma), 1 - slack, domain.i_max)
    np.testing.assert_allclose(front.latency, model.latency(caps, i_best), rtol=SOLVER_TOL)


def test_epsilon_bounds_must_be_positive(bound: ParetoBound) -> None:
    with pytest.raises(InvalidInputError):
        bound.epsilon_constraint(0.0, 0.5)
    with pytest.raises(InvalidInputError):
        bound.epsilon_constraint(5.0, np.nan)
