"""The revalidation section of the cache benchmark runs and reports each shared L3."""

from __future__ import annotations

import re
import shutil

from mmcache.lab.bench import tiered_cache as cache_bench


def test_revalidation_reports_the_added_cost_beside_a_private_store(tmp_path) -> None:
    lines, ratios = cache_bench.bench_revalidation(dim=16, n_gets=40, seed=0, workdir=tmp_path)
    assert lines[0].startswith("[5] revalidation") and "['l1']" in lines[0]
    names = ["shared SQLite"] + (["Redis", "Redis, max_staleness 1 s"]
                                 if shutil.which("redis-server") else [])
    for name in names:
        line = next(l for l in lines if l.strip().startswith(f"{name}:"))
        assert re.search(r"µs/get -> \+-?\d+\.\d µs \(ratio \d+\.\d+\)", line), line
    assert [r.name for r in ratios] == [f"L1-hit get, {name} L3" for name in names]
