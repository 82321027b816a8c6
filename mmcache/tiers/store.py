"""L3: one store-backed tier over a small store protocol, versioned so every process sees one cache.

A :class:`Store` keeps entries where other processes may reach them (a SQLite file,
a Redis server). It knows five things: write a batch, read, delete (compare-and-delete
on the version), the changes since a sequence number, and the capacity recorded when it
was created. Every write and every delete takes the next number of one monotonic
sequence of the store; an entry's ``version`` is the number of its write, so a number
says exactly which write a copy comes from. A sharded store (Redis Cluster) keeps one such
sequence per scope instead, next to the scope's entries (:meth:`Store.log_of` names it),
so a write never spans shards: a version then says which write of its scope a copy comes
from, and the tier replays each sequence on its own (:meth:`Store.heads`,
:meth:`Store.changes_after`; a store of one sequence implements neither).

:class:`StoreTier` is the tier over a store: the capacity budget and eviction policy,
the local vector index (FAISS, :class:`~mmcache.tiers.vectors.SemanticIndex`), the
entries' scopes, the budget restored when a write fails, and the entries adopted when
it opens or replays changes. A shared store (``shared = True``: other processes write
it) is brought up to date, by replaying its changes, before each search and before each
revalidation of a private copy (:meth:`StoreTier.catch_up`); ``max_staleness``
(seconds, default 0) bounds how old the view used for revalidation may be. A search, a
revalidation and a put under an unlimited capacity replay only the sequences of the
scopes they touch; the rest replay every sequence.

Threads: a tier lands its writes one at a time (its write lock), so a cache may call it without
holding the cache's lock, and reads the store beside a write in flight: a read, a replay of
changes and a search hold only the view lock, which a write takes for its view changes but never
while it waits for the store (a SQLite store reads through a second connection; a Redis client is
thread-safe over its pool). A write that lands while a replay or read changed the view of one of
its ids, or a replay already covered its version, leaves that id as the replay left it (as new as
the store was then, or brought up to date by the next replay), and its budget rollback keeps what
readers did meanwhile. What a read would write is left to a writer when a write is in flight: the
sweep of expired entries, and the served gets sent to a store's recency (a policy that drops
entries on access, LIRS, waits to delete them).
:meth:`StoreTier.catch_up` does the store I/O a lookup needs before the lookup, after which
:meth:`StoreTier.known_version` and :meth:`StoreTier.find` answer from the view without I/O
and without waiting for a call in flight. A cache writes without its lock too:
:meth:`StoreTier.put_landed` and :meth:`StoreTier.delete_landed` return, from the same
serialized call, what the write did and its place in the order this tier's writes landed in
(:class:`Landed`), for the cache to apply to the tiers above in that order.

A store that loses or rolls back its data is noticed from its :class:`Head` (a new epoch, a
head below what was seen), and so is a tier left behind by the store's compaction of its log
(a floor above what it replayed): the tier resyncs those sequences from scratch and counts it
in ``resyncs``, so a cache drops the private copies it took before. Expired entries are swept
out of the store every :data:`SWEEP_EVERY_S` seconds by the tiers that use it, and at once
before a put into a store that evicts by itself when the put would take it past its capacity
(so an expired entry never costs a live one its place). What every
client must agree on (the encoder of each modality) is recorded in the store on first use
(:meth:`StoreTier.require_facts`); what they should agree on but may disagree on without
harm to the vectors (the exact-key version) is compared without refusing
(:meth:`StoreTier.check_fact`).

Failure events: a tier reports the mismatches it detects into its :attr:`StoreTier.events`
(:class:`~mmcache.metrics.EventLog`; a cache adopts it into its own): a recorded fact that
differs (``MM-KEY-VERSION``), entries another process stamped more than
:data:`MAX_CLOCK_SKEW_S` seconds ahead of this tier's clock (``MM-CLOCK-SKEW``, one event per
replayed chunk that holds such entries; a clock behind cannot be told from an old entry), and, from
the store, an entry it had to quarantine (``MM-ENTRY-UNREADABLE``). An encoder that differs
stays a ConfigError, now with ``code`` ``MM-ENCODER-IDENTITY``. Detecting changes nothing:
every such entry is adopted, or not, as before.

Capacity belongs to the store: the first tier that opens a store records its capacity,
later tiers adopt it (``capacity=None``) or must ask for the same one (ConfigError), so
no client ever evicts other tenants' entries to meet a budget of its own. A store that
evicts by itself (:attr:`Store.evicts`: a shared SQLite file, one Redis server) enforces it
inside each write, atomically with it, by one recency all its clients share: the store
numbers each write, and each served get, from one counter of its own, and deletes the entries
of the lowest numbers until it is within its capacity, logging each deletion like a delete
(so every client drops its copy on replay) and reporting it to the writer (its evictions).
A get is not written to the store when it is served: a tier sends the ids it served with its
next write, after :data:`TOUCH_BATCH` of them, or when it closes, so a get costs no store
write. Over such a
store the tier's own policy decides nothing (a warning says so when it is not LRU); it
applies to a private store, and to a Redis Cluster, where a write cannot span the shards and
each client evicts by its own recency as before.
"""

from __future__ import annotations

import functools
import heapq
import itertools
import logging
import threading
import time
from abc import ABC, abstractmethod
from collections import Counter
from typing import TYPE_CHECKING, Any, Callable, Collection, Iterator, Mapping, NamedTuple, \
    Sequence, TypeVar

import numpy as np

from mmcache.errors import ConfigError, StorageError
from mmcache.metrics import EventLog
from mmcache.policies import EvictionPolicy
from mmcache.types import Entry
from mmcache.tiers.base import Budget, BudgetedTier, Candidate, Capacity, admit_all, gone_ids, \
    last_versions, policy_hints
from mmcache.tiers.vectors import IndexSpec, SemanticIndex

if TYPE_CHECKING:
    from mmcache.metrics import CacheMetrics

_LOG = logging.getLogger(__name__)
#: Seconds between two sweeps of expired entries by one tier.
SWEEP_EVERY_S = 60.0
#: Superseded expiry items a tier's heap may hold beyond twice its entries before it is
#: rebuilt from what the tier knows (overwrites leave one behind each).
EXPIRY_SLACK = 1024
#: Seconds an adopted entry's put time may lie ahead of this tier's clock before the tier
#: reports the writer's clock as skewed (``MM-CLOCK-SKEW``).
MAX_CLOCK_SKEW_S = 5.0
#: Entries read from the store at a time while a tier replays its changes.
REPLAY_CHUNK = 1000
#: Served gets a tier over a store that evicts by itself holds before it sends them to the
#: store's recency without waiting for its next write.
TOUCH_BATCH = 64
_F = TypeVar("_F", bound=Callable[..., Any])


def _serialized(method: _F) -> _F:
    """Run a :class:`StoreTier` method that writes the store under the tier's write lock (its
    writes land one at a time, in the order of :attr:`StoreTier.landings`)."""
    @functools.wraps(method)
    def serialized(self: "StoreTier", *args: Any, **kwargs: Any) -> Any:
        with self._lock:
            return method(self, *args, **kwargs)
    return serialized  # type: ignore[return-value]


def _viewed(method: _F) -> _F:
    """Run a :class:`StoreTier` method that only reads the store under the tier's view lock,
    which no write holds while it waits for the store."""
    @functools.wraps(method)
    def viewed(self: "StoreTier", *args: Any, **kwargs: Any) -> Any:
        with self._view:
            return method(self, *args, **kwargs)
    return viewed  # type: ignore[return-value]


class Change(NamedTuple):
    """One entry of a store's change feed: the entry's id changed at ``seq``.

    ``ref`` is the store's own handle to read it with :meth:`Store.fetch`. The feed
    holds the latest change of each id: a write (the stored entry has ``version == seq``)
    or a delete (nothing is stored under the id). ``log`` names the sequence ``seq`` is a
    number of (``""``: the store's only one).
    """

    seq: int
    entry_id: str
    ref: str
    log: str = ""


class Head(NamedTuple):
    """Where one sequence of a store stands: its last number, and the identity of the data
    it numbers (``epoch``: a store that loses its data gets a new one). A sequence whose
    epoch changes, or whose head goes below a number already seen, was rolled back or lost:
    a tier that sees it resyncs that sequence from scratch. So does a tier that last replayed
    below ``floor``: the store has compacted away the delete records up to it."""

    seq: int
    epoch: str = ""
    floor: int = 0


class Removal(NamedTuple):
    """An entry to delete: only while the store still holds ``version`` (None: any version)."""

    scope: str
    entry_id: str
    version: int | None


class Written(NamedTuple):
    """What one :meth:`Store.write` did: the version of each written entry, in order, and the
    ``(entry_id, version)`` of each entry the store evicted to stay within its capacity."""

    versions: list[int]
    evicted: list[tuple[str, int]]


class Landed(NamedTuple):
    """What one write of a :class:`StoreTier` did, read in the same serialized call: the ids it
    evicted (for a delete: the ids it deleted), whether it admitted each entry, and its place
    in the order this tier's writes and deletes landed in (:attr:`StoreTier.landings`), which
    is the order a cache applies them to the tiers above it in."""

    victims: list[str]
    admitted: list[bool]
    order: int


class Store(ABC):
    """Where a :class:`StoreTier` keeps its entries (see the module docstring)."""

    #: Where the store is, for messages (a path or a URL).
    location: str
    #: True when other processes write the store too.
    shared: bool
    #: Where a sharded store counts its requests per shard (set by the cache using it).
    metrics: "CacheMetrics | None" = None
    #: Where the store reports the failures it detects (set by the tier over it).
    events: EventLog | None = None
    #: True when :meth:`write` keeps the store within its recorded capacity by itself.
    evicts: bool = False

    @abstractmethod
    def encode(self, entry: Entry, keep_for: float | None) -> Any:
        """The entry as this store writes it (SerializationError before anything changes);
        ``keep_for``: seconds after which the store may drop it by itself (None: never)."""

    @abstractmethod
    def write(self, batch: Sequence[tuple[Entry, Any]], removed: Sequence[Removal],
              touched: Sequence[tuple[str, str]] = ()) -> Written:
        """In one atomic step, record ``touched`` (``(scope, entry_id)`` served since the
        last write, oldest first) as used now, delete ``removed`` (compare-and-delete) and
        store every encoded entry of ``batch`` in order (replacing any stored one; an id may
        come more than once), as one write each would; a store that :attr:`evicts` evicts
        after each one until it is within its capacity. Only a store that evicts records
        ``touched``."""

    @abstractmethod
    def read(self, scope: str, entry_id: str) -> Entry | None:
        """The stored entry (its ``version`` set), or None."""

    @abstractmethod
    def delete(self, removed: Sequence[Removal]) -> list[str]:
        """Compare-and-delete each of ``removed``; return the ids actually deleted."""

    @abstractmethod
    def latest(self) -> int:
        """The last sequence number the store has assigned (0 when none)."""

    @abstractmethod
    def changes(self, since: int) -> list[Change]:
        """The changes after sequence number ``since``, in sequence order."""

    def log_of(self, scope: str) -> str:
        """The name of the sequence that numbers ``scope``'s writes (``""``: the only one)."""
        return ""

    def heads(self, logs: Collection[str] | None = None) -> dict[str, Head]:
        """The :class:`Head` of each of ``logs`` (None: of every sequence), by name."""
        return {"": Head(self.latest())}

    def changes_after(self, since: Mapping[str, int]) -> list[Change]:
        """The changes after ``since[log]`` of each sequence named in ``since``, each
        sequence in order."""
        return self.changes(since.get("", 0))

    @abstractmethod
    def fetch(self, refs: Sequence[str], values: bool = True) -> list[Entry | None]:
        """The entries stored under the :attr:`Change.ref` s ``refs`` (None: none stored);
        with ``values=False``, each without its stored value (``value`` None, not read from
        the store): what a tier's index and budget need, the value being read when the
        entry is served (:meth:`read`)."""

    @abstractmethod
    def record_capacity(self, capacity: Capacity, replace: bool = False) -> Capacity:
        """Record ``capacity`` when none is recorded yet (or ``replace``); return the one
        recorded now."""

    @abstractmethod
    def record_fact(self, name: str, value: str) -> str:
        """Record ``value`` under ``name`` unless the store has one already; return the one
        recorded now (facts every client of the store must agree on, such as the encoder
        that made its vectors)."""

    @abstractmethod
    def count(self) -> int:
        """How many entries the store holds."""

    @abstractmethod
    def scan(self) -> Iterator[Entry]:
        """Every stored entry."""

    @abstractmethod
    def close(self) -> None:
        """Release the connection (and any lock on the store)."""


class _Known(NamedTuple):
    """What a tier remembers of one stored entry."""

    scope: str
    modalities: tuple[str, ...]
    size: int
    hints: dict[str, float]
    version: int | None
    expires_at: float | None = None


class StoreTier(BudgetedTier):
    """A tier over a :class:`Store`; semantic search over a local index of its entries.

    ``capacity=None`` adopts the store's recorded capacity (unlimited for a new store). A
    capacity other than the recorded one is a ConfigError on a shared store; a private
    store records the new one and evicts down to it. Over a store that :attr:`~Store.evicts`
    (with a limited capacity) the store evicts, by its own recency, and ``policy`` is unused.
    """

    semantic = True

    def __init__(self, store: Store, capacity: Capacity | None = None,
                 policy: EvictionPolicy | str = "lru", spec: IndexSpec = IndexSpec(),
                 precheck: bool = True, name: str = "l3", max_staleness: float = 0.0) -> None:
        """The tier owns ``store`` from here on: it closes it when it cannot be opened."""
        try:
            self._open(store, capacity, policy, spec, precheck, name, max_staleness)
        except BaseException:
            store.close()
            raise

    def _open(self, store: Store, capacity: Capacity | None, policy: EvictionPolicy | str,
              spec: IndexSpec, precheck: bool, name: str, max_staleness: float) -> None:
        if isinstance(max_staleness, bool) or not isinstance(max_staleness, (int, float)) or \
                not 0 <= max_staleness < float("inf"):
            raise ConfigError(f"max_staleness must be a finite number of seconds >= 0, "
                              f"got {max_staleness!r}")
        #: Held by every call that writes the store, for the whole call: writes land one at a
        #: time. Taken before :attr:`_view`, never while a thread holds that one waits for it.
        self._lock = threading.RLock()
        #: Held while this tier's view (entries, index, budget, replayed numbers) changes and
        #: while the store is read, never while a write waits for the store: a read is
        #: answered beside a write in flight (:meth:`known_version` needs neither lock).
        self._view = threading.RLock()
        self.store = store
        self.name = name
        self.shared = store.shared
        #: The failure events this tier and its store detected (a cache adopts the log).
        self.events = store.events = EventLog(name, clock=lambda: self.clock(), log=False)
        #: Seconds a view of a shared store may be old when a private copy is revalidated.
        self.max_staleness = float(max_staleness)
        #: Seconds an expired entry is still kept (stale-while-revalidate / stale-if-error);
        #: a store that drops expired entries by itself keeps them this much longer.
        self.expiry_grace = 0.0
        self._capacity = _store_capacity(store, capacity)
        #: Whether the store evicts by itself (then the budget only accounts, without limits).
        self._store_evicts = store.evicts and self._capacity != Capacity()
        self._budget = Budget(Capacity(), _accounting_policy(policy, store.location),
                              undoable=True) if self._store_evicts \
            else Budget(self._capacity, policy, undoable=True)
        #: Entry id -> scope of the entries served since the last write, oldest first (sent to
        #: the store's recency when it evicts by itself).
        self._touched: dict[str, str] = {}
        self.index = SemanticIndex(spec, precheck=precheck)
        self._known: dict[str, _Known] = {}
        #: Sequence name -> the last number of it this tier has replayed.
        self._seen: dict[str, int] = {}
        #: Sequence name -> when (monotonic) it was last replayed; None: every sequence.
        self._synced_at: dict[str | None, float] = {}
        #: Sequence name -> the epoch of the data this tier's view of it comes from.
        self._epochs: dict[str, str] = {}
        #: How many times this tier found a sequence rolled back or lost and resynced it;
        #: copies taken from it before then may carry reused versions.
        self.resyncs = 0
        #: Numbers the writes and deletes made through :meth:`put_landed` and
        #: :meth:`delete_landed` in the order they landed (under this tier's lock).
        self.landings = itertools.count(1)
        #: When (monotonic) expired entries were last swept out of the store.
        self._swept_at = -float("inf")
        #: A heap of (expires_at, entry id, version) of indexed entries that expire; an item
        #: whose entry was replaced or removed since is skipped when it comes up.
        self._expiries: list[tuple[float, str, int | None]] = []
        self._catch_up(store.heads())
        self._synced_at[None] = time.monotonic()
        while not self.shared and self.capacity.exceeded(*self.usage()):
            self.evict()  # a private store reopened with a smaller capacity

    # -- Tier protocol -------------------------------------------------------------------
    @property
    def capacity(self) -> Capacity:
        return self._capacity

    @_serialized
    def put_many(self, entries: Sequence[Entry]) -> list[str]:
        """Write ``entries`` in one store batch (setting each stored one's ``version``); the
        budget admits them one by one first, or, where the store evicts by itself, the
        store does as it writes them."""
        if self._store_evicts:
            return self._put_evicting_in_store(entries)
        now = self.clock()
        encoded = {e.entry_id: self.store.encode(e, self._keep_for(e, now)) for e in entries}
        # a budget that may evict must see what others wrote first
        self._sync({e.scope for e in entries} if self.capacity == Capacity() else None)
        self._sweep_expired()
        with self._view:
            victims, kept = admit_all(self._budget, entries, now)
            gone = gone_ids(victims, entries)
            stored = {e.entry_id for e in kept}
            before = {g: self._known.get(g) for g in gone}
            removed = [Removal(k.scope, g, k.version) for g, k in before.items()
                       if k is not None and g not in stored]
        try:
            versions = self.store.write([(e, encoded[e.entry_id]) for e in kept],
                                        removed).versions
        except BaseException:
            with self._view:
                self._budget.rollback()
            raise
        with self._view:
            self._budget.commit()
            for entry, version in zip(kept, versions):
                entry.version = version
            self._apply_landed(before, kept)
        return victims

    @_serialized
    def put_landed(self, entries: Sequence[Entry]) -> Landed:
        """:meth:`put_many`, and what it did (:class:`Landed`) read in the same serialized
        call, so a cache may write without its lock and apply the result under it."""
        victims = self.put_many(entries)
        return Landed(victims, self.admitted(entries), next(self.landings))

    @_serialized
    def delete_landed(self, entry_ids: Sequence[str]) -> Landed:
        """Delete every version of each of ``entry_ids`` (:meth:`delete`); the ids deleted are
        the ``victims`` of the :class:`Landed` it returns (``admitted`` is empty)."""
        deleted = [entry_id for entry_id in entry_ids if self.delete(entry_id)]
        return Landed(deleted, [], next(self.landings))

    def get(self, scope: str, entry_id: str) -> Entry | None:
        """The stored entry, read beside a write in flight; a policy that drops entries when
        one is used (LIRS) waits for the writes in flight to delete them."""
        with self._view:
            entry = self.store.read(scope, entry_id)
            known = self._known.get(entry_id)
            if entry is None:
                if known is not None and known.scope == scope:
                    self._forget(entry_id)  # deleted by another process
                return None
            if known is None or known.version != entry.version:
                self._adopt([entry])  # written by another process since the last replay
            dropped = self._budget.touch(entry_id, **policy_hints(entry, self.clock()))
            due = self._store_evicts and entry_id not in dropped and \
                self._record_touch(scope, entry_id)
        if dropped:
            with self._lock:
                self._remove(dropped)
        if due:
            self._send_touches()
        return None if entry_id in dropped else entry

    def search(self, scope: str, vectors: Mapping[str, np.ndarray],
               floors: Mapping[str, float], k: int = 1) -> list[Candidate]:
        self._sync({scope})
        self._sweep_beside()
        return self.index.search(scope, vectors, floors, k)

    @_serialized
    def delete(self, entry_id: str, version: int | None = None) -> bool:
        """Remove an entry; with ``version``, only while the store still holds that version
        (a newer write by another process stays). False when nothing was deleted."""
        if entry_id not in self._known:
            self._sync()
        known = self._known.get(entry_id)
        if known is None:
            return False
        deleted = self.store.delete([Removal(known.scope, entry_id, version)])
        if deleted or version is None:
            with self._view:
                if self._known.get(entry_id) is known:  # no replay meanwhile knows better
                    self._forget(entry_id)
        return bool(deleted)

    @_serialized
    def evict(self) -> str | None:
        with self._view:
            victim = self._budget.pick_victim()
        if victim is not None:
            self._remove([victim])
        return victim

    @_viewed
    def scan(self) -> Iterator[Entry]:
        return self.store.scan()

    @_viewed
    def ids(self) -> Iterator[str]:
        self._sync()
        return iter(list(self._known))

    def dims(self) -> dict[str, int]:
        return self.index.dims()

    @_viewed
    def __len__(self) -> int:
        return self.store.count()

    @_viewed
    def __contains__(self, entry_id: str) -> bool:
        self._sync()
        known = self._known.get(entry_id)
        return known is not None and self.store.read(known.scope, entry_id) is not None

    @_serialized
    def close(self) -> None:
        """Send the store the gets served since the last write (for its recency; a store
        that fails then is logged, not raised), then release the index and the store."""
        with self._view:
            served, self._touched = self._touched, {}
        try:
            if served:
                self.store.write([], [], _pairs(served))
        except StorageError as exc:
            _LOG.warning("L3 store %s: the %d entries served since the last write were not "
                         "sent to its recency before closing: %s", self.store.location,
                         len(served), exc)
        finally:
            with self._view:
                self.index.close()
                self.store.close()

    def backend(self) -> str:
        return f"{type(self.store).__name__} {self.store.location}" + \
            (" (shared)" if self.shared else "")

    def scopes(self) -> Counter[str]:
        return Counter(k.scope for k in list(self._known.values()))

    # -- coherence -----------------------------------------------------------------------
    def known_version(self, entry_id: str) -> int | None:
        """The version of ``entry_id`` in this tier's view as it stands (None: not stored
        there), without store I/O and without waiting for a call in flight."""
        known = self._known.get(entry_id)
        return None if known is None else known.version

    def catch_up(self, scope: str, max_staleness: float = 0.0, sweep: bool = False) -> None:
        """The store I/O a lookup in ``scope`` needs, done before it: replay the changes of
        ``scope``'s sequence unless the view of it is less than ``max_staleness`` seconds old
        (0: always), and with ``sweep`` sweep out expired entries when due (as a search
        does). A cache calls it outside its lock, then :meth:`known_version` and :meth:`find`
        under it. When neither is due it returns at once, without waiting for a call in
        flight; it never waits for a write in flight (a sweep is then left to a later call)."""
        log = self.store.log_of(scope)
        if self._older_than(log, max_staleness):
            with self._view:
                if self._older_than(log, max_staleness):
                    self._sync({scope})
        if sweep:
            self._sweep_beside()

    def find(self, scope: str, vectors: Mapping[str, np.ndarray],
             floors: Mapping[str, float], k: int = 1) -> tuple[list[Candidate], bool]:
        """:meth:`search` over the view as it stands (after :meth:`catch_up`), without store
        I/O, and whether the spherical-cap pre-check skipped it; safe beside other threads
        (:meth:`SemanticIndex.find`)."""
        return self.index.find(scope, vectors, floors, k)

    @_serialized
    def require_facts(self, facts: Mapping[str, str]) -> None:
        """Record ``facts`` in a store that has none of them yet; ConfigError naming the
        first one the store records otherwise (its vectors would be compared with vectors
        from another space)."""
        for name, value in sorted(facts.items()):
            recorded = self.store.record_fact(name, value)
            if recorded != value:
                raise ConfigError(f"the store {self.store.location} records {name} = "
                                  f"{recorded!r}, but this cache has {value!r}: its vectors "
                                  "would not be comparable; use another store (path, prefix) "
                                  "or the same encoder", code="MM-ENCODER-IDENTITY")

    @_serialized
    def check_fact(self, name: str, value: str, code: str) -> str:
        """Record ``value`` under ``name`` in a store that has none yet and return the one
        recorded; one that differs is reported as a failure event of ``code``, not refused."""
        recorded = self.store.record_fact(name, value)
        if recorded != value:
            self.events.report(code, f"the store {self.store.location} records {name} = "
                                     f"{recorded!r}, this process has {value!r}")
        return recorded

    @_viewed
    def refresh(self) -> None:
        """Apply the changes other processes made since the last sync, now."""
        self._sync()

    # -- internals -----------------------------------------------------------------------
    def _put_evicting_in_store(self, entries: Sequence[Entry]) -> list[str]:
        """:meth:`put_many` over a store that evicts by itself: every entry is written in
        order, as one put each would, with the gets served since the last write; the
        entries the store evicted leave this tier's view and are returned."""
        now = self.clock()
        batch = [(e, self.store.encode(e, self._keep_for(e, now))) for e in entries]
        self._sync({e.scope for e in entries})
        self._sweep_expired(force=self._must_evict(entries))
        with self._view:
            admit_all(self._budget, entries, now)  # accounting only: nothing is evicted here
            before = {e.entry_id: self._known.get(e.entry_id) for e in entries}
            served, self._touched = self._touched, {}
        try:
            written = self.store.write(batch, [], _pairs(served))
        except BaseException:
            with self._view:
                self._budget.rollback()
                self._keep_touches(served)
            raise
        with self._view:
            self._budget.commit()
            for entry, version in zip(entries, written.versions):
                entry.version = version
            evicted = set(written.evicted)
            kept = [e for e in last_versions(entries) if (e.entry_id, e.version) not in evicted]
            self._apply_landed(before, kept, written.evicted)
        return [entry_id for entry_id, _ in written.evicted]

    def _must_evict(self, entries: Sequence[Entry]) -> bool:
        """Whether writing ``entries`` takes what this tier knows of the store past its
        capacity (so the store would evict for them)."""
        with self._view:
            sizes = {e.entry_id: e.size for e in entries}
            held = {i: self._budget.sizes[i] for i in sizes if i in self._budget.sizes}
            return self._capacity.exceeded(
                len(self._budget.sizes) + len(sizes) - len(held),
                self._budget.nbytes + sum(sizes.values()) - sum(held.values()))

    def _apply_landed(self, before: Mapping[str, "_Known | None"], kept: Sequence[Entry],
                      evicted: Collection[tuple[str, int]] = ()) -> None:
        """Under the view lock, once a write has landed: drop from the view the ids it wrote,
        replaced or removed (``before``: their view when it was sent) and the ``evicted``
        ``(entry_id, version)`` the store reported, and index the entries it ``kept``, except
        the ids a replay or read made while it was in flight changed the view of, or a replay
        already covered (their view is as new as the store's then, or the next replay brings
        it up to date)."""
        ours = {i for i, k in before.items() if self._known.get(i) is k}
        ours |= {i for i, v in evicted
                 if i not in before and self._known.get(i, _NOWHERE).version == v}
        adopted = [e for e in kept if e.entry_id in ours and
                   self._seen.get(self.store.log_of(e.scope), 0) < (e.version or 0)]
        for entry_id in ours:
            self._unindex(entry_id)
        for entry_id in ours - {e.entry_id for e in adopted}:
            self._budget.remove(entry_id)
        self._index(adopted)

    def _record_touch(self, scope: str, entry_id: str) -> bool:
        """Under the view lock, remember that ``entry_id`` was served, for the store's
        recency; whether :data:`TOUCH_BATCH` of them are waiting to be sent."""
        self._touched.pop(entry_id, None)
        self._touched[entry_id] = scope
        return len(self._touched) >= TOUCH_BATCH

    def _send_touches(self) -> None:
        """Send the served gets to the store's recency now, unless a write is in flight (then
        they go with a later write or batch)."""
        if not self._lock.acquire(blocking=False):
            return
        try:
            with self._view:
                served, self._touched = self._touched, {}
            if served:
                try:
                    self.store.write([], [], _pairs(served))
                except BaseException:
                    with self._view:
                        self._keep_touches(served)
                    raise
        finally:
            self._lock.release()

    def _keep_touches(self, served: Mapping[str, str]) -> None:
        """Under the view lock, put back the touches ``served`` a write failed to send, before
        those recorded since."""
        later, self._touched = self._touched, {i: s for i, s in served.items()
                                               if i not in self._touched}
        self._touched.update(later)

    def _older_than(self, log: str | None, seconds: float) -> bool:
        """Whether the view of sequence ``log`` (None: of every one) was last brought up to
        date ``seconds`` ago or more."""
        synced_at = max(self._synced_at.get(log, -float("inf")), self._synced_at[None])
        return time.monotonic() - synced_at >= seconds

    def _sync(self, scopes: Collection[str] | None = None) -> None:
        """Bring a shared store's view up to date: of the sequences of ``scopes`` (None:
        of every sequence), under the view lock."""
        if not self.shared:
            return
        with self._view:
            now = time.monotonic()
            logs = None if scopes is None else {self.store.log_of(s) for s in scopes}
            heads = self.store.heads(logs)
            if logs is None:  # a sequence the store no longer lists was lost with its data
                heads.update(self.store.heads([log for log in self._epochs
                                               if log not in heads]))
            self._catch_up(heads)
            for log in [None] if logs is None else logs:
                self._synced_at[log] = now

    def _catch_up(self, heads: Mapping[str, Head]) -> None:
        """Replay the changes of each sequence in ``heads`` past the number last replayed,
        after resyncing those that were rolled back or lost, or compacted past it."""
        lost = {log for log, head in heads.items() if head.seq < self._seen.get(log, 0) or (
            log in self._epochs and head.epoch != self._epochs[log])}
        if lost:
            _LOG.warning("L3 store %s lost or rolled back its data (its epoch changed or its "
                         "sequence went back): this client resyncs from what it holds now and "
                         "drops the copies it took before", self.store.location)
        compacted = {log for log, head in heads.items()
                     if 0 < self._seen.get(log, 0) < head.floor}
        if compacted - lost:
            _LOG.info("L3 store %s compacted changes this client had not replayed: it "
                      "resyncs", self.store.location)
        if lost | compacted:
            self._resync(lost | compacted)
        self._epochs.update((log, head.epoch) for log, head in heads.items())
        behind = {log: self._seen.get(log, 0) for log, head in heads.items()
                  if head.seq > self._seen.get(log, 0)}
        if behind:
            self._replay(self.store.changes_after(behind))

    def _resync(self, logs: Collection[str]) -> None:
        """Forget everything known of the sequences ``logs`` so they replay from the start."""
        for entry_id, known in list(self._known.items()):
            if self.store.log_of(known.scope) in logs:
                self._forget(entry_id)
        for log in logs:
            self._seen.pop(log, None)
        self.resyncs += 1

    def _replay(self, changes: list[Change]) -> None:
        """Adopt the entries ``changes`` wrote and forget those they deleted, reading
        :data:`REPLAY_CHUNK` entries at a time, without their values (opening a store reads
        its live entries' metadata and vectors; :meth:`get` reads a value when it serves
        it, at the version the store holds then)."""
        todo = [c for c in changes if not self._holds(c)]
        for start in range(0, len(todo), REPLAY_CHUNK):
            chunk = todo[start:start + REPLAY_CHUNK]
            written = []
            entries = self.store.fetch([c.ref for c in chunk], values=False)
            for change, entry in zip(chunk, entries):
                if entry is None:
                    if change.entry_id in self._known:
                        self._forget(change.entry_id)
                elif self._known.get(entry.entry_id, _NOWHERE).version != entry.version:
                    written.append(entry)
            self._check_clock(written)
            self._adopt(written)
        for change in changes:
            self._seen[change.log] = max(self._seen.get(change.log, 0), change.seq)

    def _check_clock(self, entries: Sequence[Entry]) -> None:
        """Report ``MM-CLOCK-SKEW`` once when any of ``entries`` (a replayed chunk about to be
        adopted) was put more than :data:`MAX_CLOCK_SKEW_S` seconds ahead of this tier's
        clock."""
        if not entries:
            return
        now = self.clock()
        ahead = [e for e in entries if e.created_at - now > MAX_CLOCK_SKEW_S]
        if ahead:
            lead = max(ahead, key=lambda e: e.created_at)
            self.events.report("MM-CLOCK-SKEW", f"{len(ahead)} of {len(entries)} entries "
                               f"adopted from {self.store.location} were put up to "
                               f"{lead.created_at - now:.1f} s ahead of this clock (bound "
                               f"{MAX_CLOCK_SKEW_S:g} s), e.g. entry {lead.entry_id!r}")

    def _holds(self, change: Change) -> bool:
        """Whether this tier already knows the write ``change`` names (a version is a number
        of its scope's sequence)."""
        known = self._known.get(change.entry_id)
        return known is not None and known.version == change.seq and \
            self.store.log_of(known.scope) == change.log

    def _adopt(self, entries: Sequence[Entry]) -> None:
        """Account and index entries that are already stored (no eviction); each counts as
        last used at its put."""
        for entry in entries:
            self._unindex(entry.entry_id)
            self._budget.adopt(entry.entry_id, entry.size,
                               **policy_hints(entry, entry.created_at))
        self._index(entries)

    def _remove(self, entry_ids: Sequence[str]) -> None:
        """Delete entries the budget already let go of (each only at the version known),
        under the write lock."""
        with self._view:
            before = {e: self._known.get(e) for e in entry_ids}
        removals = [Removal(k.scope, e, k.version) for e, k in before.items() if k is not None]
        if removals:
            self.store.delete(removals)
        with self._view:
            for entry_id, known in before.items():
                if self._known.get(entry_id) is known:
                    self._unindex(entry_id)

    def _keep_for(self, entry: Entry, now: float) -> float | None:
        """Seconds the store must keep ``entry`` (None: no expiry): past its last stale window,
        plus a sweep's period, so that a live client sweeps it out, and records the delete,
        before the store drops it unseen."""
        if entry.expires_at is None:
            return None
        return max(entry.expires_at + self.expiry_grace - now, 0.0) + SWEEP_EVERY_S

    def _sweep_due(self) -> bool:
        """Whether :data:`SWEEP_EVERY_S` seconds have passed since the last sweep."""
        return time.monotonic() - self._swept_at >= SWEEP_EVERY_S

    def _sweep_expired(self, force: bool = False) -> None:
        """Under the write lock, at most every :data:`SWEEP_EVERY_S` seconds (``force``: now),
        delete the entries past their last stale window from the store (compare-and-delete:
        a newer write of one stays), so they leave every client's index and budget, and the
        store's files; this tier drops each from its view whether or not the store still
        held it (one the store expired by itself is gone; a newer write of one is adopted at
        the next replay). Costs what has expired (popped off :attr:`_expiries`), not what
        lives."""
        if not (force or self._sweep_due()):
            return
        self._swept_at = time.monotonic()
        expired = []
        with self._view:
            now = self.clock()
            while self._expiries and self._expiries[0][0] + self.expiry_grace <= now:
                expires_at, entry_id, version = heapq.heappop(self._expiries)
                known = self._known.get(entry_id)
                if known is not None and \
                        (known.version, known.expires_at) == (version, expires_at):
                    expired.append((Removal(known.scope, entry_id, version), known))
        if expired:
            self.store.delete([removal for removal, _ in expired])
            with self._view:
                for removal, known in expired:
                    if self._known.get(removal.entry_id) is known:
                        self._forget(removal.entry_id)

    def _sweep_beside(self) -> None:
        """:meth:`_sweep_expired` when due, unless a write is in flight (then a later call
        sweeps): for the calls that only read the store."""
        if self._sweep_due() and self._lock.acquire(blocking=False):
            try:
                self._sweep_expired()
            finally:
                self._lock.release()

    def _index(self, entries: Sequence[Entry]) -> None:
        """Remember and index stored ``entries``, and queue the expiry of those that expire."""
        self._known.update((e.entry_id, _Known(e.scope, tuple(e.embeddings), e.size, e.hints,
                                               e.version, e.expires_at)) for e in entries)
        self.index.add_many((e.scope, e.entry_id, e.embeddings) for e in entries)
        for e in entries:
            if e.expires_at is not None:
                heapq.heappush(self._expiries, (e.expires_at, e.entry_id, e.version))
        if len(self._expiries) > 2 * len(self._known) + EXPIRY_SLACK:
            self._expiries = [(k.expires_at, entry_id, k.version)
                              for entry_id, k in self._known.items() if k.expires_at is not None]
            heapq.heapify(self._expiries)

    def _unindex(self, entry_id: str) -> None:
        known = self._known.pop(entry_id, None)
        if known is not None:
            self.index.remove(known.scope, entry_id, known.modalities)

    def _forget(self, entry_id: str) -> None:
        self._budget.remove(entry_id)
        self._unindex(entry_id)


_NOWHERE = _Known("", (), 0, {}, None)


def _pairs(touched: Mapping[str, str]) -> list[tuple[str, str]]:
    """``(scope, entry_id)`` of the served gets ``touched`` (entry id -> scope), in order."""
    return [(scope, entry_id) for entry_id, scope in touched.items()]


def _accounting_policy(policy: EvictionPolicy | str, location: str) -> str:
    """The policy of a budget that only accounts a store that evicts by itself (LRU, used
    by :meth:`StoreTier.evict` alone); a warning when ``policy`` asked for another one."""
    name = policy if isinstance(policy, str) else getattr(policy, "name", type(policy).__name__)
    if str(name).lower() != "lru":
        _LOG.warning("L3 store %s evicts its least recently used entries by itself, as one "
                     "view for every client: eviction policy %r applies to private stores "
                     "only", location, name)
    return "lru"


def _store_capacity(store: Store, requested: Capacity | None) -> Capacity:
    """The capacity a tier over ``store`` works with (see :class:`StoreTier`)."""
    if requested is None:
        return store.record_capacity(Capacity())
    recorded = store.record_capacity(requested, replace=not store.shared)
    if recorded != requested:
        raise ConfigError(
            f"the shared store {store.location} was created with capacity "
            f"max_entries={recorded.max_entries}, max_bytes={recorded.max_bytes}, but this "
            f"client asks for max_entries={requested.max_entries}, "
            f"max_bytes={requested.max_bytes}: capacity belongs to the store, so ask for the "
            "same (or leave it out to adopt the store's), or use another store")
    return recorded
