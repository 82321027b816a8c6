"""Policies use the hints replay and the tiers give them: cost (GDSF), time (hotness-freshness),
entropy (entropy-retention)."""

from __future__ import annotations

import numpy as np
import pytest

from mmcache.errors import ConfigError
from mmcache.paths import DATA_DIR
from mmcache.sim.replay import attention_entropy_proxy, make_trace, read_oracle_general, simulate
from mmcache.tiers.base import Budget, Capacity


@pytest.mark.parametrize("use_kernel", [True, False])
def test_gdsf_keeps_the_costly_object(use_kernel):
    # a, b, c fill 300 bytes; d must evict one. By cost (a = 5) b goes and a hits again;
    # at equal costs the oldest, a, goes and misses again.
    trace = make_trace([0, 1, 2, 3, 0], 100)
    costed = simulate(trace, "gdsf", 300, use_kernel=use_kernel,
                      hints={"cost": [5, 1, 1, 1, 5]})
    plain = simulate(trace, "gdsf", 300, use_kernel=use_kernel)
    assert (costed.miss_cnt, plain.miss_cnt) == (4, 5)


def test_gdsf_in_a_tier_uses_the_entry_cost():
    budget = Budget(Capacity(max_bytes=300), "gdsf")
    for key, cost in (("a", 5.0), ("b", 1.0), ("c", 1.0)):
        assert budget.admit(key, 100, cost=cost, now=0.0) == []
    assert budget.admit("d", 100, cost=1.0, now=0.0) == ["b"]


def test_hotness_freshness_ranks_by_time_not_by_request_count():
    # A is hit twice, then B and C come. Close in time, A is fresher and hotter: B goes and
    # A hits. When A's last hit is 95 s old (window 100), its freshness is at the floor: A goes.
    ids = [0, 0, 1, 2, 0]
    close = make_trace(ids, 1, time=[0, 1, 2, 3, 4])
    apart = make_trace(ids, 1, time=[0, 1, 95, 96, 97])
    assert simulate(close, "hotness-freshness", 2, window=100).miss_cnt == 3
    assert simulate(apart, "hotness-freshness", 2, window=100).miss_cnt == 4


def test_entropy_retention_evicts_low_entropy_first_in_replay():
    # LRU evicts B (least recent); entropy-retention evicts A (entropy 0.1 < 0.35), so B hits.
    trace = make_trace([0, 1, 0, 2, 1], 1)
    entropy = [0.1, 1.0, 0.1, 1.0, 1.0]
    assert simulate(trace, "entropy-retention", 2, hints={"entropy": entropy}).miss_cnt == 3
    assert simulate(trace, "lru", 2).miss_cnt == 4


def test_entropy_proxy_is_per_object_and_not_plain_lru():
    trace = read_oracle_general(DATA_DIR / "cloudPhysicsIO.oracleGeneral.bin")
    entropy = attention_entropy_proxy(trace)
    ids, _ = trace.dense_ids()
    assert np.all(entropy[ids == ids[0]] == entropy[0])  # one value per object
    low = np.mean(entropy < 0.35)
    assert 0.05 < low < 0.5 and entropy.max() <= np.log(8) + 1e-9
    size = 134217728
    assert simulate(trace, "entropy-retention", size).miss_cnt \
        != simulate(trace, "lru", size).miss_cnt


def test_bad_replay_hints_are_refused():
    trace = make_trace([0, 1], 1)
    with pytest.raises(ConfigError):
        simulate(trace, "gdsf", 2, hints={"cost": [1.0]})
    with pytest.raises(ConfigError):
        simulate(trace, "gdsf", 2, hints={"price": [1.0, 1.0]})
