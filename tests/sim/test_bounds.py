"""opt_bounds and mmcache.sim.bounds: the lower bound is below every policy, the upper one a
feasible schedule's misses, FOO-L exact on unit sizes; bad input is refused."""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mmcache.sim.bounds import lagrange_max_hits, lower_bound, reuse_intervals
from mmcache.errors import ConfigError, InvalidInputError, TraceFormatError, UnknownPolicyError
from mmcache.paths import DATA_DIR
from mmcache.policies import POLICIES
from mmcache.sim.kernels import KERNELS
from mmcache.sim.replay import Trace, make_trace, read_oracle_general, simulate
from mmcache.sim.bounds import opt_bounds
from mmcache.sim.workload import zipf_trace

EXPECTATIONS = json.loads((DATA_DIR / "libcachesim_expectations_cloudPhysicsIO.json").read_text())


@st.composite
def variable_size_traces(draw, resize=False):
    """(trace, cache_size): up to 40 requests over up to 8 objects of 1..40 bytes each
    (``resize``: an object's size may change between its requests)."""
    n_obj = draw(st.integers(1, 8))
    ids = draw(st.lists(st.integers(0, n_obj - 1), min_size=1, max_size=40))
    sizes = draw(st.lists(st.integers(1, 40), min_size=n_obj, max_size=n_obj))
    per_request = [draw(st.integers(1, 40)) if resize else sizes[i] for i in ids]
    return make_trace(ids, per_request), draw(st.integers(1, 120))


def _misses_of_every_policy(trace, cache_size):
    return {name: simulate(trace, name, cache_size).miss_cnt for name in POLICIES}


@settings(max_examples=60, deadline=None)
@given(variable_size_traces())
def test_lower_bound_is_below_every_policy_and_upper_is_the_best_schedule(case):
    trace, cache_size = case
    misses = _misses_of_every_policy(trace, cache_size)
    bounds = opt_bounds(trace, cache_size)
    lo, hi = bounds
    assert lo <= min(misses.values()), (bounds, misses)
    assert lo <= hi <= min(misses.values())
    one_size = trace.obj_size.min() == trace.obj_size.max() <= cache_size
    assert bounds.lower_method == ("min-bypass" if one_size else "foo-l")
    assert hi == misses.get(bounds.upper_by, hi)  # a named policy really missed that often


@settings(max_examples=40, deadline=None)
@given(variable_size_traces())
def test_the_relaxations_are_ordered_pfoo_lagrange_foo(case):
    trace, cache_size = case
    pfoo, lagrange, foo = (lower_bound(trace, cache_size, m).misses
                           for m in ("pfoo-l", "lagrange", "foo-l"))
    assert pfoo <= lagrange <= foo <= min(_misses_of_every_policy(trace, cache_size).values())


@settings(max_examples=40, deadline=None)
@given(variable_size_traces(resize=True))
def test_lower_bound_holds_when_objects_change_size(case):
    trace, cache_size = case
    misses = _misses_of_every_policy(trace, cache_size)
    for method in ("foo-l", "lagrange", "pfoo-l"):
        assert lower_bound(trace, cache_size, method).misses <= min(misses.values())
    lo, hi = opt_bounds(trace, cache_size)
    assert lo <= hi <= min(misses.values())


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(0, 9), min_size=1, max_size=60), st.integers(1, 6))
def test_foo_l_equals_min_with_bypass_on_unit_sizes(ids, cache_size):
    """For unit sizes FOO's LP is integral: the bound is MIN's misses exactly (gap 0);
    libCacheSim's Belady, which must admit every miss, may miss more."""
    trace = make_trace(ids, 1)
    bound = lower_bound(trace, cache_size, "foo-l")
    assert bound.misses == simulate(trace, "belady-bypass", cache_size).miss_cnt
    assert bound.misses <= simulate(trace, "belady", cache_size).miss_cnt
    lo, hi = opt_bounds(trace, cache_size)
    assert lo == hi == bound.misses


@pytest.mark.parametrize("cache_size", [4096, 10_000, 40_960, 123_456])
def test_auto_on_unit_sizes_is_min_with_bypass(cache_size):
    """On one size per request "auto" replays MIN with bypass instead of searching: the
    optimum (no schedule holds more than cache_size // size objects), so at most every
    policy's misses; FOO's LP when the cache holds whole objects (4 and 40 KiB here), above
    it otherwise (the LP also caches fractions of an interval in the bytes left over), and
    above the Lagrangian search. A trace with two sizes still gets a relaxation."""
    rng = np.random.default_rng(1)
    trace = make_trace(rng.zipf(1.1, 4_000) % 300, 4096)
    auto = lower_bound(trace, cache_size)
    assert auto.method == "min-bypass"
    foo = lower_bound(trace, cache_size, "foo-l").misses
    assert auto.misses == foo if cache_size % 4096 == 0 else auto.misses > foo
    assert auto.misses == auto.schedule_misses == simulate(trace, "belady-bypass",
                                                           cache_size).miss_cnt
    assert auto.misses <= min(_misses_of_every_policy(trace, cache_size).values())
    assert auto.misses >= lower_bound(trace, cache_size, "lagrange").misses
    bounds = opt_bounds(trace, cache_size, policies=["lru"])
    assert (bounds.lower, bounds.upper, bounds.upper_by) == (auto.misses, auto.misses,
                                                             "belady-bypass")
    sizes = np.where(np.arange(4_000) % 2, 4096, 4097)
    mixed = make_trace(np.arange(4_000) % 300, sizes)
    assert lower_bound(mixed, cache_size).method != "min-bypass"
    assert lower_bound(trace, 100).misses == trace.n_req  # no object fits: every request misses


def test_pfoo_l_is_looser_than_foo_l_on_a_unit_size_trace():
    """The measured gap the fast bounds leave on unit sizes (Zipf, 3,000 requests)."""
    rng = np.random.default_rng(0)
    trace = make_trace(rng.zipf(1.2, 3_000) % 500, 1)
    exact = simulate(trace, "belady-bypass", 50).miss_cnt
    assert lower_bound(trace, 50, "foo-l").misses == exact
    lagrange = lower_bound(trace, 50, "lagrange").misses
    pfoo = lower_bound(trace, 50, "pfoo-l").misses
    assert pfoo <= lagrange <= exact
    assert exact - lagrange < 0.02 * exact  # a 2% gap, at most, on this trace


def test_lagrange_search_value_is_pinned():
    """The Lagrangian search's value, to the last bit, as its first implementation found it
    (Zipf(1.0) log-normal sizes, 20,000 requests, 5% of the working set)."""
    trace = zipf_trace(20_000, 2_000, alpha=1.0, seed=0, obj_size=None)
    intervals = reuse_intervals(trace, 618_692)
    assert lagrange_max_hits(intervals, 618_692) == 14935.151564670572


@pytest.mark.parametrize("cache_size, value", [(72_908, 9495.576571617972),
                                               (2_916_352, 17734.920306851876)])
def test_lagrange_search_value_is_pinned_on_unit_sizes(cache_size, value):
    """The same on 4 KiB objects (Zipf(1.0), 20,000 requests) at 1% and 40% of the working
    set, as the search with a branch per interval found it."""
    intervals = reuse_intervals(zipf_trace(20_000, 2_000, alpha=1.0, seed=0), cache_size)
    assert lagrange_max_hits(intervals, cache_size) == value


def test_oversized_objects_always_miss():
    trace = make_trace([1, 2, 1, 2, 1], [5, 500, 5, 500, 5])
    assert tuple(opt_bounds(trace, 100)) == (3, 3)  # 1 misses once, 2 (500 B) every time


@pytest.fixture(scope="module")
def cloud():
    return read_oracle_general(DATA_DIR / "cloudPhysicsIO.oracleGeneral.bin")


def test_golden_trace_lower_bound_is_below_every_libcachesim_algorithm(cloud):
    """At libCacheSim's 8 sizes: below every algorithm its own tests record and every
    compiled policy as simulate() counts it, and at least PFOO-L."""
    for k, size in enumerate(EXPECTATIONS["cache_sizes_bytes"]):
        bound = lower_bound(cloud, size)
        recorded = min(exp["miss_cnt"][k] for exp in EXPECTATIONS["expected"].values())
        simulated = min(simulate(cloud, name, size).miss_cnt for name in KERNELS)
        assert bound.method == "lagrange"
        assert lower_bound(cloud, size, "pfoo-l").misses <= bound.misses <= min(recorded,
                                                                               simulated)
    assert lower_bound(cloud, EXPECTATIONS["cache_sizes_bytes"][0]).misses > \
        lower_bound(cloud, EXPECTATIONS["cache_sizes_bytes"][0], "pfoo-l").misses + 5_000


def test_golden_trace_bounds_bracket_the_best_compiled_policy(cloud):
    size = EXPECTATIONS["cache_sizes_bytes"][1]
    bounds = opt_bounds(cloud, size, policies=["belady", "belady-bypass", "gdsf", "lirs"])
    assert bounds.upper == simulate(cloud, bounds.upper_by, size).miss_cnt
    assert bounds.lower < bounds.upper <= EXPECTATIONS["expected"]["Belady"]["miss_cnt"][1]


@pytest.mark.parametrize("bad", [0, -5, 1.5, True, "64"])
def test_bad_cache_size_is_refused(bad):
    with pytest.raises(ConfigError):
        opt_bounds(make_trace([1, 2, 1], 1), bad)


def test_empty_or_non_trace_is_refused():
    empty = Trace(np.zeros(0, np.uint64), np.zeros(0, np.int64), np.zeros(0, np.int64),
                  np.zeros(0, np.int64))
    for bad in (empty, [1, 2, 1], None):
        with pytest.raises(TraceFormatError):
            opt_bounds(bad, 10)


def test_bad_method_or_policy_is_refused():
    trace = make_trace([1, 2, 1], 1)
    with pytest.raises(ConfigError, match="method"):
        opt_bounds(trace, 10, method="exact")
    with pytest.raises(UnknownPolicyError):
        opt_bounds(trace, 10, policies=["no-such-policy"])


def test_known_misses_are_reused_not_replayed(monkeypatch) -> None:
    """lower_bound_curve takes every policy's misses from the curves already replayed."""
    import mmcache.sim.replay
    from mmcache.sim.curves import lower_bound_curve, miss_ratio_curves
    from mmcache.sim.workload import zipf_trace

    trace = zipf_trace(5_000, 500, alpha=1.0, seed=3, obj_size=None)
    sizes = [50_000, 200_000]
    curves = miss_ratio_curves(trace, ["lru", "fifo", "belady"], sizes)
    replayed = [tuple(opt_bounds(trace, s, policies=["lru", "fifo", "belady"])) for s in sizes]

    def no_replay(*args, **kwargs):
        raise AssertionError("a policy was replayed again")

    monkeypatch.setattr(mmcache.sim.replay, "simulate", no_replay)
    table = lower_bound_curve(trace, curves)
    assert [tuple(r) for r in table[["lower", "upper"]].itertuples(index=False)] == replayed
    assert list(table.belady) == list(curves[curves.policy == "belady"].miss_cnt)
    # PFOO-L's bound beside it: a lower bound too, so never above any policy's misses
    assert (table.pfoo_l <= table.upper).all() and (table.pfoo_l > 0).all()


def test_opt_bounds_show_both_bounds_their_gap_and_miss_ratios():
    trace = zipf_trace(2_000, 200, alpha=1.0, seed=1, obj_size=None)
    bounds = opt_bounds(trace, 20_000, policies=["lru", "fifo"])
    lo, hi = bounds
    text = repr(bounds)
    assert text == (f"OptBounds(lower={lo:,}, upper={hi:,}, gap={hi - lo:,}, "
                    f"lower_method={bounds.lower_method!r}, upper_by={bounds.upper_by!r}, "
                    f"n_req=2,000)")
    page = bounds._repr_html_()
    for field in ("lower", "upper", "gap", bounds.lower_method, bounds.upper_by,
                  f"{lo / 2000:.4g}", "20 kB", "2,000"):
        assert field in page, field
    # the trace's size and the cache's are not compared
    assert bounds == type(bounds)(lo, hi, bounds.lower_method, bounds.upper_by)


def test_opt_bounds_progress_shows_unless_silenced(monkeypatch, capsys):
    import mmcache.metrics

    monkeypatch.setattr(mmcache.metrics, "PROGRESS_DELAY_S", 0.0)
    monkeypatch.delenv("MMCACHE_PROGRESS", raising=False)
    trace = zipf_trace(2_000, 200, alpha=1.0, seed=1, obj_size=None)
    loud = opt_bounds(trace, 20_000, policies=["lru", "fifo"])
    assert "opt_bounds" in capsys.readouterr().err
    assert opt_bounds(trace, 20_000, policies=["lru", "fifo"], progress=False) == loud
    monkeypatch.setenv("MMCACHE_PROGRESS", "0")
    assert opt_bounds(trace, 20_000, policies=["lru", "fifo"]) == loud
    assert capsys.readouterr().err == ""
    with pytest.raises(InvalidInputError):
        opt_bounds(trace, 20_000, progress="no")
