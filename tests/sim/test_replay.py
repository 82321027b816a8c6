"""simulate: errors and counting rules; the trace API it re-exports."""

from __future__ import annotations

import pytest

from mmcache.sim import replay
from mmcache.errors import ConfigError, TraceFormatError, UnknownPolicyError
from mmcache.policies import POLICIES
from mmcache.sim.replay import make_trace, read_oracle_general, simulate, write_oracle_general


def test_simulate_rejects_a_non_trace():
    with pytest.raises(TraceFormatError):
        simulate([1, 2, 3], "lru", 10)


def test_simulate_rejects_bad_arguments():
    trace = make_trace([1, 2, 1], 1)
    for bad_policy in ("no-such-policy", ["lru"], None):
        with pytest.raises(UnknownPolicyError):
            simulate(trace, bad_policy, 10)
    for bad in (0, -5, 1.5, True):
        with pytest.raises(ConfigError):
            simulate(trace, "lru", bad)


def test_oversized_objects_miss_without_evicting():
    trace = make_trace([1, 2, 1, 1], [1, 200, 1, 1])
    for name in POLICIES:
        res = simulate(trace, name, 100)
        assert (res.miss_cnt, res.miss_byte) == (2, 201), name
        assert res.n_req == 4 and res.n_req_byte == 203
        assert res.miss_ratio == 0.5 and res.byte_miss_ratio == 201 / 203


def test_policy_names_are_case_insensitive():
    trace = make_trace([1, 2, 1], 1)
    assert simulate(trace, "LRU", 2).miss_cnt == simulate(trace, "lru", 2).miss_cnt == 2


def test_replay_re_exports_the_trace_api():
    import mmcache.sim.trace

    assert (make_trace, read_oracle_general, write_oracle_general) == (
        mmcache.sim.trace.make_trace, mmcache.sim.trace.read_oracle_general,
        mmcache.sim.trace.write_oracle_general)
    assert replay.Trace is mmcache.sim.trace.Trace


def test_an_online_replay_shows_progress_per_chunk_and_a_kernel_replay_none(monkeypatch, capsys):
    import mmcache.metrics
    from mmcache.sim.workload import zipf_trace

    monkeypatch.setattr(mmcache.metrics, "PROGRESS_DELAY_S", 0.0)
    monkeypatch.setattr(replay, "PROGRESS_CHUNK", 1_000)
    monkeypatch.delenv("MMCACHE_PROGRESS", raising=False)
    trace = zipf_trace(5_000, 500, seed=2)
    kernel = simulate(trace, "lru", 50 * 4096)
    assert capsys.readouterr().err == ""  # one compiled call: no bar
    online = simulate(trace, "lru", 50 * 4096, use_kernel=False)
    err = capsys.readouterr().err
    assert "replay lru" in err and "5000/5000" in err and online == kernel
    assert simulate(trace, "lru", 50 * 4096, use_kernel=False, progress=False) == kernel
    monkeypatch.setenv("MMCACHE_PROGRESS", "0")
    assert simulate(trace, "lru", 50 * 4096, use_kernel=False) == kernel
    assert capsys.readouterr().err == ""
