"""Regenerate every figure: the notebooks in full mode through the sweep runner, then a manifest.

``python -m mmcache.lab.figures`` (what ``make figures`` runs) runs the spec
``notebooks/sweeps/figures.yaml`` on the local pool (in parallel, as its
``resources.cpus`` allow), then publishes each notebook's figures to ``figures/``
and its executed copy and ``metrics.json`` to ``runs/<name>/`` (where a single
``python -m mmcache.lab.runbook NAME`` puts them too), and writes ``figures/MANIFEST.md``:
each figure with its notebook, parameters, the commit, and the weights and data that
its JSON sidecar names. The sweep folder is keyed by a hash of the package's source,
so an interrupted run resumes and a changed package runs afresh.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import shutil
import subprocess
import sys
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from mmcache.paths import PROJECT_ROOT, RUNS_DIR
from mmcache.lab.plotting import figure_dir
from mmcache.lab.runbook import NOTEBOOK_DIR
from mmcache.lab.sweep import SweepSpec, load_spec, run_sweep
from mmcache.lab.sweep.point import METRICS_FILE
from mmcache.lab.sweep.store import read_record

FIGURES_SPEC = NOTEBOOK_DIR / "sweeps" / "figures.yaml"
MANIFEST_FILE = "MANIFEST.md"
#: Sidecar provenance keys shown in their own manifest columns.
SHOWN_KEYS = ("weights", "data")


@dataclass(frozen=True)
class FigureEntry:
    """One published figure: its name, the notebook point that made it, and its sidecar."""

    name: str
    notebook: str             # the notebook's name (its source's stem)
    source: str               # its source, relative to the project when inside it
    params: dict[str, Any]
    source_sha256: str
    provenance: dict[str, Any]


def package_hash() -> str:
    """A short sha256 over the package's Python sources (which notebooks' results depend on)."""
    digest = hashlib.sha256()
    package = PROJECT_ROOT / "mmcache"
    for path in sorted(package.rglob("*.py")):
        digest.update(str(path.relative_to(package)).encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()[:12]


def current_commit(root: Path = PROJECT_ROOT) -> str:
    """``git rev-parse HEAD`` of ``root``, marked when tracked files differ; "unknown" without git."""
    try:
        head = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], check=True,
                              capture_output=True, text=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(root), "status", "--porcelain",
                                "--untracked-files=no"], check=True, capture_output=True,
                               text=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown (not a git checkout)"
    return f"{head} (with uncommitted changes)" if dirty else head


def publish(spec: SweepSpec, sweep_dir: Path, figures: Path, runs: Path) -> list[FigureEntry]:
    """Copy every successful point's figures to ``figures`` and its executed notebook and
    metrics to ``runs/<notebook>/``; returns the published figures, in spec order."""
    entries = []
    figures.mkdir(parents=True, exist_ok=True)
    for point in spec.points:
        record = read_record(sweep_dir, point)
        if record is None or record["status"] != "ok":
            continue
        stem = Path(point.target).stem
        point_dir = sweep_dir / point.id
        run_dir = runs / stem
        run_dir.mkdir(parents=True, exist_ok=True)
        for name in (METRICS_FILE, f"{stem}.ipynb"):
            if (point_dir / name).is_file():
                shutil.copy2(point_dir / name, run_dir / name)
        point_figures = point_dir / "figures"
        for path in sorted(point_figures.glob("*")) if point_figures.is_dir() else []:
            shutil.copy2(path, figures / path.name)
            if path.suffix == ".json":
                sidecar = json.loads(path.read_text())
                entries.append(FigureEntry(sidecar.get("figure", path.stem), stem,
                                           _shown(Path(point.target)), point.params,
                                           point.source_sha256, sidecar.get("provenance", {})))
    return entries


def render_manifest(entries: list[FigureEntry], commit: str, spec_path: str,
                    failed: list[str] = ()) -> str:
    """``figures/MANIFEST.md``: one table row per figure, grouped by notebook."""
    lines = ["# Figure manifest", "",
             f"Written by `make figures` (`python -m mmcache.lab.figures`, spec `{spec_path}`) on "
             f"{datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC at commit `{commit}`.",
             "Each figure is `<name>.png` + `.pdf`; `<name>.json` holds its full provenance.", ""]
    if failed:
        lines += [f"**Failed, so missing here:** {', '.join(failed)}.", ""]
    for notebook in dict.fromkeys(e.notebook for e in entries):
        group = [e for e in entries if e.notebook == notebook]
        params = ", ".join(f"`{k}={v!r}`" for k, v in group[0].params.items())
        lines += [f"## {notebook}", "",
                  f"Notebook `{group[0].source}` (sha256 `{group[0].source_sha256[:12]}`), "
                  f"parameters {params} (the rest as in its parameters cell).", "",
                  "| figure | weights | data | other provenance |", "|---|---|---|---|"]
        for e in group:
            other = {k: v for k, v in e.provenance.items() if k not in SHOWN_KEYS}
            lines.append(f"| `{e.name}` | {_cell(e.provenance.get('weights', '—'))} | "
                         f"{_cell(e.provenance.get('data', '—'))} | {_cell(other or '—')} |")
        lines.append("")
    return "\n".join(lines)


def run_figures(spec: SweepSpec, sweep_dir: Path, figures: Path, runs: Path,
                spec_path: str = "", progress: bool = True) -> list[str]:
    """Run the figures sweep, publish its outputs and write the manifest; returns the notebooks
    that failed."""
    run_sweep(spec, sweep_dir, engine="local", progress=progress)
    failed = [Path(p.target).stem for p in spec.points
              if (read_record(sweep_dir, p) or {}).get("status") != "ok"]
    entries = publish(spec, sweep_dir, figures, runs)
    manifest = render_manifest(entries, current_commit(), spec_path, failed)
    (figures / MANIFEST_FILE).write_text(manifest + "\n")
    return failed


def _shown(path: Path) -> str:
    """``path`` relative to the project when it is inside it."""
    path = path.resolve()
    return str(path.relative_to(PROJECT_ROOT) if path.is_relative_to(PROJECT_ROOT) else path)


def _cell(value: Any) -> str:
    """A markdown table cell: strings as they are, anything else as compact JSON."""
    text = value if isinstance(value, str) else json.dumps(value, default=str)
    return text.replace("|", "\\|").replace("\n", " ")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m mmcache.lab.figures", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--spec", default=str(FIGURES_SPEC), help="the figures sweep spec")
    parser.add_argument("--out", default=None,
                        help="the sweep folder (default: runs/figures/<package hash>)")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    args = parser.parse_args(argv)
    spec = load_spec(args.spec)
    sweep_dir = Path(args.out) if args.out else RUNS_DIR / "figures" / package_hash()
    failed = run_figures(spec, sweep_dir, figure_dir(), RUNS_DIR, _shown(Path(args.spec)),
                         progress=not args.no_progress)
    print(f"[figures] {len(spec.points) - len(failed)} of {len(spec.points)} notebooks -> "
          f"{figure_dir()} (manifest {MANIFEST_FILE}); sweep folder {sweep_dir}"
          + (f"; FAILED: {', '.join(failed)}" if failed else ""))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
