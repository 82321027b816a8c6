"""Capacity of a shared store is enforced by the store, atomically with each write, by one
recency every client shares (a shared SQLite file, one Redis server).

Real processes put into one store at once: it ends exactly full, never over its capacity
after a committed put, holding the most recently used entries, and every eviction is
reported to the writer that caused it; another client stops serving an evicted entry.
"""

from __future__ import annotations

import multiprocessing as mp
import time
from typing import Iterator

import numpy as np
import pytest

from mmcache.lab.testing import started_together
from mmcache.tiers import Capacity, SQLiteTier
from mmcache.tiers.redis import RedisTier
from mmcache.tiers.store import StoreTier
from mmcache.types import Entry

WORKERS = 3
PUTS = 30
DIM = 8
LIMIT = 10
SIZE = 100


def unit(seed: int) -> np.ndarray:
    vec = np.random.default_rng(seed).standard_normal(DIM).astype(np.float32)
    return vec / np.linalg.norm(vec)


def entry(entry_id: str, seed: int, size: int = SIZE) -> Entry:
    return Entry(entry_id, "s", entry_id, f"value of {entry_id}", {"text": unit(seed)}, size,
                 1.0, None)


def open_tier(where: dict, capacity: Capacity | None) -> StoreTier:
    """A tier over the shared store ``where`` names (``{"path": ...}`` or ``{"url", "prefix"}``)."""
    if "path" in where:
        return SQLiteTier(where["path"], capacity, shared=True)
    return RedisTier(where["url"], capacity, prefix=where["prefix"])


def size_of(worker: int, i: int) -> int:
    """Sizes vary, so a byte limit is met by a varying number of entries."""
    return 50 + (7 * worker + 13 * i) % 101


def putter(where: dict, capacity: Capacity, worker: int, start, conn) -> None:
    """Once ``start`` is set, put :data:`PUTS` entries; send back, per put, the entry's id,
    version and size, the store's count after it and the ids it evicted."""
    tier = open_tier(where, capacity)
    try:
        start.wait()
        done = []
        for i in range(PUTS):
            e = entry(f"w{worker}-{i}", 1000 * worker + i, size_of(worker, i))
            evicted = tier.put(e)
            done.append((e.entry_id, e.version, e.size, len(tier), evicted))
        conn.send(done)
    finally:
        tier.close()


@pytest.fixture
def store(request, tmp_path, redis_url) -> dict:
    if request.param == "sqlite":
        return {"path": str(tmp_path / "shared.db")}
    return {"url": redis_url, "prefix": f"cap-{time.monotonic_ns()}"}


def counted_usage(tier: StoreTier) -> tuple[int, int]:
    """The live entries and bytes as the store counts them for its capacity."""
    if isinstance(tier, SQLiteTier):
        return tier.store._usage()
    db, prefix = tier.store._db, tier.prefix
    return int(db.zcard(f"{prefix}:recency")), int(db.get(f"{prefix}:bytes"))


def longest_suffix_within(puts: list[tuple[str, int, int]], capacity: Capacity) -> set[str]:
    """The ids of the most recent of ``puts`` (id, version, size) that fit ``capacity``
    together, newest first: what a store evicting its least recently used keeps."""
    kept, nbytes = set(), 0
    for entry_id, _, size in sorted(puts, key=lambda p: -p[1]):
        if capacity.exceeded(len(kept) + 1, nbytes + size):
            break
        kept.add(entry_id)
        nbytes += size
    return kept


@pytest.mark.parametrize("store", ["sqlite", "redis"], indirect=True)
@pytest.mark.parametrize("capacity", [Capacity(max_entries=LIMIT), Capacity(max_bytes=LIMIT * SIZE)],
                         ids=["max_entries", "max_bytes"])
def test_processes_putting_at_once_leave_the_store_exactly_full_of_the_most_recent(
        store: dict, capacity: Capacity) -> None:
    open_tier(store, capacity).close()  # records the capacity
    ctx = mp.get_context("forkserver")
    ctx.set_forkserver_preload(["mmcache.tiers.sqlite", "mmcache.tiers.redis"])
    results = started_together(ctx, putter, [(store, capacity, w) for w in range(WORKERS)])
    puts = [(entry_id, version, size) for done in results for entry_id, version, size, _, _ in done]
    observer = open_tier(store, None)
    try:
        live = {e.entry_id: e.size for e in observer.scan()}
        assert set(live) == longest_suffix_within(puts, capacity)
        assert not capacity.exceeded(len(live), sum(live.values()))
        assert len(live) == (capacity.max_entries or len(live))   # exactly full, not fewer
        assert counted_usage(observer) == (len(live), sum(live.values()))
        assert all(count <= (capacity.max_entries or count)
                   for done in results for _, _, _, count, _ in done)
        evictions = [victim for done in results for *_, evicted in done for victim in evicted]
        assert len(evictions) == len(puts) - len(live)
        assert set(evictions) == {entry_id for entry_id, _, _ in puts} - set(live)
    finally:
        observer.close()


@pytest.fixture(params=["sqlite", "redis"])
def two_clients(request, tmp_path, redis_url) -> Iterator[tuple[StoreTier, StoreTier]]:
    where = {"path": str(tmp_path / "shared.db")} if request.param == "sqlite" else \
        {"url": redis_url, "prefix": f"cap2-{time.monotonic_ns()}"}
    first = open_tier(where, Capacity(max_entries=3))
    second = open_tier(where, None)
    yield first, second
    first.close()
    second.close()


def test_the_store_evicts_by_its_own_recency_and_other_clients_drop_the_entry(
        two_clients: tuple[StoreTier, StoreTier]) -> None:
    a, b = two_clients
    for i in range(3):
        a.put(entry(f"e{i}", i))
    assert b.get("s", "e0").value == "value of e0"   # the store learns of it with b's write
    assert b.put(entry("b0", 10)) == ["e1"]           # e1 is the least recently used now
    assert a.get("s", "e1") is None
    assert a.search("s", {"text": unit(1)}, {"text": 0.99}) == []
    assert sorted(a.ids()) == sorted(b.ids()) == ["b0", "e0", "e2"]
    assert a.put(entry("a0", 11)) == ["e2"]
    assert b.search("s", {"text": unit(2)}, {"text": 0.99}) == []
    assert len(a) == len(b) == 3 and a.usage() == b.usage() == (3, 3 * SIZE)


def test_a_batch_over_capacity_evicts_as_one_put_each_would(
        two_clients: tuple[StoreTier, StoreTier]) -> None:
    a, b = two_clients
    order = ["e0", "e1", "e2", "e1", "e3", "e4", "e0", "e5"]
    evicted = a.put_many([entry(eid, i) for i, eid in enumerate(order)])
    assert evicted == ["e0", "e2", "e1", "e3"]
    assert sorted(a.ids()) == sorted(b.ids()) == ["e0", "e4", "e5"]
    assert b.get("s", "e0").value == "value of e0"


def test_served_gets_reach_the_store_after_a_batch_of_them(
        two_clients: tuple[StoreTier, StoreTier], monkeypatch) -> None:
    from mmcache.tiers import store as store_module

    monkeypatch.setattr(store_module, "TOUCH_BATCH", 2)
    a, b = two_clients
    for i in range(3):
        a.put(entry(f"e{i}", i))
    b.get("s", "e0")
    b.get("s", "e1")   # the second served get sends both, without a write of b's
    assert a.put(entry("a0", 10)) == ["e2"]


def test_a_private_store_keeps_evicting_by_its_own_policy(tmp_path) -> None:
    tier = SQLiteTier(tmp_path / "private.db", Capacity(max_entries=2), policy="fifo")
    try:
        tier.put(entry("e0", 0))
        tier.put(entry("e1", 1))
        tier.get("s", "e0")
        assert tier.put(entry("e2", 2)) == ["e0"]   # FIFO: the get does not save it
        assert sorted(tier.ids()) == ["e1", "e2"]
    finally:
        tier.close()


def another_client(tier: StoreTier) -> StoreTier:
    """One more client of the shared store ``tier`` is over."""
    if isinstance(tier, SQLiteTier):
        return open_tier({"path": str(tier.path)}, None)
    return open_tier({"url": tier.url, "prefix": tier.prefix}, None)


def test_a_client_that_closes_sends_the_gets_it_served_to_the_store_s_recency(
        two_clients: tuple[StoreTier, StoreTier]) -> None:
    a, _ = two_clients
    for i in range(3):
        a.put(entry(f"e{i}", i))
    reader = another_client(a)
    assert [reader.get("s", f"e{i}").value for i in (0, 1)] == ["value of e0", "value of e1"]
    reader.close()   # it never wrote: its two served gets go with its close
    assert a.put(entry("a0", 10)) == ["e2"]   # not e0, the least recently put
    assert sorted(a.ids()) == ["a0", "e0", "e1"]


def test_a_put_that_must_evict_purges_the_expired_entries_first(
        two_clients: tuple[StoreTier, StoreTier]) -> None:
    """An entry past its expiry is not the least recently used one; the put that needs room
    deletes it (as a sweep would, logged so every client drops it) instead of evicting a live
    entry."""
    a, b = two_clients
    a.put(entry("e0", 0))
    a.put(entry("e1", 1))
    expired = entry("old", 2)
    expired.expires_at = 5.0   # long past on this tier's clock
    a.put(expired)
    assert a.put(entry("a0", 10)) == []
    assert sorted(a.ids()) == sorted(b.ids()) == ["a0", "e0", "e1"]
    assert counted_usage(a) == (3, 3 * SIZE) and len(b) == 3
