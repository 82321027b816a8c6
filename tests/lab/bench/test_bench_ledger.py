"""The benchmark ledger: ratios recorded by a benchmark come back with their targets judged."""

from __future__ import annotations

import json
import os

import pytest

from mmcache.lab.bench import ledger
from mmcache.lab.bench.ledger import Ratio


def test_targets_are_judged_at_their_bounds():
    assert Ratio("r", 5.0, "b", at_least=5.0).met is True
    assert Ratio("r", 4.99, "b", at_least=5.0).met is False
    assert Ratio("r", 5.01, "b", unit="ms", at_most=5.0).met is False
    assert Ratio("r", 1.0, "b", at_least=0.5, at_most=2.0).met is True
    assert Ratio("r", 1.0, "b").met is None and Ratio("r", 1.0, "b").target == ""


def test_record_then_read_round_trips_and_table_counts_misses(tmp_path):
    ratios = [Ratio("lookups/s", 31.0, "GPTCache", at_least=30.0),
              Ratio("get p99.9", 7.5, "", unit="ms", at_most=5.0),
              Ratio("agreement", 0.995, "exact", unit="fraction", at_least=0.99)]
    path = ledger.record("demo", ratios, {"n": 10}, out_dir=tmp_path,
                         started=ledger.machine())
    payload = json.loads(path.read_text())
    assert payload["bench"] == "demo" and payload["params"] == {"n": 10}
    runs = ledger.read(tmp_path)
    assert runs[0]["ratios"] == ratios
    text = ledger.table(runs)
    assert "1 targets missed" in text
    assert "99.50%" in text and "7.50 ms" in text
    lines = {line.split()[1]: line for line in text.splitlines()[1:4]}
    assert " NO " in lines["get"] and " yes " in lines["lookups/s"]


def test_no_recorded_run_says_how_to_make_one(tmp_path):
    with pytest.raises(SystemExit, match="make bench"):
        ledger.main(["--dir", str(tmp_path)])


def test_markdown_prints_one_table_per_run_and_figures_reads_it_back(tmp_path):
    ratios = [Ratio("lookups/s at 10 entries", 31.0, "GPTCache", at_least=30.0),
              Ratio("decisions equal", 0.995, "exact", unit="fraction", at_least=0.99)]
    ledger.record("demo", ratios, {"n": 10}, out_dir=tmp_path, started=ledger.machine())
    (run,) = ledger.read(tmp_path)
    text = ledger.markdown([run])
    assert "| lookups/s at 10 entries | 31.00 | ≥ 30 | GPTCache |" in text
    assert "| decisions equal | 99.50% | ≥ 99% | exact |" in text
    read = ledger.figures(run)
    assert read["figures"] == {"lookups/s at 10 entries": 31.0, "decisions equal": 0.995}
    assert read["params"] == {"n": 10}
    assert read["machine_after"]["cores"] == os.cpu_count()
    assert f"({os.cpu_count()} cores), load average" in text
