"""Regenerate every figure: the notebooks in full mode through the sweep runner, then a manifest.

``python -m mmcache.lab.figures`` (what ``make figures`` runs) runs the spec
``notebooks/sweeps/figures.yaml`` on the local pool (in parallel, as its
``resources.cpus`` allow), then publishes each notebook's figures to ``figures/``
and its executed copy and ``metrics.json`` to ``runs/<name>/`` (where a single
``python -m mmcache.lab.runbook NAME`` puts them too), and writes the report of them:
``figures/index.html`` (open it from disk: every figure with its caption, notebook,
parameters, the commit, and the weights, data and other provenance its JSON sidecar
holds) and ``figures/MANIFEST.md`` (one line per figure: notebook, parameters, commit,
weights, the data sources' names, and a link to the sidecar with the rest). The sweep
folder is keyed by a hash of the package's source, so an interrupted run resumes and a
changed package runs afresh.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import shutil
import subprocess
import sys
import textwrap
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any
from urllib.parse import quote

import jinja2

from mmcache.paths import PROJECT_ROOT, RUNS_DIR
from mmcache.lab.plotting import figure_dir
from mmcache.lab.runbook import NOTEBOOK_DIR
from mmcache.lab.sweep import SweepSpec, load_spec, run_sweep
from mmcache.lab.sweep.point import METRICS_FILE
from mmcache.lab.sweep.store import RECORD_FILE, read_record

FIGURES_SPEC = NOTEBOOK_DIR / "sweeps" / "figures.yaml"
MANIFEST_FILE = "MANIFEST.md"
INDEX_FILE = "index.html"
#: The Jinja template of ``index.html`` (package data beside this module, autoescaped).
INDEX_TEMPLATE = "figures_index.html.j2"
#: Sidecar provenance keys shown in their own manifest columns.
SHOWN_KEYS = ("weights", "data")
#: The longest text a manifest cell shows of one name (the sidecar holds it in full).
NAME_WIDTH = 80
#: The image formats a figure's page links to, the first one shown.
IMAGE_SUFFIXES = (".png", ".pdf")


@dataclass(frozen=True)
class FigureEntry:
    """One published figure: its name, the notebook point that made it, and its sidecar."""

    name: str
    notebook: str             # the notebook's name (its source's stem)
    source: str               # its source, relative to the project when inside it
    params: dict[str, Any]
    source_sha256: str
    provenance: dict[str, Any]
    caption: str = ""         # the sidecar's caption ("" in sidecars written before captions)
    sidecar: str = ""         # the sidecar's file name in the figures folder
    files: tuple[str, ...] = ()   # the figure's image files beside it (PNG first)

    @property
    def png(self) -> str | None:
        """The PNG's file name, None when the figure has none."""
        return next((f for f in self.files if f.endswith(".png")), None)


def read_entry(sidecar: Path, notebook: str, source: str, params: Mapping[str, Any],
               source_sha256: str) -> FigureEntry:
    """The figure a sidecar (as :func:`mmcache.lab.plotting.save_figure` writes it) describes,
    with the image files beside it."""
    data = json.loads(sidecar.read_text())
    files = tuple(f"{sidecar.stem}{s}" for s in IMAGE_SUFFIXES
                  if sidecar.with_suffix(s).is_file())
    return FigureEntry(data.get("figure", sidecar.stem), notebook, source, dict(params),
                       source_sha256, data.get("provenance", {}), data.get("caption") or "",
                       sidecar.name, files)


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
    """Copy every successful point's figures to ``figures`` and its executed notebook, metrics
    and record (``point.json``: parameters, wall time) to ``runs/<notebook>/``; returns the
    published figures, in spec order."""
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
        for name in (METRICS_FILE, RECORD_FILE, f"{stem}.ipynb"):
            if (point_dir / name).is_file():
                shutil.copy2(point_dir / name, run_dir / name)
        point_figures = point_dir / "figures"
        for path in sorted(point_figures.glob("*")) if point_figures.is_dir() else []:
            shutil.copy2(path, figures / path.name)
            if path.suffix == ".json":
                entries.append(read_entry(path, stem, _shown(Path(point.target)), point.params,
                                          point.source_sha256))
    return entries


def render_manifest(entries: list[FigureEntry], commit: str, spec_path: str,
                    failed: Sequence[str] = (), written: datetime | None = None) -> str:
    """``figures/MANIFEST.md``: one table row per figure (notebook, parameters, commit,
    weights, the data sources' names), linking to the sidecar that holds the rest."""
    written = written or datetime.now(timezone.utc)
    lines = ["# Figure manifest", "",
             "Written by `make figures` (`python -m mmcache.lab.figures`, "
             f"spec `{spec_path}`) on {written:%Y-%m-%d %H:%M} UTC at commit `{commit}`. "
             f"Browse the figures in [{INDEX_FILE}]({INDEX_FILE}). Each figure is `<name>.png` + "
             "`.pdf`; its `<name>.json` holds its caption and full provenance. Parameters not "
             "listed are as in the notebook's parameters cell; a notebook's sha256 is of its "
             "source.", ""]
    if failed:
        lines += [f"**Failed, so missing here:** {', '.join(failed)}.", ""]
    lines += ["| figure | notebook | parameters | commit | weights | data | provenance |",
              "|---|---|---|---|---|---|---|"]
    short_commit = _short_commit(commit)
    for e in entries:
        figure = f"[`{e.name}`]({quote(e.png)})" if e.png else f"`{e.name}` (no PNG)"
        params = ", ".join(f"`{k}={v!r}`" for k, v in e.params.items()) or "—"
        sidecar = f"[{e.sidecar}]({quote(e.sidecar)})" if e.sidecar else "—"
        lines.append("| " + " | ".join(_cell(c) for c in (
            figure, f"`{e.notebook}` (sha256 `{e.source_sha256[:12]}`)", params,
            f"`{short_commit}`", weight_names(e.provenance.get("weights")),
            source_names(e.provenance.get("data")), sidecar)) + " |")
    return "\n".join(lines)


def render_index(entries: list[FigureEntry], commit: str, spec_path: str,
                 failed: Sequence[str] = (), written: datetime | None = None) -> str:
    """``figures/index.html``: every figure with its caption and full provenance, grouped by
    notebook; images and sidecars linked relatively, so the folder opens from disk."""
    written = written or datetime.now(timezone.utc)
    groups = [{"notebook": notebook, "entries": [e for e in entries if e.notebook == notebook]}
              for notebook in dict.fromkeys(e.notebook for e in entries)]
    for group in groups:
        group["first"] = group["entries"][0]
    return _environment().get_template(INDEX_TEMPLATE).render(
        groups=groups, n_figures=len(entries), commit=commit, spec_path=spec_path,
        failed=list(failed), written=f"{written:%Y-%m-%d %H:%M}", shown_keys=SHOWN_KEYS,
        manifest=MANIFEST_FILE)


def write_report(entries: list[FigureEntry], figures: Path, commit: str, spec_path: str,
                 failed: Sequence[str] = ()) -> tuple[Path, Path]:
    """Write ``MANIFEST.md`` and ``index.html`` into ``figures``; returns their paths."""
    written = datetime.now(timezone.utc)
    figures.mkdir(parents=True, exist_ok=True)
    manifest, index = figures / MANIFEST_FILE, figures / INDEX_FILE
    manifest.write_text(render_manifest(entries, commit, spec_path, failed, written) + "\n")
    index.write_text(render_index(entries, commit, spec_path, failed, written),
                     encoding="utf-8")
    return manifest, index


def weight_names(value: Any) -> str:
    """The weights a sidecar names, in one line: ``role: id`` per entry of a mapping."""
    if value is None:
        return "—"
    if isinstance(value, Mapping):
        return "; ".join(f"{k}: {_name(v)}" for k, v in value.items()) or "—"
    if isinstance(value, (list, tuple)):
        return ", ".join(_name(v) for v in value) or "—"
    return _name(value)


def source_names(value: Any) -> str:
    """The names of the data sources a sidecar's ``data`` holds, in one line.

    A string is the source's name (shortened to :data:`NAME_WIDTH`); a mapping whose values
    are all strings, lists or mappings names one source per key; any other mapping (with
    numbers among its values) describes one generated source, which the sidecar holds.
    """
    if value is None:
        return "—"
    if isinstance(value, Mapping):
        if value and all(isinstance(v, (str, Mapping, list, tuple)) for v in value.values()):
            return ", ".join(str(k) for k in value)
        return "one described source (see the sidecar)"
    if isinstance(value, (list, tuple)):
        return ", ".join(source_names(v) for v in value) or "—"
    return _name(value)


def _name(value: Any) -> str:
    text = value if isinstance(value, str) else json.dumps(value, default=str)
    return textwrap.shorten(text, NAME_WIDTH, placeholder=" …") or "—"


def _short_commit(commit: str) -> str:
    """A 40-hex commit cut to 12 characters, with its marks (uncommitted changes) kept."""
    head, sep, rest = commit.partition(" ")
    if len(head) == 40 and all(c in "0123456789abcdef" for c in head):
        return head[:12] + sep + rest
    return commit


def _environment() -> jinja2.Environment:
    """Templates from the package beside this module, every value HTML-escaped."""
    env = jinja2.Environment(loader=jinja2.PackageLoader(__package__, "templates"),
                             autoescape=True, undefined=jinja2.StrictUndefined,
                             trim_blocks=True, lstrip_blocks=True)
    env.filters["pyrepr"] = repr          # parameters as a notebook's parameters cell writes them
    return env


def run_figures(spec: SweepSpec, sweep_dir: Path, figures: Path, runs: Path,
                spec_path: str = "", progress: bool | None = None) -> list[str]:
    """Run the figures sweep, publish its outputs and write the report (index.html and the
    manifest); returns the notebooks that failed."""
    run_sweep(spec, sweep_dir, engine="local", progress=progress)
    failed = [Path(p.target).stem for p in spec.points
              if (read_record(sweep_dir, p) or {}).get("status") != "ok"]
    entries = publish(spec, sweep_dir, figures, runs)
    write_report(entries, figures, current_commit(), spec_path, failed)
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
                         progress=False if args.no_progress else None)
    print(f"[figures] {len(spec.points) - len(failed)} of {len(spec.points)} notebooks -> "
          f"{figure_dir()} ({INDEX_FILE}, {MANIFEST_FILE}); sweep folder {sweep_dir}"
          + (f"; FAILED: {', '.join(failed)}" if failed else ""))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
