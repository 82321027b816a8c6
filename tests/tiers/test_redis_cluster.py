"""The Redis tier on a real three-node Redis Cluster (the ``redis_cluster_url`` fixture).

The store protocol itself runs on the cluster in ``test_store_tier.py`` (its ``l3``
fixture); here: the per-scope key layout, writes over several scopes, the errors that
name a fix, and the skew watch of seed 000 §2.4 in the cache's metrics.
"""

from __future__ import annotations

import itertools
import logging
import time
from collections import defaultdict

import numpy as np
import pytest
from redis.cluster import RedisCluster

import mmcache
from mmcache.errors import ConfigError, StorageError
from mmcache.lab.testing import unit
from mmcache.tiers.redis import RedisTier, scope_tag
from mmcache.types import Entry

DIM = 16
_prefixes = itertools.count()


def entry(eid: str, scope: str, seed: int, value: object = "v") -> Entry:
    vec = unit(np.random.default_rng(seed), DIM)
    return Entry(eid, scope, eid, value, {"text": vec}, 100, 1.0)


@pytest.fixture
def prefix() -> str:
    return f"c{next(_prefixes)}-{time.monotonic_ns()}"


@pytest.fixture
def tier(redis_cluster_url: str, prefix: str):
    t = RedisTier(redis_cluster_url, prefix=prefix, cluster=True)
    yield t
    t.close()


def test_a_scopes_entries_log_and_sequence_share_a_slot_and_scopes_spread(
        tier: RedisTier, redis_cluster_url: str, prefix: str) -> None:
    scopes = [f"tenant-{i}" for i in range(12)]
    for i, scope in enumerate(scopes):
        tier.put(entry(f"{scope}-e", scope, i))
    client = RedisCluster.from_url(redis_cluster_url)
    try:
        for scope in scopes:
            tag = scope_tag(scope)
            keys = [tier.key(scope, f"{scope}-e"), f"{prefix}:seq:{{{tag}}}",
                    f"{prefix}:log:{{{tag}}}"]
            assert client.exists(*keys) == 3
            assert len({client.keyslot(k) for k in keys}) == 1
        shards = {tier.store.shard_of(tier.key(s, "x")) for s in scopes}
        assert shards == {n.name for n in client.get_primaries()} and len(shards) == 3
    finally:
        client.close()


def test_each_scope_numbers_its_own_writes_and_other_clients_replay_every_scope(
        tier: RedisTier, redis_cluster_url: str, prefix: str) -> None:
    tier.put(entry("a1", "a", 1))
    tier.put(entry("a2", "a", 2))
    tier.put(entry("b1", "b", 3))
    assert [tier.get(s, e).version for s, e in (("a", "a1"), ("a", "a2"), ("b", "b1"))] \
        == [1, 2, 1]
    other = RedisTier(redis_cluster_url, prefix=prefix, cluster=True)
    try:
        assert sorted(other.ids()) == ["a1", "a2", "b1"] and len(other) == 3
        tier.put(entry("b2", "b", 4, "late"))
        assert tier.delete("a1")
        hits = other.search("b", {"text": entry("b2", "b", 4).embeddings["text"]},
                            {"text": 0.99})
        assert [c.entry_id for c in hits] == ["b2"] and other.get("b", "b2").value == "late"
        assert sorted(other.ids()) == ["a2", "b1", "b2"]
    finally:
        other.close()


def test_a_batch_over_scopes_on_several_shards_is_written_and_seen(
        tier: RedisTier, redis_cluster_url: str, prefix: str) -> None:
    batch = [entry(f"e{i}", f"tenant-{i}", i, value=i) for i in range(9)]
    assert len({tier.store.shard_of(tier.key(e.scope, e.entry_id)) for e in batch}) > 1
    tier.put_many(batch)
    other = RedisTier(redis_cluster_url, prefix=prefix, cluster=True)
    try:
        for e in batch:
            found = other.search(e.scope, e.embeddings, {"text": 0.99})
            assert [c.entry_id for c in found] == [e.entry_id]
            assert other.get(e.scope, e.entry_id).value == int(e.entry_id[1:])
        assert {e.entry_id for e in other.scan()} == {e.entry_id for e in batch}
    finally:
        other.close()


def test_an_unreadable_entry_is_quarantined_in_its_scopes_slot(
        tier: RedisTier, redis_cluster_url: str, prefix: str) -> None:
    client = RedisCluster.from_url(redis_cluster_url)
    scopes = [f"tenant-{i}" for i in range(4)]
    tier.put_many([entry(f"{s}-e", s, i) for i, s in enumerate(scopes)])
    bad = scopes[1]
    client.hset(tier.key(bad, f"{bad}-e"), "value_type", "pickle")
    assert tier.get(bad, f"{bad}-e") is None and tier.get(bad, f"{bad}-e") is None
    assert len(tier.events.events("MM-ENTRY-UNREADABLE")) == 1
    tag = scope_tag(bad)
    moved = f"{prefix}:quarantine:{{{tag}}}:{bad}-e"
    assert client.keyslot(moved) == client.keyslot(tier.key(bad, f"{bad}-e"))
    assert client.hget(moved, "value_type") == b"pickle"
    assert client.zrange(f"{prefix}:quarantined:{{{tag}}}", 0, -1) == [moved.encode()]
    later = RedisTier(redis_cluster_url, prefix=prefix, cluster=True)
    try:
        assert sorted(later.ids()) == sorted(f"{s}-e" for s in scopes if s != bad)
        assert [e for e, _ in later.store.quarantined()] == [f"{bad}-e"]
        assert later.events.events("MM-ENTRY-UNREADABLE") == []
    finally:
        later.close()


def test_a_cache_config_selects_the_cluster(redis_cluster_url: str, prefix: str) -> None:
    config = {"l3": {"backend": "redis", "url": redis_cluster_url,
                     "options": {"prefix": prefix, "cluster": True}}}
    q = mmcache.Query(text="a red dress", embeddings={"text": unit(np.random.default_rng(0),
                                                                     DIM)}, scope="t")
    with mmcache.TieredCache(config) as writer, mmcache.TieredCache(config) as reader:
        writer.put(q, "red")
        hit = reader.get(q)
        assert hit is not None and (hit.value, hit.tier) == ("red", "l3")


@pytest.mark.parametrize("max_entries", [None, 100], ids=["unlimited", "bounded"])
def test_a_scopes_traffic_reaches_only_its_shard_unless_the_budget_may_evict(
        redis_cluster_url: str, prefix: str, max_entries: int | None) -> None:
    config = {"l3": {"backend": "redis", "url": redis_cluster_url, "max_entries": max_entries,
                     "options": {"prefix": prefix, "cluster": True}}}
    vec = unit(np.random.default_rng(0), DIM)
    with mmcache.TieredCache(config) as cache:
        store = cache.tier("l3").store
        own = store.shard_of(store.key("t", "x"))
        other = next(s for s in (f"other-{i}" for i in itertools.count())
                     if store.shard_of(store.key(s, "x")) != own)
        for scope in ("t", other):  # both scopes have a log now
            cache.put(mmcache.Query(text=scope, embeddings={"text": vec}, scope=scope), scope)
        cache.metrics.reset()
        cache.put(mmcache.Query(text="q", embeddings={"text": vec}, scope="t"), 1)
        paraphrase = mmcache.Query(text="q, put another way", embeddings={"text": vec}, scope="t")
        assert cache.get(paraphrase) is not None  # a semantic hit: the search replayed "t"
        requests = cache.metrics.snapshot().shard_requests
    if max_entries is None:
        assert set(requests) == {own}
    else:  # a put that may evict replays every scope's sequence first
        assert requests[store.shard_of(store.key(other, "x"))] >= 1
        assert requests[store.shard_of(f"{prefix}:scopes")] >= 1


def test_a_single_server_client_on_a_cluster_node_names_the_fix(redis_cluster_url: str) -> None:
    with pytest.raises(StorageError, match="cluster: true"):
        RedisTier(redis_cluster_url)


def test_a_cluster_client_on_a_single_server_is_a_storage_error(redis_url: str) -> None:
    with pytest.raises(StorageError, match="cannot reach the Redis tier"):
        RedisTier(redis_url, cluster=True)


def test_a_prefix_with_a_brace_is_refused_on_a_cluster(redis_cluster_url: str) -> None:
    with pytest.raises(ConfigError, match="without '{' and '}'"):
        RedisTier(redis_cluster_url, prefix="my{app}", cluster=True)


# -- the skew watch (seed 000 §2.4) ----------------------------------------------------------
WINDOW = 100


def _scopes_per_shard(tier: RedisTier, per_shard: int) -> list[str]:
    """``per_shard`` scope names on each shard of the cluster (an evenly spread tenant set)."""
    found: dict[str, list[str]] = defaultdict(list)
    for i in itertools.count():
        scope = f"tenant-{i}"
        shard = found[tier.store.shard_of(tier.key(scope, "x"))]
        if len(shard) < per_shard:
            shard.append(scope)
        if len(found) == 3 and all(len(s) == per_shard for s in found.values()):
            return [s for scopes in found.values() for s in scopes]


def _run(cache: mmcache.TieredCache, scopes: list[str], n: int) -> None:
    """``n`` puts, each read back and looked up by a paraphrase, round-robin over ``scopes``."""
    rng = np.random.default_rng(1)
    for i in range(n):
        scope = scopes[i % len(scopes)]
        vec = unit(rng, DIM)
        cache.put(mmcache.Query(text=f"q{i}", embeddings={"text": vec}, scope=scope), i)
        assert cache.get(mmcache.Query(text=f"q{i}", embeddings={"text": vec},
                                       scope=scope)).value == i
        assert cache.get(mmcache.Query(text=f"paraphrase {i}", embeddings={"text": vec},
                                       scope=scope)).value == i


@pytest.mark.parametrize("skewed", [True, False], ids=["one-scope", "spread"])
def test_the_skew_watch_alerts_on_a_hot_shard_only(redis_cluster_url: str, prefix: str,
                                                   skewed: bool, caplog) -> None:
    config = {"l1": {"enabled": False}, "l2": {"enabled": False},
              "l3": {"backend": "redis", "url": redis_cluster_url,
                     "options": {"prefix": prefix, "cluster": True, "skew_window": WINDOW}}}
    with mmcache.TieredCache(config) as cache, caplog.at_level(logging.WARNING, "mmcache.skew"):
        tier = cache.tier("l3")
        scopes = ["hot-tenant"] if skewed else _scopes_per_shard(tier, 2)
        _run(cache, scopes, 60)
        requests = cache.metrics.snapshot().shard_requests
        alerts = cache.metrics.snapshot().skew_alerts
        text = cache.metrics.to_prometheus()
    shards = tier.store.skew.shards
    assert len(shards) == 3 and sum(requests.values()) >= 3 * WINDOW
    for shard, n in requests.items():
        assert f'mmcache_shard_requests_total{{shard="{shard}"}} {float(n)}' in text
    warned = [r.getMessage() for r in caplog.records if r.name == "mmcache.skew"]
    if skewed:
        hot = tier.store.shard_of(tier.key("hot-tenant", "x"))
        assert max(requests, key=requests.get) == hot
        assert set(alerts) == {hot} and alerts[hot] >= 2
        assert f'mmcache_skew_alerts_total{{shard="{hot}"}} {float(alerts[hot])}' in text
        assert len(warned) == 1 and hot in warned[0]   # warned once while it stays skewed
        assert tier.store.skew.skewed == {hot}
    else:
        mean = sum(requests.values()) / len(shards)
        assert set(requests) == shards and max(requests.values()) < 1.8 * mean
        assert not alerts and not warned and not tier.store.skew.skewed
        assert "mmcache_skew_alerts_total{" not in text
