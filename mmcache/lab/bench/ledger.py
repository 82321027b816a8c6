"""What the benchmarks measured, side by side: each benchmark records its ratios here and
``python -m mmcache.lab.bench.ledger`` (the last step of ``make bench``) prints them all in
one table, each beside its target.

A benchmark calls :func:`record` once at its end; that writes ``runs/bench/<name>.json``
(or under ``$MMCACHE_BENCH_DIR``)
(the ratios, the command line, the commit, the machine's CPU and its load average before
and after). Every ratio is mmcache's figure over a baseline measured in the same process,
interleaved with it, so machine load hits both alike; absolute times are not recorded here.
``--markdown`` prints the same as one table per benchmark, the form
``docs/results/benchmarks.md`` carries (the docs check compares that page with a new
``make bench``'s records through :func:`figures`).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Iterable, Sequence

from mmcache.lab.figures import current_commit
from mmcache.paths import RUNS_DIR

def bench_dir() -> Path:
    """Where benchmarks record: ``$MMCACHE_BENCH_DIR``, else ``runs/bench``."""
    return Path(os.environ.get("MMCACHE_BENCH_DIR") or RUNS_DIR / "bench")


@dataclass(frozen=True)
class Ratio:
    """One measured figure: ``value`` (mmcache ÷ ``baseline``, or a fraction, a count or a
    latency as ``unit`` says) and its target, ``at_least`` and/or ``at_most`` (None: informational)."""

    name: str
    value: float
    baseline: str
    unit: str = "x"
    at_least: float | None = None
    at_most: float | None = None

    @property
    def target(self) -> str:
        """The target as text ("" when there is none)."""
        parts = [f">= {self._bound(self.at_least)}" if self.at_least is not None else "",
                 f"<= {self._bound(self.at_most)}" if self.at_most is not None else ""]
        return " and ".join(p for p in parts if p)

    def _bound(self, value: float) -> str:
        return f"{value:.0%}" if self.unit == "fraction" else f"{value:g}"

    @property
    def met(self) -> bool | None:
        """Whether the target holds (None when there is none)."""
        if self.at_least is None and self.at_most is None:
            return None
        return ((self.at_least is None or self.value >= self.at_least)
                and (self.at_most is None or self.value <= self.at_most))


def machine() -> dict[str, object]:
    """The CPU model, core count and 1-minute load average of this machine."""
    model = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {"cpu": model, "cores": os.cpu_count(), "load_1min": _load()}


def record(bench: str, ratios: Iterable[Ratio], params: dict[str, object],
           out_dir: Path | None = None, started: dict[str, object] | None = None) -> Path:
    """Write ``bench``'s ratios (and how they were made) to ``<out_dir>/<bench>.json``
    (default :func:`bench_dir`); ``started`` is :func:`machine` as taken before the run."""
    out_dir = out_dir or bench_dir()
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / f"{bench}.json"
    payload = {"bench": bench, "command": " ".join(["python", "-m", _module(), *sys.argv[1:]]),
               "params": params, "commit": current_commit(), "finished": time.time(),
               "machine_before": started or {}, "machine_after": machine(),
               "ratios": [asdict(r) for r in ratios]}
    path.write_text(json.dumps(payload, indent=1, default=str) + "\n")
    return path


def read(out_dir: Path | None = None) -> list[dict]:
    """Every recorded benchmark under ``out_dir`` (default :func:`bench_dir`), by name
    (ratios as :class:`Ratio`)."""
    return [load(path) for path in sorted((out_dir or bench_dir()).glob("*.json"))]


def load(path: Path) -> dict:
    """One benchmark's record (ratios as :class:`Ratio`)."""
    payload = json.loads(path.read_text())
    payload["ratios"] = [Ratio(**r) for r in payload["ratios"]]
    return payload


def figures(run: dict) -> dict[str, object]:
    """A record as the docs check reads a run: ``figures`` (name -> value), ``params`` and the
    machine before and after (``machine_before``, ``machine_after``: CPU, cores, load)."""
    return {"figures": {r.name: r.value for r in run["ratios"]}, "params": run["params"],
            "machine_before": run["machine_before"], "machine_after": run["machine_after"]}


def table(runs: Sequence[dict]) -> str:
    """One line per ratio of every run: benchmark, figure, value, baseline, target, met."""
    lines = [f"{'benchmark':<24} {'figure':<52} {'value':>10}  {'target':<14} met  baseline"]
    for run in runs:
        for r in run["ratios"]:
            met = {True: "yes", False: "NO", None: ""}[r.met]
            lines.append(f"{run['bench']:<24} {r.name:<52} {_fmt(r):>10}  {r.target:<14} "
                         f"{met:<4} {r.baseline}")
    missed = sum(r.met is False for run in runs for r in run["ratios"])
    lines.append(f"{sum(len(run['ratios']) for run in runs)} figures from {len(runs)} "
                 f"benchmark runs; {missed} targets missed")
    for run in runs:
        before, after = run["machine_before"], run["machine_after"]
        lines.append(f"  {run['bench']}: `{run['command']}` at {run['commit'][:12]} on "
                     f"{after.get('cpu')} ({after.get('cores')} cores), load average "
                     f"{before.get('load_1min', '?')} before, {after.get('load_1min')} after")
    return "\n".join(lines)


def markdown(runs: Sequence[dict]) -> str:
    """One Markdown table per run (figure, value, target, baseline), under its command line,
    commit, CPU and load average."""
    blocks = []
    for run in runs:
        before, after = run["machine_before"], run["machine_after"]
        rows = [f"| {r.name} | {_fmt(r)} | {_md_target(r)} | {r.baseline} |"
                for r in run["ratios"]]
        blocks.append("\n".join([
            f"`{run['command']}` ({run['bench']}) at `{run['commit'][:7]}` on {after.get('cpu')} "
            f"({after.get('cores')} cores), load average {before.get('load_1min', '?')} before, "
            f"{after.get('load_1min')} after:", "",
            "| figure | value | target | baseline |", "|---|---|---|---|", *rows]))
    return "\n\n".join(blocks)


def main(argv: Sequence[str] | None = None) -> None:
    """Print the table of every recorded benchmark (exit 1 when none was recorded)."""
    parser = argparse.ArgumentParser(prog="python -m mmcache.lab.bench.ledger",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--dir", type=Path, default=None,
                        help="where benchmarks recorded (default $MMCACHE_BENCH_DIR or runs/bench)")
    parser.add_argument("--markdown", action="store_true",
                        help="one Markdown table per benchmark (the benchmarks page's form)")
    args = parser.parse_args(argv)
    runs = read(args.dir)
    if not runs:
        sys.exit(f"no benchmark recorded under {args.dir or bench_dir()}: run `make bench` first")
    print(markdown(runs) if args.markdown else table(runs))


def _fmt(r: Ratio) -> str:
    if r.unit == "fraction":
        return f"{r.value:.2%}"
    if r.unit == "count":
        return f"{r.value:,.0f}"
    return f"{r.value:.2f}{'' if r.unit == 'x' else ' ' + r.unit}"


def _md_target(r: Ratio) -> str:
    return r.target.replace(">=", "≥").replace("<=", "≤")


def _load() -> float | None:
    try:
        return round(os.getloadavg()[0], 2)
    except OSError:
        return None


def _module() -> str:
    main_module = sys.modules.get("__main__")
    spec = getattr(main_module, "__spec__", None)
    return spec.name if spec is not None else Path(sys.argv[0]).name


if __name__ == "__main__":
    main()
