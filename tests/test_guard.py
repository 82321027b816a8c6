"""Penetration guard: the Bloom filter has no false negatives; the cap bound is tight enough."""

from __future__ import annotations

import numpy as np

from mmcache.guard import ExactKeyFilter, SphericalCap
from mmcache.lab.testing import near, unit


def test_bloom_filter_never_forgets_and_rarely_lies():
    bloom = ExactKeyFilter(expected_items=10_000, error_rate=0.01)
    keys = [f"key-{i}" for i in range(5_000)]
    for k in keys:
        bloom.add(k)
    assert all(bloom.might_contain(k) for k in keys)
    false_positive = np.mean([bloom.might_contain(f"other-{i}") for i in range(5_000)])
    assert false_positive < 0.02
    bloom.clear()
    assert not bloom.might_contain("key-1")


def test_cap_rejects_far_queries_and_keeps_near_ones():
    rng = np.random.default_rng(0)
    centre = unit(rng, 64)
    cap = SphericalCap()
    assert not cap.may_reach(centre, 0.0)                 # empty: nothing can be reached
    members = [near(rng, centre, 0.98) for _ in range(50)]
    for v in members:
        cap.include(v)
    cap.refit(np.stack(members))
    assert cap.may_reach(members[3], 0.99)
    assert not cap.may_reach(near(rng, centre, 0.3), 0.9)
    assert cap.may_reach(near(rng, centre, 0.3), -1.0)
