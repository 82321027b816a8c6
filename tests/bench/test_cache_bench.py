"""The cache benchmark runs end to end at a tiny size and prints its three ratio lines.

Timings are not asserted (performance is measured by the benchmark, not by tests);
the decision-agreement numbers are, since an exact index must agree with exact search.
"""

from __future__ import annotations

import re

import pytest

from mmcache.bench import cache_bench

pytest.importorskip("gptcache", reason="GPTCache is installed only with the bench extra "
                                       "(pip install -e '.[bench]')")


def test_tiny_run_prints_the_three_ratios(capsys: pytest.CaptureFixture[str]) -> None:
    cache_bench.main(["--n", "400", "--dim", "32", "--queries", "60", "--overhead-queries", "20",
                      "--passes", "1", "--puts", "20"])
    out = capsys.readouterr().out
    for label in ("[1] overhead", "[2] end to end", "[3] put throughput into L3"):
        line = next((l for l in out.splitlines() if l.startswith(label)), None)
        assert line is not None, f"missing {label!r} in:\n{out}"
        assert re.search(r"-> ratio \d+\.\d+", line), line
    assert "synchronous=FULL" in out and "synchronous=NORMAL" in out
    agreement = re.search(r"mmcache (\d+\.\d+)%, GPTCache (\d+\.\d+)%", out)
    assert agreement and float(agreement[1]) == 100.0 and float(agreement[2]) == 100.0
    assert "false hits: mmcache 0, GPTCache 0" in out


def test_workload_mixes_paraphrases_at_the_stated_cosines() -> None:
    w = cache_bench.make_workload(n=200, dim=16, n_queries=300, paraphrase_share=0.5, seed=1)
    sims, _ = cache_bench.exact_nearest(w.stored, w.queries)
    low, high = cache_bench.PARAPHRASE_COS
    assert 0.4 < w.paraphrase.mean() < 0.6
    assert (sims[w.paraphrase] >= low - 1e-5).all()
    assert (sims[~w.paraphrase] < low).mean() > 0.9
