"""Crash safety of the SQLite L3 store: a writer process is SIGKILLed mid-stream, many times.

Each round forks a writer (from a forkserver that has already imported mmcache,
so a round costs milliseconds, not an interpreter start) that puts entries
through a TieredCache whose only tier is L3 and reports each put's id over a pipe
*after* ``put`` returned (an acknowledged put). The parent kills it with SIGKILL
after a random delay. Afterwards every acknowledged put must be readable with its
exact value, no entry may be torn (an entry row without its embedding, or the
reverse), and SQLite's ``PRAGMA integrity_check`` must say ``ok``.
"""

from __future__ import annotations

import multiprocessing as mp
import random
import signal
import sqlite3
import time
from pathlib import Path

import numpy as np

import mmcache

ROUNDS = 12
DIM = 32
SCOPE = "crash-tenant"


def config(path: Path) -> dict:
    """Only the durable tier, so every acknowledged put is one committed transaction."""
    return {"l1": {"enabled": False}, "l2": {"enabled": False},
            "l3": {"backend": "sqlite", "path": str(path), "synchronous": "NORMAL"}}


def query(round_no: int, i: int) -> mmcache.Query:
    vec = np.random.default_rng([round_no, i]).standard_normal(DIM).astype(np.float32)
    return mmcache.Query(text=f"round {round_no} item {i}", embeddings={"text": vec},
                         scope=SCOPE)


def value(round_no: int, i: int) -> dict:
    return {"round": round_no, "item": i, "pad": "x" * (i % 97) * 10}


def writer(path: str, round_no: int, conn) -> None:
    """Put entries forever, sending each id once its put has returned."""
    cache = mmcache.TieredCache(config(Path(path)))
    conn.send("ready")
    i = 0
    while True:
        cache.put(query(round_no, i), value(round_no, i))
        conn.send(i)
        i += 1


def run_round(ctx, path: Path, round_no: int, kill_after_s: float) -> list[int]:
    """One writer, killed with SIGKILL ``kill_after_s`` after it opened the store."""
    receiver, sender = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=writer, args=(str(path), round_no, sender))
    proc.start()
    sender.close()
    assert receiver.poll(60), "writer did not open the store"
    assert receiver.recv() == "ready"
    time.sleep(kill_after_s)
    proc.kill()
    proc.join(10)
    assert proc.exitcode == -signal.SIGKILL, f"writer ended with {proc.exitcode}, not killed"
    acked = []
    while receiver.poll():
        try:
            acked.append(receiver.recv())
        except (EOFError, OSError):
            break  # the kill can land in the middle of a message: that put was never acked
    receiver.close()
    return acked


def test_every_acknowledged_put_survives_sigkill(tmp_path: Path) -> None:
    ctx = mp.get_context("forkserver")
    ctx.set_forkserver_preload(["mmcache.cache", "mmcache.tiers.sqlite"])
    path = tmp_path / "l3.db"
    rng = random.Random(20261129)
    acked = {r: run_round(ctx, path, r, rng.uniform(0.05, 0.4)) for r in range(ROUNDS)}
    assert sum(len(ids) for ids in acked.values()) >= ROUNDS, "writers acknowledged too little"

    with sqlite3.connect(path) as db:
        assert db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        torn = db.execute("SELECT COUNT(*) FROM entries e WHERE NOT EXISTS "
                          "(SELECT 1 FROM embeddings m WHERE m.entry_id = e.entry_id)").fetchone()
        orphans = db.execute("SELECT COUNT(*) FROM embeddings m WHERE NOT EXISTS "
                             "(SELECT 1 FROM entries e WHERE e.entry_id = m.entry_id)").fetchone()
        assert torn[0] == 0 and orphans[0] == 0

    cache = mmcache.TieredCache(config(path))
    try:
        for round_no, ids in acked.items():
            for i in ids:
                hit = cache.get(query(round_no, i))
                assert hit is not None, f"acknowledged put {round_no}/{i} was lost"
                assert hit.value == value(round_no, i) and hit.tier == "l3"
    finally:
        cache.close()
