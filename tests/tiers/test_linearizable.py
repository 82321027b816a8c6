"""Concurrent histories under faults, checked per key against a register: several processes
put, get and invalidate a few keys on one shared store while the store restarts empty and a
client is killed with SIGKILL; no completed get may return a value that a write completed
before the get began had already replaced."""

from __future__ import annotations

import json
import math
import signal
import subprocess
import sys
import time
from pathlib import Path

from mmcache.lab.testing import LocalRedis

WORKER = Path(__file__).with_name("history_worker.py")
CLIENTS, OPS = 3, 300


def stale_reads(history: list[dict]) -> list[tuple[dict, dict, dict]]:
    """(read, the write it returned, a write that had replaced it before the read began) for
    every such read. Each call is recorded when it starts (``end`` None) and again when it
    returns, with the same start; a write's end is when it was acknowledged (inf: unknown, a
    call that failed or whose client was killed mid-call); an invalidation is a write of
    nothing."""
    ended = {(h["op"], h["key"], h["start"]): h["end"] for h in history if h["end"]}
    writes = [{**h, "end": ended.get((h["op"], h["key"], h["start"]), math.inf)}
              for h in history if h["op"] != "get" and h["end"] is None]
    by_value = {w["value"]: w for w in writes if w["op"] == "put"}
    found = []
    for read in (h for h in history if h["op"] == "get" and h["end"] and h["value"]):
        write = by_value[read["value"]]
        assert write["start"] <= read["end"], "a read returned a value not yet written"
        for later in writes:
            if later["key"] == read["key"] and later["start"] > write["end"] and \
                    later["end"] < read["start"]:
                found.append((read, write, later))
                break
    return found


def run_clients(l3: dict, folder: Path, fault) -> list[dict]:
    """Start the clients, inject ``fault`` while they run, wait for them, return the history."""
    files = [folder / f"client{i}.jsonl" for i in range(CLIENTS)]
    procs = [subprocess.Popen([sys.executable, str(WORKER), json.dumps(l3), str(f), f"c{i}",
                               str(i), str(OPS)]) for i, f in enumerate(files)]
    try:
        fault(procs)
        for proc in procs:
            proc.wait(timeout=300)
    finally:
        for proc in procs:
            proc.kill()
    return [json.loads(line) for f in files if f.exists() for line in f.read_text().splitlines()]


def _wait_for_progress(folder: Path, lines: int = 60) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        written = [f.read_text().count("\n") for f in folder.glob("client*.jsonl")]
        if len(written) == CLIENTS and min(written) >= lines:
            return
        time.sleep(0.05)


def test_redis_histories_stay_linearizable_through_restarts_and_a_killed_client(tmp_path):
    with LocalRedis(tmp_path / "redis", "--save", "", "--appendonly", "no") as server:
        def fault(procs):
            for lines in (60, 220, 380):
                _wait_for_progress(tmp_path, lines)
                server.restart(kill=True)           # the store comes back empty
            _wait_for_progress(tmp_path, 460)
            procs[0].send_signal(signal.SIGKILL)    # a client dies mid-call

        history = run_clients({"backend": "redis", "url": server.url,
                               "options": {"prefix": "lin"}}, tmp_path, fault)
    gets = sum(1 for h in history if h["op"] == "get" and h["end"] and h["value"])
    assert gets > 50, "too few reads returned a value to say anything"
    assert stale_reads(history) == []


def test_sqlite_histories_stay_linearizable_with_a_killed_client(tmp_path):
    def fault(procs):
        _wait_for_progress(tmp_path)
        procs[1].send_signal(signal.SIGKILL)

    history = run_clients({"backend": "sqlite", "path": str(tmp_path / "l3.db"), "shared": True},
                          tmp_path, fault)
    assert stale_reads(history) == []


def test_the_checker_finds_a_stale_read():
    history = [
        {"op": "put", "key": 0, "value": "a", "start": 0.0, "end": None},
        {"op": "put", "key": 0, "value": "a", "start": 0.0, "end": 1.0},
        {"op": "put", "key": 0, "value": "b", "start": 2.0, "end": None},
        {"op": "put", "key": 0, "value": "b", "start": 2.0, "end": 3.0},
        {"op": "put", "key": 0, "value": "c", "start": 3.5, "end": None},   # never returned
        {"op": "get", "key": 0, "value": "a", "start": 4.0, "end": 5.0},   # b had replaced it
        {"op": "get", "key": 0, "value": "a", "start": 2.5, "end": 5.0},   # concurrent: fine
        {"op": "get", "key": 0, "value": "b", "start": 6.0, "end": 7.0},   # c may not be in
    ]
    assert [(r["start"], w["value"], later["value"]) for r, w, later in stale_reads(history)] \
        == [(4.0, "a", "b")]

