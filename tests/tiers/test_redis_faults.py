"""The Redis L3 under faults, against private redis-servers: after data loss or a rollback no
client serves a copy older than the store's latest write or invalidation; a store that stops
answering makes gets misses and puts not stored, within a bounded time, until it is back."""

from __future__ import annotations

import time
from typing import Callable

import numpy as np
import pytest
import redis

import mmcache
from mmcache.lab.testing import FaultProxy, LocalRedis
from mmcache.tiers.redis import SOCKET_TIMEOUT_S

PREFIX = "faults"
NO_PERSISTENCE = ("--save", "", "--appendonly", "no")


def query(text: str = "what is the capital of France?") -> mmcache.Query:
    vec = np.random.default_rng(len(text)).standard_normal(32).astype(np.float32)
    return mmcache.Query(text=text, embeddings={"text": vec}, scope="tenant")


def caches(url: str) -> tuple[mmcache.TieredCache, mmcache.TieredCache]:
    config = {"l3": {"backend": "redis", "url": url, "options": {"prefix": PREFIX}}}
    return mmcache.TieredCache(config), mmcache.TieredCache(config)


def value_of(cache: mmcache.TieredCache, q: mmcache.Query) -> object:
    hit = cache.get(q)
    return None if hit is None else hit.value


def flush(server: LocalRedis, client: redis.Redis) -> None:
    client.flushall()


def restart_empty(server: LocalRedis, client: redis.Redis) -> None:
    server.restart(kill=True)


def evict_control_keys(server: LocalRedis, client: redis.Redis) -> None:
    """What maxmemory with an allkeys policy may do: the sequence and epoch keys go."""
    client.delete(f"{PREFIX}:seq", f"{PREFIX}:epoch")


@pytest.mark.parametrize("fault, entries_lost", [(flush, True), (restart_empty, True),
                                                 (evict_control_keys, False)])
def test_after_data_loss_no_client_serves_its_old_copy(tmp_path, fault: Callable,
                                                      entries_lost: bool) -> None:
    with LocalRedis(tmp_path, *NO_PERSISTENCE) as server:
        a, b = caches(server.url)
        q, other = query(), query("who wrote Hamlet?")
        try:
            a.put(q, "old")
            a.put(other, "kept in b's L1 only")
            assert value_of(b, q) == "old" and value_of(b, other) == "kept in b's L1 only"
            fault(server, redis.Redis.from_url(server.url))
            a.put(q, "new")                 # its version number may be the old copy's
            assert value_of(b, q) == "new"
            assert value_of(b, other) == (None if entries_lost else "kept in b's L1 only")
            a.invalidate(q)
            assert value_of(b, q) is None
        finally:
            a.close()
            b.close()


def test_after_a_rollback_to_an_older_snapshot_no_client_serves_a_lost_write(tmp_path) -> None:
    with LocalRedis(tmp_path, "--save", "", "--appendonly", "no") as server:
        client = redis.Redis.from_url(server.url)
        a, b = caches(server.url)
        q = query()
        try:
            a.put(q, "v1")
            client.save()                   # the snapshot holds v1
            a.put(q, "v2")
            assert value_of(b, q) == "v2"   # b's L1 now holds v2, at version 2
            server.restart(kill=True)       # kill -9: the server comes back with v1
            assert value_of(b, q) == "v1"   # what the store holds now
            a.put(q, "v3")                  # takes version 2 again
            assert value_of(b, q) == "v3"
        finally:
            a.close()
            b.close()


def test_a_store_that_stops_answering_degrades_the_cache_and_it_recovers(tmp_path,
                                                                         caplog) -> None:
    with LocalRedis(tmp_path, *NO_PERSISTENCE) as server, \
            FaultProxy(("127.0.0.1", server.port)) as proxy:
        a, b = caches(proxy.url())
        q, new = query(), query("who wrote Hamlet?")
        try:
            a.put(q, "kept")
            assert value_of(b, q) == "kept"
            proxy.mode = "blackhole"
            started = time.monotonic()
            assert b.get(q) is None                # a miss, not an error, and soon
            assert b.put(new, "lost") is None      # not stored
            took = time.monotonic() - started
            assert took < 2 * 2 * SOCKET_TIMEOUT_S + 1.0, took
            assert b.metrics.errors == {"l3": 2}
            assert caplog.text.count("store fails") == 1
            proxy.mode = "pass"
            assert b.put(new, "stored") is not None    # the same object recovers
            assert value_of(a, new) == "stored" and value_of(b, q) == "kept"
            assert "answers again" in caplog.text
        finally:
            a.close()
            b.close()


def test_a_store_that_went_down_and_came_back_empty_is_used_again(tmp_path) -> None:
    with LocalRedis(tmp_path, *NO_PERSISTENCE) as server:
        a, b = caches(server.url)
        q = query()
        try:
            a.put(q, "before")
            assert value_of(b, q) == "before"
            server.stop(kill=True)
            assert b.get(q) is None and a.put(q, "during") is None
            server.start()
            assert value_of(b, q) is None          # the store lost it: so does b
            a.put(q, "after")
            assert value_of(b, q) == "after"
        finally:
            a.close()
            b.close()


def test_a_server_that_may_evict_any_key_is_warned_about(tmp_path, caplog) -> None:
    with LocalRedis(tmp_path, *NO_PERSISTENCE, "--maxmemory-policy", "allkeys-lru") as server:
        for cache in caches(server.url):
            cache.close()
        assert "maxmemory-policy ['allkeys-lru']" in caplog.text and "noeviction" in caplog.text
