"""The replay benchmark's baseline counts like simulate(); a tiny run prints every ratio."""

from __future__ import annotations

import numpy as np
import pytest

from mmcache.bench.replay_bench import ordered_dict_lru
from mmcache.replay import make_trace, simulate


def test_ordered_dict_baseline_counts_like_simulate():
    rng = np.random.default_rng(3)
    ids = rng.zipf(1.2, 5000) % 500
    trace = make_trace(ids, (ids % 7 + 1) * 10)
    for cache_size in (50, 700, 5000):
        assert ordered_dict_lru(trace, cache_size) == simulate(trace, "lru", cache_size).miss_cnt


def test_small_benchmark_prints_matching_misses_and_targets(capsys):
    pytest.importorskip("libcachesim")  # benchmark-only peer (GPL), in the bench extra
    from mmcache.bench.replay_bench import main

    main(["--zipf-requests", "20000", "--zipf-objects", "2000", "--repeats", "1",
          "--policies", "lru", "s3fifo", "belady"])
    rows = [line for line in capsys.readouterr().out.splitlines()
            if line.startswith(("cloudPhysics ", "zipf1.0 "))]
    assert len(rows) == 8  # 2 traces x (OrderedDict baseline + 3 policies)
    assert all(" True " in row for row in rows if "OrderedDict" not in row)
    assert all("x: " in row or "req/s: " in row for row in rows if "OrderedDict" not in row)
