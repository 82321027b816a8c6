"""The store fault matrix: faults injected into real Redis servers and shared SQLite files under
two caches, and what each fault did to what the caches served.

``python -m mmcache.lab.bench.faults [--keys N] [--rounds R]`` starts, for each Redis fault, a
private redis-server on loopback behind a TCP proxy the run controls (for each SQLite fault, a
fresh shared SQLite file), and three
``TieredCache`` s on it (L1 + flat L2 + the L3, defaults otherwise): ``A`` writes,
``B`` reads, and ``truth`` (no L1, no L2) reads what the store holds. ``A`` puts every key and
``B`` reads it, so ``B`` holds private copies; then the fault; then ``R`` rounds in which
``A`` writes every key again and ``B`` reads it. One row per fault:

- ``reads``: ``B``'s gets after the fault;
- ``stale``: those that served a value other than what the store held for the key then
  (a private copy the store no longer holds): the bound is 0 s (``max_staleness: 0``);
- ``acked lost``: puts acknowledged after the fault (they returned an id) whose value the
  store no longer holds at the end;
- ``typed`` / ``untyped``: calls that raised an ``MMCacheError`` / any other exception
  (a store failure degrades to a miss or a put not stored by default, so both should be 0);
- ``recover s``: seconds from the end of the fault until a round of ``B``'s reads all agree
  with the store;
- ``gets during``, ``get p50 ms`` / ``p99`` / ``max``: for a fault that lasts (an outage),
  the gets ``B`` made while it lasted (every key in turn, ``A`` putting after each) and their
  latency: what a caller waits while the store does not answer (a copy, or a miss, within the
  store's timeouts).

The store itself loses data in some faults (that is the fault); what is measured is whether
the caches notice. The rows are printed as a Markdown table and recorded in the benchmark
ledger (``runs/bench/faults.json``; ``make bench-faults``).
``tests/lab/bench/test_faults_bench.py`` runs the matrix small in ``make test``.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import sqlite3
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import numpy as np
import redis

from mmcache.cache import TieredCache
from mmcache.errors import MMCacheError
from mmcache.lab.bench.ledger import Ratio, machine, record
from mmcache.lab.testing import FaultProxy, LocalRedis
from mmcache.types import Query

PREFIX = "faults"
NO_PERSISTENCE = ("--save", "", "--appendonly", "no")
#: Seconds an outage lasts (each call into it waits for the socket timeout).
OUTAGE_S = 1.0


@dataclass
class Rig:
    """The store (a Redis server behind its proxy, or a SQLite file), the three caches and the
    keys of one run, with the errors counted and the seconds each get made during the fault
    took."""

    server: LocalRedis | None
    proxy: FaultProxy | None
    folder: Path
    keys: list[str]
    caches: dict[str, TieredCache] = field(default_factory=dict)
    typed: int = 0
    untyped: int = 0
    get_s: list[float] = field(default_factory=list)

    @property
    def admin(self) -> redis.Redis:
        return redis.Redis.from_url(self.server.url)

    @property
    def path(self) -> Path:
        """The SQLite file of a SQLite run."""
        return self.folder / "l3.db"

    def call(self, fn: Callable[..., Any], *args: Any) -> Any:
        """``fn(*args)``, with an error counted (typed or not) and None returned."""
        try:
            return fn(*args)
        except MMCacheError:
            self.typed += 1
        except Exception:  # noqa: BLE001 - counting untyped errors is the point
            self.untyped += 1
        return None

    def write_all(self, tag: str) -> dict[str, str]:
        """``A`` puts every key with value ``<tag>:<key>``; the acknowledged ones."""
        acked = {}
        for key in self.keys:
            value = f"{tag}:{key}"
            if self.call(self.caches["a"].put, query(key), value) is not None:
                acked[key] = value
        return acked

    def read_all(self, who: str = "b") -> dict[str, Any]:
        """What ``who`` serves for every key (None: a miss)."""
        hits = {key: self.call(self.caches[who].get, query(key)) for key in self.keys}
        return {key: None if hit is None else hit.value for key, hit in hits.items()}


@dataclass(frozen=True)
class Fault:
    """One fault: its name, its kind, how to inject it (the function returns once the store
    is reachable again), its store (``"redis"`` or ``"sqlite"``) and the server's options."""

    name: str
    kind: str
    inject: Callable[[Rig], None]
    server_args: tuple[str, ...] = NO_PERSISTENCE
    backend: str = "redis"


def _flush(rig: Rig) -> None:
    rig.admin.flushall()


def _restart_empty(rig: Rig) -> None:
    rig.server.restart(kill=True)


def _delete_control_keys(rig: Rig) -> None:
    rig.admin.delete(f"{PREFIX}:seq", f"{PREFIX}:epoch")


def _snapshot_rollback(rig: Rig) -> None:
    rig.admin.save()
    rig.write_all("lost")          # acknowledged, read by B, then lost with the kill
    rig.read_all()
    rig.server.restart(kill=True)


def _lagging_replica_promoted(rig: Rig) -> None:
    replica = LocalRedis(rig.folder / "replica", "--save", "", "--appendonly", "no",
                         "--replicaof", "127.0.0.1", str(rig.server.port)).start()
    _wait_until_in_sync(rig.admin, redis.Redis.from_url(replica.url))
    redis.Redis.from_url(replica.url).replicaof("NO", "ONE")   # it stops following here
    rig.write_all("lost")          # reaches the old primary only
    rig.read_all()
    rig.proxy.retarget(("127.0.0.1", replica.port))           # the failover
    rig.server.stop(kill=True)
    rig.server = replica


def _black_hole(rig: Rig) -> None:
    rig.proxy.mode = "blackhole"
    _during_outage(rig)
    rig.proxy.mode = "pass"


def _server_down(rig: Rig) -> None:
    rig.server.stop(kill=True)
    _during_outage(rig)
    rig.server.start()


def _during_outage(rig: Rig, value: str = "during the outage") -> None:
    """Calls into an outage for :data:`OUTAGE_S` seconds: ``B`` gets every key in turn (each
    get timed) and ``A`` puts ``value`` after each; each must degrade (a copy, a miss, a put
    not stored), none may raise."""
    deadline = time.monotonic() + OUTAGE_S
    for i in itertools.count():
        if time.monotonic() >= deadline:
            return
        key = rig.keys[i % len(rig.keys)]
        started = time.perf_counter()
        rig.call(rig.caches["b"].get, query(key))
        rig.get_s.append(time.perf_counter() - started)
        rig.call(rig.caches["a"].put, query(key), value)


def _sqlite_connections(cache: TieredCache) -> list[sqlite3.Connection]:
    """The connections of a cache's SQLite L3 (its writer's and its reader's)."""
    store = cache.tier("l3").store
    return [db for db in {id(c): c for c in (store._db, getattr(store, "_reader", None))}.values()
            if isinstance(db, sqlite3.Connection)]


def _disk_full(rig: Rig) -> None:
    """No page can be added to the file (``PRAGMA max_page_count`` on every connection) for
    :data:`OUTAGE_S` seconds while ``A`` puts values larger than the file's free pages."""
    connections = [db for cache in rig.caches.values() for db in _sqlite_connections(cache)]
    pages = connections[0].execute("PRAGMA page_count").fetchone()[0]
    limits = [db.execute("PRAGMA max_page_count").fetchone()[0] for db in connections]
    for db in connections:
        db.execute(f"PRAGMA max_page_count = {pages}")
    try:
        _during_outage(rig, "x" * 200_000)
    finally:
        for db, limit in zip(connections, limits):
            db.execute(f"PRAGMA max_page_count = {limit}")


def _corrupt_rows(rig: Rig) -> None:
    """Another process overwrites the stored value of every key with bytes of no codec."""
    with contextlib.closing(sqlite3.connect(rig.path, isolation_level=None)) as db:
        db.execute("UPDATE entries SET value = X'ff00ff', value_type = 'no such codec'")


def _locked(rig: Rig) -> None:
    """Another process holds the file's write lock (``BEGIN IMMEDIATE``) for
    :data:`OUTAGE_S` seconds: puts wait for it, reads go on beside it (WAL)."""
    holder = sqlite3.connect(rig.path, isolation_level=None, check_same_thread=False)
    holder.execute("BEGIN IMMEDIATE")
    release = threading.Timer(OUTAGE_S, holder.rollback)
    release.start()
    try:
        _during_outage(rig)
    finally:
        release.join()
        holder.close()


def _wait_until_in_sync(primary: redis.Redis, replica: redis.Redis, timeout_s: float = 10) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        info = replica.info("replication")
        if info.get("master_link_status") == "up" and \
                info.get("slave_repl_offset") == primary.info("replication")["master_repl_offset"]:
            return
        time.sleep(0.05)
    raise RuntimeError("the replica did not catch up with its primary")


FAULTS = (
    Fault("FLUSHALL", "data loss", _flush),
    Fault("restart without persistence (kill -9)", "data loss", _restart_empty),
    Fault("sequence and epoch keys deleted (as maxmemory eviction may)", "data loss",
          _delete_control_keys),
    Fault("snapshot rollback: SAVE, more writes, kill -9, restart", "rollback",
          _snapshot_rollback, ("--appendonly", "no")),
    Fault("lagging replica promoted (replicaof, then failover)", "rollback",
          _lagging_replica_promoted),
    Fault("black hole: the server stops answering for 1 s", "outage", _black_hole),
    Fault("server killed, down for 1 s, back empty", "outage", _server_down),
    Fault("SQLite: disk full for 1 s (max_page_count)", "outage", _disk_full, backend="sqlite"),
    Fault("SQLite: every row's value corrupted by another process", "corruption",
          _corrupt_rows, backend="sqlite"),
    Fault("SQLite: write lock held by another process for 1 s", "outage", _locked,
          backend="sqlite"),
)


def query(key: str) -> Query:
    """The query of ``key``: its text and a vector of its own."""
    rng = np.random.default_rng(int.from_bytes(key.encode()[-4:], "little"))
    return Query(text=key, embeddings={"text": rng.standard_normal(32).astype(np.float32)},
                 scope="tenant")


def run_fault(fault: Fault, keys: int = 20, rounds: int = 3) -> dict[str, Any]:
    """Inject ``fault`` under three caches (see the module doc); its row."""
    with tempfile.TemporaryDirectory() as tmp, contextlib.ExitStack() as stack:
        names = [f"question {i}" for i in range(keys)]
        if fault.backend == "sqlite":
            rig = Rig(None, None, Path(tmp), names)
            l3: dict[str, Any] = {"backend": "sqlite", "path": str(rig.path), "shared": True}
        else:
            server = stack.enter_context(LocalRedis(Path(tmp) / "primary", *fault.server_args))
            proxy = stack.enter_context(FaultProxy(("127.0.0.1", server.port)))
            rig = Rig(server, proxy, Path(tmp), names)
            l3 = {"backend": "redis", "url": proxy.url(), "options": {"prefix": PREFIX}}
        config = {"l2": {"index": "flat"}, "l3": l3}
        alone = {**config, "l1": {"enabled": False}, "l2": {"enabled": False}}
        rig.caches = {"a": TieredCache(config), "b": TieredCache(config),
                      "truth": TieredCache(alone)}
        try:
            rig.write_all("before")
            rig.read_all()
            fault.inject(rig)
            ended = time.monotonic()
            return _after(fault, rig, rounds, ended)
        finally:
            for cache in rig.caches.values():
                cache.close()
            if rig.server is not None:
                rig.server.stop(kill=True)


def _after(fault: Fault, rig: Rig, rounds: int, ended: float) -> dict[str, Any]:
    """The rounds after ``fault`` (see the module doc) and the row they give."""
    reads = stale = 0
    recovered = None
    acked: dict[str, str] = {}
    for r in range(rounds + 1):
        served, held = rig.read_all(), rig.read_all("truth")
        reads += len(served)
        wrong = sum(served[k] != held[k] for k in rig.keys)
        stale += wrong
        if wrong == 0 and recovered is None:
            recovered = time.monotonic() - ended
        if r < rounds:
            acked.update(rig.write_all(f"round {r}"))
    held = rig.read_all("truth")
    lost = sum(held[k] != v for k, v in acked.items())
    during = np.asarray(rig.get_s) * 1000.0
    return {"fault": fault.name, "kind": fault.kind, "reads": reads, "stale": stale,
            "acked lost": lost, "typed": rig.typed, "untyped": rig.untyped,
            "recover s": None if recovered is None else round(recovered, 3),
            "gets during": len(during),
            **{f"get {name} ms": round(float(np.percentile(during, q)), 1) if len(during)
               else None for name, q in (("p50", 50), ("p99", 99), ("max", 100))}}


def markdown(rows: list[dict[str, Any]]) -> str:
    """The rows as a markdown table."""
    names = list(rows[0])
    lines = ["| " + " | ".join(names) + " |", "|" + "---|" * len(names)]
    lines += ["| " + " | ".join("—" if row[n] is None else str(row[n]) for n in names) + " |"
              for row in rows]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keys", type=int, default=50, help="keys per fault (default 50)")
    parser.add_argument("--rounds", type=int, default=5, help="rounds after it (default 5)")
    args = parser.parse_args(argv)
    started = machine()
    rows = [run_fault(fault, args.keys, args.rounds) for fault in FAULTS]
    print(markdown(rows))
    record("faults", [ratio for row in rows for ratio in figures(row)], vars(args),
           started=started)


def figures(row: dict[str, Any]) -> list[Ratio]:
    """A row of the matrix as the ledger's figures (each count's target: none)."""
    truth = "what the store held"
    counts = [Ratio(f"{row['fault']}: {name}", row[key], truth, unit="count", at_most=bound)
              for name, key, bound in (("reads", "reads", None), ("stale reads", "stale", 0),
                                       ("acknowledged puts lost", "acked lost", 0),
                                       ("typed errors", "typed", 0),
                                       ("untyped errors", "untyped", 0))]
    recover = row["recover s"]
    latency = [Ratio(f"{row['fault']}: get {name} during the fault", row[f"get {name} ms"], "",
                     unit="ms") for name in ("p50", "p99", "max")
               if row.get(f"get {name} ms") is not None]
    during = [Ratio(f"{row['fault']}: gets during the fault", row["gets during"], "",
                    unit="count")] \
        if row.get("gets during") else []
    return counts + [Ratio(f"{row['fault']}: seconds to recover",
                           float("inf") if recover is None else recover, truth, unit="s")] + \
        during + latency


if __name__ == "__main__":
    main()
