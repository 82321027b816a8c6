"""A disk that fails: libfiu (Debian's fiu-utils) fails a process's SQLite writes and syncs at
random while it puts. Every put is acknowledged or refused (never an untyped error), what was
acknowledged survives, nothing half-written is served, the file stays sound, and the same cache
stores again once the disk answers."""

from __future__ import annotations

import json
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

import mmcache

from disk_fault_worker import query

WORKER = Path(__file__).with_name("disk_fault_worker.py")
PUTS = 300

pytestmark = pytest.mark.skipif(shutil.which("fiu-run") is None,
                                reason="libfiu is not installed (Debian fiu-utils; the "
                                       "Makefile installs it when run as root)")


@pytest.mark.parametrize("probability", [0.02, 0.2])
def test_puts_on_a_failing_disk_are_acked_and_kept_or_refused_and_absent(tmp_path, probability):
    db, result = tmp_path / "l3.db", tmp_path / "result.json"
    run = subprocess.run(["fiu-run", "-x", sys.executable, str(WORKER), str(db), str(PUTS),
                          str(probability), str(result)],
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-2000:]
    outcome = json.loads(result.read_text())
    assert outcome["untyped"] == []
    assert outcome["refused"] > 0 and outcome["acked"], outcome   # the faults fired, not always
    assert outcome["after"]                                       # stores again once it answers
    with sqlite3.connect(db) as raw:
        assert raw.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    cache = mmcache.TieredCache({"l2": {"index": "flat"},
                                 "l3": {"backend": "sqlite", "path": str(db)}})
    served = {i: cache.get(query(i)) for i in range(PUTS + 1)}
    cache.close()
    assert all(served[i] is not None and served[i].value == f"answer {i}"
               for i in outcome["acked"] + [PUTS])
    assert all(hit is None or hit.value == f"answer {i}" for i, hit in served.items())
