"""L3 SQLite tier: round trips, reopen rebuilds the vector index, no pickle, sharing."""

from __future__ import annotations

import os
import sqlite3

import numpy as np
import pytest

from mmcache.errors import StorageError, StoreFullError
from mmcache.lab.testing import near, unit
from mmcache.tiers import Capacity, SQLiteTier
from mmcache.tiers import sqlite
from mmcache.tiers.sqlite import SCHEMA_VERSION
from mmcache.types import Entry

DIM = 16
#: Floors of a search for an entry's own vectors (entries have text and image, so must queries).
CLOSE = {"text": 0.99, "image": 0.99}


def entry(i: int, rng: np.random.Generator, scope: str = "s", value=None) -> Entry:
    return Entry(f"{scope}-{i}", scope, f"{scope}-{i}", {"i": i} if value is None else value,
                 {"text": unit(rng, DIM), "image": unit(rng, DIM)}, 100, 5.0 + i, 5e9 + i,
                 ground_truth=["label", i])


def test_round_trip_and_reopen(tmp_path):
    rng = np.random.default_rng(0)
    path = tmp_path / "l3.db"
    tier = SQLiteTier(path)
    entries = [entry(i, rng) for i in range(10)] + [entry(0, rng, scope="t", value=b"\x00raw")]
    for e in entries:
        tier.put(e)
    tier.close()
    tier = SQLiteTier(path)
    assert len(tier) == 11 and tier.integrity_check() == "ok"
    for e in entries:
        got = tier.get(e.scope, e.entry_id)
        assert (got.value, got.created_at, got.expires_at, got.ground_truth) == \
            (e.value, e.created_at, e.expires_at, e.ground_truth)
        assert all(np.array_equal(got.embeddings[m], e.embeddings[m]) for m in e.embeddings)
        cands = tier.search(e.scope, {"text": near(rng, e.embeddings["text"], 0.97),
                                      "image": e.embeddings["image"]}, {"text": 0.9, "image": 0.9})
        assert [c.entry_id for c in cands] == [e.entry_id]
    assert tier.get("t", "s-0") is None            # scope is part of the lookup
    assert tier.dims() == {"text": DIM, "image": DIM}


def test_values_are_tagged_json_or_bytes_never_pickle(tmp_path):
    rng = np.random.default_rng(1)
    tier = SQLiteTier(tmp_path / "l3.db")
    tier.put(entry(1, rng, value={"answer": [1, 2]}))
    tier.close()
    db = sqlite3.connect(tmp_path / "l3.db")
    tag, payload = db.execute("SELECT value_type, value FROM entries").fetchone()
    assert (tag, bytes(payload)) == ("json", b'{"answer":[1,2]}')
    blob, dim = db.execute("SELECT vector, dim FROM embeddings WHERE modality='text'").fetchone()
    assert len(blob) == 4 * dim == 4 * DIM
    db.execute("UPDATE entries SET value_type = 'pickle'")
    db.commit()
    db.close()
    reopened = SQLiteTier(tmp_path / "l3.db")
    assert reopened.get("s", "s-1") is None
    assert [reason for _, reason in reopened.store.quarantined()] == [
        f"stored value has unknown type tag 'pickle'"]
    reopened.close()


def test_capacity_evicts_in_the_file_and_on_reopen(tmp_path):
    rng = np.random.default_rng(2)
    tier = SQLiteTier(tmp_path / "l3.db", Capacity(max_entries=4))
    for i in range(7):
        tier.put(entry(i, rng))
    assert len(tier) == 4 and tier.usage() == (4, 400)
    tier.close()
    smaller = SQLiteTier(tmp_path / "l3.db", Capacity(max_entries=2))
    assert len(smaller) == 2 and smaller.usage()[0] == 2
    assert smaller.get("s", "s-6") is not None


def test_shared_store_sees_other_writers(tmp_path):
    rng = np.random.default_rng(3)
    reader = SQLiteTier(tmp_path / "l3.db", shared=True)
    writer = SQLiteTier(tmp_path / "l3.db", shared=True)
    e = entry(1, rng)
    writer.put(e)
    assert reader.get("s", "s-1").value == {"i": 1}
    cands = reader.search("s", e.embeddings, CLOSE)
    assert [c.entry_id for c in cands] == ["s-1"]
    writer.delete("s-1")
    assert reader.get("s", "s-1") is None
    assert reader.search("s", e.embeddings, CLOSE) == []


def test_bad_settings_and_unopenable_files(tmp_path):
    from mmcache.errors import ConfigError

    with pytest.raises(ConfigError, match="synchronous"):
        SQLiteTier(tmp_path / "x.db", synchronous="SOMETIMES")
    (tmp_path / "junk.db").write_bytes(b"this is not a database" * 100)
    with pytest.raises(StorageError):
        SQLiteTier(tmp_path / "junk.db")


def test_put_many_is_one_transaction_and_equals_one_put_each(tmp_path):
    rng = np.random.default_rng(7)
    batch = [entry(i % 6, rng, value={"v": i}) for i in range(10)]   # ids 0..3 twice
    tiers = [SQLiteTier(tmp_path / f"{name}.db", Capacity(max_entries=4))
             for name in ("sequential", "bulk")]
    sequential, bulk = tiers
    victims = [v for e in batch for v in sequential.put(e)]
    assert bulk.put_many(batch) == victims
    assert bulk.usage() == sequential.usage() == (4, 400)
    assert sorted(bulk.ids()) == sorted(sequential.ids()) == ["s-0", "s-1", "s-2", "s-3"]
    assert bulk.get("s", "s-2").value == {"v": 8}
    for tier in tiers:
        tier.close()
    reopened = SQLiteTier(tmp_path / "bulk.db", Capacity(max_entries=4))
    assert reopened.get("s", "s-3").value == {"v": 9}
    found = reopened.search("s", batch[9].embeddings, CLOSE)
    assert [c.entry_id for c in found] == ["s-3"]
    reopened.close()


def test_failed_put_many_restores_budget_file_and_index(tmp_path, monkeypatch):
    rng = np.random.default_rng(8)
    tier = SQLiteTier(tmp_path / "c.db", Capacity(max_entries=3))
    kept = [entry(i, rng) for i in range(3)]
    tier.put_many(kept)
    before = tier.usage(), sorted(tier.ids())

    class Broken:
        def __enter__(self):
            raise sqlite3.OperationalError("disk I/O error (simulated)")

        def __exit__(self, *exc):
            return False

    monkeypatch.setattr(tier.store, "_transaction", Broken)
    with pytest.raises(StorageError, match="L3 write .* failed"):
        tier.put_many([entry(i, rng) for i in range(1, 6)])
    monkeypatch.undo()
    assert (tier.usage(), sorted(tier.ids())) == before
    assert [c.entry_id for c in tier.search("s", kept[0].embeddings, CLOSE)] == ["s-0"]
    assert len(tier.put(entry(9, rng))) == 1 and len(tier) == 3   # the budget still evicts
    tier.close()


def test_failed_put_does_not_change_the_next_victim(tmp_path, monkeypatch):
    """The victims a failed write had chosen go back where they were, not to the MRU end."""
    rng = np.random.default_rng(11)
    tier = SQLiteTier(tmp_path / "c.db", Capacity(max_entries=3))
    tier.put_many([entry(i, rng) for i in range(3)])

    class Broken:
        def __enter__(self):
            raise sqlite3.OperationalError("disk I/O error (simulated)")

        def __exit__(self, *exc):
            return False

    monkeypatch.setattr(tier.store, "_transaction", Broken)
    with pytest.raises(StorageError):
        tier.put(entry(7, rng))
    monkeypatch.undo()
    assert [tier.evict() for _ in range(3)] == ["s-0", "s-1", "s-2"]
    tier.close()


SCHEMA_1 = """
CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE entries (
    entry_id TEXT PRIMARY KEY, scope TEXT NOT NULL, exact_key TEXT NOT NULL,
    value_type TEXT NOT NULL, value BLOB NOT NULL, size INTEGER NOT NULL,
    created_at REAL NOT NULL, expires_at REAL, ground_truth TEXT);
CREATE TABLE embeddings (
    entry_id TEXT NOT NULL REFERENCES entries(entry_id) ON DELETE CASCADE,
    modality TEXT NOT NULL, dim INTEGER NOT NULL, vector BLOB NOT NULL,
    PRIMARY KEY (entry_id, modality));
INSERT INTO meta VALUES ('schema_version', '1');
INSERT INTO entries VALUES ('s-1', 's', 's-1', 'str', X'6f6c64', 3, 1.0, NULL, NULL);
"""


def test_a_schema_1_file_gains_the_hints_column(tmp_path):
    path = tmp_path / "old.db"
    with sqlite3.connect(path) as db:
        db.executescript(SCHEMA_1)
    tier = SQLiteTier(path)
    old = tier.get("s", "s-1")
    assert (old.value, old.hints) == ("old", {})
    rng = np.random.default_rng(9)
    new = entry(2, rng)
    new.hints = {"cost": 4.0}
    tier.put(new)
    tier.close()
    reopened = SQLiteTier(path)
    assert reopened.get("s", "s-2").hints == {"cost": 4.0}
    assert reopened.store._db.execute("SELECT value FROM meta WHERE key = 'schema_version'"
                                      ).fetchone()[0] == SCHEMA_VERSION
    reopened.close()


SCHEMA_3_ROW = ("INSERT INTO entries (entry_id, scope, exact_key, value_type, value, size, "
                "created_at, version) VALUES ('s-1', 's', 's-1', 'str', X'6f6c64', 3, 1.0, 1)")


def _old_file(path, version: str, columns: str) -> None:
    """A schema-``version`` file (entries with ``columns`` after ground_truth) holding s-1."""
    with sqlite3.connect(path) as db:
        db.executescript(SCHEMA_1.replace("ground_truth TEXT);", f"ground_truth TEXT, {columns});")
                         .replace("'1');", f"'{version}');").split("INSERT INTO entries")[0])
        db.execute("CREATE TABLE log (seq INTEGER PRIMARY KEY AUTOINCREMENT, "
                   "entry_id TEXT NOT NULL UNIQUE)")
        db.execute(SCHEMA_3_ROW)
        db.execute("INSERT INTO log VALUES (1, 's-1')")


def test_a_schema_3_file_gains_question_and_context_and_keeps_its_entries(tmp_path):
    path = tmp_path / "v3.db"
    _old_file(path, "3", "hints TEXT, version INTEGER")
    tier = SQLiteTier(path)
    old = tier.get("s", "s-1")
    assert (old.value, old.question, old.context, old.context_vector) == ("old", None, (), None)
    rng = np.random.default_rng(3)
    new = entry(2, rng)
    new.question, new.context = "yes, cancel it", (("user", "cancel Netflix"),)
    new.context_vector = np.ones(4, np.float32) / 2
    tier.put(new)
    tier.close()
    back = SQLiteTier(path).get("s", "s-2")
    assert (back.question, back.context) == ("yes, cancel it", (("user", "cancel Netflix"),))
    assert np.array_equal(back.context_vector, new.context_vector)


def test_a_schema_4_file_gains_the_image_fingerprint_column(tmp_path):
    path = tmp_path / "v4.db"
    _old_file(path, "4", "hints TEXT, version INTEGER, question TEXT, context TEXT, "
              "context_vector BLOB")
    tier = SQLiteTier(path)
    assert (tier.get("s", "s-1").value, tier.get("s", "s-1").image_fingerprint) == ("old", None)
    new = entry(2, np.random.default_rng(4))
    new.image_fingerprint = bytes(range(256)) * 4
    tier.put(new)
    tier.close()
    reopened = SQLiteTier(path)
    assert reopened.get("s", "s-2").image_fingerprint == new.image_fingerprint
    assert reopened.store._db.execute("SELECT value FROM meta WHERE key = 'schema_version'"
                                      ).fetchone()[0] == SCHEMA_VERSION
    reopened.close()


@pytest.mark.parametrize("column, corrupt", [
    ("hints", "'[1, 2]'"), ("context", "'{not json'"), ("ground_truth", "'[1,'"),
    ("value", "CAST('{\"a\":' AS BLOB)"), ("created_at", "'yesterday'"),
])
def test_a_corrupt_row_is_quarantined_and_the_store_still_opens(tmp_path, caplog, column,
                                                                 corrupt):
    rng = np.random.default_rng(10)
    path = tmp_path / "l3.db"
    tier = SQLiteTier(path, shared=True)
    other = SQLiteTier(path, shared=True)
    tier.put_many([entry(i, rng, value={"i": i}) for i in range(3)])
    tier.store._db.execute(f"UPDATE entries SET value_type = 'json', {column} = {corrupt} "
                           "WHERE entry_id = 's-1'")
    assert tier.get("s", "s-1") is None                     # a miss, not an error
    assert "'s-1' cannot be read" in caplog.text
    tier.close()
    reopened = SQLiteTier(path, shared=True)                # opens, without the bad row
    assert len(reopened) == 2 and sorted(reopened.ids()) == ["s-0", "s-2"]
    assert [e for e, _ in reopened.store.quarantined()] == ["s-1"]
    assert "s-1" not in other                               # the removal reached the others
    for t in (reopened, other):
        t.close()


class _Rows(list):
    """Rows already fetched, read like a cursor."""

    def fetchone(self):
        return self[0] if self else None

    def fetchall(self):
        return list(self)


class _WriteBetweenSelects:
    """A connection that lets another connection commit after the first SELECT of a read."""

    def __init__(self, db: sqlite3.Connection, write) -> None:
        self._db, self._write = db, write

    def execute(self, sql: str, *args):
        cursor = self._db.execute(sql, *args)
        if sql.lstrip().startswith("SELECT") and self._write is not None:
            rows, write, self._write = _Rows(cursor.fetchall()), self._write, None
            write()
            return rows
        return cursor

    def __getattr__(self, name: str):
        return getattr(self._db, name)


@pytest.mark.parametrize("how", ["read", "fetch", "scan"])
def test_a_read_sees_one_write_not_parts_of_two(tmp_path, how):
    rng = np.random.default_rng(12)
    path = tmp_path / "l3.db"
    reader = SQLiteTier(path, shared=True)
    writer = SQLiteTier(path, shared=True)
    first = entry(1, rng, value="first")
    writer.put(first)
    second = entry(1, rng, value="second")   # the same id, new vectors
    reader.store._db = _WriteBetweenSelects(reader.store._db, lambda: writer.put(second))
    got = {"read": lambda: reader.store.read("s", "s-1"),
           "fetch": lambda: reader.store.fetch(["s-1"])[0],
           "scan": lambda: next(reader.store.scan())}[how]()
    expected = first if got.value == "first" else second
    assert all(np.array_equal(got.embeddings[m], expected.embeddings[m]) for m in CLOSE)
    reader.store._db = reader.store._db._db
    for t in (reader, writer):
        t.close()


def test_a_full_disk_is_a_store_full_error_and_keeps_nothing(tmp_path):
    rng = np.random.default_rng(13)
    tier = SQLiteTier(tmp_path / "l3.db")
    tier.put(entry(0, rng))
    pages = tier.store._db.execute("PRAGMA page_count").fetchone()[0]
    tier.store._db.execute(f"PRAGMA max_page_count = {pages + 2}")
    with pytest.raises(StoreFullError, match="full.*free disk space"):
        tier.put(entry(1, rng, value="x" * 1_000_000))
    assert sorted(tier.ids()) == ["s-0"] and len(tier) == 1 and tier.usage() == (1, 100)
    assert tier.integrity_check() == "ok"
    tier.store._db.execute("PRAGMA max_page_count = 1073741823")
    tier.put(entry(2, rng, value="x" * 1_000_000))          # room again: the store works
    assert tier.get("s", "s-2").value == "x" * 1_000_000
    tier.close()


def test_a_store_sqlite_cannot_keep_in_wal_mode_is_refused(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(StorageError, match="not WAL"):
        SQLiteTier(":memory:")


def test_store_files_are_readable_by_their_owner_only(tmp_path):
    old = os.umask(0o022)
    try:
        tier = SQLiteTier(tmp_path / "l3.db", shared=True)
        tier.put(entry(1, np.random.default_rng(14)))
        made = sorted(p.name for p in tmp_path.iterdir())
        assert made == ["l3.db", "l3.db-shm", "l3.db-wal", "l3.db.lock"]
        assert {p.name: oct(p.stat().st_mode & 0o777) for p in tmp_path.iterdir()} == \
            {name: "0o600" for name in made}
        tier.close()
    finally:
        os.umask(old)


def test_a_malformed_context_is_not_printed(tmp_path):
    tier = SQLiteTier(tmp_path / "l3.db")
    tier.put(entry(1, np.random.default_rng(15)))
    tier.store._db.execute("UPDATE entries SET context = '[[\"user\", \"my password is hunter2\"'")
    assert tier.get("s", "s-1") is None
    assert "hunter2" not in str(tier.store.quarantined())
    tier.close()


def test_the_log_is_compacted_and_a_reader_behind_it_resyncs(tmp_path, monkeypatch):
    monkeypatch.setattr(sqlite, "COMPACT_EVERY", 10)
    monkeypatch.setattr(sqlite, "COMPACT_LAG", 5)
    rng = np.random.default_rng(16)
    path = tmp_path / "l3.db"
    writer, reader = SQLiteTier(path, shared=True), SQLiteTier(path, shared=True)
    gone = entry(0, rng)
    writer.put(gone)
    assert [c.entry_id for c in reader.search("s", gone.embeddings, CLOSE)] == ["s-0"]
    writer.delete("s-0")                      # its delete record is what the reader needs
    for i in range(1, 51):                    # 50 puts and invalidations of other entries
        writer.put(entry(i, rng))
        writer.delete(f"s-{i}")
    rows = writer.store._db.execute("SELECT COUNT(*) FROM log").fetchone()[0]
    assert len(writer) == 0 and rows <= 10 + 5    # not one row per id ever written
    assert reader.search("s", gone.embeddings, CLOSE) == []   # resynced, no ghost
    assert sorted(reader.ids()) == [] and reader.usage() == (0, 0)
    for t in (writer, reader):
        t.close()
    private = SQLiteTier(tmp_path / "private.db")
    for i in range(30):
        private.put(entry(i, rng))
        private.delete(f"s-{i}")
    assert private.store._db.execute("SELECT COUNT(*) FROM log").fetchone()[0] <= 10
    private.close()


def test_opening_reads_the_stored_entries_a_chunk_at_a_time(tmp_path, monkeypatch):
    from mmcache.tiers import store

    rng = np.random.default_rng(17)
    tier = SQLiteTier(tmp_path / "l3.db")
    tier.put_many([entry(i, rng) for i in range(5)])
    tier.close()
    monkeypatch.setattr(store, "REPLAY_CHUNK", 2)
    fetched = []
    fetch = sqlite.SQLiteStore.fetch
    monkeypatch.setattr(sqlite.SQLiteStore, "fetch",
                        lambda self, refs, values=True: fetched.append(len(refs))
                        or fetch(self, refs, values))
    reopened = SQLiteTier(tmp_path / "l3.db")
    assert fetched == [2, 2, 1] and sorted(reopened.ids()) == [f"s-{i}" for i in range(5)]
    reopened.close()


def test_a_schema_5_file_gains_the_stores_recency_in_the_order_it_was_written(tmp_path):
    path = tmp_path / "v5.db"
    _old_file(path, "5", "hints TEXT, version INTEGER, question TEXT, context TEXT, "
              "context_vector BLOB, image_fingerprint BLOB")
    SQLiteTier(path, Capacity(max_entries=2), shared=True).close()
    tier = SQLiteTier(path, shared=True)
    try:
        rng = np.random.default_rng(5)
        assert tier.put(entry(2, rng)) == []
        assert tier.put(entry(3, rng)) == ["s-1"]   # the old entry is the least recently used
        assert sorted(tier.ids()) == ["s-2", "s-3"]
    finally:
        tier.close()
