"""The docs check: a full run reproduces the numbers the docs print, on the pages that print them.

``figures/expected.yaml`` maps each number of the docs (README.md and the pages under
``docs/``) to the metric a full run writes (``runs/<notebook>/metrics.json``) with a
stated tolerance (``tol``, ``rtol``, or ``factor``: the run's value within that factor of the
page's, either way), names the page that prints it (``page``) and quotes the text there
that prints it (``readme``). A statistic over seeds is checked against the interval the run
itself reports: ``{value: v, within: path/of/its/ci95}`` passes when the page's ``v`` lies in
the run's interval (widened by the entry's ``tol``, the page's rounding), whatever machine
made it. Where the run's whole interval moves between runs (chaotic training: the collapse runs
at high learning rates between CPUs, the frozen-feature runs even on one machine),
``{interval: [low, high], overlaps: path/of/its/ci95}`` passes when the interval the page prints
and the run's overlap: the two runs agree within their uncertainty. :func:`check` compares
them; :func:`missing_quotes` checks the quotes alone (no run needed).

A section named ``bench/<benchmark>`` holds the numbers of the benchmarks page: its run is the
benchmark ledger's record ``runs/bench/<benchmark>.json`` (what ``make bench`` writes), read as
``figures/<figure name>``, ``params/<parameter>`` and ``machine_before/`` / ``machine_after/``
(``cores``, ``load_1min``). A notebook's run published by ``make figures`` also gives
``point/elapsed_s``, its wall time (from ``runs/<notebook>/point.json``). The command line
checks the notebooks' numbers (what ``make check-docs`` runs, after ``make figures``) or, with
``--bench``, the benchmarks' (the last step of ``make bench``); it prints every mismatch and
exits 1 if there is one; ``--coverage`` lists every number of the docs that nothing quotes
(``make test`` holds every page to none)::

    python -m mmcache.lab.docs_check [--expected figures/expected.yaml] [--runs runs] [--root .]
                                     [--quotes-only | --bench | --coverage]
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
from typing import Any, Mapping

import yaml

from mmcache.errors import ConfigError
from mmcache.lab.bench import ledger
from mmcache.lab.sweep.store import RECORD_FILE
from mmcache.paths import PROJECT_ROOT, RUNS_DIR

EXPECTED_FILE = PROJECT_ROOT / "figures" / "expected.yaml"
SETTINGS_FILE = PROJECT_ROOT / "figures" / "settings.yaml"
README_FILE = PROJECT_ROOT / "README.md"
ENTRY_FIELDS = ("page", "readme", "metrics", "tol", "rtol", "factor", "why")
#: The mapping values an entry may hold besides plain values.
SHAPES = ({"same_as"}, {"value", "within"}, {"interval", "overlaps"})
#: Float rounding allowed on top of every tolerance (0.8 - 0.6 > 0.2 in binary).
FLOAT_SLACK = 1e-9
#: A number as a page prints it (not one inside a word, a version or a section sign's).
_NUMBER = re.compile(r"(?<![\w.§−-])[−-]?\d[\d,]*(?:\.\d+)?%?")
_FENCED = re.compile(r"```.*?```", re.S)
_HEADING = re.compile(r"^#+ .*$", re.M)
#: What of a page's text is not counted besides code blocks and headings: inline code, link
#: targets, references to the seeds' sections ("seed 002 §2.4").
_NOT_COUNTED = re.compile(r"`[^`]*`|\]\([^)]*\)|§[\d.]+(?:–[\d.]+)?|[Ss]eeds? \d{3}\b")
#: The prefix of a section whose run is a benchmark's ledger record, not a notebook's.
BENCH = "bench/"
_MISSING = object()


@dataclass(frozen=True)
class Expectation:
    """One number of the docs: the page and text that print it, the metric path, the value
    and its tolerance."""

    notebook: str
    readme: str               # the text quoted from ``page`` (whitespace runs count as one)
    path: tuple[str, ...]
    value: Any                # number, list, string, bool, {"same_as": path} or
    #                           {"value": v, "within": path of the run's [low, high] interval}
    #                           or {"interval": [low, high], "overlaps": path of the run's}
    tol: float = 0.0
    rtol: float = 0.0
    factor: float = 0.0       # > 1: the run's value lies within this factor of the page's
    page: str = "README.md"   # the page that prints it, relative to the checkout
    why: str = ""             # why the tolerance is what it is (required with any tolerance)


@dataclass(frozen=True)
class Mismatch:
    """An expectation that the run (or its page) does not meet, and why."""

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


def load_settings(path: str | Path = SETTINGS_FILE) -> dict[str, list[str]]:
    """Read the settings file: page -> the quoted texts of that page whose numbers are the
    runs' inputs (parameters, sizes, the code's constants), not results; raises
    :class:`ConfigError` naming a malformed entry."""
    path = Path(path)
    try:
        raw = yaml.safe_load(path.read_text()) or {}
    except (OSError, yaml.YAMLError) as err:
        raise ConfigError(f"cannot read settings {path}: {err}") from err
    if not isinstance(raw, dict):
        raise ConfigError(f"{path}: expected a mapping of page -> list of quoted texts")
    for page, quotes in raw.items():
        if not isinstance(quotes, list) or not all(isinstance(q, str) and q.strip()
                                                   for q in quotes or []):
            raise ConfigError(f"{path}: `{page}` must be a list of texts quoted from the page")
    return {page: list(quotes or []) for page, quotes in raw.items()}


def uncovered_numbers(page: str, text: str, expectations: list[Expectation],
                      settings: Mapping[str, list[str]]) -> list[str]:
    """The numbers ``text`` (the page ``page``) prints outside every expectation's quote and
    every setting's, each with the words around it. Numbers in code (fenced or inline), link
    targets and headings are not counted."""
    squashed = _squash(_HEADING.sub(lambda m: "\0" * len(m.group()), _FENCED.sub(" ", text)))
    covered = bytearray(len(squashed))
    quotes = [e.readme for e in expectations if e.page == page] + list(settings.get(page, []))
    for quote in quotes:
        quote = _squash(quote)
        start = 0
        while (at := squashed.find(quote, start)) >= 0:
            covered[at:at + len(quote)] = b"\1" * len(quote)
            start = at + 1
    for exempt in _NOT_COUNTED.finditer(squashed):
        covered[exempt.start():exempt.end()] = b"\1" * (exempt.end() - exempt.start())
    return [f"{m.group()} in \"…{squashed[max(0, m.start() - 40):m.end() + 10]}…\"".replace(
                "\0", "") for m in _NUMBER.finditer(squashed) if not covered[m.start()]]


def read_pages(expectations: list[Expectation], root: str | Path = PROJECT_ROOT,
               ) -> dict[str, str | None]:
    """The text of every page the expectations name, read under ``root`` (None: no such file)."""
    root = Path(root)
    return {page: (root / page).read_text() if (root / page).is_file() else None
            for page in sorted({e.page for e in expectations})}


def missing_quotes(expectations: list[Expectation],
                   pages: Mapping[str, str | None]) -> list[Mismatch]:
    """Every expectation whose quoted text its page does not show (no run needed)."""
    squashed = {page: _squash(text) for page, text in pages.items() if text is not None}
    mismatches = []
    for exp in expectations:
        if exp.page not in squashed:
            mismatches.append(Mismatch(exp, f"no page {exp.page}"))
        elif _squash(exp.readme) not in squashed[exp.page]:
            mismatches.append(Mismatch(exp, f"{exp.page} no longer shows {exp.readme!r}"))
    return mismatches


def check(expectations: list[Expectation], runs_dir: str | Path = RUNS_DIR,
          pages: Mapping[str, str | None] | None = None) -> list[Mismatch]:
    """Every expectation the runs in ``runs_dir`` (or its page, when ``pages`` maps page
    paths to their text, as :func:`read_pages` reads them) do not meet."""
    runs_dir = Path(runs_dir)
    quotes = ({id(m.expectation): m.problem for m in missing_quotes(expectations, pages)}
              if pages is not None else {})
    metrics: dict[str, dict[str, Any] | str] = {}
    mismatches = []
    for exp in expectations:
        if exp.notebook not in metrics:
            metrics[exp.notebook] = _read_run(runs_dir, exp.notebook)
        run = metrics[exp.notebook]
        problem = quotes.get(id(exp)) or (run if isinstance(run, str) else _compare(exp, run))
        if problem:
            mismatches.append(Mismatch(exp, problem))
    return mismatches


def _entry(entry: Any, notebook: str, where: str) -> list[Expectation]:
    if not isinstance(entry, dict):
        raise ConfigError(f"{where}: an entry is a mapping of {list(ENTRY_FIELDS)}")
    unknown = sorted(set(entry) - set(ENTRY_FIELDS))
    if unknown:
        raise ConfigError(f"{where}: unknown field(s) {unknown}; the fields are {list(ENTRY_FIELDS)}")
    page, readme, metrics = entry.get("page"), entry.get("readme"), entry.get("metrics")
    if not isinstance(page, str) or not page.endswith(".md") or Path(page).is_absolute():
        raise ConfigError(f"{where}: `page` must be the path of the page that prints the "
                          f"numbers, relative to the checkout (README.md, docs/...), got {page!r}")
    if not isinstance(readme, str) or not readme.strip():
        raise ConfigError(f"{where}: `readme` must be the text of `page` that prints the numbers")
    if not isinstance(metrics, dict) or not metrics:
        raise ConfigError(f"{where}: `metrics` must map metric paths (a/b/c) to the page's values")
    tols = {}
    for key in ("tol", "rtol", "factor"):
        value = entry.get(key, 0.0)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
            raise ConfigError(f"{where}: `{key}` must be a non-negative number, got {value!r}")
        tols[key] = float(value)
    if 0 < tols["factor"] <= 1:
        raise ConfigError(f"{where}: `factor` must be above 1 (the run's value within that "
                          f"factor of the page's, either way), got {tols['factor']!r}")
    why = entry.get("why", "")
    if not isinstance(why, str) or "\n" in why.strip():
        raise ConfigError(f"{where}: `why` must be one line of text saying why the tolerance "
                          f"is what it is, got {why!r}")
    why = why.strip()
    if any(tols.values()) and not why:
        raise ConfigError(f"{where} ({readme!r}): a nonzero `tol`/`rtol`/`factor` needs a `why:` line "
                          f"saying what it allows (e.g. \"the page's rounding (3 decimals)\", "
                          f"or the cause and the size of one flipped decision); or drop the "
                          f"tolerance, or check a statistic against the run's own interval "
                          f"({{value: v, within: path}})")
    for key, value in metrics.items():
        if isinstance(value, dict) and set(value) not in SHAPES:
            raise ConfigError(f"{where}: metric `{key}`: a mapping value must be {{same_as: path}}, "
                              f"{{value: number, within: path of an interval}} or "
                              f"{{interval: [low, high], overlaps: path of an interval}}")
        if isinstance(value, dict) and "overlaps" in value and not _is_interval(value["interval"]):
            raise ConfigError(f"{where}: metric `{key}`: `interval` must be the [low, high] the page "
                              f"prints (two finite numbers, low <= high), got {value['interval']!r}")
    return [Expectation(notebook, readme, tuple(str(key).split("/")), value, page=page, why=why,
                        **tols)
            for key, value in metrics.items()]


def _is_interval(value: Any) -> bool:
    """Whether ``value`` is a ``[low, high]`` pair of finite numbers with low <= high."""
    return (isinstance(value, list) and len(value) == 2
            and all(isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
                    for v in value) and value[0] <= value[1])


def is_bench(expectation: Expectation) -> bool:
    """Whether the expectation's run is a benchmark's record (``make bench``)."""
    return expectation.notebook.startswith(BENCH)


def _read_run(runs_dir: Path, notebook: str) -> dict[str, Any] | str:
    """A full run's metrics, or the problem that stops reading them."""
    if notebook.startswith(BENCH):
        return _read_bench(runs_dir, notebook.removeprefix(BENCH))
    path = runs_dir / notebook / "metrics.json"
    if not path.is_file():
        return f"no {path}: run `make figures` (or `python -m mmcache.lab.runbook {notebook}`) first"
    metrics = json.loads(path.read_text())
    if metrics.get("smoke"):
        return f"{path} is from a smoke run; the docs' numbers come from full runs"
    record = runs_dir / notebook / RECORD_FILE      # `make figures`' record of the run
    if record.is_file():
        metrics = {**metrics, "point": {"elapsed_s": json.loads(record.read_text())["elapsed_s"]}}
    return metrics


def _read_bench(runs_dir: Path, bench: str) -> dict[str, Any] | str:
    """A benchmark's recorded figures, or the problem that stops reading them."""
    path = runs_dir / "bench" / f"{bench}.json"
    if not path.is_file():
        return f"no {path}: run `make bench` first"
    run = ledger.load(path)
    if run["params"].get("quick"):
        return f"{path} is from a --quick run; the docs' numbers come from full runs"
    return ledger.figures(run)


def _lookup(metrics: Any, path: tuple[str, ...]) -> Any:
    """The metric at ``path``: keys of mappings, or indices (``"0"``) of lists. A mapping key
    that itself holds the separator (``"both/none"``, ``"image/near-duplicate"``) is matched by
    joining the path's next parts, the shortest join first."""
    if not path:
        return metrics
    if isinstance(metrics, list):
        key = path[0]
        if key.isdigit() and int(key) < len(metrics):
            return _lookup(metrics[int(key)], path[1:])
        return _MISSING
    if isinstance(metrics, dict):
        for width in range(1, len(path) + 1):
            key = "/".join(path[:width])
            if key in metrics:
                found = _lookup(metrics[key], path[width:])
                if found is not _MISSING:
                    return found
    return _MISSING


def _compare(exp: Expectation, metrics: dict[str, Any]) -> str | None:
    name = "/".join(exp.path)
    measured = _lookup(metrics, exp.path)
    if measured is _MISSING:
        written_by = " (`make figures` writes it)" if exp.path[0] == "point" else ""
        return f"{name}: no such metric{written_by}"
    expected = exp.value
    if isinstance(expected, dict) and "within" in expected:
        return _within(exp, name, expected, metrics)
    if isinstance(expected, dict) and "overlaps" in expected:
        return _overlaps(exp, name, expected, metrics)
    if isinstance(expected, dict):
        expected = _lookup(metrics, tuple(expected["same_as"].split("/")))
        if expected is _MISSING:
            return f"{name}: same_as {exp.value['same_as']}: no such metric"
    if exp.factor and not _within_factor(measured, expected, exp.factor):
        return f"{name}: {exp.page} {expected!r}, run {measured!r} (not within ×{exp.factor:g})"
    if not exp.factor and not _matches(measured, expected, exp.tol, exp.rtol):
        tolerance = f" (tol {exp.tol:g}, rtol {exp.rtol:g})" if exp.tol or exp.rtol else ""
        return f"{name}: {exp.page} {expected!r}, run {measured!r}{tolerance}"
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


def _within_factor(measured: Any, expected: Any, factor: float) -> bool:
    """Whether a positive ``measured`` lies in [``expected`` / factor, ``expected`` × factor]."""
    numbers = all(isinstance(v, (int, float)) and not isinstance(v, bool)
                  for v in (measured, expected))
    return (numbers and expected > 0 and math.isfinite(measured)
            and expected / factor * (1 - FLOAT_SLACK) <= measured
            <= expected * factor * (1 + FLOAT_SLACK))


def _run_interval(metrics: dict[str, Any], path: str) -> tuple[float, float] | None:
    """The finite ``[low, high]`` interval the run reports at ``path``: a pair, or a mapping
    with ``low`` and ``high`` (beside its ``mean``); None when there is none."""
    interval = _lookup(metrics, tuple(str(path).split("/")))
    if isinstance(interval, dict) and {"low", "high"} <= set(interval):
        interval = [interval["low"], interval["high"]]
    if not (isinstance(interval, list) and len(interval) == 2 and
            all(isinstance(v, (int, float)) and math.isfinite(v) for v in interval)):
        return None
    return float(interval[0]), float(interval[1])


def _within(exp: Expectation, name: str, expected: Mapping[str, Any],
            metrics: dict[str, Any]) -> str | None:
    """Whether the page's value lies in the interval the run reports at ``expected["within"]``."""
    interval = _run_interval(metrics, expected["within"])
    if interval is None:
        return f"{name}: within {expected['within']}: no [low, high] interval in the run"
    value, (low, high) = expected["value"], interval
    slack = exp.tol + FLOAT_SLACK * max(1.0, abs(value))   # ``tol``: the page's rounding
    if not low - slack <= value <= high + slack:
        return (f"{name}: {exp.page} {value!r} is outside the run's 95% interval "
                f"[{low:.4g}, {high:.4g}] ({expected['within']})")
    return None


def _overlaps(exp: Expectation, name: str, expected: Mapping[str, Any],
              metrics: dict[str, Any]) -> str | None:
    """Whether the interval the page prints overlaps the run's at ``expected["overlaps"]``."""
    interval = _run_interval(metrics, expected["overlaps"])
    if interval is None:
        return f"{name}: overlaps {expected['overlaps']}: no [low, high] interval in the run"
    (page_low, page_high), (low, high) = expected["interval"], interval
    slack = exp.tol + FLOAT_SLACK   # ``tol``: the page's rounding
    if page_high + slack < low or high + slack < page_low:
        return (f"{name}: {exp.page} interval [{page_low:g}, {page_high:g}] does not overlap the "
                f"run's [{low:.4g}, {high:.4g}] ({expected['overlaps']})")
    return None


def doc_pages(root: str | Path = PROJECT_ROOT) -> list[str]:
    """Every page of the docs: README.md and the Markdown pages under ``docs/``, relative to
    ``root``."""
    root = Path(root)
    return ["README.md"] + sorted(str(p.relative_to(root)) for p in (root / "docs").rglob("*.md"))


def _print_coverage(expectations: list[Expectation], root: Path) -> int:
    """``--coverage``: print, per page of the docs, the numbers it prints that no entry and no
    setting quotes; 1 when a page has one."""
    try:
        settings = load_settings(root / SETTINGS_FILE.relative_to(PROJECT_ROOT))
    except ConfigError as err:
        print(f"[docs-check] {err}", file=sys.stderr)
        return 2
    missing = 0
    for page in doc_pages(root):
        numbers = uncovered_numbers(page, (root / page).read_text(), expectations, settings)
        print(f"[docs-check] {page}: {len(numbers)} numbers no entry or setting quotes")
        for number in numbers:
            print(f"    {number}")
        missing += len(numbers)
    return 1 if missing else 0


def _squash(text: str) -> str:
    """Text with every run of whitespace made one space (the pages are hard-wrapped)."""
    return re.sub(r"\s+", " ", text).strip()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m mmcache.lab.docs_check", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--expected", default=str(EXPECTED_FILE), help="the expectations file")
    parser.add_argument("--runs", default=str(RUNS_DIR), help="the folder of runs/<notebook>/")
    parser.add_argument("--root", default=str(PROJECT_ROOT),
                        help="the checkout whose pages (README.md, docs/...) are quoted")
    which = parser.add_mutually_exclusive_group()
    which.add_argument("--quotes-only", action="store_true",
                       help="check only that every quoted text is on its page (no run needed)")
    which.add_argument("--coverage", action="store_true",
                       help="list the numbers each page of the docs prints that no entry and "
                            "no setting (figures/settings.yaml) quotes; fails if there is one")
    which.add_argument("--bench", action="store_true",
                       help="check the benchmarks' numbers against <runs>/bench (after `make "
                            "bench`) instead of the notebooks' against <runs>/<notebook>")
    args = parser.parse_args(argv)
    try:
        expectations = load_expectations(args.expected)
    except ConfigError as err:
        print(f"[docs-check] {err}", file=sys.stderr)
        return 2
    if args.coverage:
        return _print_coverage(expectations, Path(args.root))
    if not args.quotes_only:
        left = [e for e in expectations if is_bench(e) != args.bench]
        expectations = [e for e in expectations if is_bench(e) == args.bench]
        print(f"[docs-check] {len(left)} numbers of the " + (
            "notebooks are checked by `make check-docs`" if args.bench else
            "benchmarks are checked by `make bench` (`--bench`)"))
    pages = read_pages(expectations, args.root)
    mismatches = (missing_quotes(expectations, pages) if args.quotes_only
                  else check(expectations, args.runs, pages))
    for (notebook, problem), n in Counter((m.expectation.notebook, m.problem)
                                          for m in mismatches).items():
        print(f"[docs-check] {notebook}: {problem}" + (f" ({n} numbers)" if n > 1 else ""))
    runs = len({e.notebook for e in expectations})
    what = "quoted on their pages" if args.quotes_only else f"reproduced by {args.runs}"
    print(f"[docs-check] {len(expectations) - len(mismatches)} of {len(expectations)} numbers "
          f"on {len(pages)} pages from {runs} runs {what}")
    return 1 if mismatches else 0


if __name__ == "__main__":
    sys.exit(main())
