"""Run one sweep point in a worker and bring back everything it wrote.

A point runs in a private temporary folder (its run folder: notebooks' and
functions' ``write_metrics`` and ``save_figure`` write there) and returns the
folder's files as bytes, so the driver is the only writer of the sweep folder
and a worker on another machine needs no shared file system.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
import time
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator, Mapping

from threadpoolctl import threadpool_limits

from mmcache.lab import runbook
from mmcache.lab.plotting import FIGURE_DIR_ENV
from mmcache.lab.sweep.spec import resolve_function

METRICS_FILE = "metrics.json"
#: Thread-pool sizes that BLAS, OpenMP (torch) and numba read when they start; a point's
#: notebook kernel inherits them.
THREAD_ENV = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "NUMBA_NUM_THREADS")


@dataclass(frozen=True)
class PointOutcome:
    """What one point produced: success or its error, its wall time and its files."""

    ok: bool
    error: str | None
    traceback: str | None
    elapsed_s: float
    files: dict[str, bytes]

    @classmethod
    def failure(cls, err: BaseException, elapsed_s: float = 0.0,
                files: dict[str, bytes] | None = None) -> "PointOutcome":
        """A failed outcome: the error, its traceback, and whatever the point wrote."""
        return cls(False, f"{type(err).__name__}: {err}",
                   "".join(traceback.format_exception(err)), elapsed_s, files or {})


def run_point(kind: str, target: str, params: Mapping[str, Any],
              threads: int | None = None) -> PointOutcome:
    """Run one function (``module:function``) or notebook point; its errors are returned.

    ``threads`` (the point's CPU cores) caps the BLAS / OpenMP / numba thread pools of the
    point, so points running side by side do not each start one thread per core of the
    machine (oversubscribed, such pools spin-wait: Whisper decoding ran 4.5x slower).
    """
    with tempfile.TemporaryDirectory(prefix="mmcache-point-") as tmp, thread_limit(threads):
        run_dir = Path(tmp)
        start = time.perf_counter()
        error = None
        try:
            if kind == "function":
                _call_function(target, params, run_dir)
            else:
                _execute_notebook(target, params, run_dir)
            if not (run_dir / METRICS_FILE).is_file():
                raise RuntimeError(f"the point wrote no {METRICS_FILE} (return a mapping of "
                                   "metrics, or call mmcache.lab.runbook.write_metrics)")
        except Exception as err:  # a failed point is recorded, and the sweep goes on
            error = err
        elapsed = time.perf_counter() - start
        # A failed notebook's executed copy shows where it failed: keep it too.
        files = {str(p.relative_to(run_dir)): p.read_bytes()
                 for p in sorted(run_dir.rglob("*")) if p.is_file()}
    if error is not None:
        return PointOutcome.failure(error, elapsed, files)
    return PointOutcome(True, None, None, elapsed, files)


def run_prerequisite(target: str, threads: int | None = None) -> None:
    """Call a point's prerequisite ``module:function`` (no arguments); its errors propagate."""

    with thread_limit(threads):
        resolve_function(target)()


def _call_function(target: str, params: Mapping[str, Any], run_dir: Path) -> None:

    func = resolve_function(target)
    with environ({runbook.RUN_DIR_ENV: str(run_dir), FIGURE_DIR_ENV: str(run_dir / "figures")}):
        metrics = func(**params)
        if metrics is not None:
            if not isinstance(metrics, Mapping):
                raise TypeError(f"{target} returned {type(metrics).__name__}; a sweep function "
                                "returns a mapping of metrics (or None after write_metrics)")
            runbook.write_metrics(metrics)


def _execute_notebook(target: str, params: Mapping[str, Any], run_dir: Path) -> None:

    rest = {k: v for k, v in params.items() if k != "SMOKE"}
    with environ({FIGURE_DIR_ENV: str(run_dir / "figures")}):
        runbook.execute(target, smoke=bool(params["SMOKE"]), parameters=rest, out_dir=run_dir)


@contextlib.contextmanager
def thread_limit(threads: int | None) -> Iterator[None]:
    """Cap thread pools at ``threads`` for the block: the environment (read by libraries
    that start later, and by a notebook's kernel) and the pools already loaded."""
    if threads is None:
        yield
        return
    with environ({key: str(threads) for key in THREAD_ENV}), threadpool_limits(threads):
        yield


@contextlib.contextmanager
def environ(values: Mapping[str, str]) -> Iterator[None]:
    """Set environment variables for the duration of the block."""
    saved = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
