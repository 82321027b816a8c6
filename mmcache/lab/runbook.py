"""Run notebooks in batch and record what they measured.

A notebook's reviewed source is ``notebooks/<name>.py`` (jupytext percent
format). :func:`execute` builds the notebook from it in memory, runs it with
papermill (injecting ``SMOKE`` and any parameters), and writes the executed copy,
its ``metrics.json`` and, in smoke mode, its figures to ``runs/<name>[-smoke]/``.
Inside a notebook, :func:`write_metrics` records its key numbers.

Command line::

    python -m mmcache.lab.runbook [--smoke] [-p key=value ...] [notebooks ...]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any, Mapping

import yaml

from mmcache.errors import InvalidInputError
from mmcache.metrics import DASHBOARD_ENV, progress_bar
from mmcache.offline import enforce_offline
from mmcache.paths import PROJECT_ROOT, RUNS_DIR
from mmcache.lab.plotting import FIGURE_DIR_ENV

RUN_DIR_ENV = "MMCACHE_RUN_DIR"
NOTEBOOK_DIR = PROJECT_ROOT / "notebooks"


def notebook_sources() -> list[Path]:
    """Every notebook's paired ``.py`` source, in name order."""
    return sorted(NOTEBOOK_DIR.glob("[0-9][0-9]_*.py"))


def run_dir(name: str | None = None, smoke: bool = False) -> Path:
    """This run's output folder.

    ``$MMCACHE_RUN_DIR`` inside a batch run (runbook, sweeps); else the notebook's own
    ``runs/<name>[-smoke]/`` (a plain papermill or Jupyter run passes its ``NOTEBOOK``
    parameter as ``name``); ``runs/interactive/`` when nothing names the notebook.
    """
    if RUN_DIR_ENV in os.environ:
        return Path(os.environ[RUN_DIR_ENV])
    return _batch_dir(name, smoke) if name else RUNS_DIR / "interactive"


def write_metrics(metrics: Mapping[str, Any], name: str | None = None,
                  smoke: bool = False) -> Path:
    """Write a notebook's key numbers to ``metrics.json`` in its run folder (see :func:`run_dir`)."""
    out = run_dir(name, smoke)
    out.mkdir(parents=True, exist_ok=True)
    path = out / "metrics.json"
    path.write_text(json.dumps(dict(metrics), indent=2, sort_keys=True, default=_jsonable) + "\n")
    return path


def read_metrics(name: str, smoke: bool = True) -> dict[str, Any]:
    """The metrics a batch run of notebook ``name`` wrote."""
    return json.loads((_batch_dir(name, smoke) / "metrics.json").read_text())


def execute(source: Path | str, smoke: bool, parameters: Mapping[str, Any] | None = None,
            timeout_s: int = 3600, out_dir: Path | str | None = None) -> Path:
    """Execute one notebook source with papermill; returns its run folder.

    The run folder is ``out_dir`` when given (a sweep point's folder), else
    ``runs/<name>[-smoke]/``.
    """
    enforce_offline()  # the kernel inherits the offline switches
    # deferred: the notebook tools load only when a notebook runs
    import jupytext
    import papermill as pm

    source = Path(source)
    if source.suffix != ".py":
        source = NOTEBOOK_DIR / f"{source.stem}.py"
    if not source.exists():
        raise InvalidInputError(f"no notebook source {source}; known: "
                                f"{[p.stem for p in notebook_sources()]}")
    out = Path(out_dir) if out_dir is not None else _batch_dir(source.stem, smoke)
    out.mkdir(parents=True, exist_ok=True)
    built = out / f"{source.stem}.source.ipynb"
    nb = jupytext.read(source)
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nb.metadata["language_info"] = {"name": "python"}
    jupytext.write(nb, built)
    # a batch run keeps its output readable without a widget manager: static dashboards
    env = {**run_env(out, smoke), "MPLBACKEND": "Agg", DASHBOARD_ENV: "static"}
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        pm.execute_notebook(str(built), str(out / f"{source.stem}.ipynb"), kernel_name="python3",
                            parameters={"SMOKE": smoke, **dict(parameters or {})},
                            cwd=str(NOTEBOOK_DIR), progress_bar=False,
                            execution_timeout=timeout_s)
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        built.unlink(missing_ok=True)
    return out


def run_env(out: Path, smoke: bool) -> dict[str, str]:
    """The environment variables that send a notebook's metrics to ``out`` and, in smoke mode,
    its figures to ``out/figures``."""
    env = {RUN_DIR_ENV: str(out)}
    if smoke:
        env[FIGURE_DIR_ENV] = str(out / "figures")
    return env


def _batch_dir(name: str, smoke: bool) -> Path:
    return RUNS_DIR / (f"{name}-smoke" if smoke else name)


def _jsonable(obj: Any) -> Any:
    if hasattr(obj, "tolist"):
        return obj.tolist()
    return str(obj)


def _parse_parameter(text: str) -> tuple[str, Any]:
    key, sep, value = text.partition("=")
    if not sep:
        raise argparse.ArgumentTypeError(f"parameter {text!r} is not key=value")
    return key, yaml.safe_load(value)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m mmcache.lab.runbook", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("notebooks", nargs="*", help="names or .py sources (default: all)")
    parser.add_argument("--smoke", action="store_true", help="run with SMOKE=True (seconds)")
    parser.add_argument("-p", "--parameter", action="append", default=[], type=_parse_parameter,
                        help="override a parameters-cell value, e.g. -p SEED=3")
    args = parser.parse_args(argv)
    sources = [Path(n) for n in args.notebooks] or notebook_sources()
    failed = []
    with progress_bar(len(sources), "notebooks", unit="nb",
                      progress=None if len(sources) > 1 else False) as bar:
        for source in sources:
            bar.write(f"[runbook] {source.stem} ({'smoke' if args.smoke else 'full'})")
            try:
                out = execute(source, args.smoke, dict(args.parameter))
            except Exception as err:  # report every failing notebook, not only the first
                failed.append(source.stem)
                bar.write(f"[runbook]   FAILED {source.stem}: {type(err).__name__}: {err}")
            else:
                bar.write(f"[runbook]   -> {out}")
            bar.update()
    if failed:
        print(f"[runbook] {len(failed)} of {len(sources)} notebooks failed: {', '.join(failed)}",
              file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
