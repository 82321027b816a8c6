"""Run a sweep: skip the points already done, run the rest, collect the table and figure."""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
from tqdm.auto import tqdm

from mmcache.lab.sweep.engines import run_points
from mmcache.lab.sweep.results import collect, write_figure, write_table
from mmcache.lab.sweep.spec import SweepSpec
from mmcache.lab.sweep.store import clear_partial, is_complete, save_outcome


@dataclass(frozen=True)
class SweepReport:
    """What a run of a sweep did, and the table of every point."""

    table: pd.DataFrame
    ran: int
    skipped: int
    failed: int


def run_sweep(spec: SweepSpec, out: str | Path, engine: str = "local",
              address: str | None = None, progress: bool = True) -> SweepReport:
    """Run every point of ``spec`` not yet completed under ``out`` and write the results.

    Writes ``out/<point>/`` per point, then ``out/results.csv`` and, when the spec
    has a ``figure``, ``out/<name>.png|pdf|json``. Ctrl-C stops the run with only
    whole points written; running again resumes.
    """
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    clear_partial(out)
    todo = [i for i, point in enumerate(spec.points) if not is_complete(out, point)]
    skipped = len(spec.points) - len(todo)
    tasks = [(i, (spec.kind, spec.points[i].target, spec.points[i].params)) for i in todo]
    failed = 0
    needs = {i: spec.points[i].needs for i in todo if spec.points[i].needs is not None}
    outcomes = run_points(engine, tasks, spec.resources, address, needs)
    bar = tqdm(total=len(todo), desc=f"sweep {spec.name}", unit="pt", disable=not progress)
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
