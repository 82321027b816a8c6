"""Property: each numba kernel counts exactly like its policy's online object."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mmcache.errors import ConfigError
from mmcache.sim.kernels import KERNELS
from mmcache.sim.replay import make_trace, simulate


@st.composite
def small_traces(draw):
    """A Zipf-like trace over a few objects and a cache size; sizes fixed per object or
    (``resized``) redrawn per request; times that mostly advance, with ties and steps back;
    per-request costs and entropies."""
    seed = draw(st.integers(0, 2**32 - 1))
    n_obj = draw(st.integers(1, 60))
    n_req = draw(st.integers(1, 400))
    max_size = draw(st.sampled_from([1, 4, 64]))
    resized = draw(st.booleans())
    rng = np.random.default_rng(seed)
    popularity = rng.zipf(1.3, n_obj).astype(float)
    ids = rng.choice(n_obj, n_req, p=popularity / popularity.sum())
    sizes = rng.integers(1, max_size + 1, n_req if resized else n_obj)
    sizes = sizes if resized else sizes[ids]
    wss = int(sizes.sum() if resized else sizes[np.unique(ids, return_index=True)[1]].sum())
    cache_size = draw(st.integers(1, max(1, int(wss * 1.1))))
    time = np.maximum(0, np.cumsum(rng.integers(-2, 6, n_req)))
    hints = {"cost": rng.choice([0.0, 0.5, 1.0, 3.0], n_req),
             "entropy": rng.choice([0.1, 0.35, 1.0, 2.0], n_req)}
    return make_trace(ids + 1000, sizes, time=time), cache_size, hints


@pytest.mark.parametrize("name", sorted(KERNELS))
@settings(max_examples=60, deadline=None)
@given(case=small_traces())
def test_kernel_matches_online_object(name, case):
    trace, cache_size, _ = case
    fast = simulate(trace, name, cache_size)
    slow = simulate(trace, name, cache_size, use_kernel=False)
    assert (fast.miss_cnt, fast.miss_byte) == (slow.miss_cnt, slow.miss_byte)


@pytest.mark.parametrize("name, params", [
    ("gdsf", {}), ("value-per-byte", {}), ("value-per-byte", {"default_cost": 2.5}),
    ("entropy-retention", {}), ("entropy-retention", {"threshold": 1.0}),
    ("lru-k", {"k": 1}), ("lru-k", {"k": 3}),
    ("hotness-freshness", {"window": 20}),
    ("hotness-freshness", {"window": 7, "decay": 0.5, "boost": 1.0, "w_hot": 0.3,
                           "w_fresh": 0.7})])
@settings(max_examples=60, deadline=None)
@given(case=small_traces())
def test_kernel_matches_online_object_with_hints_and_params(name, params, case):
    trace, cache_size, hints = case
    fast = simulate(trace, name, cache_size, hints=hints, **params)
    slow = simulate(trace, name, cache_size, hints=hints, use_kernel=False, **params)
    assert (fast.miss_cnt, fast.miss_byte) == (slow.miss_cnt, slow.miss_byte)


def test_value_per_byte_leaves_a_negative_cost_to_the_online_object():
    trace = make_trace([0, 1, 0], 1)
    with pytest.raises(ConfigError):
        simulate(trace, "value-per-byte", 2, hints={"cost": [1.0, -1.0, 1.0]})


def test_lfuda_kernel_matches_online_object_across_count_table_growth(monkeypatch):
    from mmcache.sim.kernels import lfuda

    grow, grown = lfuda.grow, []
    monkeypatch.setattr(lfuda, "grow", lambda *table: grown.append(1) or grow(*table))
    rng = np.random.default_rng(3)
    ids = rng.zipf(1.2, 20_000) % 3000
    trace = make_trace(ids, rng.integers(1, 9, 3000)[ids])
    fast = simulate(trace, "lfuda", 2000)
    slow = simulate(trace, "lfuda", 2000, use_kernel=False)
    assert grown  # the kernel stopped for its count table at least once and resumed
    assert (fast.miss_cnt, fast.miss_byte) == (slow.miss_cnt, slow.miss_byte)
