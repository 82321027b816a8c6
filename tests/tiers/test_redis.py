"""The Redis remote tier against a real redis-server (started by the ``redis_url`` fixture)."""

from __future__ import annotations

import itertools
import time

import numpy as np
import pytest
import redis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mmcache.errors import ConfigError, SerializationError, StorageError
from mmcache.tiers.base import Capacity
from mmcache.tiers.redis import RedisTier, scope_tag
from mmcache.types import Entry

DIM = 16
_prefixes = itertools.count()


def unit(seed: int, dim: int = DIM) -> np.ndarray:
    vec = np.random.default_rng(seed).standard_normal(dim).astype(np.float32)
    return vec / np.linalg.norm(vec)


def entry(entry_id: str, scope: str = "tenant-a", value: object = "v", seed: int = 0,
          size: int = 100, **extra: object) -> Entry:
    return Entry(entry_id=entry_id, scope=scope, exact_key=f"exact-{entry_id}", value=value,
                 embeddings={"text": unit(seed)}, size=size, created_at=1000.0, **extra)


@pytest.fixture
def prefix() -> str:
    """A fresh key prefix per test, so tests share the server but not data."""
    return f"t{next(_prefixes)}-{time.monotonic_ns()}"


@pytest.fixture
def tier(redis_url: str, prefix: str):
    t = RedisTier(redis_url, prefix=prefix)
    yield t
    t.close()


@pytest.mark.parametrize("value", ["text ünïcode", b"\x00\x80raw bytes", {"a": [1, 2.5, None]},
                                   [1, "two"], 42, None])
def test_round_trip_keeps_value_type_embedding_and_metadata(tier: RedisTier, value: object) -> None:
    expires_at = time.time() + 3600.0  # in the future: Redis expires entries by their TTL
    stored = entry("e1", value=value, seed=7, expires_at=expires_at, ground_truth={"intent": 3})
    tier.put(stored)
    got = tier.get("tenant-a", "e1")
    assert got is not None
    assert got.value == value and type(got.value) is type(value)
    assert got.embeddings["text"].dtype == np.float32
    assert np.array_equal(got.embeddings["text"], stored.embeddings["text"])
    assert (got.exact_key, got.size, got.created_at, got.expires_at, got.ground_truth) == \
        ("exact-e1", 100, 1000.0, expires_at, {"intent": 3})


def test_values_are_stored_type_tagged_without_pickle(tier: RedisTier, redis_url: str) -> None:
    tier.put(entry("e1", value={"answer": 1}))
    raw = redis.Redis.from_url(redis_url).hgetall(tier.key("tenant-a", "e1"))
    assert raw[b"value_type"] == b"json" and raw[b"value"] == b'{"answer":1}'
    assert raw[b"vec:text"] == tier.get("tenant-a", "e1").embeddings["text"].astype("<f4").tobytes()


def test_scopes_are_separate_key_spaces(tier: RedisTier, redis_url: str, prefix: str) -> None:
    tier.put(entry("same-id", scope="tenant-a", value="a", seed=1))
    tier.put(entry("same-id", scope="tenant-b", value="b", seed=1))
    assert tier.get("tenant-a", "same-id").value == "a"
    assert tier.get("tenant-b", "same-id").value == "b"
    assert tier.get("tenant-c", "same-id") is None
    client = redis.Redis.from_url(redis_url)
    assert sorted(client.scan_iter(f"{prefix}:{scope_tag('tenant-a')}:*")) == \
        [tier.key("tenant-a", "same-id").encode()]


def test_search_never_crosses_scopes(tier: RedisTier) -> None:
    tier.put(entry("a1", scope="tenant-a", seed=5))
    query = {"text": unit(5)}
    assert [c.entry_id for c in tier.search("tenant-a", query, {"text": 0.9})] == ["a1"]
    assert tier.search("tenant-b", query, {"text": 0.9}) == []


def test_search_applies_the_floor(tier: RedisTier) -> None:
    tier.put(entry("a1", seed=5))
    near = unit(5) + 0.05 * unit(6)
    near /= np.linalg.norm(near)
    sim = float(near @ unit(5))
    assert [c.entry_id for c in tier.search("tenant-a", {"text": near}, {"text": sim - 1e-3})] \
        == ["a1"]
    assert tier.search("tenant-a", {"text": near}, {"text": sim + 1e-3}) == []


def test_a_second_client_rebuilds_its_index_from_the_server(tier: RedisTier, redis_url: str,
                                                            prefix: str) -> None:
    for i in range(20):
        tier.put(entry(f"e{i}", seed=i, value=i))
    other = RedisTier(redis_url, prefix=prefix)
    try:
        assert len(other) == 20 and other.usage() == (20, 2000)
        found = other.search("tenant-a", {"text": unit(13)}, {"text": 0.99})
        assert [c.entry_id for c in found] == ["e13"]
        assert other.get("tenant-a", "e13").value == 13
    finally:
        other.close()


def test_writes_and_deletes_by_another_client_are_seen(tier: RedisTier, redis_url: str,
                                                       prefix: str) -> None:
    other = RedisTier(redis_url, prefix=prefix)
    try:
        other.put(entry("late", seed=99, value="from other"))
        assert [c.entry_id for c in tier.search("tenant-a", {"text": unit(99)}, {"text": 0.99})] \
            == ["late"]
        assert other.delete("late")
        assert tier.get("tenant-a", "late") is None
        assert tier.search("tenant-a", {"text": unit(99)}, {"text": 0.99}) == []
        assert tier.usage() == (0, 0)
    finally:
        other.close()


def test_capacity_in_entries_evicts_least_recently_used(redis_url: str, prefix: str) -> None:
    tier = RedisTier(redis_url, capacity=Capacity(max_entries=3), policy="lru", prefix=prefix)
    try:
        for i in range(3):
            tier.put(entry(f"e{i}", seed=i))
        tier.get("tenant-a", "e0")
        assert tier.put(entry("e3", seed=3)) == ["e1"]
        assert len(tier) == 3 and tier.get("tenant-a", "e1") is None
        assert tier.search("tenant-a", {"text": unit(1)}, {"text": 0.99}) == []
        assert tier.evict() == "e2" and len(tier) == 2
    finally:
        tier.close()


def test_capacity_in_bytes(redis_url: str, prefix: str) -> None:
    tier = RedisTier(redis_url, capacity=Capacity(max_bytes=250), prefix=prefix)
    try:
        for i in range(5):
            tier.put(entry(f"e{i}", seed=i, size=100))
            assert tier.usage()[1] <= 250
        assert len(tier) == 2
    finally:
        tier.close()


def test_unserialisable_value_leaves_the_store_unchanged(tier: RedisTier) -> None:
    tier.put(entry("keep", value="kept"))
    with pytest.raises(SerializationError, match="cannot be stored"):
        tier.put(entry("bad", value=object()))
    assert len(tier) == 1 and tier.usage() == (1, 100)
    assert tier.get("tenant-a", "bad") is None


def test_failed_write_restores_the_budget(redis_url: str, prefix: str,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    tier = RedisTier(redis_url, capacity=Capacity(max_entries=2), prefix=prefix)
    try:
        tier.put(entry("e0", seed=0))
        tier.put(entry("e1", seed=1))

        def lost(*args: object, **kwargs: object) -> None:
            raise redis.ConnectionError("connection lost (simulated)")

        monkeypatch.setattr(tier.store, "_put_script", lost)
        with pytest.raises(StorageError, match="write .* failed"):
            tier.put(entry("e2", seed=2))
        assert tier.usage() == (2, 200)
        assert {e.entry_id for e in tier.scan()} == {"e0", "e1"}
        assert [c.entry_id for c in tier.search("tenant-a", {"text": unit(0)}, {"text": 0.99})] \
            == ["e0"]
        monkeypatch.undo()
        assert tier.evict() == "e0"      # still the next victim, as before the failed write
    finally:
        tier.close()


def test_a_put_the_server_refuses_writes_nothing(tier: RedisTier, redis_url: str) -> None:
    tier.put(entry("e1", value="old"))
    client = redis.Redis.from_url(redis_url)
    before = (client.get(f"{tier.prefix}:seq"), client.zrange(f"{tier.prefix}:log", 0, -1,
                                                               withscores=True))
    args = tier.store.encode(entry("e1", value="new"), keep_for=1e17)   # past any expiry
    with pytest.raises(StorageError, match="write .* failed"):
        tier.store.write([(entry("e1", value="new"), args)], [])
    assert client.hget(tier.key("tenant-a", "e1"), "value") == b"old"
    assert client.ttl(tier.key("tenant-a", "e1")) == -1
    assert (client.get(f"{tier.prefix}:seq"), client.zrange(f"{tier.prefix}:log", 0, -1,
                                                             withscores=True)) == before


def test_the_password_in_the_url_reaches_no_message(redis_url: str, prefix: str,
                                                    caplog) -> None:
    admin = redis.Redis.from_url(redis_url)
    admin.execute_command("ACL", "SETUSER", "tester", "on", ">s3cret-pw", "~*", "&*", "+@all")
    url = redis_url.replace("redis://", "redis://tester:s3cret-pw@")
    messages = []
    tier = RedisTier(url, capacity=Capacity(max_entries=5), prefix=prefix)
    try:
        tier.put(entry("e1"))
        admin.hdel(tier.key("tenant-a", "e1"), "size")
        assert tier.get("tenant-a", "e1") is None  # malformed: quarantined, reported
        messages += [tier.events.events()[-1].detail, tier.backend(), tier.store.skew.where]
        messages += [reason for _, reason in tier.store.quarantined()]
        quarantined = admin.hgetall(f"{prefix}:quarantine:{scope_tag('tenant-a')}:e1")
        messages.append(quarantined[b"quarantine_reason"].decode())
        with pytest.raises(ConfigError) as other_capacity:
            RedisTier(url, capacity=Capacity(max_entries=6), prefix=prefix)
        messages.append(str(other_capacity.value))
    finally:
        tier.close()
    with pytest.raises(StorageError) as unreachable:
        RedisTier("redis://tester:s3cret-pw@127.0.0.1:1/0", socket_timeout=0.5)
    messages.append(str(unreachable.value))
    assert all("tester:***@127.0.0.1" in m for m in messages), messages
    assert not any("s3cret" in m for m in messages)
    assert "cannot be read" in caplog.text and "s3cret" not in caplog.text  # nor any warning


def test_a_malformed_stored_entry_is_quarantined_reported_once_and_absent(
        tier: RedisTier, redis_url: str, prefix: str, caplog) -> None:
    tier.put(entry("e1"))
    tier.put(entry("e2"))
    client = redis.Redis.from_url(redis_url)
    key = tier.key("tenant-a", "e1")
    client.hset(key, "value_type", "pickle")
    raw = client.hgetall(key)
    head = int(client.get(f"{prefix}:seq"))
    assert tier.get("tenant-a", "e1") is None
    assert tier.get("tenant-a", "e1") is None
    assert tier.get("tenant-a", "e2") is not None  # the others are still served
    assert tier.store.fetch([key, tier.key("tenant-a", "e2")])[0] is None
    tier.refresh()
    events = tier.events.events("MM-ENTRY-UNREADABLE")
    assert len(events) == 1 and "unknown type tag 'pickle'" in events[0].detail
    assert "served as absent" in caplog.text
    assert not client.exists(key)  # moved out of the live keyspace, its removal logged
    assert int(client.get(f"{prefix}:seq")) == head + 1
    assert client.zscore(f"{prefix}:log", key) == head + 1
    moved = client.hgetall(f"{prefix}:quarantine:{scope_tag('tenant-a')}:e1")
    assert {k: v for k, v in moved.items() if k in raw} == raw  # every raw field kept
    assert b"unknown type tag 'pickle'" in moved[b"quarantine_reason"]
    assert moved[b"quarantined_key"] == key.encode() and float(moved[b"quarantined_at"]) > 0
    assert client.zrange(f"{prefix}:quarantined", 0, -1) == \
        [f"{prefix}:quarantine:{scope_tag('tenant-a')}:e1".encode()]
    [(entry_id, reason)] = tier.store.quarantined()
    assert entry_id == "e1" and "unknown type tag 'pickle'" in reason
    assert sorted(tier.ids()) == ["e2"] and tier.store.count() == 1


def test_a_quarantined_entry_is_gone_for_every_client(redis_url: str, prefix: str) -> None:
    client = redis.Redis.from_url(redis_url)
    tier, other = RedisTier(redis_url, prefix=prefix), RedisTier(redis_url, prefix=prefix)
    try:
        tier.put_many([entry("e1"), entry("e2"), entry("e3", scope="tenant-b")])
        other.refresh()
        assert sorted(other.ids()) == ["e1", "e2", "e3"]
        client.hset(tier.key("tenant-a", "e1"), "size", "not a number")
        client.hset(tier.key("tenant-b", "e3"), "value_type", "pickle")
        assert tier.get("tenant-a", "e1") is None
        assert tier.get("tenant-b", "e3") is None
        other.refresh()  # replays the logged removals: the entries leave its view
        assert sorted(other.ids()) == ["e2"] and "e1" not in other
        assert other.events.events("MM-ENTRY-UNREADABLE") == []
        later = RedisTier(redis_url, prefix=prefix)  # opens without them, reporting nothing
        try:
            assert sorted(later.ids()) == ["e2"] and later.usage()[0] == 1
            assert later.get("tenant-a", "e1") is None
            assert later.events.events("MM-ENTRY-UNREADABLE") == []
            assert [e for e, _ in later.store.quarantined()] == ["e1", "e3"]  # oldest first
        finally:
            later.close()
        assert len(tier.events.events("MM-ENTRY-UNREADABLE")) == 2
    finally:
        tier.close()
        other.close()


def test_a_good_write_racing_the_quarantine_is_never_quarantined(
        tier: RedisTier, redis_url: str, prefix: str) -> None:
    client = redis.Redis.from_url(redis_url)
    key = tier.key("tenant-a", "e1")
    tier.put(entry("e1", value="bad"))
    client.hset(key, "value_type", "pickle")
    stale = client.hget(key, "version")
    tier.put(entry("e1", value="good"))  # a new version lands before the move runs
    tier.store._quarantine(key, stale, "stale read")
    assert tier.get("tenant-a", "e1").value == "good"
    assert tier.store.quarantined() == [] and not client.exists(f"{prefix}:quarantined")
    assert tier.events.events("MM-ENTRY-UNREADABLE") == []


def test_a_failed_quarantine_leaves_the_entry_and_reports_it_once(
        tier: RedisTier, redis_url: str, monkeypatch) -> None:
    client = redis.Redis.from_url(redis_url)
    tier.put(entry("e1"))
    client.hset(tier.key("tenant-a", "e1"), "value_type", "pickle")

    def refuse(**_: object) -> None:
        raise redis.ConnectionError("connection refused")
    monkeypatch.setattr(tier.store, "_quarantine_script", refuse)
    assert tier.get("tenant-a", "e1") is None
    assert tier.get("tenant-a", "e1") is None
    [event] = tier.events.events("MM-ENTRY-UNREADABLE")
    assert "could not be moved to quarantine" in event.detail and "left at key" in event.detail
    assert client.hget(tier.key("tenant-a", "e1"), "value_type") == b"pickle"


def test_unreachable_server_is_a_storage_error() -> None:
    with pytest.raises(StorageError, match="cannot reach the Redis tier"):
        RedisTier("redis://127.0.0.1:1/0", socket_timeout=0.5)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops=st.lists(st.tuples(st.sampled_from(["put", "delete", "get"]),
                              st.integers(0, 5), st.sampled_from(["a", "b"])), max_size=30))
def test_matches_a_dict_model_and_never_exceeds_capacity(redis_url: str, ops: list) -> None:
    prefix = f"prop{next(_prefixes)}-{time.monotonic_ns()}"
    tier = RedisTier(redis_url, capacity=Capacity(max_entries=4), prefix=prefix)
    model: dict[tuple[str, str], int] = {}
    try:
        for step, (op, i, scope) in enumerate(ops):
            eid = f"{scope}:{i}"  # ids carry their scope, as the cache's exact keys do
            if op == "put":
                for victim in tier.put(entry(eid, scope=scope, value=step, seed=i)):
                    model.pop((victim.split(":")[0], victim), None)
                model[(scope, eid)] = step
            elif op == "delete":
                assert tier.delete(eid) == ((scope, eid) in model)
                model.pop((scope, eid), None)
            else:
                got = tier.get(scope, eid)
                assert (got.value if got else None) == model.get((scope, eid))
                other = "b" if scope == "a" else "a"
                assert tier.get(other, eid) is None
            assert len(tier) == len(model) <= 4
    finally:
        tier.close()


def test_config_selects_the_redis_backend(redis_url: str, prefix: str) -> None:
    from mmcache.config import CacheConfig
    from mmcache.build import index_spec, make_store_tier

    config = CacheConfig.from_dict({"l3": {"backend": "redis", "url": redis_url, "max_entries": 5,
                                           "options": {"prefix": prefix}}})
    tier = make_store_tier(config.l3, index_spec(config.l2))
    try:
        assert isinstance(tier, RedisTier) and tier.capacity == Capacity(max_entries=5)
        tier.put(entry("e1", value="via config"))
        assert tier.get("tenant-a", "e1").value == "via config"
    finally:
        tier.close()


@pytest.mark.parametrize("memory_tiers", [False, True], ids=["l3-only", "l1-l2-l3"])
def test_tiered_cache_over_a_redis_l3_shares_entries_between_caches(
        redis_url: str, prefix: str, memory_tiers: bool) -> None:
    import mmcache

    config = {"l1": {"enabled": memory_tiers}, "l2": {"enabled": memory_tiers},
              "l3": {"backend": "redis", "url": redis_url, "options": {"prefix": prefix}}}
    vec = unit(3, 32)
    writer, reader = mmcache.TieredCache(config), mmcache.TieredCache(config)
    try:
        writer.put(mmcache.Query(text="a red dress", embeddings={"text": vec}, scope="t-a"),
                   {"answer": "red"})
        near = vec + 0.1 * unit(4, 32)
        hit = reader.get(mmcache.Query(text="a crimson dress", embeddings={"text": near},
                                       scope="t-a"))
        assert hit is not None and hit.value == {"answer": "red"} and hit.tier == "l3"
        assert reader.get(mmcache.Query(text="a red dress", embeddings={"text": vec},
                                        scope="t-b")) is None
    finally:
        writer.close()
        reader.close()


def _live_policies() -> list[str]:
    from mmcache.config import ORACLE_POLICIES
    from mmcache.policies import POLICIES

    return sorted(set(POLICIES) - set(ORACLE_POLICIES))


@pytest.mark.parametrize("policy", _live_policies())
def test_every_live_policy_keeps_the_server_within_capacity(redis_url: str, policy: str) -> None:
    from mmcache.build import tier_policy
    from mmcache.policies import POLICIES

    max_entries = None if POLICIES[policy].needs_capacity else 6
    cap = Capacity(max_entries=max_entries, max_bytes=3000)
    tier = RedisTier(redis_url, capacity=cap, policy=tier_policy(policy, {}, cap.max_bytes),
                     prefix=f"pol-{policy}-{time.monotonic_ns()}")
    rng = np.random.default_rng(0)
    try:
        for _ in range(150):
            i = int(rng.integers(30))
            if tier.get("s", f"s-{i}") is None:
                tier.put(entry(f"s-{i}", scope="s", seed=i, size=int(rng.integers(10, 400))))
            entries, nbytes = tier.usage()
            assert entries <= (max_entries or entries) and nbytes <= 3000
            assert len(tier) == entries == len(list(tier.scan()))
    finally:
        tier.close()


def test_put_many_equals_one_put_each_and_other_clients_see_it(redis_url: str,
                                                               prefix: str) -> None:
    order = ["e0", "e1", "e2", "e1", "e3", "e4", "e0", "e5"]
    batch = [entry(eid, value=f"v{i}", seed=i) for i, eid in enumerate(order)]
    tiers = [RedisTier(redis_url, capacity=Capacity(max_entries=3), prefix=f"{prefix}-{name}")
             for name in ("sequential", "bulk")]
    sequential, bulk = tiers
    try:
        victims = [v for e in batch for v in sequential.put(e)]
        assert bulk.put_many(batch) == victims
        assert bulk.usage() == sequential.usage() == (3, 300)
        assert sorted(bulk.ids()) == sorted(sequential.ids()) == ["e0", "e4", "e5"]
        assert bulk.get("tenant-a", "e0").value == "v6"
        other = RedisTier(redis_url, prefix=bulk.prefix)
        assert sorted(other.ids()) == ["e0", "e4", "e5"] and len(other) == 3
        assert [c.entry_id for c in other.search("tenant-a", {"text": unit(7)},
                                                 {"text": 0.99})] == ["e5"]
        other.close()
    finally:
        for tier in tiers:
            tier.close()


def test_tiered_cache_put_many_over_redis_equals_one_put_each(redis_url: str,
                                                              prefix: str) -> None:
    import mmcache

    caches = [mmcache.TieredCache({"l1": {"max_entries": 2}, "l2": {"max_entries": 3},
                                   "l3": {"backend": "redis", "url": redis_url, "max_entries": 4,
                                          "options": {"prefix": f"{prefix}-{name}"}}})
              for name in ("sequential", "bulk")]
    sequential, bulk = caches
    keys = [0, 1, 2, 1, 3, 4, 5, 0, 6]
    queries = [mmcache.Query(embeddings={"text": unit(k)}, scope="t") for k in keys]
    values = [f"v{i}" for i in range(len(keys))]
    try:
        ids = [sequential.put(q, v) for q, v in zip(queries, values)]
        assert bulk.put_many(queries, values) == ids
        for cache in caches:
            assert cache.usage() == {"l1": (2, 2 * 66), "l2": (3, 3 * 66), "l3": (4, 4 * 66)}
        assert {t.name: sorted(t.ids()) for t in bulk.tiers} == \
            {t.name: sorted(t.ids()) for t in sequential.tiers}
        answers = [[None if hit is None else (hit.value, hit.tier) for hit in map(c.get, queries)]
                   for c in caches]
        assert answers[0] == answers[1]
        assert bulk.metrics.puts == sequential.metrics.puts
        assert bulk.metrics.evictions == sequential.metrics.evictions
    finally:
        for cache in caches:
            cache.close()


def test_hints_round_trip_and_old_entries_have_none(tier: RedisTier, redis_url: str) -> None:
    tier.put(entry("e1", hints={"cost": 2.5, "entropy": 0.25}))
    tier.put(entry("e2"))
    redis.Redis.from_url(redis_url).hdel(tier.key("tenant-a", "e2"), "hints")  # pre-hints entry
    assert tier.get("tenant-a", "e1").hints == {"cost": 2.5, "entropy": 0.25}
    assert tier.get("tenant-a", "e2").hints == {}


def test_question_context_and_image_fingerprint_round_trip_and_old_entries_have_none(
        tier: RedisTier, redis_url: str) -> None:
    e = entry("e1")
    e.question, e.context = "yes, cancel it", (("user", "cancel Netflix"), ("assistant", "ok?"))
    e.context_vector = unit(5)
    e.image_fingerprint = bytes(range(256)) * 4
    tier.put(e)
    tier.put(entry("e2"))
    redis.Redis.from_url(redis_url).hdel(tier.key("tenant-a", "e2"), "question", "has_question",
                                         "context", "context_vector",
                                         "image_fingerprint")  # written before them
    back = tier.get("tenant-a", "e1")
    assert (back.question, back.context) == (e.question, e.context)
    assert np.array_equal(back.context_vector, e.context_vector)
    assert back.image_fingerprint == e.image_fingerprint
    old = tier.get("tenant-a", "e2")
    assert (old.question, old.context, old.context_vector, old.image_fingerprint) == \
        (None, (), None, None)


@pytest.mark.parametrize("policy, hint_a, hint_b", [
    ("value-per-byte", {"cost": 100.0}, {"cost": 1.0}),
    ("entropy-retention", {"entropy": 1.0}, {"entropy": 0.1})])
def test_a_redis_l3_evicts_by_its_own_recency_whatever_the_clients_policy(
        redis_url: str, prefix: str, policy: str, hint_a: dict, hint_b: dict, caplog) -> None:
    """The hints would rank B below A, but the server evicts its least recently used entry,
    A, as one view for every client: a client's policy applies to private stores only."""
    import mmcache
    from mmcache.lab.testing import FakeClock

    config = {"l1": {"enabled": False}, "l2": {"enabled": False},
              "l3": {"backend": "redis", "url": redis_url, "max_entries": 2, "policy": policy,
                     "options": {"prefix": prefix}}}
    queries = [mmcache.Query(embeddings={"text": unit(seed)}, scope="t") for seed in range(3)]
    with mmcache.TieredCache(config, clock=FakeClock()) as cache:
        a = cache.put(queries[0], "A", hints=hint_a)
        b = cache.put(queries[1], "B", hints=hint_b)
    with mmcache.TieredCache(config, clock=FakeClock()) as cache:
        c = cache.put(queries[2], "C")
        assert sorted(cache.tier("l3").ids()) == sorted([b, c]) and a not in cache.tier("l3")
    assert f"eviction policy {policy!r} applies to private stores only" in caplog.text


def test_the_log_is_compacted_and_a_reader_behind_it_resyncs(redis_url: str, prefix: str,
                                                             monkeypatch) -> None:
    from mmcache.tiers import redis as redis_tier

    monkeypatch.setattr(redis_tier, "COMPACT_EVERY", 10)
    monkeypatch.setattr(redis_tier, "COMPACT_LAG", 5)
    writer, reader = RedisTier(redis_url, prefix=prefix), RedisTier(redis_url, prefix=prefix)
    try:
        writer.put(entry("gone", seed=0))
        assert [c.entry_id for c in reader.search("tenant-a", {"text": unit(0)},
                                                  {"text": 0.99})] == ["gone"]
        writer.delete("gone")
        for i in range(50):
            writer.put(entry(f"e{i}", seed=i + 1))
            writer.delete(f"e{i}")
        logged = redis.Redis.from_url(redis_url).zcard(f"{prefix}:log")
        assert len(writer) == 0 and logged <= 10 + 5
        assert reader.search("tenant-a", {"text": unit(0)}, {"text": 0.99}) == []
        assert reader.usage() == (0, 0)
    finally:
        writer.close()
        reader.close()


@pytest.mark.parametrize("remove", ["delete", "evict"])
def test_a_key_redis_expired_leaves_every_client_once_it_is_uncounted(
        redis_url: str, prefix: str, remove: str) -> None:
    """Redis drops a key before its entry expires (its EXPIRE, or a volatile-* eviction); the
    next delete of it, or the put that picks it as the victim, logs its removal, so another
    client drops its copy at its next replay instead of keeping a ghost in its index."""
    capacity = Capacity(max_entries=1) if remove == "evict" else None
    writer = RedisTier(redis_url, capacity=capacity, prefix=prefix)
    reader = RedisTier(redis_url, prefix=prefix)
    try:
        writer.put(entry("ghost", seed=0, expires_at=time.time() + 3600.0))
        assert [c.entry_id for c in reader.search("tenant-a", {"text": unit(0)},
                                                  {"text": 0.99})] == ["ghost"]
        client = redis.Redis.from_url(redis_url)
        client.pexpireat(writer.key("tenant-a", "ghost"), 1)  # expired: Redis drops it
        assert not client.exists(writer.key("tenant-a", "ghost"))
        if remove == "delete":
            writer.delete("ghost")
        else:
            writer.put(entry("next", seed=1))
        assert reader.search("tenant-a", {"text": unit(0)}, {"text": 0.99}) == []
        assert "ghost" not in reader.ids()
        assert reader.usage() == ((1, 100) if remove == "evict" else (0, 0))
    finally:
        writer.close()
        reader.close()


def test_an_entry_redis_expired_under_two_caches_leaves_both_once_invalidated(
        redis_url: str, prefix: str, monkeypatch) -> None:
    """Two caches on one server, a short TTL: Redis drops the key by its EXPIRE (by the
    server's clock) while both caches' clocks still count the entry as live, so each holds it
    in its L3 index; the writer's invalidation, which finds the key gone, logs the removal, so
    the reader drops its copy at its next replay (here a get of another query; a get of the
    same one would find the key gone and drop it by itself)."""
    import mmcache
    from mmcache.lab.testing import FakeClock
    from mmcache.tiers import store

    monkeypatch.setattr(store, "SWEEP_EVERY_S", 0.05)  # the key outlives the entry by this
    config = {"l1": {"enabled": False}, "l2": {"enabled": False},
              "l3": {"backend": "redis", "url": redis_url, "options": {"prefix": prefix}}}
    query = mmcache.Query(embeddings={"text": unit(5)}, scope="t")
    with mmcache.TieredCache(config, clock=FakeClock()) as writer, \
            mmcache.TieredCache(config, clock=FakeClock()) as reader:
        entry_id = writer.put(query, "soon gone", ttl=0.05)
        assert reader.get(query).value == "soon gone"
        key = writer.tier("l3").key("t", entry_id)
        client = redis.Redis.from_url(redis_url)
        deadline = time.monotonic() + 10.0
        while client.exists(key) and time.monotonic() < deadline:
            time.sleep(0.02)
        assert not client.exists(key)
        assert entry_id in reader.tier("l3").ids()   # a ghost: the reader's clock has not moved
        writer.invalidate(query)
        assert reader.get(mmcache.Query(embeddings={"text": unit(6)}, scope="t")) is None
        assert entry_id not in reader.tier("l3").ids() and reader.tier("l3").usage() == (0, 0)
