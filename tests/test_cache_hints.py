"""Policy hints inside a real ``TieredCache``: ``now`` from its clock, ``cost`` and ``entropy``
from ``put(hints=...)``, kept across a reopen of the SQLite L3.

Each ranking case is built so that the order the hint implies differs from the one
the policy falls back to without it (call counter, cost 1, plain LRU).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

import mmcache
from mmcache.errors import InvalidInputError
from mmcache.inputs import prepare
from mmcache.policies import LRU
from mmcache.lab.testing import FakeClock
from mmcache.tiers import Capacity, MemoryTier, SQLiteTier
from mmcache.types import Entry, Query

from cache_helpers import snapshot

DIM = 8
VECTORS = np.random.default_rng(3).standard_normal((6, DIM)).astype(np.float32)


def query(key: int) -> Query:
    return Query(embeddings={"text": VECTORS[key]}, scope="s")


def l1_only(policy: str, max_entries: int = 2, **options: Any) -> dict:
    return {"l1": {"max_entries": max_entries, "policy": policy, "policy_options": options},
            "l2": {"enabled": False}}


def cached(cache: mmcache.TieredCache, *keys: int) -> list[bool]:
    """Whether the first tier holds each key (read without touching its policy)."""
    held = set(cache.tiers[0].ids())
    return [prepare(query(k), {}).key in held for k in keys]


@pytest.mark.parametrize("seconds_between, evicted", [(90.0, "old hot"), (0.0, "young cold")])
def test_hotness_freshness_ages_by_the_cache_clock_not_by_calls(seconds_between, evicted):
    """A is put and hit (hotter), B is put later; under pressure the score decides.

    Same calls either way: only the clock differs. 90 s into a 100 s window A's
    freshness is at its floor (score 0.6·0.396 + 0.4·0.1 < B's 0.6·0.2 + 0.4), so A
    goes; with no time passing A is as fresh as B and hotter, so B goes. A call
    counter would see both cases as the second.
    """
    clock = FakeClock()
    cache = mmcache.TieredCache(l1_only("hotness-freshness", window=100), clock=clock)
    cache.put(query(0), "A")
    assert cache.get(query(0)).value == "A"
    clock.advance(seconds_between)
    cache.put(query(1), "B")
    cache.put(query(2), "C")
    expected = [False, True] if evicted == "old hot" else [True, False]
    assert cached(cache, 0, 1) == expected and cached(cache, 2) == [True]


@pytest.mark.parametrize("policy, hints, kept", [
    ("lru", {"cost": 100.0}, False),              # LRU ignores the cost: A is oldest
    ("value-per-byte", {}, False),                # no hint: every cost is 1, oldest goes
    ("value-per-byte", {"cost": 100.0}, True)])   # A saves 100× more per byte: B goes
def test_value_per_byte_keeps_the_costly_entry(policy, hints, kept):
    cache = mmcache.TieredCache(l1_only(policy), clock=FakeClock())
    cache.put(query(0), "A", hints=hints)
    cache.put(query(1), "B", hints={"cost": 1.0})
    cache.put(query(2), "C", hints={"cost": 1.0})
    assert cached(cache, 0, 1, 2) == [kept, not kept, True]


@pytest.mark.parametrize("policy, entropy, a_kept", [
    ("lru", 0.1, True),                     # A was hit last: B is least recently used
    ("entropy-retention", 1.0, True),       # both normal priority: LRU order
    ("entropy-retention", 0.1, False)])     # A's low entropy makes it go first
def test_entropy_retention_uses_the_entropy_hint(policy, entropy, a_kept):
    cache = mmcache.TieredCache(l1_only(policy), clock=FakeClock())
    cache.put(query(0), "A", hints={"entropy": entropy})
    cache.put(query(1), "B", hints={"entropy": 1.0})
    assert cache.get(query(0)).value == "A"
    cache.put(query(2), "C", hints={"entropy": 1.0})
    assert cached(cache, 0, 1) == [a_kept, not a_kept]


def sqlite_only(path: Path, policy: str) -> dict:
    return {"l1": {"enabled": False}, "l2": {"enabled": False},
            "l3": {"backend": "sqlite", "path": str(path), "max_entries": 2, "policy": policy}}


@pytest.mark.parametrize("policy, hint_a, hint_b", [
    ("value-per-byte", {"cost": 100.0}, {"cost": 1.0}),
    ("entropy-retention", {"entropy": 1.0}, {"entropy": 0.1})])
def test_hints_survive_close_and_reopen_of_a_sqlite_l3(tmp_path, policy, hint_a, hint_b):
    """Reopened, the store ranks B below A as before; without its hints the oldest (A)
    would go."""
    with mmcache.TieredCache(sqlite_only(tmp_path / "l3.db", policy), clock=FakeClock()) as c:
        ids = [c.put(query(0), "A", hints=hint_a), c.put(query(1), "B", hints=hint_b)]
    with mmcache.TieredCache(sqlite_only(tmp_path / "l3.db", policy), clock=FakeClock()) as c:
        c.put(query(2), "C")
        assert cached(c, 0, 1, 2) == [True, False, True]
        assert {e.entry_id: e.hints for e in c.tier("l3").scan()}[ids[0]] == hint_a


class Recording(LRU):
    """LRU that records the hints of every call."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[tuple[str, str, dict]] = []

    def on_miss(self, key, size, **hints):
        self.calls.append(("on_miss", key, hints))
        return super().on_miss(key, size, **hints)

    def insert(self, key, size, **hints):
        self.calls.append(("insert", key, hints))
        super().insert(key, size, **hints)

    def access(self, key, **hints):
        self.calls.append(("access", key, hints))
        super().access(key, **hints)


def entry(entry_id: str, hints: dict, created_at: float = 5.0) -> Entry:
    return Entry(entry_id, "s", entry_id, "v", {"text": VECTORS[0]}, 10, created_at,
                 hints=hints)


@pytest.mark.parametrize("make", [lambda p, policy: MemoryTier(Capacity(), policy),
                                  lambda p, policy: SQLiteTier(p / "l3.db", Capacity(), policy)])
def test_tiers_stamp_every_policy_call_with_their_clock_and_the_entry_hints(tmp_path, make):
    policy = Recording()
    tier = make(tmp_path, policy)
    tier.clock = FakeClock(70.0)
    tier.put(entry("e", {"cost": 3.0, "entropy": 0.5}))
    tier.clock.advance(5)
    tier.get("s", "e")
    hints = {"cost": 3.0, "entropy": 0.5}
    assert policy.calls == [("on_miss", "e", {"now": 70.0, **hints}),
                            ("insert", "e", {"now": 70.0, **hints}),
                            ("access", "e", {"now": 75.0, **hints})]
    tier.close()


def test_a_reopened_sqlite_tier_adopts_entries_as_used_at_their_put(tmp_path):
    tier = SQLiteTier(tmp_path / "l3.db")
    tier.put_many([entry("a", {"cost": 2.0}, created_at=5.0), entry("b", {}, created_at=9.0)])
    tier.close()
    policy = Recording()
    SQLiteTier(tmp_path / "l3.db", Capacity(), policy).close()
    assert [(name, key, hints) for name, key, hints in policy.calls if name == "insert"] == \
        [("insert", "a", {"now": 5.0, "cost": 2.0}), ("insert", "b", {"now": 9.0})]


BAD_HINTS = {
    "unknown name": ({"latency": 1.0}, "unknown hint 'latency'"),
    "zero cost": ({"cost": 0}, "hint 'cost' must be a finite number > 0"),
    "nan cost": ({"cost": float("nan")}, "hint 'cost'"),
    "infinite entropy": ({"entropy": float("inf")}, "hint 'entropy'"),
    "negative entropy": ({"entropy": -0.5}, "hint 'entropy' must be a finite number >= 0"),
    "bool cost": ({"cost": True}, "hint 'cost'"),
    "text cost": ({"cost": "2"}, "hint 'cost'"),
    "not a mapping": ([("cost", 1.0)], "hints must be a mapping"),
}


@pytest.fixture
def filled(tmp_path):
    cache = mmcache.TieredCache({"l1": {"max_entries": 2, "policy": "value-per-byte"},
                                 "l2": {"index": "flat"},
                                 "l3": {"backend": "sqlite", "path": str(tmp_path / "c.db")}},
                                clock=FakeClock())
    cache.put(query(0), "A", hints={"cost": 5.0})
    yield cache
    cache.close()


def state(cache: mmcache.TieredCache) -> Any:
    hints = {t.name: sorted((e.entry_id, sorted(e.hints.items())) for e in t.scan())
             for t in cache.tiers}
    return snapshot(cache), hints, dict(cache.metrics.puts)


@pytest.mark.parametrize("case", sorted(BAD_HINTS))
def test_bad_hints_change_nothing(filled, case):
    bad, message = BAD_HINTS[case]
    before = state(filled)
    with pytest.raises(InvalidInputError, match=message):
        filled.put(query(1), "B", hints=bad)
    with pytest.raises(InvalidInputError, match=f"put_many item 1: {message}"):
        filled.put_many([query(2), query(1)], ["C", "B"], hints=[{"cost": 1.0}, bad])
    assert state(filled) == before


def test_put_many_hints_must_be_one_mapping_per_item(filled):
    before = state(filled)
    with pytest.raises(InvalidInputError, match="2 queries but 1 hints"):
        filled.put_many([query(1), query(2)], ["B", "C"], hints=[{"cost": 1.0}])
    with pytest.raises(InvalidInputError, match="sequence of mappings, one per item"):
        filled.put_many([query(1)], ["B"], hints={"cost": 1.0})
    assert state(filled) == before
    filled.put_many([query(1), query(2)], ["B", "C"], hints=[None, {"entropy": 0.2}])
    assert [e.hints for e in filled.tier("l3").scan()] == [{"cost": 5.0}, {}, {"entropy": 0.2}]
