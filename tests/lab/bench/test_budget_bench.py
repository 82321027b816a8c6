"""Budget benchmark, tiny: it runs and reports a time for both budgets."""

from __future__ import annotations

from mmcache.lab.bench.budget import run


def test_budget_bench_times_both_budgets():
    result = run("lru", 50, 300)
    assert set(result) == {"plain", "undoable"} and all(s > 0 for s in result.values())
