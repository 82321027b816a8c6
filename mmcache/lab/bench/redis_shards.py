"""Shard benchmark: where the Redis tier's requests land on a Redis Cluster, per workload.

``python -m mmcache.lab.bench.redis_shards [--rounds N]`` starts a local three-master cluster
(:func:`mmcache.lab.testing.local_redis_cluster`) and runs N rounds of put, exact get and
paraphrase get (a TieredCache with only the Redis L3, so every lookup reaches it) over
(i) 12 scopes spread evenly, 4 per shard, (ii) 12 scopes placed by their hash, (iii) one
hot scope. Per workload it prints the requests per cache call and per shard as the
cache's metrics counted them (``shard_requests``), their max ÷ mean (the skew watch
alerts above 1.8 in a window), the windows alerted (``skew_alerts``), and the commands
each shard itself counted (``INFO commandstats``: EVAL = a put's script, HGETALL = an
entry read, GET = a sequence read, ZRANGEBYSCORE = a change-log read, MULTI and EXEC
around each write). For comparison it moves every GET and ZRANGEBYSCORE onto the shard
of ``{prefix}:seq``: the other layout, one global sequence and change log in one slot
with the entries spread. That projection is a lower
bound: on that layout each write also needs its INCR and ZADD on the sequence's shard,
outside the entry's slot (losing the single atomic script). Vectors are random.
"""

from __future__ import annotations

import argparse
import itertools
import tempfile
import time
from collections import Counter, defaultdict
from typing import Sequence

import numpy as np
import redis

from mmcache.cache import TieredCache
from mmcache.lab.testing import local_redis_cluster, unit
from mmcache.tiers.redis import RedisStore
from mmcache.types import Query

SKEW_WINDOW = 200
DIM = 16
#: The commands a sequence or change-log read sends (on the other layout: all to one shard).
SEQUENCE_COMMANDS = ("get", "zrangebyscore")
SHOWN_COMMANDS = ("eval", "hgetall", *SEQUENCE_COMMANDS)


def run_workload(url: str, scopes: Sequence[str],
                 rounds: int) -> tuple[Counter, Counter, dict, str]:
    """The requests per shard and skew alerts the cache counted in ``rounds`` rounds over
    ``scopes``, the commands each shard counted (shard -> command -> calls) and the shard
    a global sequence would live on."""
    config = {"l1": {"enabled": False}, "l2": {"enabled": False},
              "l3": {"backend": "redis", "url": url,
                     "options": {"prefix": f"bench-{time.time_ns()}", "cluster": True,
                                 "skew_window": SKEW_WINDOW}}}
    rng = np.random.default_rng(0)
    with TieredCache(config) as cache:
        store = cache.tier("l3").store
        nodes = {shard: _node(shard) for shard in store.skew.shards}
        global_shard = store.shard_of(f"{store.prefix}:seq")
        for node in nodes.values():
            node.config_resetstat()
        cache.metrics.reset()
        for i in range(rounds):
            scope, vec = scopes[i % len(scopes)], unit(rng, DIM)
            cache.put(Query(text=f"q{i}", embeddings={"text": vec}, scope=scope), i)
            cache.get(Query(text=f"q{i}", embeddings={"text": vec}, scope=scope))
            cache.get(Query(text=f"paraphrase {i}", embeddings={"text": vec}, scope=scope))
        snap = cache.metrics.snapshot()
    commands = {shard: _command_calls(node) for shard, node in nodes.items()}
    for node in nodes.values():
        node.close()
    requests = Counter({shard: snap.shard_requests[shard] for shard in nodes})
    return requests, Counter(snap.skew_alerts), commands, global_shard


def spread_scopes(url: str, per_shard: int) -> list[str]:
    """``per_shard`` scope names on each shard of the cluster at ``url``."""
    store = RedisStore(url, cluster=True)
    found: dict[str, list[str]] = {shard: [] for shard in store.skew.shards}
    names = (f"tenant-{i}" for i in itertools.count())
    while any(len(placed) < per_shard for placed in found.values()):
        scope = next(names)
        placed = found[store.shard_of(store.key(scope, ""))]
        if len(placed) < per_shard:
            placed.append(scope)
    store.close()
    return [scope for placed in found.values() for scope in placed]


def report(name: str, requests: Counter, alerts: Counter, commands: dict, global_shard: str,
           rounds: int) -> list[str]:
    """The lines of one workload (see the module docstring)."""
    shards = sorted(requests)
    total, mean = sum(requests.values()), sum(requests.values()) / len(shards)
    lines = [f"  {name}: {total / (3 * rounds):.2f} requests per cache call; per shard "
             f"{[requests[s] for s in shards]}, max/mean {max(requests.values()) / mean:.2f}; "
             f"windows alerted {sum(alerts.values())} of {total // SKEW_WINDOW}"]
    lines += [f"    {cmd.upper():13s} {[commands[s][cmd] for s in shards]}"
              for cmd in SHOWN_COMMANDS]
    served = {s: sum(commands[s].values()) for s in shards}
    moved = sum(commands[s][c] for s in shards for c in SEQUENCE_COMMANDS)
    other = [served[s] - sum(commands[s][c] for c in SEQUENCE_COMMANDS) for s in shards]
    other[shards.index(global_shard)] += moved
    lines.append(f"    all commands  {[served[s] for s in shards]}, max/mean "
                 f"{max(served.values()) / (sum(served.values()) / len(shards)):.2f}; "
                 f"with one global sequence + log (on {global_shard}), at least {other}, "
                 f"max/mean {max(other) / (sum(other) / len(shards)):.2f}")
    return lines


def _node(shard: str) -> redis.Redis:
    host, port = shard.rsplit(":", 1)
    return redis.Redis(host=host, port=int(port), socket_timeout=5.0)


def _command_calls(node: redis.Redis) -> Counter:
    """Calls per command (lower case) the node counted since its last CONFIG RESETSTAT."""
    stats = node.info("commandstats")
    return Counter({name[len("cmdstat_"):]: int(v["calls"]) for name, v in stats.items()})


def main(argv: Sequence[str] | None = None) -> None:
    """Start the cluster, run the three workloads and print their lines."""
    p = argparse.ArgumentParser(prog="python -m mmcache.lab.bench.redis_shards",
                                description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=600,
                   help="rounds of put, exact get, paraphrase get (default 600)")
    rounds = p.parse_args(argv).rounds
    with tempfile.TemporaryDirectory(prefix="mmcache-shards-") as folder, \
            local_redis_cluster(folder) as url:
        print(f"mmcache shard benchmark: local 3-master Redis Cluster, {rounds} rounds of put + "
              f"exact get + paraphrase get, L3 only, skew window {SKEW_WINDOW} requests; "
              f"shards in host:port order", flush=True)
        for name, scopes in (("12 scopes, 4 per shard", spread_scopes(url, 4)),
                             ("12 scopes placed by hash", [f"tenant-{i}" for i in range(12)]),
                             ("one hot scope", ["hot-tenant"])):
            print("\n".join(report(name, *run_workload(url, scopes, rounds), rounds)),
                  flush=True)


if __name__ == "__main__":
    main()
