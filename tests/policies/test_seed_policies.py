"""The seeds' policies do what seed 002 describes, checked against brute force."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mmcache.errors import ConfigError, InvalidInputError
from mmcache.policies import make_policy
from mmcache.policies.entropy_retention import attention_entropy
from mmcache.policies.hotness_freshness import HotnessFreshness


@settings(max_examples=80, deadline=None)
@given(keys=st.lists(st.integers(0, 12), min_size=1, max_size=200),
       window=st.sampled_from([3.0, 20.0, 1000.0]), capacity=st.integers(1, 8))
def test_hotness_freshness_evicts_the_lowest_score(keys, window, capacity):
    pol = HotnessFreshness(window=window)
    for now, key in enumerate(keys):
        if key in pol:
            pol.access(key, now=now)
            continue
        pol.on_miss(key, 1, now=now)
        if len(pol) >= capacity:
            residents = [k for k in set(keys) if k in pol]
            scores = {k: pol.score(k, now) for k in residents}
            victim = pol.evict()
            assert math.isclose(scores[victim], min(scores.values()), abs_tol=1e-9)
        pol.insert(key, 1, now=now)


def test_hotness_freshness_follows_the_seed_update_rule():
    pol = HotnessFreshness(decay=0.98, boost=0.2, window=60, w_hot=0.6, w_fresh=0.4)
    pol.insert("a", 1, now=0)
    pol.access("a", now=30)
    hot = 0.2 * 0.98 + 0.2
    assert pol.score("a", now=30) == pytest.approx(0.6 * hot + 0.4 * 1.0)
    assert pol.score("a", now=60) == pytest.approx(0.6 * hot + 0.4 * 0.5)
    assert pol.score("a", now=10_000) == pytest.approx(0.6 * hot + 0.4 * 0.1)


def test_hotness_freshness_time_never_runs_backwards():
    """An earlier ``now`` (an entry adopted at its put time after later calls) counts as the
    latest one seen, so the young keys stay in last-access order."""
    pol = HotnessFreshness(window=100)
    pol.insert("a", 1, now=200)
    pol.insert("b", 1, now=50)
    assert pol.score("b") == pol.score("a") == pytest.approx(0.6 * 0.2 + 0.4)
    pol.on_miss("c", 1, now=395)  # a and b are 195 old: both at the freshness floor
    assert pol.evict() == "a" and pol.evict() == "b"


def test_attention_entropy_values_and_errors():
    assert attention_entropy([1.0, 0.0]) == 0.0
    assert attention_entropy(np.ones(8)) == pytest.approx(math.log(8))
    for bad in ([], [0.0, 0.0], [-1.0, 2.0], [np.nan, 1.0]):
        with pytest.raises(InvalidInputError):
            attention_entropy(bad)


def test_entropy_retention_evicts_low_entropy_first_then_lru():
    pol = make_policy("entropy-retention")
    pol.insert("focused", 1, attention=[0.97, 0.01, 0.01, 0.01])  # H ~ 0.17 < 0.35
    pol.insert("old", 1, entropy=2.0)
    pol.insert("new", 1, entropy=2.0)
    pol.access("old", entropy=2.0)
    assert [pol.evict() for _ in range(3)] == ["focused", "new", "old"]
    with pytest.raises(ConfigError):
        make_policy("entropy-retention", threshold=-1.0)


def test_value_per_byte_keeps_costly_small_entries():
    pol = make_policy("value-per-byte")
    pol.insert("cheap-big", 1000, cost=1.0)
    pol.insert("costly-small", 10, cost=50.0)
    pol.insert("cheap-small", 10, cost=1.0)
    pol.access("cheap-small")
    assert pol.evict() == "cheap-big"
    assert pol.evict() == "cheap-small"
    assert pol.value("costly-small") == pytest.approx(0.5 * 50.0 / 10)
    with pytest.raises(ConfigError):
        pol.insert("x", 1, cost=float("inf"))
    assert "x" not in pol and len(pol) == 1
