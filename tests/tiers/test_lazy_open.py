"""Opening a store reads its live entries' metadata and vectors, not their stored values: a
value is read when it is served, at the version the store holds then (issue 26, item 4)."""

from __future__ import annotations

import itertools
import time
from typing import Callable, Iterator

import numpy as np
import pytest

import mmcache.tiers.redis
import mmcache.tiers.sqlite
from mmcache.lab.testing import unit
from mmcache.tiers import SQLiteTier
from mmcache.tiers.redis import RedisTier
from mmcache.tiers.store import StoreTier
from mmcache.types import Entry

DIM = 8
ENTRIES = 40
VALUE_BYTES = 64 * 1024
_prefixes = itertools.count()


def big_entry(eid: str, vec: np.ndarray, fill: bytes = b"v") -> Entry:
    """An entry whose stored value is :data:`VALUE_BYTES` bytes long."""
    return Entry(eid, "s", eid, fill * VALUE_BYTES, {"text": vec}, VALUE_BYTES, 1.0, None)


@pytest.fixture(params=["sqlite", "redis", "redis-cluster"])
def open_tier(request, tmp_path) -> Iterator[Callable[[], StoreTier]]:
    """``open_tier()``: a new shared tier over one store of the backend (each closed after)."""
    opened: list[StoreTier] = []
    if request.param == "sqlite":
        def make() -> StoreTier:
            return SQLiteTier(tmp_path / "l3.db", shared=True)
    else:
        cluster = request.param == "redis-cluster"
        url = request.getfixturevalue("redis_cluster_url" if cluster else "redis_url")
        prefix = f"lazy{next(_prefixes)}-{time.monotonic_ns()}"

        def make() -> StoreTier:
            return RedisTier(url, prefix=prefix, cluster=cluster)

    def tracked() -> StoreTier:
        opened.append(make())
        return opened[-1]
    yield tracked
    for tier in opened:
        tier.close()


@pytest.fixture
def decoded(monkeypatch) -> list[int]:
    """The length of every stored value decoded (by either backend) while the test runs."""
    lengths: list[int] = []
    for module in (mmcache.tiers.sqlite, mmcache.tiers.redis):
        def spy(tag, payload, _decode=module.decode_value):
            lengths.append(len(payload))
            return _decode(tag, payload)
        monkeypatch.setattr(module, "decode_value", spy)
    return lengths


def filled(open_tier: Callable[[], StoreTier]) -> StoreTier:
    """A tier that wrote :data:`ENTRIES` large entries ``e0``… into its store."""
    rng = np.random.default_rng(0)
    writer = open_tier()
    writer.put_many([big_entry(f"e{i}", unit(rng, DIM)) for i in range(ENTRIES)])
    return writer


def test_opening_a_store_reads_no_stored_value(open_tier, decoded) -> None:
    filled(open_tier)
    decoded.clear()
    reader = open_tier()
    assert sorted(reader.ids()) == sorted(f"e{i}" for i in range(ENTRIES))
    assert reader.dims() == {"text": DIM}
    assert decoded == []
    assert reader.get("s", "e3").value == b"v" * VALUE_BYTES
    assert decoded == [VALUE_BYTES]


def test_replaying_others_writes_reads_no_stored_value(open_tier, decoded) -> None:
    writer = filled(open_tier)
    reader = open_tier()
    writer.put(big_entry("late", unit(np.random.default_rng(2), DIM)))
    decoded.clear()
    reader.refresh()
    assert reader.known_version("late") == writer.known_version("late")
    assert decoded == []


def test_a_value_rewritten_after_open_is_served_at_its_new_version(open_tier) -> None:
    writer = filled(open_tier)
    reader = open_tier()
    indexed = reader.known_version("e1")
    writer.put(big_entry("e1", unit(np.random.default_rng(1), DIM), b"w"))
    served = reader.get("s", "e1")
    assert served.value == b"w" * VALUE_BYTES
    assert served.version == writer.known_version("e1") != indexed
    assert reader.known_version("e1") == served.version


def test_a_value_deleted_after_open_is_not_served(open_tier) -> None:
    writer = filled(open_tier)
    reader = open_tier()
    assert writer.delete("e2")
    assert reader.get("s", "e2") is None and reader.known_version("e2") is None
