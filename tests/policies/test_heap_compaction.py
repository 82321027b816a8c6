"""Lazily-deleted heaps stay bounded by their live keys, and compacting them never changes
which key is evicted."""

from __future__ import annotations

from unittest import mock

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mmcache.policies import _heap, make_policy

HEAP_POLICIES = {"lru-k": {"k": 2}, "gdsf": {}, "value-per-byte": {},
                 "hotness-freshness": {"window": 50}}


def heaps(policy) -> list[list]:
    return [v for k, v in vars(policy).items() if k.endswith("heap")]


@pytest.mark.parametrize("name", sorted(HEAP_POLICIES))
def test_many_hits_on_few_keys_keep_the_heaps_small(name):
    policy = make_policy(name, **HEAP_POLICIES[name])
    keys = range(100)
    for key in keys:
        policy.on_miss(key, 10, now=0)
        policy.insert(key, 10, now=0)
    rng = np.random.default_rng(0)
    for t, key in enumerate(rng.integers(0, 100, 30_000)):
        policy.access(int(key), now=t // 100, cost=1.0 + t % 3)
    assert all(len(h) <= _heap.GROWTH * len(policy) + _heap.SLACK + 1 for h in heaps(policy))
    assert sorted(policy.evict() for _ in keys) == list(keys)


ops = st.lists(st.tuples(st.sampled_from(["insert", "access", "remove", "evict"]),
                         st.integers(0, 15), st.floats(0.5, 4.0)), max_size=300)


def replay(name: str, steps) -> list:
    """What ``steps`` make the policy do: every victim, and its victims when emptied."""
    policy = make_policy(name, **HEAP_POLICIES[name])
    out = []
    for now, (op, key, cost) in enumerate(steps):
        hints = {"now": now, "cost": cost}
        if op == "insert" and key not in policy:
            if policy.on_miss(key, int(cost * 10), **hints):
                policy.insert(key, int(cost * 10), **hints)
        elif op == "access" and key in policy:
            policy.access(key, **hints)
        elif op == "remove" and key in policy:
            policy.remove(key)
        elif op == "evict" and len(policy):
            out.append(policy.evict())
    return out + [policy.evict() for _ in range(len(policy))]


@pytest.mark.parametrize("name", sorted(HEAP_POLICIES))
@settings(max_examples=80, deadline=None)
@given(steps=ops)
def test_compaction_leaves_the_eviction_order_as_without_it(name, steps):
    with mock.patch.object(_heap, "SLACK", 10**9):
        lazy = replay(name, steps)
    with mock.patch.object(_heap, "GROWTH", 1), mock.patch.object(_heap, "SLACK", 0):
        eager = replay(name, steps)       # compacts whenever one stale item exists
    assert eager == lazy
