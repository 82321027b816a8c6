"""The dashboard benchmark runs, renders while gets run, and puts the dashboard back off."""

from __future__ import annotations

from mmcache.lab.bench import dashboard


def test_the_benchmark_times_both_sides_and_the_view_renders():
    with_board, without, renders = dashboard.measure(gets=400, refresh_s=0.0)
    assert with_board > 0 and without > 0
    assert renders == 200                 # refresh 0: every listened get renders
