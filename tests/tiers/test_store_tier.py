"""A shared L3 (SQLite ``shared: true``, Redis) behaves as one cache seen by every client.

Each test names the property it checks; every one failed before L3 became one versioned
store-backed tier (:mod:`mmcache.tiers.store`).
"""

from __future__ import annotations

import itertools
import sqlite3
import time
import zlib
from typing import Callable, Iterator

import numpy as np
import pytest
import redis

import mmcache
from mmcache.errors import ConfigError, StorageError
from mmcache.tiers.store import SWEEP_EVERY_S
from mmcache.encoders.base import HashingTestEncoder
from mmcache.lab.testing import FakeClock, unit
from mmcache.tiers import Capacity, SQLiteTier
from mmcache.tiers.redis import RedisTier
from mmcache.types import Entry

from cache_helpers import snapshot

DIM = 16
_prefixes = itertools.count()


def entry(eid: str, vec: np.ndarray, value: object = "v", scope: str = "s",
          expires_at: float | None = None) -> Entry:
    return Entry(eid, scope, eid, value, {"text": vec}, 100, 1.0, expires_at)


def query(name: str, scope: str = "tenant-a") -> mmcache.Query:
    rng = np.random.default_rng(zlib.crc32(name.encode()))
    return mmcache.Query(text=name, embeddings={"text": unit(rng, DIM)}, scope=scope)


@pytest.fixture(params=["sqlite", "redis", "redis-cluster"])
def l3(request, tmp_path) -> Callable[..., dict]:
    """``l3(**extra)``: the ``l3`` section of a config of one shared store, per backend."""
    if request.param == "sqlite":
        path = str(tmp_path / "shared.db")
        return lambda **extra: {"backend": "sqlite", "path": path, "shared": True, **extra}
    cluster = request.param == "redis-cluster"
    url = request.getfixturevalue("redis_cluster_url" if cluster else "redis_url")
    prefix = f"store{next(_prefixes)}-{time.monotonic_ns()}"
    return lambda **extra: {"backend": "redis", "url": url,
                            "options": {"prefix": prefix, "cluster": cluster,
                                        **extra.pop("options", {})}, **extra}


@pytest.fixture
def two_caches(l3) -> Iterator[tuple[mmcache.TieredCache, mmcache.TieredCache, FakeClock]]:
    """Two caches with private L1/L2 over one shared L3, on one fake clock."""
    clock = FakeClock()
    caches = [mmcache.TieredCache({"l3": l3()}, clock=clock) for _ in range(2)]
    yield caches[0], caches[1], clock
    for cache in caches:
        cache.close()


# -- item 3: the change feed loses nothing ---------------------------------------------------
def test_an_own_write_does_not_skip_what_others_committed_before_it(tmp_path) -> None:
    rng = np.random.default_rng(0)
    a, b = (SQLiteTier(tmp_path / "l3.db", shared=True) for _ in range(2))
    x, y = unit(rng, DIM), unit(rng, DIM)
    b.put(entry("x", x))
    a.put(entry("y", y))   # a has not replayed b's write yet
    assert [c.entry_id for c in a.search("s", {"text": x}, {"text": 0.99})] == ["x"]
    a.close(), b.close()


def test_a_replace_of_the_newest_row_reaches_other_processes(tmp_path) -> None:
    rng = np.random.default_rng(1)
    a, b = (SQLiteTier(tmp_path / "l3.db", shared=True) for _ in range(2))
    old, new = unit(rng, DIM), unit(rng, DIM)
    b.put(entry("x", old, "old"))
    assert [c.entry_id for c in a.search("s", {"text": old}, {"text": 0.99})] == ["x"]
    b.put(entry("x", new, "new"))  # the same (highest) row, replaced
    assert [c.entry_id for c in a.search("s", {"text": new}, {"text": 0.99})] == ["x"]
    assert a.search("s", {"text": old}, {"text": 0.99}) == []
    a.close(), b.close()


def test_versions_come_from_one_monotonic_sequence_of_writes_and_deletes(tmp_path) -> None:
    rng = np.random.default_rng(2)
    a, b = (SQLiteTier(tmp_path / "l3.db", shared=True) for _ in range(2))
    a.put(entry("x", unit(rng, DIM)))
    b.put(entry("y", unit(rng, DIM)))
    assert b.delete("x")
    a.put(entry("x", unit(rng, DIM)))
    versions = [c.seq for c in a.store.changes(0)]
    assert versions == sorted(versions) and len(set(versions)) == len(versions)
    assert a.get("s", "x").version == max(versions) > b.get("s", "y").version
    a.close(), b.close()


# -- item 4: private copies are revalidated ---------------------------------------------------
def test_an_overwrite_by_another_cache_is_served_at_once(two_caches) -> None:
    a, b, _ = two_caches
    q = query("what is the capital of France")
    a.put(q, "v1")
    assert b.get(q).value == "v1"          # now in b's L1 and L2
    a.put(q, "v2")
    hit = b.get(q)
    assert hit is not None and hit.value == "v2"
    assert b.get(q).tier == "l1"           # the new version is promoted again


def test_an_invalidation_by_another_cache_is_seen_at_once(two_caches) -> None:
    a, b, _ = two_caches
    q = query("delete me")
    a.put(q, "v1")
    assert b.get(q).value == "v1"
    assert a.invalidate(q)
    assert b.get(q) is None
    paraphrase = mmcache.Query(text="a paraphrase", embeddings=q.embeddings, scope=q.scope)
    assert b.get(paraphrase) is None       # b's L2 copy is gone too


def test_max_staleness_bounds_how_long_a_stale_copy_may_be_served(l3) -> None:
    clock = FakeClock()
    a = mmcache.TieredCache({"l3": l3()}, clock=clock)
    b = mmcache.TieredCache({"l3": l3(options={"max_staleness": 3600.0})}, clock=clock)
    try:
        q = query("slow to change")
        a.put(q, "v1")
        assert b.get(q).value == "v1"
        a.put(q, "v2")
        assert b.get(q).value == "v1"       # within the bound b may serve its copy
        synced_at = b.tier("l3")._synced_at
        for log in synced_at:
            synced_at[log] -= 3601.0        # the bound has passed
        assert b.get(q).value == "v2"
    finally:
        a.close(), b.close()


# -- item 5: expiry purges are compare-and-delete -------------------------------------------
def test_an_expiry_purge_never_deletes_another_caches_fresh_write(l3) -> None:
    clock = FakeClock()
    lazy = mmcache.TieredCache({"l3": l3(options={"max_staleness": 3600.0})}, clock=clock)
    other = mmcache.TieredCache({"l3": l3()}, clock=clock)
    try:
        q = query("short-lived")
        lazy.put(q, "old", ttl=10)
        clock.advance(11)                   # lazy's copy has expired
        eid = other.put(q, "fresh", ttl=100)  # and other has just put the key again
        assert lazy.get(q).value == "fresh"  # lazy purges its expired copy, not other's write
        assert other.tier("l3").get(q.scope, eid).value == "fresh"
        assert other.get(q).value == "fresh"
    finally:
        lazy.close(), other.close()


@pytest.mark.parametrize("backend", ["sqlite", "redis", "redis-cluster"])
def test_a_delete_at_an_old_version_keeps_the_new_one(backend, tmp_path, request) -> None:
    rng = np.random.default_rng(3)
    cluster = backend == "redis-cluster"
    if backend == "sqlite":
        tier = SQLiteTier(tmp_path / "l3.db", shared=True)
    else:
        tier = RedisTier(request.getfixturevalue("redis_cluster_url" if cluster else "redis_url"),
                         prefix=f"cas{next(_prefixes)}-{time.monotonic_ns()}", cluster=cluster)
    try:
        tier.put(entry("x", unit(rng, DIM), "old"))
        old = tier.get("s", "x").version
        tier.put(entry("x", unit(rng, DIM), "new"))
        assert not tier.delete("x", old) and tier.get("s", "x").value == "new"
        assert tier.delete("x", tier.get("s", "x").version) and tier.get("s", "x") is None
    finally:
        tier.close()


# -- item 6: capacity belongs to the store; Redis entries expire by themselves ---------------
def test_a_client_asking_for_another_capacity_is_refused_and_deletes_nothing(l3) -> None:
    owner = mmcache.TieredCache({"l3": l3(max_entries=10)})
    try:
        for i in range(5):
            owner.put(query(f"tenant-a question {i}"), i)
        with pytest.raises(ConfigError, match="capacity belongs to the store"):
            mmcache.TieredCache({"l3": l3(max_entries=1)})
        assert len(owner.tier("l3")) == 5
        same = mmcache.TieredCache({"l3": l3(max_entries=10)})
        assert same.tier("l3").capacity == Capacity(max_entries=10)
        same.close()
    finally:
        owner.close()


def test_a_tier_without_a_capacity_adopts_the_stores(tmp_path) -> None:
    SQLiteTier(tmp_path / "l3.db", Capacity(max_entries=3), shared=True).close()
    tier = SQLiteTier(tmp_path / "l3.db", shared=True)
    assert tier.capacity == Capacity(max_entries=3)
    tier.close()


def test_redis_entries_with_a_ttl_carry_an_expire(redis_url) -> None:
    prefix = f"ttl{next(_prefixes)}-{time.monotonic_ns()}"
    config = {"freshness": {"stale_while_revalidate": 5.0},
              "l3": {"backend": "redis", "url": redis_url, "options": {"prefix": prefix}}}
    with mmcache.TieredCache(config) as cache:
        lasting, brief = query("lasting"), query("brief")
        cache.put(lasting, "stays")
        eid = cache.put(brief, "goes", ttl=20)
        server = redis.Redis.from_url(redis_url)
        kept_ms = int(1000 * (20 + 5 + SWEEP_EVERY_S))   # ttl, stale window, one sweep
        assert server.pttl(cache.tier("l3").key(brief.scope, eid)) in range(kept_ms - 5000,
                                                                             kept_ms + 1)
        assert server.pttl(cache.tier("l3").key(lasting.scope, cache.put(lasting, "s"))) == -1
        server.close()


# -- item 7: the guard learns entries promoted from a shared store ----------------------------
def test_entries_promoted_from_a_shared_store_are_looked_up_in_l1(two_caches) -> None:
    a, b, _ = two_caches
    q = query("written by another process")
    a.put(q, "answer")
    assert b.get(q).tier == "l3"           # b's guard rightly skipped its empty L1 here
    skipped = b.metrics.snapshot().guard_skips["l1:bloom"]
    assert b.get(q).tier == "l1"
    assert b.metrics.snapshot().guard_skips["l1:bloom"] == skipped


# -- item 8: private files are locked; opening waits for others -----------------------------
def test_a_private_file_opened_twice_is_refused_with_how_to_share_it(tmp_path) -> None:
    config = {"l3": {"backend": "sqlite", "path": str(tmp_path / "cell.db")}}
    first = mmcache.TieredCache(config)
    with pytest.raises(StorageError, match="l3.shared: true"):
        mmcache.TieredCache(config)
    with pytest.raises(StorageError, match="already open"):
        mmcache.TieredCache({"l3": {**config["l3"], "shared": True}})
    first.close()
    mmcache.TieredCache(config).close()   # once closed it opens again


def test_opening_waits_while_another_connection_holds_the_file(tmp_path) -> None:
    path = tmp_path / "busy.db"
    SQLiteTier(path, shared=True).close()
    blocker = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    blocker.execute("BEGIN EXCLUSIVE")
    import threading
    threading.Timer(0.3, lambda: blocker.execute("ROLLBACK")).start()
    tier = SQLiteTier(path, shared=True)   # waits, then opens
    assert len(tier) == 0
    tier.close()
    blocker.close()


# -- failure injection: a failed call changes nothing ----------------------------------------
def _three_tier(l3_section: dict) -> mmcache.TieredCache:
    """Three tiers whose store failures raise (``l3.on_error: raise``)."""
    return mmcache.TieredCache({"l1": {"max_entries": 2}, "l2": {"max_entries": 3},
                                "l3": {**l3_section, "max_entries": 4, "on_error": "raise"}},
                               clock=FakeClock())


def test_a_disk_error_during_a_put_changes_nothing(tmp_path, monkeypatch) -> None:
    cache = _three_tier({"backend": "sqlite", "path": str(tmp_path / "disk.db"), "shared": True})
    try:
        for i in range(4):
            cache.put(query(f"kept {i}"), i)
        before = snapshot(cache)

        def disk_error(*args: object) -> None:
            raise sqlite3.OperationalError("disk I/O error (simulated)")

        monkeypatch.setattr(cache.tier("l3").store, "_next_seq", disk_error)
        with pytest.raises(StorageError, match="disk I/O error"):
            cache.put(query("new"), "x")
        with pytest.raises(StorageError, match="disk I/O error"):
            cache.put_many([query("new"), query("kept 0")], ["x", "y"])
        monkeypatch.undo()
        assert snapshot(cache) == before
        assert cache.get(query("kept 3")).value == 3
    finally:
        cache.close()


@pytest.mark.parametrize("cluster", [False, True], ids=["redis", "redis-cluster"])
def test_a_redis_connection_dropped_mid_pipeline_changes_nothing(cluster, request,
                                                                 monkeypatch) -> None:
    from redis.connection import Connection

    url = request.getfixturevalue("redis_cluster_url" if cluster else "redis_url")
    prefix = f"drop{next(_prefixes)}-{time.monotonic_ns()}"
    cache = _three_tier({"backend": "redis", "url": url,
                         "options": {"prefix": prefix, "cluster": cluster}})
    try:
        for i in range(4):
            cache.put(query(f"kept {i}"), i)
        before = snapshot(cache)
        send = Connection.send_packed_command

        def drop_midway(self, command, check_health=True):
            data = b"".join(command) if isinstance(command, list) else command
            if b"EXEC" not in data:
                return send(self, command, check_health)
            if self._sock is None:  # the client's retry reconnects: it drops again
                self.connect()
            self._sock.sendall(data[:len(data) // 2])  # MULTI and part of the batch arrive
            self.disconnect()
            raise redis.ConnectionError("connection dropped mid-pipeline (simulated)")

        if cluster:  # the cluster client retries a lost connection, with backoff: not here
            from redis.backoff import NoBackoff
            from redis.retry import Retry
            cache.tier("l3").store._db.set_retry(Retry(NoBackoff(), 0))
        monkeypatch.setattr(Connection, "send_packed_command", drop_midway)
        with pytest.raises(StorageError, match="dropped mid-pipeline"):
            cache.put(query("new"), "x")
        with pytest.raises(StorageError, match="dropped mid-pipeline"):
            cache.put_many([query("new"), query("kept 0")], ["x", "y"])
        monkeypatch.undo()
        assert snapshot(cache) == before
        assert cache.get(query("kept 3")).value == 3
    finally:
        cache.close()


@pytest.mark.parametrize("backend", ["sqlite", "redis"])
def test_expired_entries_are_swept_from_the_store_and_every_client(backend, tmp_path, request,
                                                                   monkeypatch) -> None:
    from mmcache.tiers import store

    monkeypatch.setattr(store, "SWEEP_EVERY_S", 0.0)
    l3 = {"backend": "sqlite", "path": str(tmp_path / "l3.db"), "shared": True} \
        if backend == "sqlite" else {"backend": "redis", "url": request.getfixturevalue(
            "redis_url"), "options": {"prefix": f"sweep{next(_prefixes)}-{time.monotonic_ns()}"}}
    clock = FakeClock()
    config = {"l3": l3, "freshness": {"stale_while_revalidate": 5.0}}
    writer = mmcache.TieredCache(config, clock=clock)
    reader = mmcache.TieredCache(config, clock=clock)
    try:
        for i in range(5):
            writer.put(query(f"brief {i}"), i, ttl=10)
        writer.put(query("lasting"), "stays")
        assert reader.tier("l3").usage()[0] == 0 and reader.get(query("brief 0")).value == 0
        clock.advance(10 + 5)                 # past the ttl and the stale window
        writer.put(query("new"), "x")         # a put sweeps
        assert len(writer.tier("l3")) == 2
        reader.get(query("lasting"))
        assert reader.tier("l3").usage()[0] == 2   # gone from the other client's budget too
    finally:
        writer.close()
        reader.close()


def test_a_sweep_removes_what_expired_and_spares_a_newer_write(tmp_path, monkeypatch) -> None:
    """The sweep takes expired entries off a heap: an entry rewritten with a later expiry is
    not swept at the old one, and many rewrites do not grow the heap without bound."""
    from mmcache.tiers import store

    monkeypatch.setattr(store, "SWEEP_EVERY_S", 0.0)
    monkeypatch.setattr(store, "EXPIRY_SLACK", 8)
    clock = FakeClock()
    with mmcache.TieredCache({"l3": {"backend": "sqlite", "path": str(tmp_path / "l3.db")}},
                             clock=clock) as cache:
        cache.put(query("brief"), 1, ttl=10)
        cache.put(query("renewed"), 2, ttl=10)
        for _ in range(50):
            cache.put(query("renewed"), 2, ttl=100)    # each rewrite supersedes one item
        tier = cache.tier("l3")
        assert len(tier._expiries) <= 2 * len(tier) + 8
        clock.advance(11)
        cache.put(query("new"), 3)                    # a put sweeps
        assert len(tier) == 2                         # "brief" left the store, "renewed" stays
        assert cache.get(query("renewed")).value == 2


class _OtherSpace(HashingTestEncoder):
    """A stand-in encoder of the same dimension whose vectors live in another space."""

    def __init__(self, modality: str, dim: int) -> None:
        super().__init__(modality, dim)
        self.encoder_id = f"stand-in:other-space/{modality}/{dim}"


@pytest.mark.parametrize("backend", ["sqlite", "redis"])
def test_a_store_refuses_a_cache_whose_encoder_made_other_vectors(backend, tmp_path,
                                                                  request) -> None:
    l3 = {"backend": "sqlite", "path": str(tmp_path / "l3.db"), "shared": True} \
        if backend == "sqlite" else {"backend": "redis", "url": request.getfixturevalue(
            "redis_url"), "options": {"prefix": f"facts{next(_prefixes)}-{time.monotonic_ns()}"}}
    first = mmcache.TieredCache({"l3": l3}, encoders={"text": HashingTestEncoder("text", 16)})
    try:
        same = mmcache.TieredCache({"l3": l3}, encoders={"text": HashingTestEncoder("text", 16)})
        same.close()
        with pytest.raises(ConfigError, match="encoder:text.*other-space") as refused:
            mmcache.TieredCache({"l3": l3}, encoders={"text": _OtherSpace("text", 16)})
        assert refused.value.code == "MM-ENCODER-IDENTITY"
    finally:
        first.close()


@pytest.mark.parametrize("backend", ["sqlite", "redis"])
def test_a_store_of_another_key_version_is_an_event_not_a_refusal(backend, tmp_path, request,
                                                                  monkeypatch) -> None:
    l3 = {"backend": "sqlite", "path": str(tmp_path / "l3.db"), "shared": True} \
        if backend == "sqlite" else {"backend": "redis", "url": request.getfixturevalue(
            "redis_url"), "options": {"prefix": f"keyv{next(_prefixes)}-{time.monotonic_ns()}"}}
    with mmcache.TieredCache({"l3": l3}) as first:
        monkeypatch.setattr(mmcache.keys, "KEY_VERSION", "k-other")
        with mmcache.TieredCache({"l3": l3}) as other:
            assert [e.code for e in other.events()] == ["MM-KEY-VERSION"]
            assert other.metrics.snapshot().failure_events == {("MM-KEY-VERSION", "l3"): 1}
        assert first.events() == []


def test_a_redis_store_of_another_key_layout_is_refused(redis_url) -> None:
    prefix = f"layout{next(_prefixes)}-{time.monotonic_ns()}"
    redis.Redis.from_url(redis_url).set(f"{prefix}:fact:layout", "1")
    seen = []
    with pytest.raises(StorageError, match="key layout '1'") as refused:
        mmcache.TieredCache({"l3": {"backend": "redis", "url": redis_url,
                                    "options": {"prefix": prefix}}}, on_event=seen.append)
    assert refused.value.code == "MM-SCHEMA-VERSION"  # a failure event, with its code
    assert [(e.code, e.tier) for e in seen] == [("MM-SCHEMA-VERSION", "l3")]
    message = str(refused.value)   # it says how to go on: another prefix, or drop the old keys
    assert "l3.options.prefix" in message and f"--pattern '{prefix}:*'" in message
