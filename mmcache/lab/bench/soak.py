"""The store soak: a long run of churn with TTLs through a cache over a shared SQLite L3, and
how memory, file size, log rows, open time and sync cost follow the live entries.

``python -m mmcache.lab.bench.soak [--ops 1000000] [--keys 2000] [--samples 10]`` drives one
``TieredCache`` (L1 of 200 entries, flat L2 of 500, a shared SQLite L3 of ``2 × keys``
entries, a clock that moves 10 ms per operation) with a random mix over a window of ``keys``
questions that moves on by one every :data:`SLIDE` operations (so questions keep coming and
going): 50% gets, 35% puts (a third each with no TTL, 5 s and 60 s), 15% invalidations; a
second tier on the same file syncs after each chunk. After each of ``samples`` chunks it
prints one row: operations so far, live entries, log rows, file bytes (database + WAL), this
process's resident memory, the seconds to open the store afresh, and the seconds the second
tier took to sync. Each must stay within a small multiple of the live entries, however long
the run: ``tests/lab/bench/test_soak_bench.py`` runs it short in ``make test``. The rows are
printed, and what they show is recorded in the benchmark ledger (``runs/bench/soak.json``,
:func:`figures`; ``make bench-soak``).
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from mmcache.cache import TieredCache
from mmcache.lab.bench.faults import markdown, query
from mmcache.lab.bench.ledger import Ratio, machine, record
from mmcache.metrics import progress_bar
from mmcache.tiers.sqlite import SQLiteTier

#: Seconds the cache's clock moves per operation.
TICK_S = 0.01
TTLS = (None, 5.0, 60.0)
#: Operations per step of the window of questions: ``ops / SLIDE`` questions come and go.
SLIDE = 4


class _Clock:
    def __init__(self) -> None:
        self.now = 1_000.0

    def __call__(self) -> float:
        return self.now


def soak(folder: Path, ops: int, keys: int, samples: int, seed: int = 0,
         progress: bool | None = None) -> list[dict[str, Any]]:
    """Run the soak (see the module doc) in ``folder``; one row per sample."""
    rng = np.random.default_rng(seed)
    path = folder / "l3.db"
    clock = _Clock()
    config = {"l1": {"max_entries": 200}, "l2": {"max_entries": 500, "index": "flat"},
              "l3": {"backend": "sqlite", "path": str(path), "shared": True,
                     "max_entries": 2 * keys}}
    cache = TieredCache(config, clock=clock)
    other = SQLiteTier(path, shared=True)
    rows = []
    try:
        chunk = max(1, ops // samples)
        with progress_bar(ops, "soak", unit="op", progress=progress) as bar:
            for done in range(chunk, ops + 1, chunk):
                for op in range(done - chunk, done):
                    _one_operation(cache, rng, op // SLIDE + int(rng.integers(keys)), clock)
                bar.update(chunk)
                rows.append(_sample(done, cache, other, path))
    finally:
        cache.close()
        other.close()
    return rows


def _one_operation(cache: TieredCache, rng: np.random.Generator, key: int,
                   clock: _Clock) -> None:
    clock.now += TICK_S
    q = query(f"question {key}")
    draw = rng.random()
    if draw < 0.5:
        cache.get(q)
    elif draw < 0.85:
        cache.put(q, f"answer at {clock.now:.2f}", ttl=TTLS[int(rng.integers(len(TTLS)))])
    else:
        cache.invalidate(q)


def _sample(done: int, cache: TieredCache, other: SQLiteTier, path: Path) -> dict[str, Any]:
    """Where the store stands after ``done`` operations."""
    l3 = cache.tier("l3")
    started = time.perf_counter()
    other.refresh()
    synced = time.perf_counter() - started
    started = time.perf_counter()
    SQLiteTier(path, shared=True).close()
    opened = time.perf_counter() - started
    db = l3.store._db
    files = sum(p.stat().st_size for p in (path, Path(f"{path}-wal")) if p.exists())
    return {"ops": done, "live": len(l3),
            "log rows": int(db.execute("SELECT COUNT(*) FROM log").fetchone()[0]),
            "file bytes": files, "rss MiB": round(_resident_bytes() / 2**20, 1),
            "open s": round(opened, 4), "sync s": round(synced, 4)}


def _resident_bytes() -> int:
    """This process's resident memory now (Linux ``/proc``)."""
    pages = int(Path("/proc/self/statm").read_text().split()[1])
    return pages * 4096


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ops", type=int, default=1_000_000)
    parser.add_argument("--keys", type=int, default=2_000)
    parser.add_argument("--samples", type=int, default=10)
    args = parser.parse_args(argv)
    started = machine()
    with tempfile.TemporaryDirectory() as tmp:
        rows = soak(Path(tmp), args.ops, args.keys, args.samples)
    print(markdown(rows))
    record("soak", figures(rows), vars(args), started=started)


def figures(rows: list[dict[str, Any]]) -> list[Ratio]:
    """What the soak's samples show, as the ledger's figures: the store's size against its
    live entries, its growth after the first sample, and the slowest open and sync."""
    live = [max(1, r["live"]) for r in rows]
    later = rows[1:] or rows
    return [
        Ratio("log rows over live entries, largest", max(r["log rows"] / n for r, n in
                                                         zip(rows, live)), "live entries"),
        Ratio("file bytes, last sample over the second", rows[-1]["file bytes"]
              / later[0]["file bytes"], "the second sample", at_most=1.5),
        Ratio("file bytes per live entry, last sample", rows[-1]["file bytes"] / live[-1],
              "live entries", unit="bytes"),
        Ratio("resident memory, last sample over the first", rows[-1]["rss MiB"]
              / rows[0]["rss MiB"], "the first sample"),
        Ratio("open, slowest sample", max(r["open s"] for r in rows) * 1e3, "", unit="ms"),
        Ratio("sync of a second tier, slowest sample", max(r["sync s"] for r in rows) * 1e3, "",
              unit="ms")]


if __name__ == "__main__":
    main()
