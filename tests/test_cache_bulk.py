"""``TieredCache.put_many``: the same result as one ``put`` per pair, or nothing at all.

Property: on two fresh caches fed the same history, ``put_many(batch)`` and a ``put``
for each pair of the batch leave the same ids in every tier, the same usage, the
same metrics counters and the same answers to ``get`` (each the latest value put
for its entry), including when small capacities force evictions inside the batch,
ids repeat, entries too large for L1 replace smaller ones and items carry policy
hints (``cost``, ``entropy``) that the hint-aware policies rank by. A bad item anywhere
in a batch raises its typed error naming the item's index and changes nothing.
"""

from __future__ import annotations

import sqlite3
import tempfile
import time
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

import mmcache
from mmcache.errors import InvalidEmbeddingError, InvalidInputError, SerializationError
from mmcache.inputs import prepare
from mmcache.lab.testing import FakeClock
from mmcache.types import Query

from cache_helpers import snapshot

DIM = 8
SCOPES = ("tenant-a", "tenant-b")
KEYS = 10
POLICIES = ("lru", "fifo", "lfu", "s3fifo", "gdsf", "arc", "value-per-byte",
            "entropy-retention", "hotness-freshness")
VECTORS = np.random.default_rng(0).standard_normal((KEYS, DIM)).astype(np.float32)
VECTORS /= np.linalg.norm(VECTORS, axis=1, keepdims=True)


def query(key: int, scope: int = 0) -> Query:
    return Query(embeddings={"text": VECTORS[key]}, scope=SCOPES[scope])


def config(policy: str, l3_path: Path | None) -> dict:
    """Small capacities: L1 holds 3 entries of at most 150 bytes, L2 5, L3 7."""
    tiers = {"l1": {"max_entries": 3, "max_bytes": 150, "policy": policy},
             "l2": {"max_entries": 5, "max_bytes": 700, "policy": policy, "index": "flat"}}
    if l3_path is not None:
        tiers["l3"] = {"backend": "sqlite", "path": str(l3_path), "max_entries": 7,
                       "max_bytes": 1200, "policy": policy}
    return tiers


def state(cache: mmcache.TieredCache) -> tuple:
    """What put_many must leave exactly as sequential puts do."""
    metrics = cache.metrics
    return (cache.usage(), {t.name: sorted((e.entry_id, sorted(e.hints.items()))
                                           for e in t.scan()) for t in cache.tiers},
            dict(metrics.puts), dict(metrics.evictions))


def answers(cache: mmcache.TieredCache) -> list:
    """``get`` of every possible query, in a fixed order (gets promote and touch)."""
    out = []
    for scope in range(len(SCOPES)):
        for key in range(KEYS):
            hit = cache.get(query(key, scope))
            out.append(None if hit is None else (hit.value, hit.tier, hit.entry_id))
    return out


hints = st.one_of(st.none(), st.fixed_dictionaries(
    {}, optional={"cost": st.sampled_from([0.5, 1.0, 40.0]),
                  "entropy": st.sampled_from([0.0, 0.2, 1.5])}))
items = st.lists(st.tuples(st.integers(0, KEYS - 1), st.integers(0, len(SCOPES) - 1),
                           st.integers(0, 160), hints), max_size=14)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@example(policy="lru", with_l3=True, history=[(0, 0, 0, None)],
         batch=[(0, 0, 130, None)])  # too big for L1
@example(policy="lru", with_l3=True, history=[(1, 0, 0, None), (2, 1, 50, None)],
         batch=[(3, 0, 100, None), (1, 0, 20, None), (4, 1, 160, None), (3, 0, 0, None),
                (5, 0, 90, None), (1, 0, 10, None)])
@example(policy="value-per-byte", with_l3=True, history=[(1, 0, 0, {"cost": 40.0})],
         batch=[(2, 0, 10, {"cost": 0.5}), (3, 0, 10, None), (1, 0, 5, {"cost": 0.5}),
                (4, 0, 10, {"cost": 40.0})])
@given(policy=st.sampled_from(POLICIES), with_l3=st.booleans(), history=items, batch=items)
def test_put_many_equals_one_put_each(policy: str, with_l3: bool, history: list,
                                      batch: list) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        caches = [mmcache.TieredCache(config(policy, Path(tmp) / f"{name}.db" if with_l3
                                             else None), clock=FakeClock())
                  for name in ("sequential", "bulk")]
        sequential, bulk = caches
        pairs = [(query(k, s), "v" * n, h) for k, s, n, h in batch]
        for cache in caches:
            for k, s, n, h in history:
                cache.put(query(k, s), f"old-{k}-" + "h" * n, hints=h)
        ids = [sequential.put(q, v, hints=h) for q, v, h in pairs]
        assert bulk.put_many([q for q, _, _ in pairs], [v for _, v, _ in pairs],
                             hints=[h for _, _, h in pairs]) == ids
        assert state(bulk) == state(sequential)
        got = answers(bulk)
        assert got == answers(sequential)
        assert state(bulk) == state(sequential)
        latest = {prepare(query(k, s), {}).key: f"old-{k}-" + "h" * n for k, s, n, _ in history}
        latest.update(zip(ids, (v for _, v, _ in pairs)))
        assert all(hit is None or hit[0] == latest[hit[2]] for hit in got)  # never an old value
        for cache in caches:
            cache.close()


@pytest.fixture
def cache(tmp_path):
    c = mmcache.TieredCache(config("lru", tmp_path / "c.db"))
    c.put_many([query(0), query(1, 1)], ["kept", {"v": 1}])
    yield c
    c.close()


def sqlite_rows(cache: mmcache.TieredCache) -> list:
    with sqlite3.connect(cache.tier("l3").path) as db:
        return sorted(db.execute("SELECT entry_id, value FROM entries").fetchall())


BAD_ITEMS = {
    "nan embedding": (Query(embeddings={"text": np.full(DIM, np.nan, np.float32)},
                            scope="s"), "x", InvalidEmbeddingError),
    "wrong dimension": (Query(embeddings={"text": np.ones(DIM + 1, np.float32)}, scope="s"),
                        "x", InvalidEmbeddingError),
    "unserialisable value": (query(5), {"a": {1, 2}}, SerializationError),
    "unserialisable ground truth": (Query(embeddings={"text": VECTORS[5]}, scope="s",
                                          ground_truth=object()), "x", SerializationError),
    "larger than every tier": (query(5), "x" * 5000, InvalidInputError),
}


@pytest.mark.parametrize("case", sorted(BAD_ITEMS))
def test_bad_item_in_the_middle_changes_nothing(cache, case: str) -> None:
    bad_query, bad_value, error = BAD_ITEMS[case]
    before, rows = (snapshot(cache), state(cache)), sqlite_rows(cache)
    good = [query(2), query(3), query(4)]
    with pytest.raises(error, match="put_many item 2: "):
        cache.put_many([*good[:2], bad_query, good[2]], ["a", "b", bad_value, "d"])
    assert (snapshot(cache), state(cache)) == before
    assert sqlite_rows(cache) == rows
    assert not any(cache.guard.might_contain(prepare(q, {}).key) for q in good)


def test_a_dimension_set_earlier_in_the_batch_binds_later_items(tmp_path) -> None:
    cache = mmcache.TieredCache({"l2": {"index": "flat"}})
    with pytest.raises(InvalidEmbeddingError, match="put_many item 1: "):
        cache.put_many([Query(embeddings={"image": np.ones(4, np.float32)}, scope="s"),
                        Query(embeddings={"image": np.ones(6, np.float32)}, scope="s")],
                       ["four", "six"])
    assert cache.usage() == {"l1": (0, 0), "l2": (0, 0)}


def test_bad_arguments_are_rejected_before_anything(cache) -> None:
    before = snapshot(cache), state(cache)
    with pytest.raises(InvalidInputError, match="2 queries but 1 values"):
        cache.put_many([query(2), query(3)], ["a"])
    with pytest.raises(InvalidInputError, match="ttl"):
        cache.put_many([query(2)], ["a"], ttl=-1)
    assert (snapshot(cache), state(cache)) == before
    assert cache.put_many([], []) == []


def test_guard_learns_every_key_of_a_batch(cache) -> None:
    ids = cache.put_many([query(6), query(7)], ["six", "seven"])
    assert all(cache.guard.might_contain(i) for i in ids)
    assert cache.get(query(7)).value == "seven"


def test_put_many_leaves_the_build_to_the_builder_and_a_covered_tier_builds_nothing(
        tmp_path: Path) -> None:
    """After a bulk load L2's vectors wait in its backlog (searched exactly, built in the
    background); L3, covered by L2, stays exact and builds no ANN index until an eviction
    from L2 uncovers it."""
    rng = np.random.default_rng(1)
    vectors = rng.standard_normal((40, DIM)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    settings_ = {"l2": {"ann_min_size": 8},
                 "l3": {"backend": "sqlite", "path": str(tmp_path / "l3.db")}}
    with mmcache.TieredCache(settings_) as cache:
        cache.put_many([Query(text=f"q{i}", embeddings={"text": v}, scope="s")
                        for i, v in enumerate(vectors)], [f"a{i}" for i in range(len(vectors))])
        scope = prepare(Query(embeddings={"text": vectors[0]}, scope="s"), {}).scope
        l2, l3 = (cache.tier(name).index.index(scope, "text") for name in ("l2", "l3"))
        assert l2.uses_ann and l2.pending == len(vectors)
        assert not l3.uses_ann and len(l3) == len(vectors)
        hit = cache.get(Query(embeddings={"text": vectors[3]}, scope="s"))
        assert hit is not None and hit.value == "a3"
        cache.evict("l2")
        assert l3.uses_ann and l3.pending == len(vectors)


def test_a_lookup_after_many_single_puts_inserts_nothing_into_the_ann_index() -> None:
    """Single puts leave a backlog outside the ANN index (a builder thread inserts it once it
    passes ``max_backlog``, then idles); a lookup only searches, so it never pays for a build."""
    rng = np.random.default_rng(2)
    vectors = rng.standard_normal((1100, DIM)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    with mmcache.TieredCache({"l2": {"ann_min_size": 8}}) as cache:
        for i, v in enumerate(vectors):
            cache.put(Query(embeddings={"text": v}, scope="s"), f"a{i}")
        scope = prepare(Query(embeddings={"text": vectors[0]}, scope="s"), {}).scope
        l2 = cache.tier("l2").index.index(scope, "text")
        limit = l2.spec.max_backlog
        deadline = time.monotonic() + 60
        while l2.pending > limit and time.monotonic() < deadline:  # a batch may still build
            time.sleep(0.01)
        assert l2.uses_ann and l2._ann.ntotal > 0 and l2.pending <= limit < len(vectors)
        before = (l2._ann.ntotal, l2.pending)
        for i in (0, 500, 1099):
            turned = vectors[i] + 0.01 * vectors[(i + 1) % len(vectors)]
            hit = cache.get(Query(embeddings={"text": turned / np.linalg.norm(turned)},
                                  scope="s"))
            assert hit is not None and hit.value == f"a{i}"
        assert (l2._ann.ntotal, l2.pending) == before
