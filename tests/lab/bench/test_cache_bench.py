"""The cache benchmark runs end to end at a tiny size, prints its ratio lines and records them.

Timings are not asserted (performance is measured by the benchmark, not by tests);
the decision-agreement numbers are, since an exact index must agree with exact search.
"""

from __future__ import annotations

import re

import numpy as np
import pytest

from mmcache.lab.bench import ledger
from mmcache.lab.bench import tiered_cache as cache_bench

NEEDS_GPTCACHE = "GPTCache is installed only with the bench extra (pip install -e '.[bench]')"


def test_tiny_run_prints_the_four_ratios(capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("gptcache", reason=NEEDS_GPTCACHE)
    cache_bench.main(["--n", "400", "--dim", "32", "--queries", "60", "--overhead-queries", "20",
                      "--passes", "1", "--puts", "20"])
    out = capsys.readouterr().out
    for label in ("[1] overhead", "[2] end to end", "[3] put throughput into L3",
                  "[4] get latency while filling"):
        line = next((l for l in out.splitlines() if l.startswith(label)), None)
        assert line is not None, f"missing {label!r} in:\n{out}"
        assert re.search(r"-> (p99\.9 )?ratio \d+\.\d+", line), line
    assert "synchronous=FULL" in out and "synchronous=NORMAL" in out
    agreement = re.search(r"mmcache (\d+\.\d+)%, GPTCache (\d+\.\d+)%", out)
    assert agreement and float(agreement[1]) == 100.0 and float(agreement[2]) == 100.0
    assert "false hits: mmcache 0, GPTCache 0" in out
    assert "agreeing with exact search over the entries put so far (cos >= 0.9): backlog " \
        "100.00%, baseline 100.00%" in out        # exact below ann_min_size
    recorded = next(run for run in ledger.read() if run["bench"] == "tiered_cache-400")
    names = [r.name for r in recorded["ratios"]]
    assert "lookups/s at 400 entries (L1+L2+L3)" in names
    assert "single puts/s filling to 400 entries" in names
    agree = next(r for r in recorded["ratios"] if r.name == "decisions equal to exact search")
    assert agree.value == 1.0 and agree.met


def test_fill_only_run_measures_both_caches_past_the_ann_switch(
        capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("gptcache", reason=NEEDS_GPTCACHE)
    cache_bench.main(["--fill-only", "--n", "300", "--dim", "16", "--fill-gets", "40",
                      "--fill-ann-min-size", "50"])
    out = capsys.readouterr().out
    line = next(l for l in out.splitlines() if l.startswith("[4] get latency while filling"))
    assert re.search(r"-> p99\.9 ratio \d+\.\d+", line), line
    assert "[1] overhead" not in out
    agreement = re.search(r"backlog (\d+\.\d+)%, baseline (\d+\.\d+)%", out)
    assert agreement and float(agreement[1]) >= 95.0 and float(agreement[2]) >= 95.0


def test_fill_schedule_puts_a_fifth_before_the_first_get() -> None:
    schedule = cache_bench.fill_schedule(n=1000, n_gets=50, seed=3)
    assert len(schedule) == 50 and schedule[0] == 200
    assert (schedule[1:] > 200).all() and (schedule <= 1000).all()
    assert (np.diff(schedule) >= 0).all()


def test_workload_mixes_paraphrases_at_the_stated_cosines() -> None:
    w = cache_bench.make_workload(n=200, dim=16, n_queries=300, paraphrase_share=0.5, seed=1)
    sims, _ = cache_bench.exact_nearest(w.stored, w.queries)
    low, high = cache_bench.PARAPHRASE_COS
    assert 0.4 < w.paraphrase.mean() < 0.6
    assert (sims[w.paraphrase] >= low - 1e-5).all()
    assert (sims[~w.paraphrase] < low).mean() > 0.9


def test_threads_only_run_reports_each_count_over_one_thread(
        capsys: pytest.CaptureFixture[str]) -> None:
    cache_bench.main(["--threads-only", "--threads", "2,4", "--n", "300", "--dim", "16",
                      "--queries", "40"])
    out = capsys.readouterr().out
    line = next(l for l in out.splitlines() if l.startswith("[6] thread scaling"))
    for count in ("1 thread", "2 threads", "4 threads"):
        assert re.search(count + r" \d+ lookups/s \(x\d+\.\d+, \d+\.\d+ cores busy\)", line), line
    assert "[1] overhead" not in out and "[4] get latency" not in out
    recorded = next(run for run in ledger.read() if run["bench"] == "tiered_cache-300-threads")
    assert [r.name for r in recorded["ratios"]] == ["L2 lookups/s, 2 threads over 1",
                                                    "L2 lookups/s, 4 threads over 1"]


def test_threads_flag_takes_counts_like_1_2_4() -> None:
    assert cache_bench._parse(["--threads", "1,2,4"]).threads == [1, 2, 4]
    assert cache_bench._parse(["--threads-only"]).threads == [1, 2, 4]
    with pytest.raises(SystemExit):
        cache_bench._parse(["--threads", "0,2"])
