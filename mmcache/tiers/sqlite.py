"""L3 in one SQLite file (WAL): :class:`SQLiteStore` and the tier over it, :class:`SQLiteTier`.

Values are stored type-tagged (``str``/``bytes``/``json``), embeddings as raw
float32 bytes, an entry's policy hints as JSON text; no pickle anywhere, so opening a
cache file never runs code. Reopening a file adopts every entry with its hints, so
cost- and entropy-aware policies rank it as before.

Versions: table ``log`` holds the latest change of each entry id under an
``AUTOINCREMENT`` sequence number (never reused, assigned inside the write
transaction, so numbers commit in order); a write stores its number as the entry's
``version``, a delete takes a new number with no entry behind it. A tier replays the
log after the last number it has seen, so no process misses another's write, replace
or delete. ``PRAGMA data_version`` tells cheaply whether anyone else committed. The
log is compacted as it grows: each time its head passes a multiple of
:data:`COMPACT_EVERY`, the records of deleted entries more than :data:`COMPACT_LAG`
numbers below the head (in a private store: all of them) go, and ``meta`` records the
bound, below which a client that has not replayed resyncs; so the log holds about one row
per live entry, and opening costs O(live entries), not O(history).
Older files (schema 1 and 2) gain ``hints``, ``version`` and the log on open; schema 1–3
files gain ``question``, ``context`` (the entry's conversation turns, JSON) and
``context_vector`` (raw float32), and schema 1–4 files ``image_fingerprint`` (the
entry's grey thumbnail, :mod:`mmcache.verify.image_check`), empty for the entries they already hold;
schema 1–5 files gain ``touched``, each entry's place in the store's recency (its version
until it is next used), and ``meta`` counts of the live entries and bytes.

Capacity of a shared file is enforced by the store (:attr:`SQLiteStore.evicts`): every row
written, and every served get a tier sends, takes the next number of the store's recency
counter (``meta`` key ``recency``) as its ``touched``; inside the write's transaction, after
each entry, the rows of the lowest ``touched`` are deleted, each logged like a delete, until
the file is within its recorded capacity (the ``live_entries`` and ``live_bytes`` of
``meta``, kept by every insert and delete). A private file is kept within it by its one tier's
budget and policy.

Sharing: with ``shared=True`` several caches (in any processes) may open the file.
Without it the file is private: a second cache opening it while the first is open
(a re-run notebook cell, another process) is refused with a StorageError saying how
to share it. Opening waits for another process that is opening the file at the same
time (``database is locked`` is retried up to ``OPEN_TIMEOUT_S``).

Reads: each read, fetch and scan goes through a second connection, so it is answered beside
a write of this store in flight (WAL lets a reader go on while a writer holds, or waits for,
the file's write lock), and is one read transaction, so an entry never comes back with
one write's value and another's vectors. A row that cannot be read back (malformed JSON,
an unknown value tag, a broken vector) is moved to table ``quarantine`` with the reason,
its removal is logged like a delete, and it is served as absent, with a warning and a failure
event ``MM-ENTRY-UNREADABLE`` (:mod:`mmcache.metrics`): one bad row never stops a store from
opening (:meth:`SQLiteStore.quarantined` lists them). A file of a schema this version does not
know is refused with a StorageError of ``code`` ``MM-SCHEMA-VERSION``.

Durability: each put, and each ``put_many`` batch, is one transaction, rolled back whole
when it fails (a failed COMMIT included); a full disk is a
:class:`~mmcache.errors.StoreFullError`. The file must be in WAL mode (checked on open).
``synchronous="NORMAL"`` (default) in WAL mode survives a killed process;
``"FULL"`` also survives power loss.
"""

from __future__ import annotations

import fcntl
import logging
import os
import sqlite3
import time
from collections import defaultdict
from pathlib import Path
from typing import Any, Collection, Iterator, Sequence

import numpy as np

from mmcache.errors import ConfigError, StorageError, StoreFullError
from mmcache.policies import EvictionPolicy
from mmcache.types import Entry
from mmcache.tiers.base import Capacity
from mmcache.tiers.codec import (decode_hints, decode_label, decode_turns, decode_value, encode_hints,
                    encode_label, encode_turns, encode_value, vector_from_bytes,
                    vector_to_bytes)
from mmcache.tiers.store import Change, Head, Removal, Store, StoreTier, Written
from mmcache.tiers.vectors import IndexSpec

SYNCHRONOUS = ("OFF", "NORMAL", "FULL", "EXTRA")
SCHEMA_VERSION = "6"
#: Seconds opening a file waits for other processes opening it at the same moment.
OPEN_TIMEOUT_S = 30.0
#: Entries read per query when a tier replays many changes (on open).
FETCH_CHUNK = 500
#: The log is compacted each time its head passes a multiple of this many numbers.
COMPACT_EVERY = 1000
#: Delete records this many numbers below the head survive a compaction of a shared store:
#: a client further behind resyncs (:class:`~mmcache.tiers.store.Head`'s ``floor``).
COMPACT_LAG = 10_000
_LOG = logging.getLogger(__name__)
#: Mode of the files a store creates: cached answers are for the user who stored them.
PRIVATE_FILE_MODE = 0o600

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS entries (
    entry_id TEXT PRIMARY KEY, scope TEXT NOT NULL, exact_key TEXT NOT NULL,
    value_type TEXT NOT NULL, value BLOB NOT NULL, size INTEGER NOT NULL,
    created_at REAL NOT NULL, expires_at REAL, ground_truth TEXT, hints TEXT, version INTEGER,
    question TEXT, context TEXT, context_vector BLOB, image_fingerprint BLOB, touched INTEGER);
CREATE TABLE IF NOT EXISTS embeddings (
    entry_id TEXT NOT NULL REFERENCES entries(entry_id) ON DELETE CASCADE,
    modality TEXT NOT NULL, dim INTEGER NOT NULL, vector BLOB NOT NULL,
    PRIMARY KEY (entry_id, modality));
CREATE TABLE IF NOT EXISTS log (seq INTEGER PRIMARY KEY AUTOINCREMENT,
                                entry_id TEXT NOT NULL UNIQUE);
CREATE TABLE IF NOT EXISTS quarantine (
    entry_id TEXT, scope TEXT, exact_key TEXT, value_type TEXT, value BLOB, size INTEGER,
    created_at REAL, expires_at REAL, ground_truth TEXT, hints TEXT, question TEXT,
    context TEXT, context_vector BLOB, image_fingerprint BLOB, version INTEGER,
    reason TEXT NOT NULL, quarantined_at REAL NOT NULL);
"""
_COLUMNS = ("entry_id", "scope", "exact_key", "value_type", "value", "size", "created_at",
            "expires_at", "ground_truth", "hints", "question", "context", "context_vector",
            "image_fingerprint", "version")
_ENTRY_COLS = ", ".join(_COLUMNS)
#: An entry's columns without its stored value (NULL in its place: the column is NOT NULL).
_META_COLS = ", ".join("NULL" if c == "value" else c for c in _COLUMNS)
_VECTORS = "SELECT entry_id, modality, dim, vector FROM embeddings"
_INSERT = f"INSERT INTO entries ({_ENTRY_COLS}, touched) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)"
#: Entries by recency, least recently used first.
_RECENCY_INDEX = "CREATE INDEX IF NOT EXISTS entries_by_recency ON entries (touched, version)"


class SQLiteStore(Store):
    """Entries in one SQLite file, with a change log (see the module docstring)."""

    def __init__(self, path: str | Path, synchronous: str = "NORMAL", shared: bool = False) -> None:
        if synchronous.upper() not in SYNCHRONOUS:
            raise ConfigError(f"l3.synchronous must be one of {SYNCHRONOUS}, got {synchronous!r}")
        self.path = Path(path)
        self.location = str(self.path)
        self.shared = shared
        self.evicts = shared
        self.synchronous = synchronous.upper()
        self._capacity = Capacity()
        self._lock = _hold_open_lock(self.path, shared)
        try:
            self._db = self._connect_waiting()
        except BaseException:
            os.close(self._lock)
            raise
        try:
            #: The connection reads go through, beside a write of :attr:`_db` in flight.
            self._reader = self._connect_reader()
        except BaseException:
            self._db.close()
            os.close(self._lock)
            raise
        self._data_version = -1
        self._latest = 0
        self._floor = 0

    # -- Store protocol ------------------------------------------------------------------
    def encode(self, entry: Entry, keep_for: float | None) -> tuple[tuple, list[tuple]]:
        """The entry's ``entries`` row (without version) and its ``embeddings`` rows."""
        tag, payload = encode_value(entry.value)
        label = encode_label(entry.ground_truth)
        return ((entry.entry_id, entry.scope, entry.exact_key, tag, payload, entry.size,
                 entry.created_at, entry.expires_at, label, encode_hints(entry.hints),
                 entry.question, encode_turns(entry.context),
                 None if entry.context_vector is None else vector_to_bytes(entry.context_vector),
                 entry.image_fingerprint),
                [(entry.entry_id, m, len(v), vector_to_bytes(v))
                 for m, v in entry.embeddings.items()])

    def write(self, batch: Sequence[tuple[Entry, Any]], removed: Sequence[Removal],
              touched: Sequence[tuple[str, str]] = ()) -> Written:
        with self._failing_as("write"), self._transaction():
            before = self._next_seq() - 1
            if self.evicts:
                self._touch_in_transaction(touched)
            self._delete_in_transaction(removed)
            limited = self.evicts and self._capacity != Capacity()
            versions, evicted = [], []
            for entry, (row, vectors) in batch:
                versions.append(self._insert(entry, row, vectors))
                if limited:
                    evicted += self._evict_to_capacity()
            self._compact_if_due(before, self._next_seq() - 1)
        return Written(versions, evicted)

    def read(self, scope: str, entry_id: str) -> Entry | None:
        with self._failing_as("read"), _Snapshot(self._reader):
            row = self._reader.execute(f"SELECT {_ENTRY_COLS} FROM entries WHERE entry_id = ? "
                                       "AND scope = ?", (entry_id, scope)).fetchone()
            vectors = [] if row is None else self._reader.execute(
                f"{_VECTORS} WHERE entry_id = ?", (entry_id,)).fetchall()
        return None if row is None else self._decoded([row], vectors)[0]

    def delete(self, removed: Sequence[Removal]) -> list[str]:
        with self._failing_as("delete"), self._transaction():
            before = self._next_seq() - 1
            deleted = self._delete_in_transaction(removed)
            self._compact_if_due(before, self._next_seq() - 1)
            return deleted

    def latest(self) -> int:
        with self._failing_as("read"):
            version = self._reader.execute("PRAGMA data_version").fetchone()[0]
            if version != self._data_version:  # another connection committed meanwhile
                self._data_version = version
                row = self._reader.execute("SELECT seq FROM sqlite_sequence WHERE name = 'log'"
                                           ).fetchone()
                self._latest = 0 if row is None else int(row[0])
                floor = self._reader.execute(
                    "SELECT value FROM meta WHERE key = 'compacted_through'").fetchone()
                self._floor = 0 if floor is None else int(floor[0])
        return self._latest

    def heads(self, logs: Collection[str] | None = None) -> dict[str, Head]:
        latest = self.latest()
        return {"": Head(latest, floor=self._floor)}

    def changes(self, since: int) -> list[Change]:
        with self._failing_as("read"):
            rows = self._reader.execute("SELECT seq, entry_id FROM log WHERE seq > ? "
                                        "ORDER BY seq", (since,)).fetchall()
        return [Change(seq, entry_id, entry_id) for seq, entry_id in rows]

    def record_fact(self, name: str, value: str) -> str:
        with self._failing_as("write"), _Transaction(self._db):
            self._db.execute("INSERT OR IGNORE INTO meta VALUES (?, ?)", (f"fact:{name}", value))
            return self._db.execute("SELECT value FROM meta WHERE key = ?",
                                    (f"fact:{name}",)).fetchone()[0]

    def fetch(self, refs: Sequence[str], values: bool = True) -> list[Entry | None]:
        columns = _ENTRY_COLS if values else _META_COLS
        rows, vectors = [], []
        with self._failing_as("read"), _Snapshot(self._reader):
            for start in range(0, len(refs), FETCH_CHUNK):
                chunk = list(refs[start:start + FETCH_CHUNK])
                marks = ",".join("?" * len(chunk))
                vectors += self._reader.execute(f"{_VECTORS} WHERE entry_id IN ({marks})", chunk)
                rows += self._reader.execute(f"SELECT {columns} FROM entries "
                                         f"WHERE entry_id IN ({marks})", chunk)
        found = {e.entry_id: e for e in self._decoded(rows, vectors) if e is not None}
        return [found.get(ref) for ref in refs]

    def record_capacity(self, capacity: Capacity, replace: bool = False) -> Capacity:
        values = [("max_entries", _text(capacity.max_entries)),
                  ("max_bytes", _text(capacity.max_bytes))]
        verb = "INSERT OR REPLACE" if replace else "INSERT OR IGNORE"
        with self._failing_as("write"), _Transaction(self._db):
            self._db.executemany(f"{verb} INTO meta VALUES (?, ?)", values)
            stored = dict(self._db.execute("SELECT key, value FROM meta WHERE key IN "
                                           "('max_entries', 'max_bytes')").fetchall())
        self._capacity = Capacity(_number(stored["max_entries"]), _number(stored["max_bytes"]))
        return self._capacity

    def count(self) -> int:
        with self._failing_as("read"):
            return int(self._reader.execute("SELECT COUNT(*) FROM entries").fetchone()[0])

    def scan(self) -> Iterator[Entry]:
        with self._failing_as("read"), _Snapshot(self._reader):
            rows = self._reader.execute(f"SELECT {_ENTRY_COLS} FROM entries ORDER BY version"
                                        ).fetchall()
            vectors = self._reader.execute(_VECTORS).fetchall()
        return iter([e for e in self._decoded(rows, vectors) if e is not None])

    def quarantined(self) -> list[tuple[str, str]]:
        """``(entry_id, reason)`` of every stored entry that could not be read back, oldest
        first: each was moved to table ``quarantine`` and is absent from the store."""
        with self._failing_as("read"):
            return self._reader.execute("SELECT entry_id, reason FROM quarantine "
                                        "ORDER BY quarantined_at").fetchall()

    def close(self) -> None:
        try:
            try:
                self._reader.close()
            finally:
                self._db.close()
        except sqlite3.Error as exc:
            raise StorageError(f"closing {self.path} failed: {exc}") from exc
        finally:
            os.close(self._lock)

    def integrity_check(self) -> str:
        """SQLite's ``PRAGMA integrity_check`` result (``"ok"`` when the file is sound)."""
        return str(self._db.execute("PRAGMA integrity_check").fetchone()[0])

    # -- internals -----------------------------------------------------------------------
    def _connect_waiting(self) -> sqlite3.Connection:
        """:meth:`_connect`, retried while another process holds the file during its own open."""
        deadline = time.monotonic() + OPEN_TIMEOUT_S
        pause = 0.01
        while True:
            try:
                return self._connect()
            except sqlite3.OperationalError as exc:
                if not _is_busy(exc) or time.monotonic() > deadline:
                    raise StorageError(f"cannot open L3 store {self.path}: {exc}") from exc
            time.sleep(pause)
            pause = min(2 * pause, 0.2)

    def _connect_reader(self) -> sqlite3.Connection:
        """A second connection to the file, in WAL mode (set by :meth:`_connect`): it reads
        beside a write of the first, and moves the unreadable rows it finds to quarantine."""
        try:
            db = sqlite3.connect(str(self.path), isolation_level=None, timeout=30.0,
                                 check_same_thread=False)
        except sqlite3.Error as exc:
            raise StorageError(f"cannot open L3 store {self.path}: {exc}") from exc
        try:
            db.execute("PRAGMA busy_timeout=30000")
            db.execute(f"PRAGMA synchronous={self.synchronous}")
            db.execute("PRAGMA foreign_keys=ON")
            mode = str(db.execute("PRAGMA journal_mode").fetchone()[0]).lower()
        except sqlite3.Error as exc:
            db.close()
            raise StorageError(f"cannot open L3 store {self.path}: {exc}") from exc
        if mode != "wal":
            db.close()
            raise StorageError(f"cannot open L3 store {self.path}: its second connection "
                               f"finds it in journal mode {mode!r}, not WAL")
        return db

    def _connect(self) -> sqlite3.Connection:
        """A connection with the schema in place; sqlite3.OperationalError when busy."""
        db = None
        try:
            # check_same_thread=False: a TieredCache shared between threads calls this store
            # from any of them, but writes only under its tier's write lock (reads under its
            # view lock, on the reader connection), so uses of a connection never overlap.
            db = sqlite3.connect(str(self.path), isolation_level=None, timeout=30.0,
                                 check_same_thread=False)
            db.execute("PRAGMA busy_timeout=30000")
            mode = str(db.execute("PRAGMA journal_mode=WAL").fetchone()[0]).lower()
            db.execute(f"PRAGMA synchronous={self.synchronous}")
            db.execute("PRAGMA foreign_keys=ON")
            version = _upgrade(db)
        except sqlite3.OperationalError as exc:
            if db is not None:
                db.close()
            if _is_busy(exc):
                raise
            raise StorageError(f"cannot open L3 store {self.path}: {exc}") from exc
        except sqlite3.Error as exc:
            if db is not None:
                db.close()
            raise StorageError(f"cannot open L3 store {self.path}: {exc}") from exc
        if mode != "wal":
            db.close()
            raise StorageError(f"cannot open L3 store {self.path}: SQLite keeps it in journal "
                               f"mode {mode!r}, not WAL, so readers could block writers and "
                               "see torn writes: put it on a local file system that supports "
                               "shared memory (not NFS, not ':memory:')")
        if version != SCHEMA_VERSION:
            db.close()
            raise StorageError(f"{self.path} has schema {version}, this mmcache reads and "
                               f"writes schema {SCHEMA_VERSION} only (no migration): set another "
                               "`l3.path`, or delete the file (it holds cached answers only, "
                               "which the cache stores again on misses)",
                               code="MM-SCHEMA-VERSION")
        return db

    def _compact_if_due(self, before: int, head: int) -> None:
        """Inside a write transaction that took the numbers after ``before`` up to ``head``:
        each time the head passes a multiple of :data:`COMPACT_EVERY`, drop the delete
        records more than :data:`COMPACT_LAG` numbers below it (all of them in a private
        store) and record that bound as ``compacted_through``."""
        if head // COMPACT_EVERY == before // COMPACT_EVERY:
            return
        bound = head - (COMPACT_LAG if self.shared else 0)
        self._db.execute("DELETE FROM log WHERE seq <= ? AND entry_id NOT IN "
                         "(SELECT entry_id FROM entries)", (bound,))
        self._db.execute("INSERT OR REPLACE INTO meta VALUES ('compacted_through', ?)",
                         (str(bound),))
        self._floor = max(self._floor, bound)

    def _next_seq(self) -> int:
        row = self._db.execute("SELECT seq FROM sqlite_sequence WHERE name = 'log'").fetchone()
        return 1 + (0 if row is None else int(row[0]))

    def _insert(self, entry: Entry, row: tuple, vectors: Sequence[tuple]) -> int:
        """Inside a write transaction, store one encoded entry (replacing any stored one) at
        the next sequence number and the next recency; return that number."""
        old = self._db.execute("DELETE FROM entries WHERE entry_id = ? RETURNING size",
                               (entry.entry_id,)).fetchone()
        version = self._db.execute("INSERT OR REPLACE INTO log (entry_id) VALUES (?)",
                                   (entry.entry_id,)).lastrowid
        self._db.execute(_INSERT, (*row, version, self._next_recency()))
        self._db.executemany("INSERT INTO embeddings VALUES (?,?,?,?)", vectors)
        self._count_live(0 if old else 1, entry.size - (int(old[0]) if old else 0))
        return int(version)

    def _count_live(self, entries: int, nbytes: int,
                    db: sqlite3.Connection | None = None) -> None:
        """Add ``entries`` and ``nbytes`` to the live entries and bytes ``meta`` counts (in a
        transaction of ``db``, default the writing connection)."""
        (db or self._db).executemany(
            "UPDATE meta SET value = CAST(value AS INTEGER) + ? WHERE key = ?",
            [(entries, "live_entries"), (nbytes, "live_bytes")])

    def _next_recency(self) -> int:
        """The next number of the store's recency counter (inside a write transaction)."""
        return int(self._db.execute("UPDATE meta SET value = CAST(value AS INTEGER) + 1 "
                                    "WHERE key = 'recency' RETURNING value").fetchone()[0])

    def _touch_in_transaction(self, touched: Sequence[tuple[str, str]]) -> None:
        """Give each of the entries ``touched`` (``(scope, entry_id)``, oldest first) the next
        recency, as if used now."""
        for _, entry_id in touched:
            self._db.execute("UPDATE entries SET touched = ? WHERE entry_id = ?",
                             (self._next_recency(), entry_id))

    def _usage(self) -> tuple[int, int]:
        """``(entries, bytes)`` the store holds, as ``meta`` counts them."""
        counts = dict(self._db.execute("SELECT key, value FROM meta WHERE key IN "
                                       "('live_entries', 'live_bytes')").fetchall())
        return int(counts["live_entries"]), int(counts["live_bytes"])

    def _evict_to_capacity(self) -> list[tuple[str, int]]:
        """Inside a write transaction, delete the least recently used entries, each logged
        like a delete, while the store breaks its recorded capacity; the
        ``(entry_id, version)`` of each."""
        evicted = []
        while self._capacity.exceeded(*self._usage()):
            row = self._db.execute("SELECT entry_id, version FROM entries "
                                   "ORDER BY touched, version LIMIT 1").fetchone()
            if row is None:
                break
            self._delete_in_transaction([Removal("", *row)])
            evicted.append((row[0], int(row[1])))
        return evicted

    def _delete_in_transaction(self, removed: Sequence[Removal],
                               db: sqlite3.Connection | None = None) -> list[str]:
        """Compare-and-delete each removal, logging a new sequence number for each delete (in
        a transaction of ``db``, default the writing connection)."""
        db = db or self._db
        deleted = []
        for _, entry_id, version in removed:
            if version is None:
                gone = db.execute("DELETE FROM entries WHERE entry_id = ? RETURNING size",
                                  (entry_id,)).fetchone()
            else:
                gone = db.execute("DELETE FROM entries WHERE entry_id = ? AND version = ? "
                                  "RETURNING size", (entry_id, version)).fetchone()
            if gone is not None:
                self._count_live(-1, -int(gone[0]), db)
                db.execute("INSERT OR REPLACE INTO log (entry_id) VALUES (?)", (entry_id,))
                deleted.append(entry_id)
        return deleted

    def _decoded(self, rows: Sequence[tuple], vectors: Sequence[tuple]) -> list[Entry | None]:
        """The entries of ``rows`` (read in one snapshot with their ``vectors`` rows); a row
        that does not decode is quarantined and comes back as None."""
        blobs: dict[str, list[tuple]] = defaultdict(list)
        for entry_id, *vector in vectors:
            blobs[entry_id].append(vector)
        entries: list[Entry | None] = []
        for row in rows:
            try:
                embeddings = {m: vector_from_bytes(blob, dim) for m, dim, blob in blobs[row[0]]}
                entries.append(self._entry(row, embeddings))
            except (StorageError, ValueError, TypeError, RecursionError) as exc:
                self._quarantine(row[0], row[-1], str(exc))
                entries.append(None)
        return entries

    def _quarantine(self, entry_id: str, version: int | None, reason: str) -> None:
        """Move the unreadable entry ``entry_id`` (at ``version``) to table ``quarantine``
        and log its removal, so every client drops it; a warning names it. It writes through
        the reading connection that found it (reads are made beside the writing one's
        writes)."""
        try:
            with _Transaction(self._reader):
                self._reader.execute(f"INSERT INTO quarantine SELECT {_ENTRY_COLS}, ?, ? "
                                     "FROM entries WHERE entry_id = ? AND version IS ?",
                                     (reason, time.time(), entry_id, version))
                self._delete_in_transaction([Removal("", entry_id, version)], self._reader)
        except sqlite3.Error as exc:
            reason += f" (and it could not be moved to the quarantine table: {exc})"
        _LOG.warning("L3 store %s: entry %r cannot be read (%s); it is served as absent and "
                     "kept in table 'quarantine' for inspection", self.path, entry_id, reason)
        if self.events is not None:
            self.events.report("MM-ENTRY-UNREADABLE", f"entry {entry_id!r} of {self.path} "
                                                      f"was quarantined: {reason}")

    def _entry(self, row: tuple, embeddings: dict[str, np.ndarray]) -> Entry:
        entry_id, scope, exact_key, tag, payload, size, created, expires, label, hints, \
            question, turns, turns_vector, fingerprint, version = row
        return Entry(entry_id=entry_id, scope=scope, exact_key=exact_key,
                     value=None if payload is None else decode_value(tag, payload),
                     embeddings=embeddings,
                     size=int(size), created_at=float(created),
                     expires_at=None if expires is None else float(expires),
                     ground_truth=decode_label(label), hints=_decode_hints(hints, self.path),
                     version=version, question=question, context=_decode_turns(turns, self.path),
                     context_vector=None if turns_vector is None
                     else vector_from_bytes(turns_vector), image_fingerprint=fingerprint)

    def _transaction(self) -> "_Transaction":
        return _Transaction(self._db)

    def _failing_as(self, what: str) -> "_Failing":
        return _Failing(f"L3 {what} in {self.path} failed")


class SQLiteTier(StoreTier):
    """A persistent tier in one SQLite file; semantic search over its stored embeddings."""

    store: SQLiteStore

    def __init__(self, path: str | Path, capacity: Capacity | None = None,
                 policy: EvictionPolicy | str = "lru", spec: IndexSpec = IndexSpec(),
                 synchronous: str = "NORMAL", shared: bool = False, precheck: bool = True,
                 name: str = "l3", max_staleness: float = 0.0) -> None:
        super().__init__(SQLiteStore(path, synchronous, shared), capacity, policy, spec, precheck, name,
                         max_staleness)

    @property
    def path(self) -> Path:
        """The SQLite file."""
        return self.store.path

    def backend(self) -> str:
        return f"sqlite {self.path}" + (" (shared)" if self.shared else "")

    def integrity_check(self) -> str:
        """SQLite's ``PRAGMA integrity_check`` result (``"ok"`` when the file is sound)."""
        with self._lock:
            return self.store.integrity_check()


def _hold_open_lock(path: Path, shared: bool) -> int:
    """A lock on ``path``'s ``.lock`` file held while the store is open: shared by shared
    stores, exclusive for a private one; StorageError when another cache holds it."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(f"{path}.lock", os.O_RDWR | os.O_CREAT, PRIVATE_FILE_MODE)
        os.close(os.open(path, os.O_RDWR | os.O_CREAT, PRIVATE_FILE_MODE))  # SQLite's WAL
        # and shared-memory files take the database file's mode
    except OSError as exc:
        raise StorageError(f"cannot open L3 store {path}: {exc}") from exc
    try:
        fcntl.flock(fd, (fcntl.LOCK_SH if shared else fcntl.LOCK_EX) | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise StorageError(
            f"L3 store {path} is already open in another cache (in this process or another)"
            + ("" if shared else " and this cache opens it as private") +
            ": close that cache first (cache.close()), or set l3.shared: true in every cache "
            "that opens it, to share one store between them") from None
    return fd


def _upgrade(db: sqlite3.Connection) -> str:
    """Create the schema or bring an older one to :data:`SCHEMA_VERSION`; return the version."""
    with _Transaction(db):
        for statement in _SCHEMA.split(";"):
            if statement.strip():
                db.execute(statement)
        db.execute("INSERT OR IGNORE INTO meta VALUES ('schema_version', ?)", (SCHEMA_VERSION,))
        version = db.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone()[0]
        columns = {row[1] for row in db.execute("PRAGMA table_info(entries)")}
        if version in ("1", "2"):
            if "hints" not in columns:
                db.execute("ALTER TABLE entries ADD COLUMN hints TEXT")
            if "version" not in columns:
                db.execute("ALTER TABLE entries ADD COLUMN version INTEGER")
            db.execute("INSERT OR REPLACE INTO log (entry_id) "
                       "SELECT entry_id FROM entries ORDER BY rowid")
            db.execute("UPDATE entries SET version = "
                       "(SELECT seq FROM log WHERE log.entry_id = entries.entry_id)")
        if version in ("1", "2", "3", "4"):
            for column, kind in (("question", "TEXT"), ("context", "TEXT"),
                                 ("context_vector", "BLOB"), ("image_fingerprint", "BLOB")):
                if column not in columns:
                    db.execute(f"ALTER TABLE entries ADD COLUMN {column} {kind}")
        if version in ("1", "2", "3", "4", "5"):
            if "touched" not in columns:
                db.execute("ALTER TABLE entries ADD COLUMN touched INTEGER")
            db.execute("UPDATE entries SET touched = version")
            db.execute("INSERT OR REPLACE INTO meta SELECT 'recency', "
                       "COALESCE(MAX(version), 0) FROM entries")
            db.execute("UPDATE meta SET value = ? WHERE key='schema_version'", (SCHEMA_VERSION,))
            version = SCHEMA_VERSION
        if version == SCHEMA_VERSION:
            db.execute("INSERT OR IGNORE INTO meta VALUES ('recency', '0')")
            db.execute("INSERT OR IGNORE INTO meta SELECT 'live_entries', COUNT(*) FROM entries")
            db.execute("INSERT OR IGNORE INTO meta SELECT 'live_bytes', CAST(TOTAL(size) AS "
                       "INTEGER) FROM entries")
            db.execute(_RECENCY_INDEX)
    return version


def _is_busy(exc: sqlite3.OperationalError) -> bool:
    text = str(exc).lower()
    return "locked" in text or "busy" in text


def _text(limit: int | None) -> str:
    return "" if limit is None else str(int(limit))


def _number(text: str) -> int | None:
    return None if text == "" else int(text)


def _decode_turns(text: str | None, path: Path) -> tuple[tuple[str, str], ...]:
    """The turns stored by :func:`encode_turns`; StorageError when they are malformed."""
    try:
        return decode_turns(text)
    except (ValueError, TypeError) as exc:
        raise StorageError(f"{path} holds a malformed conversation context "
                           f"({len(text or '')} characters, not shown): "
                           f"{exc}") from None


def _decode_hints(text: str | None, path: Path) -> dict[str, float]:
    """The hints stored by :func:`encode_hints`; StorageError when they are malformed."""
    try:
        return decode_hints(text)
    except (ValueError, TypeError, AttributeError) as exc:
        raise StorageError(f"{path} holds malformed policy hints {text!r}: {exc}") from None


class _Failing:
    """Turns a ``sqlite3.Error`` raised inside it into a StorageError with ``message``."""

    def __init__(self, message: str) -> None:
        self._message = message

    def __enter__(self) -> None:
        return None

    def __exit__(self, exc_type, exc, tb) -> bool:
        if exc_type is not None and issubclass(exc_type, sqlite3.Error):
            if getattr(exc, "sqlite_errorcode", None) == sqlite3.SQLITE_FULL:
                raise StoreFullError(f"{self._message}: {exc}; nothing of it was kept: free disk "
                                     "space or lower the tier's max_bytes") from exc
            raise StorageError(f"{self._message}: {exc}") from exc
        return False


class _Transaction:
    """``BEGIN IMMEDIATE`` … ``COMMIT``, rolled back on any exception, a failed COMMIT
    included; the error that ended it is the one raised."""

    begin = "BEGIN IMMEDIATE"

    def __init__(self, db: sqlite3.Connection) -> None:
        self._db = db

    def __enter__(self) -> None:
        self._db.execute(self.begin)

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None:
            try:
                self._db.execute("COMMIT")
            except BaseException:
                self._roll_back()
                raise
        else:
            self._roll_back()

    def _roll_back(self) -> None:
        """ROLLBACK unless SQLite already rolled the transaction back (as it does on a full
        disk), keeping the original error."""
        if self._db.in_transaction:
            try:
                self._db.execute("ROLLBACK")
            except sqlite3.Error:
                pass  # the error being raised says what went wrong; SQLite rolls back on close


class _Snapshot(_Transaction):
    """A read transaction: every SELECT inside it sees the same committed state."""

    begin = "BEGIN DEFERRED"
