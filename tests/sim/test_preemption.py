"""The tier-preemption model: hand-computed tiny cases per scheduler, prefetch usefulness, the
quota split, threshold preemption against none under load, typed errors and determinism."""

from __future__ import annotations

import numpy as np
import pytest

from mmcache.errors import ConfigError, InvalidInputError
from mmcache.sim.cachebench.spec import TierSpec
from mmcache.sim.preemption import (DEFAULT_SCHEDULERS, Arrivals, Scheduler, Traffic, at_load,
                                    draw_arrivals, fixed_quotas, no_preemption, offered_load,
                                    simulate, sweep, threshold_preemption)

# channel A moves 1 GB/s = 1e6 bytes per ms, B is a thousand times faster; no lookup cost
SLOW = TierSpec("A", 1, lookup_us=0.0, bandwidth_gbps=1.0)
FAST = TierSpec("B", 1, lookup_us=0.0, bandwidth_gbps=1000.0)
CHANNELS = (SLOW, FAST)


def tiny(read_bytes: int = 1_000_000, preload_bytes: int = 3_000_000,
         duration_s: float = 0.02) -> Traffic:
    return Traffic(lookups_per_s=100.0, tier_shares={"A": 1.0}, read_bytes=read_bytes,
                   preload_per_s=0.0, preload_bytes=preload_bytes, prefetch_share=0.0,
                   source="A", target="B", duration_s=duration_s)


def stated(lookups: list[float], preloads: list[float], prefetches: list[float] | None = None,
           ) -> Arrivals:
    n = len(lookups)
    return Arrivals(np.array(lookups, float), np.zeros(n, np.int64),
                    np.array(prefetches if prefetches is not None else [np.nan] * n, float),
                    np.array([], float), np.array(preloads, float))


# a 3 ms preload at t=0, then two 1 ms reads at t=1 and t=2, all on channel A
PRELOAD_THEN_READS = stated([1.0, 2.0], [0.0])


def test_none_is_fifo_across_classes():
    r = simulate(tiny(), no_preemption(), CHANNELS, arrivals=PRELOAD_THEN_READS)
    # preload 0-3, read 1 3-4, read 2 4-5
    np.testing.assert_allclose(r.latency_ms, [3.0, 3.0])
    assert r.preload_bytes == 3_000_000 and r.frozen_share == 0.0
    assert r.served_tier.tolist() == [0, 0]


def test_threshold_freezes_background_and_resumes_with_hysteresis():
    s = threshold_preemption(threshold_ms=1.5, resume_ms=0.5)
    r = simulate(tiny(), s, CHANNELS, arrivals=PRELOAD_THEN_READS)
    # read 1 is 1.5 ms old at 2.5: the preload (0.5 ms left) pauses; read 1 2.5-3.5; read 2,
    # 1.5 ms old then (>= 0.5), keeps it frozen: 3.5-4.5; the queue empties, the preload resumes
    np.testing.assert_allclose(r.latency_ms, [2.5, 2.5])
    assert r.frozen_share == pytest.approx((4.5 - 2.5) / 20.0)
    assert r.preload_bytes == 3_000_000  # done at 5.0
    # the preload finishes at 5.0: a 4.9 ms horizon does not count it, a 5.1 ms one does
    for duration_s, done in ((0.0049, 0), (0.0051, 3_000_000)):
        assert simulate(tiny(duration_s=duration_s), s, CHANNELS,
                        arrivals=PRELOAD_THEN_READS).preload_bytes == done


def test_without_hysteresis_the_background_resumes_between_late_reads():
    arrivals = stated([1.0, 2.4], [0.0])
    held = simulate(tiny(), threshold_preemption(threshold_ms=1.5, resume_ms=0.5), CHANNELS,
                    arrivals=arrivals)
    # frozen at 2.5 (read 1 late); at 3.5 read 2 is 1.1 ms old (>= 0.5): still frozen, read 2
    # 3.5-4.5; the preload resumes at 4.5
    np.testing.assert_allclose(held.latency_ms, [2.5, 2.1])
    assert held.frozen_share == pytest.approx(2.0 / 20.0)
    r = simulate(tiny(), threshold_preemption(threshold_ms=1.5, resume_ms=1.5), CHANNELS,
                 arrivals=arrivals)
    # read 2 arrives at 2.4 (1.1 ms old at 3.5): background resumes at 3.5 and, FIFO, the
    # preload (arrived first) finishes 3.5-4.0; read 2 is 1.5 ms old at 3.9 (re-freezes: the
    # preload pauses at 3.9 with 0.1 ms left); read 2 3.9-4.9; frozen 2.5-3.5 and 3.9-4.9
    np.testing.assert_allclose(r.latency_ms, [2.5, 2.5])
    assert r.frozen_share == pytest.approx(2.0 / 20.0)


def test_hard_and_work_conserving_quotas():
    hard = simulate(tiny(), fixed_quotas(0.7), CHANNELS, arrivals=PRELOAD_THEN_READS)
    # reads at 0.7 GB/s: read 1 1 -> 1 + 1/0.7, read 2 then -> 1 + 2/0.7
    np.testing.assert_allclose(hard.latency_ms, [1 / 0.7, 2 / 0.7 - 1])
    # the preload always at 0.3 GB/s: 3e6 bytes done at 10.0 ms
    assert simulate(tiny(duration_s=0.0099), fixed_quotas(0.7), CHANNELS,
                    arrivals=PRELOAD_THEN_READS).preload_bytes == 0
    assert hard.preload_bytes == 3_000_000
    lent = fixed_quotas(0.7, work_conserving=True)
    wc = simulate(tiny(duration_s=0.0051), lent, CHANNELS, arrivals=PRELOAD_THEN_READS)
    np.testing.assert_allclose(wc.latency_ms, [1 / 0.7, 2 / 0.7 - 1])
    assert wc.preload_bytes == 3_000_000  # idle shares lent: 5e6 bytes done by 5.0 ms
    assert simulate(tiny(duration_s=0.0049), lent, CHANNELS,
                    arrivals=PRELOAD_THEN_READS).preload_bytes == 0
    # a channel that carries no background I/O has no quota: a read on B at full bandwidth
    on_b = Arrivals(np.array([1.0]), np.array([1]), np.array([np.nan]), np.array([]),
                    np.array([0.0]))
    np.testing.assert_allclose(simulate(tiny(), fixed_quotas(0.7), CHANNELS,
                                        arrivals=on_b).latency_ms, [1e-3])


def test_quotas_split_the_channel_as_stated():
    """A 7 MB read and a 3 MB preload from t=0: at 70/30 both finish at exactly 10 ms; FIFO
    (a tie goes to foreground) serves the read in 7 ms and the preload by 10 ms."""
    arrivals = stated([0.0], [0.0])
    traffic = tiny(read_bytes=7_000_000, duration_s=0.0101)
    quotas = simulate(traffic, fixed_quotas(0.7), CHANNELS, arrivals=arrivals)
    np.testing.assert_allclose(quotas.latency_ms, [10.0])
    assert quotas.preload_bytes == 3_000_000
    assert simulate(tiny(read_bytes=7_000_000, duration_s=0.0099), fixed_quotas(0.7), CHANNELS,
                    arrivals=arrivals).preload_bytes == 0
    none = simulate(traffic, no_preemption(), CHANNELS, arrivals=arrivals)
    np.testing.assert_allclose(none.latency_ms, [7.0])
    assert Scheduler("q", "quotas", foreground_share=0.7).shares(True, True, False, False) \
        == pytest.approx((0.7, 0.3))


def test_a_prefetch_is_useful_only_if_it_completes_before_its_read():
    # read 1 at 10 ms, prefetched at 0 (done at 1): served from B; read 2 at 10.5, prefetched at
    # 10.0 (done at 11, late): served from A behind it, 11-12
    r = simulate(tiny(), no_preemption(), CHANNELS,
                 arrivals=stated([10.0, 10.5], [], prefetches=[0.0, 10.0]))
    assert r.served_tier.tolist() == [1, 0]
    np.testing.assert_allclose(r.latency_ms, [1e-3, 1.5])
    row = r.row()
    assert (row["prefetch_issued"], row["prefetch_useful"]) == (2, 1)
    assert row["prefetch_usefulness"] == 0.5 and row["hits_gained"] == 0.5
    assert row["prefetch_bytes"] == 2_000_000 and row["preload_bytes"] == 0


def test_threshold_beats_none_past_saturation_and_quotas_cap_background():
    rows = {r["scheduler"]: r for r in sweep(Traffic(duration_s=1.0), [1.3])}
    assert rows["threshold"]["fg_p99_ms"] < rows["none"]["fg_p99_ms"] / 2
    assert rows["threshold"]["background_bytes"] <= rows["none"]["background_bytes"]
    assert rows["threshold"]["frozen_share"] > 0 == rows["none"]["frozen_share"]
    assert rows["quotas"]["background_completed_share"] < rows["none"][
        "background_completed_share"]
    for r in rows.values():
        assert r["load"] == pytest.approx(1.3) and 0 <= r["prefetch_usefulness"] <= 1
        assert r["fg_p50_ms"] <= r["fg_p99_ms"]


def test_offered_load_round_trips_and_arrivals_follow_it():
    t = at_load(Traffic(duration_s=2.0), 0.8)
    assert offered_load(t) == pytest.approx(0.8)
    a = draw_arrivals(t)
    assert len(a.lookup_ms) == pytest.approx(t.lookups_per_s * 2.0, rel=0.1)
    assert np.all(np.diff(a.lookup_ms) >= 0)
    prefetched = ~np.isnan(a.prefetch_ms)
    assert (a.prefetch_ms[prefetched] <= a.lookup_ms[prefetched]).all()
    # a share 0.5 of the issued prefetches is wrong (precision 0.5)
    assert prefetched.sum() == pytest.approx(len(a.wrong_prefetch_ms), rel=0.25)


def test_same_seed_same_run_another_seed_another():
    t = at_load(Traffic(duration_s=0.5), 1.0)
    s = DEFAULT_SCHEDULERS[2]
    one, two = simulate(t, s), simulate(t, s)
    np.testing.assert_array_equal(one.latency_ms, two.latency_ms)
    assert one.row() == two.row()
    other = simulate(Traffic(**{**t.describe(), "seed": 1}), s)
    assert len(other.latency_ms) != len(one.latency_ms) or \
        not np.array_equal(other.latency_ms, one.latency_ms)


@pytest.mark.parametrize("make", [
    lambda: Scheduler("x", rule="lifo"),
    lambda: Scheduler(" ", rule="fifo"),
    lambda: fixed_quotas(1.2),
    lambda: threshold_preemption(8.0, resume_ms=9.0),
    lambda: threshold_preemption(-1.0),
    lambda: Traffic(tier_shares={"L1-gpu": 0.5, "L3-nvme": 0.4}),
    lambda: Traffic(tier_shares={"L1-gpu": 1.0}),  # the source tier is never read
    lambda: Traffic(source="L1-gpu", target="L1-gpu"),
    lambda: Traffic(prefetch_precision=0.0),
    lambda: Traffic(read_bytes=0),
    lambda: Traffic(lookups_per_s=float("nan")),
])
def test_bad_parameters_raise_config_error(make):
    with pytest.raises(ConfigError):
        make()


def test_bad_calls_raise_typed_errors_and_change_nothing():
    t = Traffic(duration_s=0.1)
    before = t.describe()
    with pytest.raises(ConfigError):
        at_load(t, 0.1)  # the preloads alone offer 0.14
    with pytest.raises(ConfigError):
        simulate(t, no_preemption(), CHANNELS)  # its tiers are not these channels
    with pytest.raises(ConfigError):
        simulate(t, "none")
    with pytest.raises(ConfigError):
        sweep(t, [0.5, -1.0])
    with pytest.raises(InvalidInputError):
        simulate(tiny(duration_s=0.002), no_preemption(), CHANNELS,
                 arrivals=stated([1.0, 3.0], []))  # a lookup after the horizon
    with pytest.raises(InvalidInputError):
        simulate(tiny(), no_preemption(), CHANNELS, arrivals=stated([1.0], [], [2.0]))
    assert t.describe() == before
    assert isinstance(ConfigError("x"), ValueError)
