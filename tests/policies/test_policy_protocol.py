"""Every registered policy honours the online protocol the tiers and replay rely on."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mmcache.errors import ConfigError, UnknownPolicyError
from mmcache.policies import POLICIES, make_policy
from mmcache.sim.replay import make_trace, simulate

CAPACITY = 400

ops = st.lists(st.tuples(st.sampled_from(["get", "get", "get", "del"]), st.integers(0, 30),
                         st.integers(1, 8)), max_size=300)


def drive(policy, operations, capacity=CAPACITY):
    """Run get/delete operations the way a cache tier does; check residency after each."""
    sizes: dict[int, int] = {}
    used = 0
    next_use, seen = [-1] * len(operations), {}
    for i in range(len(operations) - 1, -1, -1):
        next_use[i] = seen.get(operations[i][1], -1)
        seen[operations[i][1]] = i

    def drop(keys):
        nonlocal used
        for key in keys:
            used -= sizes.pop(key)

    for i, (op, key, size) in enumerate(operations):
        hints = {"next_access": next_use[i], "now": i, "free": capacity - used, "cost": float(size), "entropy": key / 30}
        if op == "del":
            if key in sizes:
                policy.remove(key)
                drop([key])
        elif key in sizes:
            assert key in policy
            policy.access(key, **hints)
            drop(policy.take_dropped())
        else:
            assert key not in policy
            admit = policy.on_miss(key, size, **hints)
            drop(policy.take_dropped())
            if admit:
                while used + size > capacity:
                    victim = policy.evict()
                    if victim is None:
                        break
                    assert victim in sizes and victim not in policy
                    drop([victim])
                    drop(policy.take_dropped())
                else:
                    policy.insert(key, size, **hints)
                    sizes[key] = size
                    used += size
            drop(policy.take_dropped())
        assert used <= capacity
        assert len(policy) == len(sizes)
        assert all(k in policy for k in sizes)


@pytest.mark.parametrize("name", sorted(POLICIES))
@settings(max_examples=40, deadline=None)
@given(operations=ops)
def test_policy_tracks_residency_exactly(name, operations):
    drive(make_policy(name, CAPACITY), operations, CAPACITY)


@pytest.mark.parametrize("name", sorted(POLICIES))
def test_policy_evicts_under_pressure(name):
    rng = np.random.default_rng(1)
    operations = [("get", int(k), 1) for k in rng.integers(0, 300, 2000)]
    policy = make_policy(name, 150)
    drive(policy, operations, 150)
    assert 0 < len(policy) <= 150


def test_make_policy_errors():
    with pytest.raises(UnknownPolicyError):
        make_policy("no-such-policy")
    with pytest.raises(ConfigError, match="capacity"):
        make_policy("arc")
    with pytest.raises(ConfigError):
        make_policy("lru", colour="red")
    with pytest.raises(ConfigError):
        make_policy("lru-k", k=0)
    with pytest.raises(ConfigError):
        make_policy("s3fifo", 100, small_size_ratio=1.5)


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), n_obj=st.integers(1, 40), cache=st.integers(1, 30))
def test_belady_bypass_is_a_lower_bound_for_unit_sizes(seed, n_obj, cache):
    rng = np.random.default_rng(seed)
    trace = make_trace(rng.integers(0, n_obj, 300), 1)
    best = simulate(trace, "belady-bypass", cache).miss_cnt
    for name in POLICIES:
        assert best <= simulate(trace, name, cache).miss_cnt, name


@pytest.mark.parametrize("name", sorted(POLICIES))
def test_policy_evicts_for_an_entry_limit_with_bytes_to_spare(name):
    """Tiers also cap entry counts: evict() must yield a resident key while bytes are free."""
    policy, resident, max_entries = make_policy(name, 10_000), set(), 5
    for i, key in enumerate(np.random.default_rng(2).integers(0, 40, 400).tolist()):
        hints = {"next_access": -1, "now": i, "free": 10_000, "cost": 1.0, "entropy": 0.5}
        if key in resident:
            policy.access(key, **hints)
        elif policy.on_miss(key, 1, **hints):
            resident -= set(policy.take_dropped())
            while len(resident) >= max_entries:
                victim = policy.evict()
                assert victim in resident and victim not in policy
                resident.discard(victim)
                resident -= set(policy.take_dropped())
            policy.insert(key, 1, **hints)
            resident.add(key)
        resident -= set(policy.take_dropped())
        assert len(policy) == len(resident) <= max_entries
