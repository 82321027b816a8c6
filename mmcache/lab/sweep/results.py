"""Collect every point's metrics into one table and draw the sweep's figure."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pandas as pd

from mmcache.errors import ConfigError
from mmcache.lab import plotting
from mmcache.lab.sweep.point import METRICS_FILE, environ
from mmcache.lab.sweep.spec import Point, SweepSpec
from mmcache.lab.sweep.store import PARTIAL_DIR, read_record, write_atomic

TABLE_FILE = "results.csv"


def collect(spec: SweepSpec, out: Path) -> pd.DataFrame:
    """One row per point that ran, in spec order: point id, notebook (of a notebook sweep),
    parameters, status, error, metrics.

    Nested metrics are flattened with dots (``a.b``); a metric named like a
    parameter or a status column is prefixed ``metrics.``.
    """
    rows = []
    for point in spec.points:
        record = read_record(out, point)
        if record is None:
            continue
        row = {"point": point.id, **_notebook_column(spec, point), **point.params,
               "status": record["status"],
               "error": record["error"]}
        metrics_path = out / point.id / METRICS_FILE
        if metrics_path.is_file():
            metrics = pd.json_normalize(json.loads(metrics_path.read_text())).to_dict("records")[0]
            row.update({(f"metrics.{k}" if k in row else k): v for k, v in metrics.items()})
        rows.append(row)
    return pd.DataFrame(rows)


def _notebook_column(spec: SweepSpec, point: Point) -> dict[str, str]:
    """``{"notebook": <stem>}`` for a notebook point, nothing for a function's."""
    return {"notebook": Path(point.target).stem} if spec.kind == "notebook" else {}


def write_table(table: pd.DataFrame, out: Path) -> Path:
    """Write ``DIR/results.csv`` atomically."""
    path = out / TABLE_FILE
    write_atomic(path, table.to_csv(index=False).encode())
    return path


def write_figure(spec: SweepSpec, table: pd.DataFrame, out: Path) -> Path | None:
    """Plot the spec's ``figure`` (y against x, one line per hue) over the points that succeeded."""
    if spec.figure is None or table.empty or not (table.status == "ok").any():
        return None
    # deferred: the plotting libraries load only for a figure
    import matplotlib.pyplot as plt
    import seaborn as sns
    from matplotlib.ticker import EngFormatter, NullFormatter

    fig_spec = spec.figure
    ok = table[table.status == "ok"]
    if fig_spec["y"] not in ok.columns:
        raise ConfigError(f"field `figure.y`: {fig_spec['y']!r} is not a metric of this sweep; "
                          f"the columns are {list(table.columns)}")
    fig, ax = plt.subplots(figsize=(6, 4))
    sns.lineplot(data=ok, x=fig_spec["x"], y=fig_spec["y"], hue=fig_spec.get("hue"),
                 marker="o", errorbar="sd", ax=ax)
    if fig_spec.get("logx"):  # ticks at the swept values: a log axis over a grid has few decades
        ax.set_xscale("log")
        ax.set_xticks(sorted(ok[fig_spec["x"]].unique()))
        ax.xaxis.set_major_formatter(EngFormatter(places=1))
        ax.xaxis.set_minor_formatter(NullFormatter())
    if fig_spec.get("logy"):
        ax.set_yscale("log")
        ax.yaxis.set_minor_formatter(NullFormatter())
    ax.set_title(spec.name)
    staging = out / PARTIAL_DIR / "figure"
    provenance = {"sweep": spec.name, "targets": spec.targets,
                  "points": int(len(ok)), "table": TABLE_FILE}
    with environ({plotting.FIGURE_DIR_ENV: str(staging)}):
        plotting.save_figure(fig, spec.name, provenance=provenance)
    plt.close(fig)
    for path in staging.iterdir():
        os.replace(path, out / path.name)
    return out / f"{spec.name}.png"
