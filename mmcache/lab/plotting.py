"""One seaborn theme, one way to save a figure, and the panels of a load sweep.

Every figure goes through :func:`save_figure`, which writes PNG + PDF and a JSON
sidecar with the figure's caption and the weights and data that made it. The output folder is
``figures/`` in full runs and the run folder in smoke runs (set by
:mod:`mmcache.lab.runbook` through ``MMCACHE_FIGURE_DIR``).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Mapping

import pandas as pd

import matplotlib

matplotlib.use(os.environ.get("MPLBACKEND", "Agg"))
import matplotlib.pyplot as plt  # noqa: E402
import seaborn as sns  # noqa: E402

from mmcache.paths import PROJECT_ROOT  # noqa: E402

FIGURE_DIR_ENV = "MMCACHE_FIGURE_DIR"


def set_theme() -> None:
    """Apply mmcache's one theme: seaborn whitegrid, colour-blind palette."""
    sns.set_theme(context="notebook", style="whitegrid", palette="colorblind")
    plt.rcParams.update({"figure.dpi": 110, "savefig.dpi": 150, "figure.autolayout": True})


def figure_dir() -> Path:
    """Where figures go now: ``$MMCACHE_FIGURE_DIR`` or ``<project>/figures``."""
    return Path(os.environ.get(FIGURE_DIR_ENV, PROJECT_ROOT / "figures"))


def save_figure(fig: plt.Figure, name: str, provenance: Mapping[str, Any] | None = None, *,
                caption: str | None = None) -> Path:
    """Save ``fig`` as ``<name>.png`` and ``<name>.pdf`` and describe it in ``<name>.json``.

    ``provenance`` should say which weights, data and parameters produced the
    figure; it is written verbatim to the sidecar. ``caption`` (default: the figure's
    own titles, :func:`figure_titles`) goes to the sidecar's ``caption``, which the
    report ``make figures`` writes shows under the image. Returns the PNG path.
    """
    out = figure_dir()
    out.mkdir(parents=True, exist_ok=True)
    png = out / f"{name}.png"
    fig.savefig(png, bbox_inches="tight", metadata={"Software": None})
    fig.savefig(out / f"{name}.pdf", bbox_inches="tight",
                metadata={"CreationDate": None, "ModDate": None, "Producer": None})
    sidecar = {"figure": name, "caption": figure_titles(fig) if caption is None else caption,
               "provenance": dict(provenance or {})}
    (out / f"{name}.json").write_text(json.dumps(sidecar, indent=2, default=str) + "\n")
    return png


def figure_titles(fig: plt.Figure) -> str:
    """The figure's suptitle and its panels' titles (left, centre, right), joined by "; "."""
    titles = [fig.get_suptitle()] + [ax.get_title(loc=loc) for ax in fig.axes
                                     for loc in ("left", "center", "right")]
    return "; ".join(" ".join(t.split()) for t in titles if t.strip())


def load_panels(frame: pd.DataFrame, panels: Mapping[str, str], hue: str, xlabel: str,
                saturation: float = 1.0) -> tuple[plt.Figure, list[plt.Axes]]:
    """One panel per ``panels`` column (its y label the value), the column against
    ``frame.load`` per ``hue``, a dotted line at ``saturation``; the legend in the first only."""
    fig, axes = plt.subplots(1, len(panels), figsize=(4.4 * len(panels), 3.8))
    for ax, (column, label) in zip(axes, panels.items()):
        sns.lineplot(frame, x="load", y=column, hue=hue, marker="o", ax=ax)
        ax.set(xlabel=xlabel, ylabel=label)
        ax.axvline(saturation, c="grey", lw=0.8, ls=":")
    for ax in axes[1:]:
        ax.get_legend().remove()
    return fig, list(axes)


set_theme()
