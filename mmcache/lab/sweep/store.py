"""The sweep folder: one folder per finished point, written whole or not at all.

``DIR/<point>/`` holds a point's files and its ``point.json`` record (parameters,
status, error, wall time). It is assembled under ``DIR/.partial/`` and renamed into
place, so an interrupted sweep leaves only whole points behind; ``.partial`` is
cleared at the start and end of every run.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

from mmcache.lab.sweep.point import PointOutcome
from mmcache.lab.sweep.spec import Point, SweepSpec

RECORD_FILE = "point.json"
PARTIAL_DIR = ".partial"


def read_record(out: Path, point: Point) -> dict[str, Any] | None:
    """The point's ``point.json`` record, or None if it has not run."""
    path = out / point.id / RECORD_FILE
    return json.loads(path.read_text()) if path.is_file() else None


def is_complete(out: Path, point: Point) -> bool:
    """True when the point ran successfully before (a failed point runs again)."""
    record = read_record(out, point)
    return record is not None and record["status"] == "ok"


def save_outcome(out: Path, spec: SweepSpec, point: Point, outcome: PointOutcome) -> None:
    """Write the point's files and record to ``DIR/<point>/`` in one rename."""
    staging = out / PARTIAL_DIR / point.id
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    for name, data in outcome.files.items():
        (staging / name).parent.mkdir(parents=True, exist_ok=True)
        (staging / name).write_bytes(data)
    record = {"point": point.id, "target": point.target, "source_sha256": point.source_sha256,
              "params": point.params, "status": "ok" if outcome.ok else "failed",
              "error": outcome.error, "traceback": outcome.traceback,
              "elapsed_s": round(outcome.elapsed_s, 3)}
    (staging / RECORD_FILE).write_text(json.dumps(record, indent=2) + "\n")
    final = out / point.id
    shutil.rmtree(final, ignore_errors=True)  # a failed earlier attempt
    os.rename(staging, final)


def clear_partial(out: Path) -> None:
    """Remove whatever an interrupted or crashed run left half-assembled."""
    shutil.rmtree(out / PARTIAL_DIR, ignore_errors=True)


def write_atomic(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` through a temporary file and a rename."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise
