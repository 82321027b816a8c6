"""Check that a full run reproduces the numbers the README prints.

``figures/expected.yaml`` maps each README number to the metric a full run writes
(``runs/<notebook>/metrics.json``) with a stated tolerance, and quotes the README
text that prints it. :func:`check` compares them; the command line (what
``make check-readme`` runs, after ``make figures``) prints every mismatch and exits 1
if there is one::

    python -m mmcache.lab.docs_check [--expected figures/expected.yaml] [--runs runs] [--readme README.md]
"""

from __future__ import annotations

import argparse
import json
import math
import re
import sys
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from mmcache.errors import ConfigError
from mmcache.paths import PROJECT_ROOT, RUNS_DIR

EXPECTED_FILE = PROJECT_ROOT / "figures" / "expected.yaml"
README_FILE = PROJECT_ROOT / "README.md"
ENTRY_FIELDS = ("readme", "metrics", "tol", "rtol")
#: Float rounding allowed on top of every tolerance (0.8 - 0.6 > 0.2 in binary).
FLOAT_SLACK = 1e-9
_MISSING = object()


@dataclass(frozen=True)
class Expectation:
    """One README number: where it is printed, the metric path, the value and its tolerance."""

    notebook: str
    readme: str
    path: tuple[str, ...]
    value: Any                # number, list of numbers, string, bool, or {"same_as": path}
    tol: float = 0.0
    rtol: float = 0.0


@dataclass(frozen=True)
class Mismatch:
    """An expectation that the run (or the README) does not meet, and why."""

    expectation: Expectation
    problem: str


def load_expectations(path: str | Path = EXPECTED_FILE) -> list[Expectation]:
    """Read the expectations file; raises :class:`ConfigError` naming a malformed entry."""
    path = Path(path)
    try:
        raw = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as err:
        raise ConfigError(f"cannot read expectations {path}: {err}") from err
    if not isinstance(raw, dict):
        raise ConfigError(f"{path}: expected a mapping of notebook name -> list of entries")
    out = []
    for notebook, entries in raw.items():
        if not isinstance(entries, list):
            raise ConfigError(f"{path}: `{notebook}` must be a list of entries")
        for i, entry in enumerate(entries):
            out += _entry(entry, notebook, f"{path.name}: {notebook}[{i}]")
    return out


def check(expectations: list[Expectation], runs_dir: str | Path = RUNS_DIR,
          readme_text: str | None = None) -> list[Mismatch]:
    """Every expectation the runs in ``runs_dir`` (or the README text, when given) do not meet."""
    runs_dir = Path(runs_dir)
    readme = _squash(readme_text) if readme_text is not None else None
    metrics: dict[str, dict[str, Any] | str] = {}
    mismatches = []
    for exp in expectations:
        if exp.notebook not in metrics:
            metrics[exp.notebook] = _read_run(runs_dir, exp.notebook)
        run = metrics[exp.notebook]
        problem = (f"README.md no longer shows {exp.readme!r}"
                   if readme is not None and _squash(exp.readme) not in readme
                   else run if isinstance(run, str) else _compare(exp, run))
        if problem:
            mismatches.append(Mismatch(exp, problem))
    return mismatches


def _entry(entry: Any, notebook: str, where: str) -> list[Expectation]:
    if not isinstance(entry, dict):
        raise ConfigError(f"{where}: an entry is a mapping of {list(ENTRY_FIELDS)}")
    unknown = sorted(set(entry) - set(ENTRY_FIELDS))
    if unknown:
        raise ConfigError(f"{where}: unknown field(s) {unknown}; the fields are {list(ENTRY_FIELDS)}")
    readme, metrics = entry.get("readme"), entry.get("metrics")
    if not isinstance(readme, str) or not readme.strip():
        raise ConfigError(f"{where}: `readme` must be the README text that prints the numbers")
    if not isinstance(metrics, dict) or not metrics:
        raise ConfigError(f"{where}: `metrics` must map metric paths (a/b/c) to README values")
    tols = {}
    for key in ("tol", "rtol"):
        value = entry.get(key, 0.0)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
            raise ConfigError(f"{where}: `{key}` must be a non-negative number, got {value!r}")
        tols[key] = float(value)
    for key, value in metrics.items():
        if isinstance(value, dict) and set(value) != {"same_as"}:
            raise ConfigError(f"{where}: metric `{key}`: a mapping value must be {{same_as: path}}")
    return [Expectation(notebook, readme, tuple(str(key).split("/")), value, **tols)
            for key, value in metrics.items()]


def _read_run(runs_dir: Path, notebook: str) -> dict[str, Any] | str:
    """A full run's metrics, or the problem that stops reading them."""
    path = runs_dir / notebook / "metrics.json"
    if not path.is_file():
        return f"no {path}: run `make figures` (or `python -m mmcache.lab.runbook {notebook}`) first"
    metrics = json.loads(path.read_text())
    if metrics.get("smoke"):
        return f"{path} is from a smoke run; the README's numbers come from full runs"
    return metrics


def _lookup(metrics: Any, path: tuple[str, ...]) -> Any:
    for key in path:
        if not isinstance(metrics, dict) or key not in metrics:
            return _MISSING
        metrics = metrics[key]
    return metrics


def _compare(exp: Expectation, metrics: dict[str, Any]) -> str | None:
    name = "/".join(exp.path)
    measured = _lookup(metrics, exp.path)
    if measured is _MISSING:
        return f"{name}: no such metric"
    expected = exp.value
    if isinstance(expected, dict):
        expected = _lookup(metrics, tuple(expected["same_as"].split("/")))
        if expected is _MISSING:
            return f"{name}: same_as {exp.value['same_as']}: no such metric"
    if not _matches(measured, expected, exp.tol, exp.rtol):
        tolerance = f" (tol {exp.tol:g}, rtol {exp.rtol:g})" if exp.tol or exp.rtol else ""
        return f"{name}: README {expected!r}, run {measured!r}{tolerance}"
    return None


def _matches(measured: Any, expected: Any, tol: float, rtol: float) -> bool:
    if isinstance(expected, list):
        return (isinstance(measured, list) and len(measured) == len(expected)
                and all(_matches(m, e, tol, rtol) for m, e in zip(measured, expected)))
    if isinstance(expected, bool) or isinstance(measured, bool) or isinstance(expected, str):
        return measured == expected
    if isinstance(expected, (int, float)) and isinstance(measured, (int, float)):
        bound = tol + rtol * abs(expected) + FLOAT_SLACK * max(1.0, abs(expected))
        return math.isfinite(measured) and abs(measured - expected) <= bound
    return measured == expected


def _squash(text: str) -> str:
    """Text with every run of whitespace made one space (the README is hard-wrapped)."""
    return re.sub(r"\s+", " ", text).strip()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m mmcache.lab.docs_check", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--expected", default=str(EXPECTED_FILE), help="the expectations file")
    parser.add_argument("--runs", default=str(RUNS_DIR), help="the folder of runs/<notebook>/")
    parser.add_argument("--readme", default=str(README_FILE), help="the README to quote")
    args = parser.parse_args(argv)
    try:
        expectations = load_expectations(args.expected)
    except ConfigError as err:
        print(f"[readme-check] {err}", file=sys.stderr)
        return 2
    mismatches = check(expectations, args.runs, Path(args.readme).read_text())
    for (notebook, problem), n in Counter((m.expectation.notebook, m.problem)
                                          for m in mismatches).items():
        print(f"[readme-check] {notebook}: {problem}" + (f" ({n} numbers)" if n > 1 else ""))
    notebooks = len({e.notebook for e in expectations})
    print(f"[readme-check] {len(expectations) - len(mismatches)} of {len(expectations)} README "
          f"numbers from {notebooks} notebooks reproduced by {args.runs}")
    return 1 if mismatches else 0


if __name__ == "__main__":
    sys.exit(main())
