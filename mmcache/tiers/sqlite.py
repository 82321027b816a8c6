"""L3: entries, values and embeddings in one SQLite file (WAL), with its own vector search.

Values are stored type-tagged (``str``/``bytes``/``json``), embeddings as raw
float32 bytes, an entry's policy hints as JSON text; no pickle anywhere, so opening a
cache file never runs code. Reopening a file adopts every entry with its hints, so
cost- and entropy-aware policies rank it as before (a schema-1 file gains the
``hints`` column on open; its entries have none).
The vector index (:class:`mmcache.tiers.vectors.SemanticIndex`) is rebuilt from
the file on open. With ``shared=True`` (other processes write the same file)
every lookup first loads rows committed by others (``PRAGMA data_version``).

Durability: each put, and each ``put_many`` batch, is one transaction.
``synchronous="NORMAL"`` (default) in WAL mode survives a killed process;
``"FULL"`` also survives power loss.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Iterator, Mapping, Sequence

import numpy as np

from ..errors import ConfigError, StorageError
from ..policies import EvictionPolicy
from ..types import Entry
from .base import Budget, BudgetedTier, Candidate, Capacity, admit_all, gone_ids, policy_hints
from .codec import (decode_hints, decode_label, decode_value, encode_hints, encode_label,
                    encode_value, vector_from_bytes, vector_to_bytes)
from .vectors import IndexSpec, SemanticIndex

SYNCHRONOUS = ("OFF", "NORMAL", "FULL", "EXTRA")
SCHEMA_VERSION = "2"

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS entries (
    entry_id TEXT PRIMARY KEY, scope TEXT NOT NULL, exact_key TEXT NOT NULL,
    value_type TEXT NOT NULL, value BLOB NOT NULL, size INTEGER NOT NULL,
    created_at REAL NOT NULL, expires_at REAL, ground_truth TEXT, hints TEXT);
CREATE TABLE IF NOT EXISTS embeddings (
    entry_id TEXT NOT NULL REFERENCES entries(entry_id) ON DELETE CASCADE,
    modality TEXT NOT NULL, dim INTEGER NOT NULL, vector BLOB NOT NULL,
    PRIMARY KEY (entry_id, modality));
"""
_ENTRY_COLS = "rowid, entry_id, scope, exact_key, value_type, value, size, created_at, " \
              "expires_at, ground_truth, hints"


class SQLiteTier(BudgetedTier):
    """A persistent tier in one SQLite file; semantic search over its stored embeddings."""

    semantic = True

    def __init__(self, path: str | Path, capacity: Capacity = Capacity(),
                 policy: EvictionPolicy | str = "lru", spec: IndexSpec = IndexSpec(),
                 synchronous: str = "NORMAL", shared: bool = False, precheck: bool = True,
                 name: str = "l3") -> None:
        if synchronous.upper() not in SYNCHRONOUS:
            raise ConfigError(f"l3.synchronous must be one of {SYNCHRONOUS}, got {synchronous!r}")
        self.name = name
        self.path = Path(path)
        self.shared = shared
        self.synchronous = synchronous.upper()
        self._budget = Budget(capacity, policy, undoable=True)
        self.index = SemanticIndex(spec, precheck=precheck)
        #: entry id -> (scope, modalities, size, policy hints) of every entry held.
        self._scopes: dict[str, tuple[str, tuple[str, ...], int, dict[str, float]]] = {}
        self._last_rowid = 0
        self._data_version = -1
        self._db = self._connect()
        self._load_new_rows()
        while self.capacity.exceeded(*self.usage()):  # reopened with a smaller capacity
            self.evict()

    # -- Tier protocol -------------------------------------------------------------------
    def put_many(self, entries: Sequence[Entry]) -> list[str]:
        """Store ``entries`` in one transaction; the budget admits them one by one first."""
        rows = {e.entry_id: _row(e) for e in entries}  # SerializationError before any change
        now = self.clock()
        victims, kept = admit_all(self._budget, entries, now)
        gone = gone_ids(victims, entries)
        try:
            with self._transaction():
                self._db.executemany("DELETE FROM entries WHERE entry_id = ?",
                                     [(g,) for g in gone])
                self._db.executemany(
                    "INSERT INTO entries (entry_id, scope, exact_key, value_type, value, size, "
                    "created_at, expires_at, ground_truth, hints) VALUES (?,?,?,?,?,?,?,?,?,?)",
                    [rows[e.entry_id][0] for e in kept])
                self._db.executemany("INSERT INTO embeddings VALUES (?,?,?,?)",
                                     [v for e in kept for v in rows[e.entry_id][1]])
                last_rowid = self._db.execute("SELECT last_insert_rowid()").fetchone()[0]
        except sqlite3.Error as exc:
            self._budget.rollback()
            raise StorageError(f"L3 write to {self.path} failed: {exc}") from exc
        self._last_rowid = max(self._last_rowid, last_rowid or 0)
        for entry_id in gone:
            self._unindex(entry_id)
        self._index([(e.scope, e.entry_id, e.embeddings, e.size, e.hints) for e in kept])
        return victims

    def get(self, scope: str, entry_id: str) -> Entry | None:
        try:
            row = self._db.execute(f"SELECT {_ENTRY_COLS} FROM entries WHERE entry_id = ? "
                                   "AND scope = ?", (entry_id, scope)).fetchone()
            if row is None:
                if entry_id in self._scopes and self._scopes[entry_id][0] == scope:
                    self._forget(entry_id)  # deleted by another process
                return None
            entry = self._entry(row, self._embeddings(entry_id))
        except sqlite3.Error as exc:
            raise StorageError(f"L3 read from {self.path} failed: {exc}") from exc
        dropped = self._budget.touch(entry_id, **policy_hints(entry, self.clock()))
        if dropped:
            self._delete_rows(dropped)
        return None if entry_id in dropped else entry

    def search(self, scope: str, vectors: Mapping[str, np.ndarray],
               floors: Mapping[str, float], k: int = 1) -> list[Candidate]:
        if self.shared:
            self._sync()
        return self.index.search(scope, vectors, floors, k)

    def dims(self) -> dict[str, int]:
        return self.index.dims()

    def delete(self, entry_id: str) -> bool:
        try:
            with self._transaction():
                gone = self._db.execute("DELETE FROM entries WHERE entry_id = ?",
                                        (entry_id,)).rowcount > 0
        except sqlite3.Error as exc:
            raise StorageError(f"L3 delete in {self.path} failed: {exc}") from exc
        self._forget(entry_id)
        return gone

    def evict(self) -> str | None:
        victim = self._budget.pick_victim()
        if victim is not None:
            self._delete_rows([victim])
        return victim

    def scan(self) -> Iterator[Entry]:
        rows = self._db.execute(f"SELECT {_ENTRY_COLS} FROM entries ORDER BY rowid").fetchall()
        for row in rows:
            yield self._entry(row, self._embeddings(row[1]))

    def ids(self) -> Iterator[str]:
        return (row[0] for row in self._db.execute("SELECT entry_id FROM entries").fetchall())

    def __len__(self) -> int:
        return int(self._db.execute("SELECT COUNT(*) FROM entries").fetchone()[0])

    def __contains__(self, entry_id: str) -> bool:
        return self._db.execute("SELECT 1 FROM entries WHERE entry_id = ?",
                                (entry_id,)).fetchone() is not None

    def close(self) -> None:
        try:
            self._db.close()
        except sqlite3.Error as exc:
            raise StorageError(f"closing {self.path} failed: {exc}") from exc

    def integrity_check(self) -> str:
        """SQLite's ``PRAGMA integrity_check`` result (``"ok"`` when the file is sound)."""
        return str(self._db.execute("PRAGMA integrity_check").fetchone()[0])

    # -- internals -----------------------------------------------------------------------
    def _connect(self) -> sqlite3.Connection:
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            # check_same_thread=False: a TieredCache shared between threads calls this tier
            # from any of them, but only under its lock, so uses of the connection never
            # overlap. Used on its own, a SQLiteTier still needs one thread at a time.
            db = sqlite3.connect(str(self.path), isolation_level=None, timeout=30.0,
                                 check_same_thread=False)
            db.execute("PRAGMA journal_mode=WAL")
            db.execute(f"PRAGMA synchronous={self.synchronous}")
            db.execute("PRAGMA foreign_keys=ON")
            db.execute("PRAGMA busy_timeout=30000")
            db.executescript(_SCHEMA)
            db.execute("INSERT OR IGNORE INTO meta VALUES ('schema_version', ?)", (SCHEMA_VERSION,))
            version = db.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone()[0]
            if version == "1":
                version = _add_hints_column(db)
        except (sqlite3.Error, OSError) as exc:
            raise StorageError(f"cannot open L3 store {self.path}: {exc}") from exc
        if version != SCHEMA_VERSION:
            db.close()
            raise StorageError(f"{self.path} has schema {version}, expected {SCHEMA_VERSION}")
        return db

    def _delete_rows(self, entry_ids: list[str]) -> None:
        """Delete rows the budget already let go of, and their vectors."""
        try:
            with self._transaction():
                self._db.executemany("DELETE FROM entries WHERE entry_id = ?",
                                     [(e,) for e in entry_ids])
        except sqlite3.Error as exc:
            raise StorageError(f"L3 eviction in {self.path} failed: {exc}") from exc
        for entry_id in entry_ids:
            self._unindex(entry_id)

    def _transaction(self):
        return _Transaction(self._db)

    def _sync(self) -> None:
        version = self._db.execute("PRAGMA data_version").fetchone()[0]
        if version != self._data_version:
            self._data_version = version
            self._load_new_rows()

    def _load_new_rows(self) -> None:
        """Index rows committed after the last one this tier has seen (all of them on open)."""
        try:
            rows = self._db.execute(f"SELECT {_ENTRY_COLS} FROM entries WHERE rowid > ? "
                                    "ORDER BY rowid", (self._last_rowid,)).fetchall()
            for row in rows:
                entry_id, scope, size, created_at = row[1], row[2], row[6], row[7]
                hints = _decode_hints(row[10], self.path)
                vectors = self._embeddings(entry_id)
                self._unindex(entry_id)
                # an adopted entry counts as last used at its put
                self._budget.adopt(entry_id, size, now=created_at, **hints)
                self._index([(scope, entry_id, vectors, size, hints)])
                self._last_rowid = max(self._last_rowid, row[0])
        except sqlite3.Error as exc:
            raise StorageError(f"L3 load from {self.path} failed: {exc}") from exc

    def _embeddings(self, entry_id: str) -> dict[str, np.ndarray]:
        rows = self._db.execute("SELECT modality, dim, vector FROM embeddings WHERE entry_id = ?",
                                (entry_id,)).fetchall()
        return {m: vector_from_bytes(blob, dim) for m, dim, blob in rows}

    def _entry(self, row: tuple, embeddings: dict[str, np.ndarray]) -> Entry:
        _, entry_id, scope, exact_key, tag, payload, size, created, expires, label, hints = row
        return Entry(entry_id=entry_id, scope=scope, exact_key=exact_key,
                     value=decode_value(tag, payload), embeddings=embeddings, size=size,
                     created_at=created, expires_at=expires, ground_truth=decode_label(label),
                     hints=_decode_hints(hints, self.path))

    def _index(self, items: list[tuple[str, str, Mapping[str, np.ndarray], int,
                                       dict[str, float]]]) -> None:
        """Remember and index entries given as ``(scope, entry_id, vectors, size, hints)``."""
        self._scopes.update((eid, (scope, tuple(vecs), size, hints))
                            for scope, eid, vecs, size, hints in items)
        self.index.add_many((scope, eid, vecs) for scope, eid, vecs, _, _ in items)

    def _unindex(self, entry_id: str) -> None:
        known = self._scopes.pop(entry_id, None)
        if known is not None:
            self.index.remove(known[0], entry_id, known[1])

    def _forget(self, entry_id: str) -> None:
        self._budget.remove(entry_id)
        self._unindex(entry_id)


def _row(entry: Entry) -> tuple[tuple, list[tuple]]:
    """The entry's ``entries`` row and its ``embeddings`` rows (SerializationError first)."""
    tag, payload = encode_value(entry.value)
    label = encode_label(entry.ground_truth)
    return ((entry.entry_id, entry.scope, entry.exact_key, tag, payload, entry.size,
             entry.created_at, entry.expires_at, label, encode_hints(entry.hints)),
            [(entry.entry_id, m, len(v), vector_to_bytes(v)) for m, v in entry.embeddings.items()])


def _decode_hints(text: str | None, path: Path) -> dict[str, float]:
    """The hints stored by :func:`encode_hints`; StorageError when they are malformed."""
    try:
        return decode_hints(text)
    except (ValueError, TypeError, AttributeError) as exc:
        raise StorageError(f"{path} holds malformed policy hints {text!r}: {exc}") from None


def _add_hints_column(db: sqlite3.Connection) -> str:
    """Upgrade a schema-1 file to schema 2 (``entries.hints``, null for old rows)."""
    with _Transaction(db):
        current = db.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone()[0]
        if current == "1":  # another process may have upgraded it meanwhile
            db.execute("ALTER TABLE entries ADD COLUMN hints TEXT")
            db.execute("UPDATE meta SET value = ? WHERE key='schema_version'", (SCHEMA_VERSION,))
    return SCHEMA_VERSION


class _Transaction:
    """``BEGIN IMMEDIATE`` … ``COMMIT``, rolled back on any exception."""

    def __init__(self, db: sqlite3.Connection) -> None:
        self._db = db

    def __enter__(self) -> None:
        self._db.execute("BEGIN IMMEDIATE")

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None:
            self._db.execute("COMMIT")
        else:
            self._db.execute("ROLLBACK")
