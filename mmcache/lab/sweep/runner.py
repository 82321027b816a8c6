"""Run a sweep: skip the points already done, run the rest, collect the table and figure."""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from mmcache.lab.sweep.engines import run_points
from mmcache.lab.sweep.results import collect, write_figure, write_table
from mmcache.lab.sweep.spec import SweepSpec
from mmcache.lab.sweep.store import clear_partial, is_complete, save_outcome
from mmcache.metrics import progress_bar, progress_enabled
from mmcache.types import html_card, html_fields, safe_display


@dataclass(frozen=True)
class SweepReport:
    """What a run of a sweep did, and the table of every point."""

    table: pd.DataFrame
    ran: int
    skipped: int
    failed: int

    def to_dataframe(self) -> pd.DataFrame:
        """The table of every point (the ``table`` field; what ``results.csv`` holds)."""
        return self.table

    def __repr__(self) -> str:
        return safe_display(lambda: (
            f"SweepReport(points={len(self.table):,}, ran={self.ran:,}, "
            f"skipped={self.skipped:,}, failed={self.failed:,}, "
            f"columns={_columns(self.table)})"), self)

    def _repr_html_(self) -> str:
        def render() -> str:
            ok = int((self.table["status"] == "ok").sum()) if "status" in self.table else None
            summary = html_fields([("points in the table", len(self.table)), ("ok", ok),
                                   ("ran now", self.ran), ("skipped (already done)", self.skipped),
                                   ("failed now", self.failed)])
            # pandas escapes every cell (escape=True is its default; said here for the reader)
            table = self.table.to_html(max_rows=SHOWN_ROWS, escape=True, border=0,
                                       classes="mmcache-table")
            return html_card("SweepReport", summary, table,
                             note="plain data: .to_dataframe() (the results.csv table)")

        return safe_display(render, self, as_html=True)


#: Rows of a sweep's table its notebook display shows (pandas elides the middle past it).
SHOWN_ROWS = 30


def _columns(table: pd.DataFrame, keep: int = 6) -> str:
    """The table's first column names, with how many more there are."""
    names = [str(c) for c in table.columns]
    more = f", +{len(names) - keep} more" if len(names) > keep else ""
    return "[" + ", ".join(names[:keep]) + more + "]"


def run_sweep(spec: SweepSpec, out: str | Path, engine: str = "local",
              address: str | None = None, progress: bool | None = None) -> SweepReport:
    """Run every point of ``spec`` not yet completed under ``out`` and write the results.

    Writes ``out/<point>/`` per point, then ``out/results.csv`` and, when the spec
    has a ``figure``, ``out/<name>.png|pdf|json``. Ctrl-C stops the run with only
    whole points written; running again resumes. A progress bar counts the points
    (``progress=False`` or ``MMCACHE_PROGRESS=0`` silences it; failures are printed anyway).
    """
    progress_enabled(progress)  # a bad argument fails before any point runs
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    clear_partial(out)
    todo = [i for i, point in enumerate(spec.points) if not is_complete(out, point)]
    skipped = len(spec.points) - len(todo)
    tasks = [(i, (spec.kind, spec.points[i].target, spec.points[i].params)) for i in todo]
    failed = 0
    needs = {i: spec.points[i].needs for i in todo if spec.points[i].needs is not None}
    outcomes = run_points(engine, tasks, spec.resources, address, needs)
    bar = progress_bar(len(todo), f"sweep {spec.name}", unit="pt", progress=progress)
    try:
        with contextlib.closing(outcomes), bar:
            bar.set_postfix(failed=0, remaining=len(todo), skipped=skipped)
            for index, outcome in outcomes:
                save_outcome(out, spec, spec.points[index], outcome)
                failed += not outcome.ok
                if not outcome.ok:
                    bar.write(f"[sweep] FAILED {spec.points[index].id}: {outcome.error}")
                bar.set_postfix(failed=failed, remaining=len(todo) - bar.n - 1, skipped=skipped,
                                refresh=False)
                bar.update()
        table = collect(spec, out)
        write_table(table, out)
        write_figure(spec, table, out)
    finally:
        clear_partial(out)
    return SweepReport(table, len(todo), skipped, failed)
