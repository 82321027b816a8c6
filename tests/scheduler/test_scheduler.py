"""The Lagrangian scheduler: controllers on a known plant, the decision, replay and live cache."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import mmcache
import mmcache.scheduler.decision as scheduler_module
from mmcache.sim.latency import LatencyModel
from mmcache.sim.cachebench import TierSpec, replay, three_tier
from mmcache.errors import ConfigError, InvalidInputError
from mmcache.metrics import CacheMetrics
from mmcache.scheduler import (CONTROLLERS, Controller, FirstOrderPlant, IController, Levers,
                               OffsetThreshold, Scheduler, WindowStats, compiles,
                               control_metrics, cosine_lr, demonstrate, make_controller,
                               run_plant, window_stats)
from mmcache.thresholds import DEFAULT_DELTA, StaticThreshold
from mmcache.types import MODALITIES
from mmcache.sim.workload import generate

TARGET = 0.92


# -- controllers ---------------------------------------------------------------------------
def test_seed_schedule_is_cosine_from_005_to_0001():
    assert cosine_lr(0, 100) == 0.05
    assert cosine_lr(100, 100) == 0.001 and cosine_lr(250, 100) == 0.001
    assert cosine_lr(50, 100) == pytest.approx(0.0255, abs=1e-15)
    assert cosine_lr(25, 100) == pytest.approx(0.001 + 0.0245 * (1 + math.cos(math.pi / 4)),
                                               abs=1e-15)
    lrs = [cosine_lr(t, 100) for t in range(101)]
    assert all(a > b for a, b in zip(lrs, lrs[1:]))


def test_i_controller_is_exactly_the_seed_update():
    c = IController(TARGET, horizon=4)
    measurements = [1.0, 0.5, 0.9, 1.0, 1.0, 0.95, 0.0]
    lam, expected = 0.0, []
    for t, m in enumerate(measurements):
        lr = 0.001 + 0.5 * 0.049 * (1 + math.cos(math.pi * min(t, 4) / 4))
        lam = max(0.0, lam + lr * (TARGET - m))
        expected.append(lam)
    assert [c.update(m) for m in measurements] == pytest.approx(expected, abs=1e-15)
    assert 0.0 in expected  # the max(0, ·) projection was exercised
    c.reset()
    assert (c.lam, c.steps) == (0.0, 0)


def test_i_overshoots_where_pid_settles_on_a_first_order_plant():
    scores = demonstrate(TARGET, windows=300)
    i, pid, pi = scores["I"], scores["PID"], scores["PI"]
    assert i["overshoot"] > 0.02  # the seed's integral-only ascent overshoots by 2 points
    assert pid["overshoot"] < i["overshoot"] / 5 and pi["overshoot"] < i["overshoot"] / 5
    assert pid["settling_windows"] < i["settling_windows"] / 2
    assert pid["violation_area"] < i["violation_area"]
    for adaptive in (i, pi, pid):
        assert abs(adaptive["steady_state_error"]) < 0.01
    # a fixed λ that is not the right one never settles
    assert scores["fixed"]["settling_windows"] == 300


def test_pid_settles_without_leaving_the_band_once_inside():
    hits, lams = run_plant(make_controller("PID", TARGET), FirstOrderPlant(), 300)
    settle = control_metrics(hits, TARGET)["settling_windows"]
    assert np.all(np.abs(hits[settle:] - TARGET) <= 0.01)
    assert abs(hits[settle - 1] - TARGET) > 0.01
    assert lams.min() >= 0.0


def test_pid_derivative_acts_on_the_measurement_with_the_violation_sign():
    d_only = make_controller("PID", 0.5, kp=0.0, ki=0.0, kd=1.0)
    assert d_only.update(0.5) == 0.0  # no previous measurement: no derivative
    assert d_only.update(0.4) == pytest.approx(0.1)  # hit rate falling: violation rising
    assert d_only.update(0.6) == 0.0  # rising: negative, clamped at 0
    d_only.target = 0.9  # a new target gives no derivative kick
    assert d_only.update(0.6) == 0.0
    at_most = make_controller("PID", 0.02, kp=0.0, ki=0.0, kd=1.0, at_least=False)
    at_most.update(0.01)
    assert at_most.update(0.05) == pytest.approx(0.04)  # error rate rising


def test_anti_windup_bounds_lambda_and_pid_recovers_after_a_long_infeasible_stretch():
    def infeasible_then_reachable(controller):
        plant = FirstOrderPlant(ceiling=0.85)  # target 0.92 unreachable
        _, lam_bad = run_plant(controller, plant, 1000)
        plant.ceiling = 0.99
        hits, lam_good = run_plant(controller, plant, 600)
        return lam_bad, lam_good, control_metrics(hits, TARGET)

    lam_bad, lam_good, pid = infeasible_then_reachable(make_controller("PID", TARGET,
                                                                       lam_max=0.5))
    assert lam_bad.max() <= 0.5 and lam_good.max() <= 0.5
    assert pid["settling_windows"] <= 200  # measured 155 windows; bound = lam_max / (ki·overshoot)
    _, lam_i, seed_i = infeasible_then_reachable(make_controller("I", TARGET, horizon=1600))
    assert lam_i.max() > 2.5  # the seed's integral winds up without bound ...
    assert seed_i["settling_windows"] == 600  # ... and has not recovered 600 windows later


@settings(max_examples=60, deadline=None)
@given(st.sampled_from(sorted(CONTROLLERS)),
       st.lists(st.floats(-5.0, 5.0, allow_nan=False), min_size=1, max_size=60),
       st.floats(0.0, 1.0), st.floats(0.0, 3.0), st.booleans())
def test_lambda_is_never_negative(name, measurements, target, gain, at_least):
    params = {"fixed": {"lam": gain}, "I": {"horizon": 10},
              "PI": {"kp": gain, "ki": gain}, "PID": {"kp": gain, "ki": gain, "kd": gain},
              "PI-aim": {"kp": gain, "ki": gain}}[name]
    controller = make_controller(name, target, at_least=at_least, **params)
    assert all(controller.update(m) >= 0.0 for m in measurements)


def test_bad_measurement_changes_nothing():
    c = make_controller("PID", TARGET)
    c.update(0.5)
    state = (c.lam, c.integral, c.previous)
    for bad in (math.nan, math.inf, "0.9", None, True):
        with pytest.raises(InvalidInputError, match="measurement"):
            c.update(bad)
    assert (c.lam, c.integral, c.previous) == state


def test_unknown_controller_is_a_config_error_naming_the_known_ones():
    with pytest.raises(ConfigError, match=r"'PD'.*\['I', 'PI', 'PI-aim', 'PID', 'fixed'\]"):
        make_controller("PD", TARGET)
    with pytest.raises(ConfigError, match="bad parameters"):
        make_controller("PI", TARGET, kd=1.0)
    with pytest.raises(ConfigError, match="kp"):
        make_controller("PID", TARGET, kp=-1.0)


def test_a_new_controller_is_one_class_and_a_registry_line(monkeypatch):
    class Bang(Controller):
        name = "bang"

        def _step(self, measurement):
            self.lam = 1.0 if self.violation(measurement) > 0 else 0.0
            return self.lam

        def reset(self):
            self.lam = 0.0

    monkeypatch.setitem(CONTROLLERS, "bang", Bang)
    c = make_controller("bang", TARGET)
    assert (c.update(0.5), c.update(0.95)) == (1.0, 0.0)


# -- the decision --------------------------------------------------------------------------
def _stats(hit_rate, latency_ms, error_rate=0.0):
    return WindowStats(100, hit_rate, error_rate, latency_ms, 2 * latency_ms)


def test_scheduler_tries_every_setting_then_minimises_the_lagrangian():
    tight, loose = Levers({"text": -0.05}), Levers({"text": 0.1})
    # loose: more hits but slower (a trade-off); λ fixed so the argmin is known
    for lam, expected in ((0.0, 0), (10.0, 1)):
        s = Scheduler([tight, loose], {"hit_rate": make_controller("fixed", TARGET, lam=lam)},
                      objective_scale=100.0, explore=0.0)
        assert s.observe(_stats(0.80, 50.0)) is loose  # untried settings first
        for _ in range(3):
            s.observe(_stats(0.95, 80.0) if s.choice == 1 else _stats(0.80, 50.0))
        # L(tight) = 0.5 + λ·0.12, L(loose) = 0.8 − λ·0.03
        assert s.choice == expected
    assert [row["setting"] for row in s.history] == [0, 1, 1, 1]
    assert s.history[-1]["lambda_hit_rate"] == 10.0


def test_scheduler_estimates_are_moving_averages_and_empty_windows_change_nothing():
    s = Scheduler([Levers()], {}, smoothing=0.5)
    s.observe(_stats(0.8, 40.0))
    s.observe(_stats(0.6, 20.0))
    assert s.estimates[0]["hit_rate"] == pytest.approx(0.7)
    assert s.estimates[0]["mean_latency_ms"] == pytest.approx(30.0)
    s.observe(WindowStats(0, math.nan, math.nan, math.nan, math.nan))
    assert len(s.history) == 2
    with pytest.raises(InvalidInputError, match="hit_rate"):
        s.observe(WindowStats(5, math.nan, 0.0, 1.0, 1.0))
    assert len(s.history) == 2 and s.estimates[0]["hit_rate"] == pytest.approx(0.7)


def test_controllers_are_fed_the_filtered_measurement_once_every_setting_is_estimated():
    s = Scheduler([Levers()], {"hit_rate": make_controller("I", TARGET, horizon=10)},
                  signal_smoothing=0.25)
    s.observe(_stats(0.1, 10.0))  # the untried setting's window: not the controller's
    assert s.filtered == {} and s.lambdas["hit_rate"] == 0.0
    for hit_rate in (0.8, 0.4, 0.6):
        s.observe(_stats(hit_rate, 10.0))
    # the exponentially weighted mean of the fed windows, weights 0.75² : 0.75 : 1
    expected = (0.5625 * 0.8 + 0.75 * 0.4 + 0.6) / (0.5625 + 0.75 + 1)
    assert s.filtered["hit_rate"] == pytest.approx(expected)
    assert s.history[-1]["filtered_hit_rate"] == pytest.approx(expected)
    assert s.history[1]["filtered_hit_rate"] == pytest.approx(0.8)  # the first, at full weight
    seed_update = make_controller("I", TARGET, horizon=10)
    for fed in (0.8, (0.75 * 0.8 + 0.4) / 1.75):
        seed_update.update(fed)
    assert s.lambdas["hit_rate"] == pytest.approx(seed_update.update(expected))
    s.reset()
    assert s.filtered == {} and s.lambdas["hit_rate"] == 0.0


def test_exploration_is_seeded_and_happens_at_about_the_stated_share():
    def choices(seed):
        s = Scheduler([Levers(), Levers(admit=0.5)],
                      {"hit_rate": make_controller("fixed", TARGET, lam=0.0)},
                      explore=0.2, seed=seed)
        for _ in range(400):
            s.observe(_stats(0.9, 10.0) if s.choice == 0 else _stats(0.9, 90.0))
        return [row["setting"] for row in s.history]

    first = choices(1)
    assert first == choices(1)
    assert 0.03 < np.mean(first[2:]) < 0.2  # a random pick is setting 1 half the time: ~10%


@pytest.mark.parametrize("bad, match", [
    ({"settings": []}, "non-empty"),
    ({"constraints": {"latency": make_controller("fixed", 1.0)}}, "unknown constraint"),
    ({"constraints": {"error_rate": make_controller("PI", 0.02)}}, "at_least=False"),
    ({"explore": 1.0}, "explore"),
    ({"smoothing": 0.0}, "smoothing"),
    ({"signal_smoothing": 1.5}, "signal_smoothing"),
    ({"objective_scale": 0}, "objective_scale"),
])
def test_bad_scheduler_config_is_a_config_error(bad, match):
    kwargs = {"settings": [Levers()], "constraints": {}, **bad}
    with pytest.raises(ConfigError, match=match):
        Scheduler(kwargs.pop("settings"), kwargs.pop("constraints"), **kwargs)


@pytest.mark.parametrize("bad, match", [({"delta_offset": {"video": 0.1}}, "unknown modalit"),
                                        ({"delta_offset": {"text": 1.5}}, r"\(-1, 1\)"),
                                        ({"delta_offset": {"text": math.nan}}, "finite"),
                                        ({"admit": 1.2}, "probability"),
                                        ({"skip": "l3"}, "tier names")])
def test_bad_levers_are_a_config_error(bad, match):
    with pytest.raises(ConfigError, match=match):
        Levers(**bad)


def test_window_stats_are_the_difference_of_two_snapshots_or_all_after_a_reset():
    before, after = CacheMetrics(), CacheMetrics()
    for metrics, hits, misses in ((before, 10, 0), (after, 13, 1)):
        for _ in range(hits):
            metrics.hit("l1", "text", "fresh", None)
            metrics.time("get", 0.001)
        for _ in range(misses):
            metrics.count("misses", "text")
            metrics.time("get", 0.001)
    after.hit("l2", "text", "fresh", False)
    after.time("get", 0.001)
    stats = window_stats(before, after, miss_cost_ms=100.0)
    assert (stats.requests, stats.hit_rate, stats.error_rate) == (5, 0.8, 0.2)
    assert stats.mean_latency_ms == pytest.approx(1.0 + 100.0 * 0.2)
    after.reset()
    after.count("misses", "text")
    after.time("get", 0.002)
    stats = window_stats(before, after)
    assert (stats.requests, stats.hit_rate, stats.mean_latency_ms) == (1, 0.0, pytest.approx(2.0))


def test_offset_threshold_adds_offsets_to_the_inner_rules_delta():
    inner = StaticThreshold({"text": 0.1})
    rule = OffsetThreshold(inner)
    rule.offsets = {"text": -0.02, "image": 0.05}
    assert rule.deltas() == pytest.approx({"text": 0.08, "image": DEFAULT_DELTA + 0.05})
    assert not rule.accepts({"text": 0.915}) and rule.accepts({"text": 0.925})
    assert rule.floor("image") == pytest.approx(1 - DEFAULT_DELTA - 0.05)
    assert rule.delta is inner.delta  # anything else is the inner rule's


# -- where it runs: CacheBench-MM replay and a live TieredCache -----------------------------
@pytest.fixture(scope="module")
def stream():
    return generate(n_queries=300, n_intents=40, n_variants=4, novel_share=0.05, dim=32,
                    seed=5)


def _tiers(stream, threshold=0.9):
    return [TierSpec("L1", int(stream.size.sum() // 3), match="semantic", threshold=threshold)]


def _config(delta):
    return {"l2": {"index": "flat"},
            "thresholds": {"rule": "static", "delta": {m: delta for m in MODALITIES}}}


def _drive(cache, adapter, stream):
    """Every query through the live cache, storing admitted misses; per-query hit flags."""
    hits = []
    for i in range(len(stream)):
        query = stream.query(i, scope="t")
        hit = cache.get(query)
        hits.append(hit is not None)
        if hit is None and (adapter is None or adapter.admit()):
            cache.put(query, str(query.ground_truth))
    return np.array(hits)


def test_a_replay_levers_are_applied_per_request(stream):
    offset = {m: 0.05 for m in MODALITIES}
    scheduled = Scheduler([Levers(offset)], {}).replay(stream, _tiers(stream), window=64)
    assert scheduled.hit_rate == replay(stream, _tiers(stream, 0.85), limits=False).hit_rate
    assert scheduled.hit_rate > replay(stream, _tiers(stream), limits=False).hit_rate + 0.1
    assert np.array_equal(scheduled.latencies_ms,
                          replay(stream, _tiers(stream, 0.85), limits=False).latencies_ms)
    nothing_stored = Scheduler([Levers(admit=0.0)], {}).replay(stream, _tiers(stream))
    assert nothing_stored.hit_rate == 0.0


def test_a_replay_skips_the_tiers_a_setting_does_not_probe(stream):
    tiers = [TierSpec("L1", int(stream.size.sum() // 20), lookup_us=2.0),
             TierSpec("L2", int(stream.size.sum() // 3), match="semantic", threshold=0.85,
                      lookup_us=50.0)]
    probed = Scheduler([Levers()], {}).replay(stream, tiers)
    skipped = Scheduler([Levers(skip={"L2"})], {}).replay(stream, tiers)
    assert probed.hit_rate_per_tier["L2"] > 0.1 and skipped.hit_rate_per_tier["L2"] == 0.0
    assert skipped.hit_rate < probed.hit_rate
    inference = np.array([LatencyModel().inference_ms[MODALITIES[m]] for m in stream.modality])
    misses = skipped.latencies_ms > 100
    assert skipped.latencies_ms[misses] == pytest.approx(0.002 + inference[misses])  # no encode
    with pytest.raises(ConfigError, match=r"\['L3'\].*\['L1', 'L2'\]"):
        Scheduler([Levers(skip={"L3"})], {}).replay(stream, tiers)


def test_live_levers_are_applied_and_detach_restores_the_rule(stream):
    offset = {m: 0.05 for m in MODALITIES}
    with mmcache.TieredCache(_config(0.1)) as plain:
        expected = _drive(plain, None, stream)
    with mmcache.TieredCache(_config(0.05)) as unshifted:
        assert _drive(unshifted, None, stream).sum() < expected.sum() - 10  # the offset matters
    with mmcache.TieredCache(_config(0.05)) as cache:
        rule = cache.thresholds
        adapter = Scheduler([Levers(offset)], {}).attach(cache, window=50)
        assert np.array_equal(_drive(cache, adapter, stream), expected)
        assert isinstance(cache.thresholds, OffsetThreshold)
        assert cache.thresholds.deltas() == pytest.approx({m: 0.1 for m in MODALITIES})
        with pytest.raises(ConfigError, match="after_get"):
            Scheduler([Levers()], {}).attach(cache)
        adapter.detach()
        assert cache.thresholds is rule and cache.after_get is None


def test_one_scheduler_drives_a_replay_and_a_live_cache(stream):
    settings = [Levers({m: d for m in MODALITIES}, admit) for d, admit in
                ((-0.05, 1.0), (0.0, 1.0), (0.05, 1.0), (0.05, 0.5))]
    scheduler = Scheduler(settings, {"hit_rate": make_controller("PI", 0.6),
                                     "error_rate": make_controller("PI", 0.02, at_least=False)},
                          objective_scale=500.0, explore=0.1, seed=3)
    window = 30
    report = scheduler.replay(stream, _tiers(stream), window=window)
    windows = len(stream) // window
    replayed = list(scheduler.history)
    assert [row["setting"] for row in replayed[:4]] == [0, 1, 2, 3]
    assert [row["hit_rate"] for row in replayed] == pytest.approx(
        [(report.latencies_ms[k * window:(k + 1) * window] < 100).mean()
         for k in range(windows)])  # hits are sub-ms, misses pay inference: the same counts
    assert all(row[f"lambda_{m}"] >= 0 for row in replayed for m in ("hit_rate", "error_rate"))

    scheduler.reset()
    with mmcache.TieredCache(_config(1 - 0.9)) as cache:
        adapter = scheduler.attach(cache, window=window, miss_cost_ms=400.0)
        hits = _drive(cache, adapter, stream)
        live = scheduler.history
        assert len(live) == windows and [row["setting"] for row in live[:4]] == [0, 1, 2, 3]
        assert [row["hit_rate"] for row in live] == pytest.approx(
            hits[:windows * window].reshape(windows, window).mean(axis=1))
        assert [row["requests"] for row in live] == [window] * windows
        for row in live:  # the cache's own get time plus the assumed origin cost of each miss
            miss_cost = 400.0 * (1 - row["hit_rate"])
            assert miss_cost < row["mean_latency_ms"] < miss_cost + 50.0
        assert cache.thresholds.offsets == scheduler.levers.delta_offset
        adapter.detach()


def test_a_live_setting_that_skips_l3_never_reads_it(stream, tmp_path):
    config = {**_config(0.1), "l3": {"backend": "sqlite", "path": str(tmp_path / "l3.db")}}
    with mmcache.TieredCache(config) as cache:
        l3 = next(t for t in cache.tiers if t.name == "l3")
        reads = {"n": 0}
        for method in ("get", "search"):
            inner = getattr(l3, method)

            def counted(*args, _inner=inner, **kwargs):
                reads["n"] += 1
                return _inner(*args, **kwargs)
            setattr(l3, method, counted)
        window = 50
        scheduler = Scheduler([Levers(skip={"l3"}), Levers(skip={"l1", "l2"})], {},
                              explore=0.0)
        adapter = scheduler.attach(cache, window=window)
        assert cache.probe == {"l1", "l2"}
        per_get = []
        for i in range(2 * window):
            query = stream.query(i, scope="t")
            if cache.get(query) is None and adapter.admit():
                cache.put(query, str(query.ground_truth))
            per_get.append((reads["n"], cache.probe))
        assert per_get[window - 1][0] == 0  # the first window skips L3: not one read
        assert per_get[window][1] == {"l3"} and per_get[-1][0] > 0  # the second probes only L3
        assert [row["setting"] for row in scheduler.history] == [0, 1]
        adapter.detach()
        assert cache.probe is None
        with pytest.raises(ConfigError, match=r"\['l4'\]"):
            Scheduler([Levers(skip={"l4"})], {}).attach(cache)


def test_the_error_objective_picks_the_strictest_setting_unless_the_hit_target_binds(stream):
    settings = [Levers({m: d for m in MODALITIES}) for d in (0.0, 0.1)]
    free = Scheduler(settings, {}, objective="error_rate", explore=0.0)
    assert free.lagrangian({"error_rate": 0.03, "mean_latency_ms": 500.0}) == 0.03
    scaled = Scheduler(settings, {}, objective="error_rate", objective_scale=0.5)
    assert scaled.lagrangian({"error_rate": 0.03}) == pytest.approx(0.06)
    assert Scheduler(settings, {}).lagrangian({"mean_latency_ms": 500.0}) == 0.5  # seconds
    bound = Scheduler(settings, {"hit_rate": make_controller("fixed", 0.9, lam=5.0)},
                      objective="error_rate", explore=0.0)
    free.replay(stream, _tiers(stream), window=30)
    bound.replay(stream, _tiers(stream), window=30)
    assert {row["setting"] for row in free.history[2:]} == {0}
    assert {row["setting"] for row in bound.history[2:]} == {1}
    with pytest.raises(ConfigError, match="objective"):
        Scheduler(settings, {}, objective="p50")


# -- mixing two neighbouring settings (a Lagrangian relaxation's randomised optimum) --------
#: A toy plant: (hit rate, false-hit rate) per setting; setting 4 is dominated (fewer hits
#: and more false hits than setting 2), the others lie on a convex frontier whose
#: break-even multipliers (the chord slopes) are 0.1, 0.2 and 0.4.
TOY = [(0.6, 0.01), (0.7, 0.02), (0.8, 0.04), (0.9, 0.08), (0.75, 0.05)]


def _toy(mix="hit_rate"):
    controller = make_controller("fixed", 0.75, lam=0.0)
    s = Scheduler([Levers(admit=a / 10) for a in range(len(TOY))], {"hit_rate": controller},
                  objective="error_rate", explore=0.0, mix=mix)
    for hit_rate, error_rate in TOY:  # each setting tried once: its estimate is its window
        s.observe(_stats(hit_rate, 10.0, error_rate))
    return s, controller


def _expected_hit_rate(s, lam):
    s.constraints["hit_rate"].lam = lam
    a, b, w = s.mixture()
    assert 0.0 <= w <= 1.0
    return (1 - w) * TOY[a][0] + w * TOY[b][0]


def test_the_mixed_hit_rate_is_continuous_and_monotone_in_lambda():
    s, _ = _toy()
    lams = np.linspace(0.0, 0.6, 1201)
    expected = np.array([_expected_hit_rate(s, lam) for lam in lams])
    steps = np.diff(expected)
    assert steps.min() >= -1e-12  # monotone
    # continuous: the steepest segment rises 0.1 of hit rate over 0.1 of λ
    assert steps.max() <= (lams[1] - lams[0]) * 1.0 + 1e-9
    assert expected[0] == pytest.approx(0.6) and expected[-1] == pytest.approx(0.9)
    # between break-evens 0.2 and 0.4 it is linear: a quarter of the way, a quarter of the step
    assert _expected_hit_rate(s, 0.25) == pytest.approx(0.825)
    # the argmin alone is a staircase: a jump of a whole setting (0.1) at a break-even
    argmin = Scheduler(s.settings, s.constraints, objective="error_rate", explore=0.0)
    argmin.estimates = s.estimates
    picks = []
    for lam in (0.39, 0.41):
        s.constraints["hit_rate"].lam = lam
        picks.append(TOY[int(np.argmin([argmin.lagrangian(e) for e in argmin.estimates]))][0])
    assert picks[1] - picks[0] == pytest.approx(0.1)


def test_at_a_break_even_the_setting_is_picked_purely_and_dominated_ones_never():
    s, controller = _toy()
    for lam, setting in ((0.0, 0), (0.1, 1), (0.2, 2), (0.4, 3), (5.0, 3)):
        controller.lam = lam
        s.choice, s.mixed_with, s.weight = a, b, w = s.mixture()
        # the break-even's own float rounding may put it on either side of it
        assert (1 - w) * (a == setting) + w * (b == setting) == pytest.approx(1.0)
        assert s.split(400) == [(setting, 400)]
    for lam in np.linspace(0.0, 1.0, 101):
        controller.lam = lam
        assert 4 not in s.mixture()[:2]
    controller.lam = 0.15
    s.choice, s.mixed_with, s.weight = s.mixture()
    assert (s.choice, s.mixed_with, s.weight) == (1, 2, pytest.approx(0.5))
    assert s.split(400) == [(1, 200), (2, 200)]
    with pytest.raises(ConfigError, match="mix"):
        _toy(mix=None)[0].mixture()
    with pytest.raises(ConfigError, match="mix"):
        Scheduler([Levers()], {}, mix="hit_rate")


def test_the_multiplier_inverts_the_mixed_hit_rate():
    s, controller = _toy()
    for aim in np.linspace(0.61, 0.89, 29):
        assert _expected_hit_rate(s, s.multiplier(aim)) == pytest.approx(aim)
    assert s.multiplier(0.825) == pytest.approx(0.25)  # a quarter of the way from 0.2 to 0.4
    assert (s.multiplier(0.5), s.multiplier(0.95)) == (0.0, pytest.approx(0.4))
    for bad in (math.nan, math.inf, "0.8"):
        with pytest.raises(InvalidInputError, match="aim"):
            s.multiplier(bad)


def _closed_loop(name, params, *, objective_scale, windows=60, bias=0.03):
    """A toy scheduler whose window measures the mixture's hit rate of settings whose true
    hit rates lie ``bias`` below TOY's first estimates: the hit rates it measured."""
    controller = make_controller(name, 0.75, **params)
    s = Scheduler([Levers(admit=a / 10) for a in range(len(TOY))], {"hit_rate": controller},
                  objective="error_rate", objective_scale=objective_scale, explore=0.0,
                  mix="hit_rate", smoothing=0.3)
    truth = [(h - bias, e) for h, e in TOY]
    for hit_rate, error_rate in TOY:
        s.observe(_stats(hit_rate, 10.0, error_rate))
    for _ in range(windows):
        parts = [(k, WindowStats(n, truth[k][0], truth[k][1], 10.0, 20.0))
                 for k, n in s.split(100)]
        hit = sum(n * truth[k][0] for k, n in s.split(100)) / 100
        s.observe(WindowStats(100, hit, 0.0, 10.0, 20.0), parts)
    return np.array([row["hit_rate"] for row in s.history[len(TOY):]])


def test_an_aiming_pi_reaches_the_target_whatever_the_slope_of_hit_rate_in_lambda():
    # objective_scale divides the break-evens, so hit rate rises 20 times faster in λ at 0.05
    aim = {s: _closed_loop("PI-aim", {"kp": 0.5, "ki": 0.3}, objective_scale=s)
           for s in (1.0, 0.05)}
    np.testing.assert_allclose(aim[1.0], aim[0.05], atol=1e-9)  # the same run at either
    assert abs(aim[1.0][-10:].mean() - 0.75) < 0.002  # the estimates' bias integrated away
    pi = {s: _closed_loop("PI", {"kp": 0.5, "ki": 0.3, "lam_max": 20.0}, objective_scale=s)
          for s in (1.0, 0.05)}
    assert np.abs(pi[1.0] - pi[0.05]).max() > 0.01  # a PI on λ depends on the slope


def test_an_aiming_controller_bounds_its_integral_and_needs_the_mix():
    c = make_controller("PI-aim", 0.5, kp=0.0, ki=1.0, reach=0.1)
    for _ in range(50):  # a long infeasible stretch
        c.update(0.0)
    assert (c.integral, c.aim) == (pytest.approx(0.1), pytest.approx(0.6))
    c.update(0.55)
    assert c.aim == pytest.approx(0.55)  # one window's error back: no wound-up integral
    at_most = make_controller("PI-aim", 0.02, kp=1.0, ki=0.0, at_least=False)
    at_most.update(0.03)
    assert at_most.aim == pytest.approx(0.01)  # too many errors: aim lower
    with pytest.raises(ConfigError, match="aim"):
        Scheduler([Levers()], {"hit_rate": make_controller("PI-aim", 0.5)})


def test_a_split_window_teaches_each_part_its_own_requests():
    s, controller = _toy()
    controller.lam = 0.15
    s.observe(_stats(0.7, 10.0, 0.02))  # chooses the next window: half setting 1, half 2
    assert (s.choice, s.mixed_with, s.weight) == (1, 2, pytest.approx(0.5))
    before = {k: dict(s.estimates[k]) for k in (1, 2)}
    whole = WindowStats(100, 0.8, 0.035, 10.0, 20.0)
    s.observe(whole, [(1, WindowStats(50, 0.5, 0.02, 10.0, 20.0)),
                      (2, WindowStats(50, 1.0, 0.05, 10.0, 20.0))])
    for k, measured in ((1, 0.5), (2, 1.0)):  # weight: smoothing × the part's share (0.5)
        assert s.estimates[k]["hit_rate"] == pytest.approx(
            before[k]["hit_rate"] + 0.3 * 0.5 * (measured - before[k]["hit_rate"]))
    assert s.history[-1]["hit_rate"] == 0.8
    assert (s.history[-1]["setting"], s.history[-1]["mixed_with"]) == (1, 2)


def test_replay_and_live_serve_each_part_of_a_split_window_with_its_levers(stream):
    settings = [Levers({m: d for m in MODALITIES}) for d in (0.0, 0.1)]
    window = 30

    def mixed():
        # a target between the two settings' hit rates (about 0.51 and 0.80 here)
        pi = make_controller("PI", 0.6, kp=1.0, ki=0.1, lam_max=1.0)
        return Scheduler(settings, {"hit_rate": pi}, objective="error_rate", explore=0.0,
                         mix="hit_rate")
    replayed = mixed()
    replayed.replay(stream, _tiers(stream), window=window)
    split = [row for row in replayed.history[2:] if 0 < row["mix_weight"] < 1]
    assert split and all(row["mixed_with"] == 1 for row in split)
    scheduler = mixed()
    offsets = []
    with mmcache.TieredCache(_config(0.1)) as cache:
        adapter = scheduler.attach(cache, window=window)
        for i in range(len(stream)):
            offsets.append(cache.thresholds.offsets.get("text", 0.0))
            query = stream.query(i, scope="t")
            if cache.get(query) is None and adapter.admit():
                cache.put(query, str(query.ground_truth))
        adapter.detach()
    assert any(0 < row["mix_weight"] < 1 for row in scheduler.history)
    for k, row in enumerate(scheduler.history):
        served = offsets[k * window:(k + 1) * window]
        looser = int(round(row["mix_weight"] * window)) if row["mixed_with"] == 1 else 0
        first = 0.1 * (row["setting"] == 1)
        assert served == [first] * (window - looser) + [0.1] * looser


def test_a_compiled_replay_serves_every_window_as_the_request_by_request_one(monkeypatch):
    stream = generate(n_queries=2_000, n_intents=120, seed=8,
                      multimodal_mix={"text+image": 0.2, "image+audio": 0.1})
    tiers = three_tier(int(stream.size.sum() * 0.05))
    settings = [Levers({m: d for m in MODALITIES}) for d in (-0.05, 0.0, 0.05, 0.1)]

    def run():
        pi = make_controller("PI", 0.5, kp=3.0, ki=0.3, lam_max=3.0)
        scheduler = Scheduler(settings, {"hit_rate": pi}, objective="error_rate",
                              objective_scale=0.2, explore=0.1, mix="hit_rate", seed=3)
        report = scheduler.replay(stream, tiers, window=50, latency=LatencyModel(servers=2))
        return scheduler.history, report
    assert compiles(tiers, settings)
    history, report = run()
    monkeypatch.setattr(scheduler_module, "compiles", lambda *args: False)
    slow_history, slow_report = run()
    assert history == slow_history
    assert np.array_equal(report.latencies_ms, slow_report.latencies_ms)
    assert any(0 < row["mix_weight"] < 1 for row in history)  # split windows were served


def test_compiles_only_where_the_kernel_serves_as_serve_does():
    tiers, loose = three_tier(10**6), [Levers({"text": 0.1})]
    assert compiles(tiers, loose)
    assert not compiles(three_tier(10**6, policy="lfu"), loose)
    assert not compiles(tiers, [*loose, Levers(admit=0.5)])
    assert not compiles(tiers, [*loose, Levers(skip={"L1-gpu"})])
    assert not compiles(three_tier(10**6, threshold=0.1), [Levers({"text": 0.2})])  # floor < 0


# -- display -------------------------------------------------------------------------------
def test_a_scheduler_shows_its_settings_controllers_and_lambda():
    s = Scheduler([Levers({"text": -0.05}), Levers({"text": 0.1}, admit=0.5, skip={"L3"})],
                  {"hit_rate": make_controller("PI", TARGET, kp=0.4),
                   "error_rate": make_controller("fixed", 0.02, lam=2.0, at_least=False)},
                  objective_scale=100.0, explore=0.0)
    for hit_rate in (0.80, 0.95, 0.85):
        s.observe(_stats(hit_rate, 50.0))
    text = repr(s)
    assert "\n" not in text and "0x" not in text and len(text) < 300
    assert text.startswith("Scheduler(2 settings, objective='mean_latency_ms', constraints="
                           "{hit_rate: PIController(≥ 0.92, λ=")
    assert "error_rate: FixedController(≤ 0.02, λ=2)" in text and "windows=3" in text
    page = s._repr_html_()
    lam = s.lambdas["hit_rate"]
    for field in ("Constraints and controllers", "hit_rate", "PI", "≥ 0.92", "kp=0.4",
                  "error_rate", "fixed", "≤ 0.02", "Lever settings", "text=-0.05", "text=0.1",
                  "L3", "0.5", "Last window", "lambda_hit_rate", f"{lam:.4g}"):
        assert field in page, field
    history = s.to_dataframe()
    assert len(history) == 3 and history.lambda_hit_rate.iloc[-1] == lam
    assert list(history.setting[:2]) == [0, 1]


def test_a_fresh_scheduler_shows_itself():
    s = Scheduler([Levers()], {})
    assert repr(s).startswith("Scheduler(1 settings") and "windows=0" in repr(s)
    assert "display failed" not in s._repr_html_() and s.to_dataframe().empty
