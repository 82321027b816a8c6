"""Tier preemption driven by a CacheBench-MM replay: hand-made streams timed by hand per
scheduler, a hand-made replay whose prefetches are used only when hit before eviction, no
background traffic leaving every scheduler alike, and the schedulers under load on a real
replay."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from mmcache.errors import ConfigError, InvalidInputError
from mmcache.sim.cachebench import three_tier
from mmcache.sim.cachebench.prefetch import prefetch_plan
from mmcache.sim.cachebench.spec import TierSpec
from mmcache.sim.preemption import fixed_quotas, no_preemption, threshold_preemption
from mmcache.sim.preemption_replay import (ReplayStreams, pagerank_prefetcher,
                                           replay_offered_load, replay_streams, replay_sweep,
                                           simulate_replay)
from mmcache.sim.workload import generate

# tier 0 ("B") a thousand times faster than tier 1 ("A", 1 GB/s = 1e6 bytes per ms, the source)
FAST = TierSpec("B", 10, lookup_us=0.0, bandwidth_gbps=1000.0)
SLOW = TierSpec("A", 10, lookup_us=0.0, bandwidth_gbps=1.0)


def hand_streams() -> ReplayStreams:
    """A 3 MB preload at 0; a 1 MB hit on A at 1; prefetches of 1 MB at 5 (used by the hit at
    10), at 10 (used by the hit at 10.5) and at 12 (never used); 20 ms of replay."""
    return ReplayStreams(
        tiers=(FAST, SLOW), lookup_request=np.array([1, 4, 5]),
        lookup_ms=np.array([1.0, 10.0, 10.5]), lookup_bytes=np.full(3, 1_000_000),
        lookup_tier=np.array([1, 0, 0]), depends=np.array([-1, 1, 2]),
        bg_ms=np.array([0.0, 5.0, 10.0, 12.0]),
        bg_bytes=np.array([3_000_000, 1_000_000, 1_000_000, 1_000_000]),
        bg_prefetch=np.array([False, True, True, True]),
        bg_used=np.array([False, True, True, False]), requests=6, span_ms=20.0)


def test_offered_load_counts_late_reads_and_every_transfer():
    # on A: the hit at 1 and both dependent hits (as if late), 3 MB preload, 3 MB prefetched
    assert replay_offered_load(hand_streams(), "A") == pytest.approx(9e6 / 0.02 / 1e9)
    assert replay_offered_load(hand_streams()) == replay_offered_load(hand_streams(), "A")
    d = hand_streams().describe()
    assert d["source"] == "A" and d["source_foreground_bytes"] == 3_000_000
    assert d["source_foreground_share"] == pytest.approx(1 / 3)
    assert (d["prefetches"], d["prefetches_used"], d["preloads"], d["preloads_used"]) == (3, 2, 1, 0)


def test_no_preemption_by_hand():
    r = simulate_replay(hand_streams(), no_preemption(), 0.45)
    # preload 0-3, the read 3-4; prefetch 1 5-6, its hit at 10 from B (1 MB at 1e9 bytes/ms);
    # prefetch 2 10-11, its hit at 10.5 late: from A after it, 11-12; prefetch 3 12-13
    assert r["time_scale"] == pytest.approx(1.0)
    assert r["fg_p50_ms"] == pytest.approx(1.5) and r["fg_mean_ms"] == pytest.approx(
        (3.0 + 1e-3 + 1.5) / 3)
    assert (r["prefetch_issued"], r["prefetch_used"], r["prefetch_useful"],
            r["prefetch_late"]) == (3, 2, 1, 1)
    assert r["prefetch_usefulness"] == pytest.approx(1 / 3)
    assert r["replay_usefulness"] == pytest.approx(2 / 3)
    assert (r["preload_issued"], r["preload_used"], r["preload_useful"]) == (1, 0, 0)
    assert r["background_bytes"] == 6_000_000 and r["background_completed_share"] == 1.0
    assert r["late_share"] == pytest.approx(1 / 3) and r["frozen_share"] == 0.0
    assert r["requests_per_s"] == pytest.approx(6 / 0.02)


def test_threshold_by_hand():
    r = simulate_replay(hand_streams(), threshold_preemption(1.2, 0.5), 0.45)
    # the read at 1 is 1.2 ms old at 2.2: the preload pauses, the read 2.2-3.2, the preload
    # resumes; the late hit at 10.5 (behind prefetch 2, 11-12) is 1.2 ms old at 11.7: frozen
    # 11.7-12.0 (nothing of the background waits then); frozen 1.3 of 20 ms
    assert r["fg_p99_ms"] == pytest.approx(np.percentile([2.2, 1e-3, 1.5], 99))
    assert r["fg_mean_ms"] == pytest.approx((2.2 + 1e-3 + 1.5) / 3)
    assert r["frozen_share"] == pytest.approx(1.3 / 20)
    assert r["prefetch_useful"] == 1 and r["background_bytes"] == 6_000_000


def test_hard_quotas_by_hand():
    r = simulate_replay(hand_streams(), fixed_quotas(0.7), 0.45)
    # foreground at 0.7 GB/s: the read 1-2.43; the preload at 0.3 GB/s ends at 10, so prefetch 1
    # (behind it) is late for its hit at 10: both dependent hits read from A, 10-11.43-12.86
    assert r["fg_mean_ms"] == pytest.approx((1 / 0.7 + 1 / 0.7 + 2 / 0.7 - 0.5) / 3)
    assert (r["prefetch_useful"], r["prefetch_late"], r["prefetch_usefulness"]) == (0, 2, 0.0)


def test_a_load_scales_every_arrival():
    half = simulate_replay(hand_streams(), no_preemption(), 0.9)
    assert half["time_scale"] == pytest.approx(0.5)
    assert half["requests_per_s"] == pytest.approx(6 / 0.01)
    # preload 0-3, the read at 0.5 waits for it: 3-4; prefetch 1 (at 2.5) 4-5, done as its hit
    # arrives at 5; prefetch 2 (at 5) 5-6, its hit at 5.25 late: 6-7
    assert half["fg_mean_ms"] == pytest.approx((3.5 + 1e-3 + 1.75) / 3)
    assert half["prefetch_useful"] == 1


def hand_workload(intents=(0, 1, 2, 0, 3, 1, 2)):
    """Text requests of one variant, 100 bytes each, one per second, of ``intents`` (the first
    is the prefix)."""
    n = len(intents)
    base = generate(n_queries=n, n_intents=4, seed=0)
    return replace(base, intent=np.array(intents), modality=np.zeros(n, np.int8),
                   variant=np.zeros(n, np.int64), modality_set=np.zeros(n, np.int8),
                   time=np.arange(n, dtype=float), size=np.full(n, 100, np.int64),
                   trap_of=None, _vectors={})


def test_prefetch_is_used_only_when_hit_before_it_leaves_the_cache():
    tiers = (TierSpec("T", 200, "lru", "exact", lookup_us=0.0, bandwidth_gbps=1.0),)
    plan = {2: [0], 3: [1], 4: [2]}  # after request t, prefetch these requests' answers
    s = replay_streams(hand_workload(), tiers, train_end=1, prefetch=lambda t: plan.get(t, []))
    # cache of two: 1, 2 stored by misses; prefetch 0 (evicts 1), hit by request 3 (used);
    # prefetch 1 (evicts 2); request 4 (intent 3) evicts 0; prefetch 2 evicts 1: unused, and
    # request 5 (intent 1) misses; request 6 hits prefetch 2 (used)
    assert s.bg_prefetch.tolist() == [True, True, True]
    np.testing.assert_allclose(s.bg_ms, [1000.0, 2000.0, 3000.0])  # ms from request 1
    assert s.bg_used.tolist() == [True, False, True]
    assert s.lookup_request.tolist() == [3, 6] and s.depends.tolist() == [0, 2]
    assert s.lookup_bytes.tolist() == [100, 100] and s.requests == 6
    assert s.span_ms == pytest.approx(6000.0)  # 5 s of arrivals plus one mean gap
    # a prefetcher that names a resident answer is skipped: request 1's answer is prefetched
    # only once request 3 (intent 0) has evicted it, and request 5 hits it; one naming a request
    # not yet seen is refused
    again = replay_streams(hand_workload(), tiers, train_end=1, prefetch=lambda t: [1])
    np.testing.assert_allclose(again.bg_ms, [2000.0])
    assert again.bg_used.tolist() == [True] and again.lookup_request.tolist() == [5]
    with pytest.raises(ConfigError):
        replay_streams(hand_workload(), tiers, train_end=1, prefetch=lambda t: [t + 1])


def test_a_preload_is_used_by_its_first_hit_before_eviction_only():
    three = (TierSpec("T", 300, "lru", "exact", lookup_us=0.0, bandwidth_gbps=1.0),)
    s = replay_streams(hand_workload(), three, train_end=1, preload=[0])
    # a cache of three: preload 0 at the first measured arrival, requests 1 and 2 stored, request
    # 3 hits the preload (depends on it); 3, 1 and 2 then miss
    assert s.bg_prefetch.tolist() == [False] and s.bg_ms.tolist() == [0.0]
    assert s.bg_used.tolist() == [True]
    assert s.lookup_request.tolist() == [3] and s.depends.tolist() == [0]
    # a cache of two: request 2 evicts the preload, request 3 misses it: never used
    two = (TierSpec("T", 200, "lru", "exact", lookup_us=0.0, bandwidth_gbps=1.0),)
    s = replay_streams(hand_workload(), two, train_end=1, preload=[0])
    assert s.bg_used.tolist() == [False] and len(s.lookup_ms) == 0
    assert simulate_replay(s, no_preemption(), 0.5)["preload_useful"] == 0
    # ... and a hit on its key after a miss stored it again is not the preload's
    s = replay_streams(hand_workload((0, 1, 2, 0, 0)), two, train_end=1, preload=[0])
    assert s.lookup_request.tolist() == [4] and s.depends.tolist() == [-1]
    assert s.bg_used.tolist() == [False]
    with pytest.raises(ConfigError):
        replay_streams(hand_workload(), two, train_end=1, preload=[3])  # not in the prefix


@pytest.fixture(scope="module")
def small_replay():
    w = generate(n_queries=1500, n_intents=150, seed=0, value_bytes_median=2 * 2 ** 20)
    train_end = 500
    tiers = three_tier(int(0.1 * w.size[train_end:].sum()))
    return w, tiers, train_end


def test_without_background_every_scheduler_serves_the_same(small_replay):
    w, tiers, train_end = small_replay
    s = replay_streams(w, tiers, train_end=train_end)
    assert len(s.bg_ms) == 0 and len(s.lookup_ms) > 100
    rows = {}
    for sched in (no_preemption(), threshold_preemption(), fixed_quotas(0.7,
                                                                        work_conserving=True)):
        rows[sched.name] = simulate_replay(s, sched, 1.2)
    assert rows["none"]["fg_p99_ms"] == rows["threshold"]["fg_p99_ms"] == \
        rows["quotas"]["fg_p99_ms"]
    assert rows["none"]["fg_mean_ms"] == rows["threshold"]["fg_mean_ms"] == \
        rows["quotas"]["fg_mean_ms"]
    assert rows["threshold"]["frozen_share"] >= 0 and rows["none"]["background_bytes"] == 0
    # a hard 70 % quota caps the foreground even with no background waiting: never faster
    hard = simulate_replay(s, fixed_quotas(0.7), 1.2)
    assert hard["fg_mean_ms"] > rows["none"]["fg_mean_ms"]


def test_threshold_protects_the_tail_of_a_real_replay_past_saturation(small_replay):
    w, tiers, train_end = small_replay
    s = replay_streams(w, tiers, train_end=train_end,
                       preload=prefetch_plan(w, train_end, 0.005),
                       prefetch=pagerank_prefetcher(w, train_end, 16))
    d = s.describe()
    assert d["preloads"] > 0 and d["prefetches"] > 0
    assert 0 < d["prefetches_used"] <= d["prefetches"]
    rows = {(r["load"], r["scheduler"]): r for r in replay_sweep(s, [0.3, 1.4])}
    hi = {name: rows[(1.4, name)] for name in ("none", "quotas", "threshold")}
    assert hi["threshold"]["fg_p99_ms"] < hi["none"]["fg_p99_ms"] / 2
    assert hi["threshold"]["frozen_share"] > 0 == hi["none"]["frozen_share"]
    assert hi["quotas"]["background_bytes"] <= hi["none"]["background_bytes"]
    for r in rows.values():
        assert 0 <= r["prefetch_usefulness"] <= r["replay_usefulness"] <= 1
        assert r["prefetch_useful"] + r["prefetch_late"] == r["prefetch_used"]
        assert r["fg_p50_ms"] <= r["fg_p99_ms"] and r["lookups"] == d["hits"]


def test_bad_streams_and_calls_raise_typed_errors():
    s = hand_streams()
    with pytest.raises(InvalidInputError):
        replace(s, bg_used=np.array([False, True, False, False])).check()  # a dependent unused
    with pytest.raises(InvalidInputError):
        replace(s, lookup_ms=np.array([1.0, 10.0, 25.0])).check()  # past the span
    with pytest.raises(InvalidInputError):
        replace(s, bg_ms=np.array([0.0, 11.0, 10.0, 12.0])).check()  # issued after its hit
    with pytest.raises(ConfigError):
        simulate_replay(s, no_preemption(), 0.0)
    with pytest.raises(ConfigError):
        simulate_replay(s, "none", 1.0)
    with pytest.raises(ConfigError):
        simulate_replay(s, no_preemption(), 1.0, source="L3-nvme")
    with pytest.raises(ConfigError):
        replay_sweep(s, [])
    with pytest.raises(ConfigError):
        replay_streams(hand_workload(), (FAST,), train_end=7)
