"""The store fault matrix: faults injected into real Redis servers under two caches, and what
each fault did to what the caches served.

``python -m mmcache.lab.bench.faults [--keys N] [--rounds R]`` starts, for each fault, a
private redis-server on loopback behind a TCP proxy the run controls, and three
``TieredCache`` s on it (L1 + flat L2 + the Redis L3, defaults otherwise): ``A`` writes,
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
  with the store.

The store itself loses data in some faults (that is the fault); what is measured is whether
the caches notice. The rows are printed as a Markdown table and recorded in the benchmark
ledger (``runs/bench/faults.json``; ``make bench-faults``).
``tests/lab/bench/test_faults_bench.py`` runs the matrix small in ``make test``.
"""

from __future__ import annotations

import argparse
import tempfile
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
    """The servers, the proxy in front of them, the three caches and the keys of one run."""

    server: LocalRedis
    proxy: FaultProxy
    folder: Path
    keys: list[str]
    caches: dict[str, TieredCache] = field(default_factory=dict)
    typed: int = 0
    untyped: int = 0

    @property
    def admin(self) -> redis.Redis:
        return redis.Redis.from_url(self.server.url)

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
    """One fault: its name, its kind, the server's options, and how to inject it (the
    function returns once the store is reachable again)."""

    name: str
    kind: str
    inject: Callable[[Rig], None]
    server_args: tuple[str, ...] = NO_PERSISTENCE


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


def _during_outage(rig: Rig) -> None:
    """Calls into an outage: each must degrade (a miss, a put not stored), none may raise."""
    deadline = time.monotonic() + OUTAGE_S
    while time.monotonic() < deadline:
        rig.call(rig.caches["b"].get, query(rig.keys[0]))
        rig.call(rig.caches["a"].put, query(rig.keys[0]), "during the outage")


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
)


def query(key: str) -> Query:
    """The query of ``key``: its text and a vector of its own."""
    rng = np.random.default_rng(int.from_bytes(key.encode()[-4:], "little"))
    return Query(text=key, embeddings={"text": rng.standard_normal(32).astype(np.float32)},
                 scope="tenant")


def run_fault(fault: Fault, keys: int = 20, rounds: int = 3) -> dict[str, Any]:
    """Inject ``fault`` under three caches (see the module doc); its row."""
    with tempfile.TemporaryDirectory() as tmp, \
            LocalRedis(Path(tmp) / "primary", *fault.server_args) as server, \
            FaultProxy(("127.0.0.1", server.port)) as proxy:
        rig = Rig(server, proxy, Path(tmp), [f"question {i}" for i in range(keys)])
        config = {"l2": {"index": "flat"},
                  "l3": {"backend": "redis", "url": proxy.url(), "options": {"prefix": PREFIX}}}
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
    return {"fault": fault.name, "kind": fault.kind, "reads": reads, "stale": stale,
            "acked lost": lost, "typed": rig.typed, "untyped": rig.untyped,
            "recover s": None if recovered is None else round(recovered, 3)}


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
    return counts + [Ratio(f"{row['fault']}: seconds to recover",
                           float("inf") if recover is None else recover, truth, unit="s")]


if __name__ == "__main__":
    main()
