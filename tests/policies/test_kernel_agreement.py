"""Property: each numba kernel counts exactly like its policy's online object."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mmcache.policies.kernels import KERNELS
from mmcache.replay import make_trace, simulate


@st.composite
def small_traces(draw):
    """A Zipf-like trace over a few objects, fixed size per object, and a cache size."""
    seed = draw(st.integers(0, 2**32 - 1))
    n_obj = draw(st.integers(1, 60))
    n_req = draw(st.integers(1, 400))
    max_size = draw(st.sampled_from([1, 4, 64]))
    rng = np.random.default_rng(seed)
    popularity = rng.zipf(1.3, n_obj).astype(float)
    ids = rng.choice(n_obj, n_req, p=popularity / popularity.sum())
    obj_sizes = rng.integers(1, max_size + 1, n_obj)
    wss = int(obj_sizes[np.unique(ids)].sum())
    cache_size = draw(st.integers(1, max(1, int(wss * 1.1))))
    return make_trace(ids + 1000, obj_sizes[ids]), cache_size


@pytest.mark.parametrize("name", sorted(KERNELS))
@settings(max_examples=60, deadline=None)
@given(case=small_traces())
def test_kernel_matches_online_object(name, case):
    trace, cache_size = case
    fast = simulate(trace, name, cache_size)
    slow = simulate(trace, name, cache_size, use_kernel=False)
    assert (fast.miss_cnt, fast.miss_byte) == (slow.miss_cnt, slow.miss_byte)


def test_lfuda_kernel_matches_online_object_across_count_table_growth(monkeypatch):
    from mmcache.policies.kernels import lfuda

    grow, grown = lfuda.grow, []
    monkeypatch.setattr(lfuda, "grow", lambda *table: grown.append(1) or grow(*table))
    rng = np.random.default_rng(3)
    ids = rng.zipf(1.2, 20_000) % 3000
    trace = make_trace(ids, rng.integers(1, 9, 3000)[ids])
    fast = simulate(trace, "lfuda", 2000)
    slow = simulate(trace, "lfuda", 2000, use_kernel=False)
    assert grown  # the kernel stopped for its count table at least once and resumed
    assert (fast.miss_cnt, fast.miss_byte) == (slow.miss_cnt, slow.miss_byte)
