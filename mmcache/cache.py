"""``TieredCache``: the lookup path over L1 exact → L2 semantic → L3 persistent/remote.

``get(query)`` first looks for the query's exact key (scope + a content hash of every
modality, :mod:`mmcache.keys`) in each tier in order, then for a δ-neighbour in each
semantic tier in order: an entry of the same scope with the same set of modalities
whose every modality is within its own threshold (:mod:`mmcache.thresholds`). A hit
needs the same modalities on both sides: a text-only query never gets a text + image
answer, nor the reverse. A modality without a vector (none given, no encoder) limits
the query to its exact key, and an entry put without a vector for every modality is
stored for exact lookups only. A hit below L1 is copied up
(back-filled) into the tiers above it. ``put`` writes through to every tier that
can hold the entry, the durable tier first, so a failing store leaves memory
unchanged. ``put_many(queries, values)`` gives the same result as one ``put`` per
pair in order, but checks every item before storing any and writes each tier in one
batch (one SQLite transaction, one Redis pipeline, one vector add per index).
Scopes are separate key spaces and separate vector indexes: entries never match
across scopes.

Video (seed 002 §3.1): a clip (``Query.video``, a :class:`~mmcache.types.VideoClip`) is its
keyframes, each through the image encoder and mean-pooled
(:class:`~mmcache.encoders.KeyframeMeanEncoder`; the ``video`` channel), and its track through
the audio encoder (the ``audio`` channel). Its modality set, ``video`` (``text+video`` with
text), has indexes of its own, apart from a still image + audio. Routes: each tier serves the
modality sets that the config's ``modality_sets`` and ``route`` give it
(:func:`mmcache.build.tier_routes`; by default every set); a query of another set neither looks
it up there nor is stored or promoted there.

Freshness (seed 001 §3.3): an entry expires ``ttl`` seconds after its put (scaled by its
scope's ``freshness.ttl_factors``, at most :data:`mmcache.config.MAX_LIFETIME_S`). For
``freshness.stale_while_revalidate`` seconds after expiry it is still served,
marked ``Hit.freshness == "stale-while-revalidate"`` (the caller should refresh
it); when the caller reports the origin failed (``get(q, origin_failed=True)``)
it is served up to ``freshness.stale_if_error`` seconds after expiry, marked
``"stale-if-error"``. ``get(q, bypass=True)`` (or a query text containing a
``freshness.bypass_tokens`` entry such as ``freshness:strict``) skips the cache.

Penetration guard (:mod:`mmcache.guard`): a Bloom filter over the exact keys put
through this cache lets a guaranteed exact miss skip the lookups in tiers that
only this process writes; a spherical-cap bound lets a guaranteed semantic miss
skip the vector search.

Hit decisions (:mod:`mmcache.thresholds`): every lookup, hit or miss, is shown to the
threshold rule with its nearest candidate's similarities; a candidate the rule accepts
goes to the verifier (the one named by ``thresholds.verifier`` or
``TieredCache(verifier=...)``; :mod:`mmcache.verify`), which may veto it;
``thresholds.verifier_band`` below 2 spares it the candidates that far above the threshold. ``feedback(hit, correct)`` labels a served semantic hit and the rule
learns from it. A rule that explores (``vcache``) may instead hand the nearest candidate back
unserved: ``get`` returns it as a ``Hit`` with ``explored=True``, counted as a miss; the caller
answers from the model, compares, and labels it with the same ``feedback``. A query's conversation ``context`` is part of its exact key and, on the
semantic side, a context channel with its own threshold (:mod:`mmcache.context`).

Benchmark settings: ``{"l2": {"index": "flat"}}`` is exact flat search at every
size; the default ``{"l2": {"index": "auto"}}`` switches each (scope, modality set,
modality) index to ``l2.ann_factory`` (an inverted file, ``IVF{nlist}(SQfp16),SQfp16``, probing
``ef_search`` / 4 = 32 lists) at ``l2.ann_min_size`` vectors; ``make bench-cache`` measures
how often its hit-or-miss decisions equal exact search.

Eviction signals: ``put(q, v, hints={"cost": 2.5, "entropy": 0.2})`` gives the tiers'
policies the entry's miss cost (e.g. seconds of inference it saves; value-per-byte keeps
costly entries) and attention entropy (entropy-retention evicts low-entropy entries
first). Every policy call also carries ``now``, the cache's ``clock`` (seconds), so
hotness-freshness ages entries by time (its ``window`` is in seconds here). Persistent
tiers store the hints, so a reopened cache ranks its entries the same way.

Threads may share one cache: every public call holds the cache's lock while it reads or
changes the tiers (one at a time), but checks its query and runs encoders before taking
it, so a slow encoder stalls only its own call; a dimension another thread fixed
meanwhile is checked again under the lock (the call then fails and changes nothing).
``get`` encodes only after an exact miss, between two holds of the lock, and searches the
first in-memory semantic tier (L2) there too, without the lock: the faiss search runs beside
other threads' searches (faiss releases the GIL), guarded by the index's own readers-writer
lock (:class:`~mmcache.tiers.vectors.SemanticIndex`), and its candidates are used under the
lock only if the tier has not changed since (its ``writes`` count) and the rule's floors are
the same; otherwise the tier is searched again under the lock, so every answer is one a
search under the lock would give. A store-backed tier (L3) does its store round trips without
the cache's lock too (it lands its writes one at a time and reads beside them): a get first brings the tier's view of its
scope up to date as revalidation needs (``max_staleness``), and, before a semantic search,
as a search needs; under the lock, copies above the store are revalidated against that view
and the store's own index is searched in it, without I/O. Each entry a get reads from the
store (its exact key, an accepted candidate, a judged one again) is read outside the lock and
used under it only while the tier's view of that entry is the one it had when read (no write,
invalidation or resync of it since); otherwise it is read again, at most ``STORE_READS`` times,
then taken as not stored. So an L1 hit, or any lookup the store is not needed for, never
waits for another thread's store call. Writes do the same (:meth:`TieredCache._write`): ``put``,
``put_many`` and ``invalidate`` are checked and registered as in flight under the lock, make
their store call without it (:meth:`~mmcache.tiers.store.StoreTier.put_landed`, ``delete_landed``)
and are applied to the tiers above the store under it again; a write that reaches no store is
made in one hold. While a write of a key is in flight a get does not serve that key's copies
above the store (it reads the store: the old value until the write lands, the new one after),
and the tier numbers its store calls in the order they land, which is the order they are applied
above it in: one applied after a later one of its key is left out there, so the tiers end with
the store's version. ``feedback`` asks the store whether an entry is stored without the lock;
``close`` waits for the writes in flight (and refuses new ones). The purge of an expired entry a
get finds leaves the tiers above the store at once and the store after the lookup, without the
lock (compare-and-delete on its version); ``evict`` of a store-backed tier deletes without it.
``on_stale`` runs outside it and is single-flight: it is called once per stale entry until that
entry is put again or ``REFRESH_TIMEOUT`` seconds of the cache's clock pass (then the next
stale answer calls it again). Processes each open their own cache (the SQLite store may be
shared between processes with ``l3.shared: true``).

Asyncio callers await ``aget``, ``aput``, ``aput_many`` and ``afeedback``: each runs the
synchronous call of the same name, unchanged, on a worker thread of an executor the cache owns
(at most ``async_workers`` threads, started on first use and shut down by ``close``), so a
store, faiss search, encoder or verifier that blocks never blocks the event loop, and a call
raises the same typed error the synchronous one would, leaving the cache as it was. The
cache's own threads rather than ``asyncio.to_thread``: the loop's default executor is shared
with everything else on the loop (``getaddrinfo``, other ``to_thread`` calls), and a stalled
store would fill it. Cancelling an awaiting caller abandons only the wait: the call still runs
to its end on its thread (a cancelled ``aput`` is stored, unless it fails; it is visible once
its thread finishes, which ``aclose`` waits for). ``aclose()`` (and ``async with
TieredCache(cfg) as cache:``) refuses new async calls, waits for those in flight (cancelled
ones included) to finish, then closes; ``close()`` closes at once: a call still in flight
either finished before it or raises MMCacheError ("closed") having changed nothing stored.

One cache across processes: a shared L3 (SQLite with ``l3.shared: true``, or Redis) is
one store every process sees (:mod:`mmcache.tiers.store`). Every write and delete there
takes the next number of the store's one sequence, stored as the entry's ``version``.
A store that fails (unreachable, timing out after ``l3.options.socket_timeout``, full)
degrades the cache by default (``l3.on_error: degrade``): the ``get`` or ``put`` that met the
failure is a miss or stores nothing, changes nothing, and is counted in ``metrics.errors``;
the first failure of an outage is logged, and so is the first call that succeeds after it.
``l3.on_error: raise`` raises the StorageError instead; ``invalidate`` always raises.
If the store loses or rolls back its data (its epoch changes, or its sequence goes back:
:class:`~mmcache.tiers.store.Head`), its tier resyncs and every private copy is dropped, since
version numbers may be reused from then on.
Before a copy in this process's L1 or L2 is served it is revalidated: the L3 tier
replays the store's changes (one ``PRAGMA data_version`` when nothing changed, one
Redis ``GET`` of the sequence) and a copy of another version is dropped and looked up
again below. Staleness bound: ``l3.options.max_staleness`` seconds (default 0: a copy
is never served after another process's write or invalidation has returned; with
``max_staleness: s`` the view may be up to ``s`` seconds old). A purge of an expired
entry is a compare-and-delete on its version, so it never deletes another process's
newer write of the key, and entries promoted from the shared store enter the Bloom
guard, so they are looked up in L1 again.

Failure codes: the mismatches a cache can detect between processes sharing a
store are failure events with stable codes (:data:`mmcache.metrics.FAILURE_CODES`: cause and fix
of each): ``MM-KEY-VERSION`` (the store records another exact-key version; the cache opens
anyway), ``MM-ENCODER-IDENTITY`` and ``MM-SCHEMA-VERSION`` (the open is refused as before, the
error carrying the code), ``MM-ENTRY-UNREADABLE`` (an entry quarantined) and ``MM-CLOCK-SKEW``
(entries put ahead of this cache's clock). ``cache.events()`` returns the recent ones,
``metrics.failure_events`` counts them by code and tier (exported to Prometheus as
``mmcache_failure_events_total``), and ``TieredCache(on_event=...)`` is called with each, those
of a refused open included. Detecting changes nothing else the cache does.
"""

from __future__ import annotations

import asyncio
import contextvars
import dataclasses
import itertools
import logging
import math
import numbers
import os
import threading
import time
from collections import Counter, OrderedDict
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Generator, Iterator, Mapping, Sequence, \
    TypeVar

import numpy as np

from mmcache.build import build_tiers, make_encoder, make_threshold, rule_settings, tier_routes
from mmcache.config import MAX_LIFETIME_S, CacheConfig, check_ann_factory
from mmcache.context import context_similarity, context_vector, turn_texts
from mmcache.verify.image_check import image_fingerprint
from mmcache.inputs import text_only
from mmcache.encoders.base import Encoder
from mmcache.encoders.keyframes import KeyframeMeanEncoder
from mmcache.errors import (ConfigError, InvalidEmbeddingError, InvalidInputError, MMCacheError,
                            SerializationError, StorageError, UnknownHitError)
from mmcache.guard import ExactKeyFilter
from mmcache.inputs import PreparedQuery, prepare, unit_vector
from mmcache import keys as _keys
from mmcache.metrics import CacheMetrics, Dashboard, EventLog, FailureEvent, html_sections
from mmcache.thresholds import ThresholdRule
from mmcache.tiers import Candidate, Tier
from mmcache.tiers.semantic import SemanticTier
from mmcache.tiers.codec import canonical_value, detached, encode_label, value_size
from mmcache.tiers.store import Landed, StoreTier
from mmcache.types import (HINT_NAMES, MODALITIES, SET_NAMES, VIDEO, Entry, Hit, Query, fmt,
                           fmt_bytes, html_card, html_fields, html_table, modality_set_name,
                           safe_display)
from mmcache.verify import Verifier, checked_probability, make_verifier

if TYPE_CHECKING:
    import pandas as pd

#: Candidates fetched per semantic tier search (stale ones are skipped).
SEARCH_K = 4
#: Seconds (cache clock) after an ``on_stale`` call before a still-stale entry gets another.
REFRESH_TIMEOUT = 30.0
#: Served hits remembered for ``feedback`` (older ones can no longer be labelled).
FEEDBACK_WINDOW = 100_000
#: Worker threads of a cache's asyncio executor by default (the stdlib executor's default).
ASYNC_WORKERS = min(32, (os.cpu_count() or 1) + 4)
#: A hit to answer with: the hit, its entry, and what the threshold rule charged for it.
_Found = tuple[Hit, Entry, float]
#: A search made outside the lock: the tier's ``writes`` and the floors it was planned with,
#: its candidates, whether the spherical cap skipped it, and its seconds.
_Searched = tuple[int, dict[str, float], list[Candidate], bool, float]
#: Times an exact lookup reads a store-backed tier outside the lock before it counts a miss
#: there (each read that the tier's view moved past meanwhile is read again).
STORE_READS = 3
#: Seconds a display waits for the cache's lock; past it, it shows what needs no lock.
DISPLAY_LOCK_WAIT = 0.05
#: A display counts entries per scope only in tiers holding at most this many (bounded hold).
DISPLAY_SCAN_LIMIT = 100_000
_T = TypeVar("_T")
_LOG = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class _Fetch:
    """A read of ``entry_id`` from a store-backed ``tier``, to make outside the lock."""

    tier: StoreTier
    scope: str
    entry_id: str


@dataclasses.dataclass(frozen=True)
class _Fetched:
    """What a :class:`_Fetch` read: the entry (None: not stored), the tier's resync count
    before the read, and the read's seconds."""

    entry: Entry | None
    resyncs: int
    seconds: float


#: Work under the cache's lock that asks for store reads to be made outside it
#: (:meth:`TieredCache._locked`), returning a ``_T``.
_Steps = Generator[_Fetch, _Fetched, _T]


@dataclasses.dataclass(frozen=True)
class _StoreWrite:
    """The store part of a write, made without the lock: the entries routed to store-backed
    ``tier`` (``routed``: their indexes), and per run of them (:func:`_runs`) whether the tier's
    capacity can hold it, the index of its first entry, the run, and what its write (or, for a
    run it cannot hold, the delete of older versions) did."""

    tier: StoreTier
    routed: list[int]
    runs: list[tuple[bool, int, list[Entry], Landed]]

    def orders(self) -> dict[str, int]:
        """Entry id -> the landing order of the last of this write's store calls that wrote it."""
        return {e.entry_id: landed.order for _, _, run, landed in self.runs for e in run}


@dataclasses.dataclass(frozen=True)
class _Pending:
    """An accepted candidate: its tier's level, entry, freshness, similarities, and whether
    it goes to the verifier before it may be served."""

    level: int
    entry: Entry
    freshness: str
    similarities: dict[str, float]
    judge: bool


class TieredCache:
    """A multimodal semantic cache over configurable tiers (see the module docstring).

    ``config`` is a :class:`CacheConfig`, a dict or a YAML path. ``encoders`` maps a
    modality to an :class:`~mmcache.encoders.base.Encoder` used when a query carries
    raw input without an embedding; modalities named in ``config.encoders`` are
    resolved lazily through ``mmcache.encoders.get_encoder``. ``clock`` returns
    seconds (inject a fake one to test TTLs; every tier's eviction policy sees it as the
    ``now`` hint); ``threshold`` overrides the rule built
    from ``config.thresholds``; ``on_stale(query, hit)`` is called for a
    stale-while-revalidate answer, to start the refresh (e.g. submit it to an executor
    that calls ``put``): once per entry until it is put again or ``REFRESH_TIMEOUT``
    seconds pass. ``verifier(query, entry) -> probability`` overrides the verifier named
    by ``config.thresholds.verifier`` (:mod:`mmcache.verify`; it runs outside the
    cache's lock, so a slow judge delays only its own lookup; a candidate that was
    rewritten or removed while it was being judged is not served). ``async_workers`` bounds
    the threads that run the asyncio twins (``aget``, ``aput``, ...; default
    ``ASYNC_WORKERS``). ``on_event(event)`` is called with every failure event
    (:class:`~mmcache.metrics.FailureEvent`) where it is detected, possibly under the cache's
    lock, so keep it quick; it sees those of an open that is refused too.
    """

    def __init__(self, config: CacheConfig | Mapping[str, Any] | str | Path | None = None,
                 encoders: Mapping[str, Encoder] | None = None, *,
                 clock: Callable[[], float] = time.time,
                 threshold: ThresholdRule | None = None,
                 on_stale: Callable[[Query, Hit], None] | None = None,
                 verifier: Verifier | None = None,
                 async_workers: int = ASYNC_WORKERS,
                 on_event: Callable[[FailureEvent], None] | None = None) -> None:
        if isinstance(async_workers, bool) or not isinstance(async_workers, int) or \
                async_workers < 1:
            raise ConfigError(f"async_workers must be an int >= 1, got {async_workers!r}")
        #: The asyncio twins' executor (None until the first async call, and after close),
        #: the calls submitted to it and not yet finished, and whether ``aclose`` is waiting
        #: for them; all under ``_async_state``.
        self._async_workers = async_workers
        self._executor: ThreadPoolExecutor | None = None
        self._in_flight: set[Future[Any]] = set()
        self._draining = False
        self._async_state = threading.Lock()
        self.config = CacheConfig.load(config)
        #: Held by every public call, so threads may share one cache.
        self._lock = threading.RLock()
        #: Held while an encoder named in the config is loaded (outside ``_lock``).
        self._loading = threading.Lock()
        self._clock = clock
        self._on_stale = on_stale
        #: Called with every get's answer, inside the lock, before it returns (e.g. by
        #: :meth:`mmcache.scheduler.Scheduler.attach` to adjust the cache between windows).
        self.after_get: Callable[[Hit | None], None] | None = None
        #: Names of the tiers a get consults (None: all); e.g. set by a scheduler's adapter.
        self.probe: set[str] | None = None
        #: Entry id -> when (cache clock) its pending ``on_stale`` refresh times out.
        self._refreshing: dict[str, float] = {}
        #: Per thread, the (id, version) of entries its lookup found past every window: the
        #: stores delete them after the lookup, without the lock (:meth:`_locked`).
        self._expiring = threading.local()
        self._dims: dict[str, int] = dict(self.config.dims)
        self._encoders: dict[str, Encoder] = {}
        for modality, encoder in (encoders or {}).items():
            self._add_encoder(modality, encoder)
        self.thresholds = threshold or make_threshold(self.config.thresholds,
                                                      self.config.encoders)
        if verifier is not None and not callable(verifier):
            raise ConfigError("verifier must be a callable verifier(query, entry) -> float")
        self.verifier = verifier or make_verifier(self.config.thresholds.verifier)
        #: Lookup serial -> (entry id, scope, similarities, semantic?, what the rule charged)
        #: of recent served hits.
        self._served: OrderedDict[int, tuple[str, str, dict[str, float], bool, float]] = \
            OrderedDict()
        self._serial = itertools.count(1)
        self._metrics = CacheMetrics()
        #: The failure events this cache emitted (:meth:`events`), counted in its metrics.
        self._events = EventLog("l3", clock=clock, metrics=self._metrics, listener=on_event)
        try:
            self.tiers: list[Tier] = build_tiers(self.config)
        except MMCacheError as exc:  # a coded refusal (another store schema) is an event
            if exc.code is not None:
                self._events.report(exc.code, str(exc))
            raise
        if not self.tiers:
            raise ConfigError("every tier is disabled: enable l1, l2 or configure l3")
        #: Per tier, the names of the modality sets it serves (:func:`~mmcache.build.tier_routes`).
        self._routes = tier_routes(self.config)
        for tier in self.tiers:
            tier.clock = clock
            if isinstance(tier, StoreTier):
                tier.expiry_grace = max(self.config.freshness.stale_while_revalidate,
                                        self.config.freshness.stale_if_error)
                tier.store.metrics = self._metrics  # requests per shard, skew alerts
        self.guard = ExactKeyFilter(self.config.guard.expected_items,
                                    self.config.guard.error_rate) \
            if self.config.guard.enabled else None
        #: Tier name -> whether every entry it holds is also in a semantic tier above it,
        #: so its own vector search can only repeat that tier's answer and is skipped.
        self._covered = {t.name: False for t in self.tiers}
        #: The store-backed tier other processes write too (None: no tier is shared); copies
        #: in the tiers above it are revalidated against it before they are served.
        self._shared_store = next((t for t in self.tiers if isinstance(t, StoreTier)
                                   and t.shared), None)
        #: The shared store's resync count when the copies above it were last known good.
        self._store_resyncs = 0 if self._shared_store is None else self._shared_store.resyncs
        try:
            for tier in self.tiers:
                if isinstance(tier, StoreTier):
                    self._events.adopt(tier.events)
                    tier.require_facts(self._encoder_facts())
                    tier.check_fact("key_version", _keys.KEY_VERSION, "MM-KEY-VERSION")
            self._adopt_stored_entries()
        except BaseException as exc:
            if isinstance(exc, MMCacheError) and exc.code is not None:
                self._events.report(exc.code, str(exc))  # another encoder
            for tier in self.tiers:
                tier.close()
            raise
        #: Entry id -> writes and invalidations of it in flight (their store calls run without
        #: the lock); a copy of it above the store is not served meanwhile (:meth:`_current`).
        self._writing: Counter[str] = Counter()
        #: Entry id (while writes of it are in flight) -> the landing order of the last store
        #: call of it applied to the tiers above; one that landed before it is not applied.
        self._applied: dict[str, int] = {}
        #: Modality -> [dim, writes in flight] of the dims those writes fix once applied.
        self._reserved_dims: dict[str, list[int]] = {}
        #: Writes in flight and, on the cache's lock, the condition ``close`` waits for them on.
        self._writes = 0
        self._writes_done = threading.Condition(self._lock)
        #: The level of the first store-backed tier (the number of tiers: none).
        self._store_level = next((i for i, t in enumerate(self.tiers)
                                  if isinstance(t, StoreTier)), len(self.tiers))
        self._closing = False
        self._closed = False
        #: Whether the last call that reached the store saw it fail (for logging once).
        self._store_failing = False

    # -- public API ----------------------------------------------------------------------
    def put(self, query: Query, value: Any, *, ttl: float | None = None,
            hints: Mapping[str, float] | None = None) -> str | None:
        """Store ``value`` (str, bytes or JSON-able) for ``query``; return the entry id, or
        None when no tier admitted the entry, or when the store failed (``l3.on_error``:
        ``degrade``, the default; nothing is stored then, in any tier).

        ``ttl`` (seconds) overrides ``config.freshness.ttl`` (either is scaled by the scope's
        ``freshness.ttl_factors``). The entry goes to every
        tier whose capacity can hold it, evicting by each tier's policy. A policy may decline
        an entry (LIRS refuses one over 1% of its tier's bytes, S3-FIFO one not smaller than
        its small queue); when every tier declines it, nothing is stored (an older version
        under the same key is gone as well), ``metrics.not_stored`` counts it and the result
        is None. ``hints`` are
        signals for those policies, stored with the entry: ``cost`` (the miss cost the
        entry saves, e.g. seconds of inference; finite, > 0) and ``entropy`` (attention
        entropy; finite, >= 0). An unknown name or a bad value raises InvalidInputError.
        """
        self._check_open()
        encode_times: list[float] = []
        kinds: list[str] = []
        entry = self._entry(query, value, self._lifetime(ttl), _checked_hints(hints),
                            self._dims_now(), encode_times, kinds)  # encoders run outside the lock
        return self._unless_the_store_fails(
            lambda: self._write([entry], kinds, encode_times)[0], None)

    def put_many(self, queries: Sequence[Query], values: Sequence[Any], *,
                 ttl: float | None = None,
                 hints: Sequence[Mapping[str, float] | None] | None = None
                 ) -> list[str | None]:
        """Store ``values[i]`` for ``queries[i]`` (with ``hints[i]``, see :meth:`put`) as
        :meth:`put` for each item in order would (same ids, None for an item no tier
        admitted, tiers, evictions and metrics), writing each tier in one batch.

        Every item is checked first: a bad one raises its typed error naming its index,
        and nothing is stored. It does not wait for ANN indexes to be built: as after single
        puts, the new vectors wait in a backlog per index, searched exactly beside it, that
        a background builder inserts batch by batch (see :mod:`mmcache.tiers.vectors`).
        """
        queries, values = list(queries), list(values)
        if len(queries) != len(values):
            raise InvalidInputError(f"put_many got {len(queries)} queries but "
                                    f"{len(values)} values")
        item_hints = _hints_per_item(hints, len(queries))
        self._check_open()
        lifetime = self._lifetime(ttl)
        dims = self._dims_now()
        encode_times: list[float] = []
        entries, kinds = [], []
        for i, (query, value, hint) in enumerate(zip(queries, values, item_hints)):
            try:  # encoders run outside the lock
                entries.append(self._entry(query, value, lifetime, _checked_hints(hint),
                                           dims, encode_times, kinds))
            except MMCacheError as exc:
                raise type(exc)(f"put_many item {i}: {exc}") from exc
        return self._unless_the_store_fails(lambda: self._write(entries, kinds, encode_times),
                                            [None] * len(entries))

    def get(self, query: Query, *, bypass: bool = False, origin_failed: bool = False,
            degrade: str = "full-modal") -> Hit | None:
        """The cached answer for ``query`` (exact, then δ-neighbour), or None on a miss; a
        rule that explores may return its candidate unserved, marked ``Hit.explored`` (a
        miss: answer from the model, then label it with :meth:`feedback`).

        ``bypass`` skips the cache; ``origin_failed`` allows stale-if-error answers;
        ``degrade="text-fallback"`` looks up the query's text alone
        (:func:`mmcache.inputs.text_only`; seed 001 §4.3's text-fallback under load).
        """
        if degrade != "full-modal":
            if degrade != "text-fallback":
                raise ConfigError(f"get(degrade=...) takes 'full-modal' or 'text-fallback' "
                                  f"(keyword-proxy is replay-only), got {degrade!r}")
            query = text_only(query)
        hit, refresh = self._unless_the_store_fails(
            lambda: self._lookup(query, bypass, origin_failed), (None, False))
        if self.after_get is not None:
            with self._lock:
                self.after_get(hit)
        if refresh:
            self._on_stale(query, hit)  # outside the lock: it may hand a put to another thread
        return hit

    def feedback(self, hit: Hit, correct: bool) -> bool:
        """Label a hit this cache served (ground truth, a user's thumbs-down, a verifier), or
        an explored candidate it returned (``hit.explored``: is its answer right for the
        query?); the threshold rule learns from it. Returns whether the rule was updated: False (a
        documented no-op) for an exact hit, which no rule decided, or for an entry evicted or
        invalidated since. A hit this cache did not serve (another cache's, one already
        labelled, or older than the last ``FEEDBACK_WINDOW`` hits) raises UnknownHitError;
        a non-bool ``correct`` raises InvalidInputError. Each hit is labelled once."""
        if not isinstance(correct, bool):
            raise InvalidInputError(f"feedback needs correct=True or False, got {correct!r}")
        with self._lock:
            self._check_open()
            served = self._served.get(hit.lookup) if isinstance(hit, Hit) else None
            if served is None or served[0] != hit.entry_id:
                raise UnknownHitError("feedback got a hit this cache did not serve (from another "
                                      "cache, already labelled, or older than the last "
                                      f"{FEEDBACK_WINDOW} hits); pass the Hit that get() "
                                      "returned, once")
            del self._served[hit.lookup]
            entry_id, scope, sims, semantic, charged = served
            if not semantic:
                return False
            held = self._held_in_memory(entry_id)
        if not held:  # is it stored? asked of the store without the lock
            held = self._unlocked_io(lambda: self._held_in_stores(entry_id))
        with self._lock:
            self._check_open()
            if not held or not (self._held_in_memory(entry_id) or self._known_in_stores(entry_id)):
                return False  # not stored, or invalidated while the store was asked
            self.thresholds.feedback(sims, entry_id, correct, scope, charged)
            return True

    def invalidate(self, query: Query) -> bool:
        """Remove the entry stored under ``query``'s exact key from every tier."""
        with self._lock:
            self._check_writable()
            key = prepare(query, self._dims, self.config.limits).key
            stores = [t for t in self.tiers if isinstance(t, StoreTier)]
            if not stores:
                return self._purge(key)
            self._begin_writes([key], [])
        try:  # the store deletes without the lock; the tiers above follow under it
            landed = self._unlocked_io(lambda: [(t, t.delete_landed([key])) for t in stores])
            with self._lock:
                return self._apply_invalidation(key, landed)
        except StorageError:
            with self._lock:  # the store may still hold it: no copy above it is served either
                self._drop_above_stores(key)
            raise
        finally:
            self._end_writes([key], [])

    def evict(self, tier: str) -> str | None:
        """Evict one entry from the named tier by its policy; return its id (a store-backed
        tier deletes it without the cache's lock)."""
        with self._lock:
            self._check_open()
            target = self._tier(tier)
            victim = None if isinstance(target, StoreTier) else target.evict()
        if isinstance(target, StoreTier):
            victim = self._unlocked_io(target.evict)
        with self._lock:
            if victim is not None:
                self._forget_rule_state(target, [victim])
                self._metrics.count("evictions", tier)
                self._uncover_below(target)
            return victim

    def close(self) -> None:
        """Close every tier (files, connections); further calls raise MMCacheError. It waits for
        the writes in flight (their store calls run without the lock) and refuses new ones. Async
        calls still in flight either finished before it or raise MMCacheError having stored
        nothing (:meth:`aclose` waits for them instead); the async executor's threads exit
        once those calls end, without ``close`` waiting for them."""
        with self._lock:
            self._closing = True  # new writes are refused; those in flight land and apply
            while self._writes and not self._closed:
                self._writes_done.wait()
            if self._closed:
                return
            self._closed = True
            for tier in self.tiers:
                tier.close()
        self._shutdown_executor(wait=False)

    def __enter__(self) -> "TieredCache":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- asyncio twins -------------------------------------------------------------------
    async def aget(self, query: Query, *, bypass: bool = False, origin_failed: bool = False,
                   degrade: str = "full-modal") -> Hit | None:
        """:meth:`get` for asyncio callers, run on the cache's worker thread (see the module
        docstring): the same answer, the same typed errors."""
        return await self._in_thread(self.get, query, bypass=bypass,
                                     origin_failed=origin_failed, degrade=degrade)

    async def aput(self, query: Query, value: Any, *, ttl: float | None = None,
                   hints: Mapping[str, float] | None = None) -> str | None:
        """:meth:`put` for asyncio callers, run on the cache's worker thread. Cancelling the
        caller does not cancel the put: it is stored (unless it fails) when its thread ends."""
        return await self._in_thread(self.put, query, value, ttl=ttl, hints=hints)

    async def aput_many(self, queries: Sequence[Query], values: Sequence[Any], *,
                        ttl: float | None = None,
                        hints: Sequence[Mapping[str, float] | None] | None = None
                        ) -> list[str | None]:
        """:meth:`put_many` for asyncio callers, run on the cache's worker thread (all items
        or none, cancelled or not, as :meth:`aput`)."""
        return await self._in_thread(self.put_many, queries, values, ttl=ttl, hints=hints)

    async def afeedback(self, hit: Hit, correct: bool) -> bool:
        """:meth:`feedback` for asyncio callers, run on the cache's worker thread (its store
        call, when it makes one, is made without the cache's lock)."""
        return await self._in_thread(self.feedback, hit, correct)

    async def aclose(self) -> None:
        """Close for asyncio callers: refuse new async calls (MMCacheError), wait until every
        one in flight has finished (those whose callers were cancelled too), then
        :meth:`close` and join the worker threads, all without blocking the event loop. If
        ``aclose`` itself is cancelled while it waits, async calls stay refused and the cache
        stays open to synchronous calls until it is closed."""
        with self._async_state:
            self._draining = True
            pending = list(self._in_flight)
            executor = self._executor
        if pending:
            await asyncio.wait([_when_done(f) for f in pending])
        if executor is None:  # no async call was made: close on a thread of its own
            executor = ThreadPoolExecutor(1, thread_name_prefix="mmcache-async")
        try:
            closing = executor.submit(self.close)  # it may wait for the cache's lock
            await _when_done(closing)
            closing.result()
        finally:
            executor.shutdown(wait=True)  # its threads are idle: joining them is immediate

    async def __aenter__(self) -> "TieredCache":
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def _in_thread(self, call: Callable[..., _T], /, *args: Any, **kwargs: Any) -> _T:
        """``call(*args, **kwargs)`` on the cache's executor (in the caller's contextvars),
        awaited without blocking the loop. The result or the very exception the call raised
        comes back; a cancelled caller leaves the call running to its end."""
        with self._async_state:
            self._check_open()
            if self._draining:
                raise MMCacheError("this TieredCache is closing (aclose)")
            if self._executor is None:
                self._executor = ThreadPoolExecutor(self._async_workers,
                                                    thread_name_prefix="mmcache-async")
            future = self._executor.submit(contextvars.copy_context().run, call, *args,
                                           **kwargs)
            self._in_flight.add(future)
        future.add_done_callback(self._finished)
        await _when_done(future)
        return future.result()

    def _finished(self, future: Future[Any]) -> None:
        with self._async_state:
            self._in_flight.discard(future)

    def _shutdown_executor(self, wait: bool) -> None:
        """Stop the async executor (calls already submitted still run: on a closed cache they
        raise MMCacheError); ``wait`` joins its threads."""
        with self._async_state:
            executor, self._executor = self._executor, None
        if executor is not None:
            executor.shutdown(wait=wait)

    @property
    def metrics(self) -> CacheMetrics:
        """Counters and latency histograms of this cache: the live object, not a copy.

        It has its own lock (see :mod:`mmcache.metrics`) rather than this cache's, so a
        thread can export (``to_dataframe``, ``to_prometheus``) or ``reset()`` it while
        others use the cache, without waiting for their calls (a put may be encoding);
        ``metrics.snapshot()`` is a consistent copy for reading several counters.
        """
        return self._metrics

    def events(self, code: str | None = None) -> list[FailureEvent]:
        """The failure events this cache emitted, oldest first: the last
        :data:`~mmcache.metrics.EVENTS_KEPT` (``metrics.failure_events`` counts every one); only
        those of ``code`` when given. The codes, causes and fixes:
        :data:`mmcache.metrics.FAILURE_CODES`."""
        return self._events.events(code)

    def dashboard(self, *, refresh_s: float = 0.5, window_s: float = 30.0,
                  live: bool | None = None, scope: str | None = None) -> Dashboard:
        """A live view of this cache for a notebook (:class:`mmcache.metrics.Dashboard`):
        display it in a cell, then stream queries through the cache in the next; it updates
        at most every ``refresh_s`` seconds over the last ``window_s``, with the threshold
        state of ``scope`` when one is named. ``.close()`` it to stop."""
        return Dashboard(self, refresh_s=refresh_s, window_s=window_s, live=live, scope=scope)

    def usage(self) -> dict[str, tuple[int, int]]:
        """``(entries, bytes)`` per tier name."""
        with self._lock:
            return {t.name: t.usage() for t in self.tiers}

    def tier(self, name: str) -> Tier:
        """The tier called ``name`` (``"l1"``, ``"l2"``, ``"l3"``)."""
        return self._tier(name)

    # -- display -------------------------------------------------------------------------
    def __repr__(self) -> str:
        return safe_display(self._plain, self)

    def _repr_html_(self) -> str:
        return safe_display(self._html, self, as_html=True)

    def to_dataframe(self) -> "pd.DataFrame":
        """One row per tier, as the notebook display shows them: ``tier``, ``backend``,
        ``policy``, ``entries``, ``bytes`` (None once closed), ``max_entries``, ``max_bytes``
        (None: unlimited), ``modality_sets`` (those it serves), ``shared``, ``semantic``,
        ``hits`` and ``hit_ratio`` (its hits ÷ every lookup). Counters: ``metrics``."""
        import pandas as pd  # deferred: pandas only for this export

        view = self._view()
        frame = pd.DataFrame([{k: t[k] for k in (
            "tier", "backend", "policy", "entries", "bytes", "max_entries", "max_bytes",
            "modality_sets", "shared", "semantic", "hits", "hit_ratio")} for t in view["tiers"]])
        sizes = ["entries", "bytes", "max_entries", "max_bytes"]
        return frame.astype({c: "Int64" for c in sizes})  # None: unlimited, or closed

    def _view(self) -> dict[str, Any]:
        """What a display shows, read without holding the lock for long: tier sizes, scopes
        and the rule's δ under one hold of it (waiting at most ``DISPLAY_LOCK_WAIT`` seconds;
        past that only what needs no lock), the counters from a metrics snapshot. It reads
        only what the cache holds in memory: no store I/O, no encoder loading."""
        locked = self._lock.acquire(timeout=DISPLAY_LOCK_WAIT)
        try:
            closed = getattr(self, "_closed", True)
            tiers = []
            for tier, served in zip(self.tiers, self._routes):
                used = None if closed else tier.usage()
                scan = locked and used is not None and used[0] <= DISPLAY_SCAN_LIMIT
                tiers.append({"tier": tier.name, "backend": tier.backend(),
                              "policy": _policy_name(tier), "entries": None if used is None
                              else used[0], "bytes": None if used is None else used[1],
                              "max_entries": tier.capacity.max_entries,
                              "max_bytes": tier.capacity.max_bytes,
                              "modality_sets": "all" if served >= set(SET_NAMES) else
                              ", ".join(n for n in SET_NAMES if n in served),
                              "shared": tier.shared, "semantic": tier.semantic,
                              "scopes": tier.scopes() if scan else None})
            deltas = dict(self.thresholds.deltas()) if locked else None
            encoders = {m: _component_name(e) for m, e in self._encoders.items() if m != VIDEO}
        finally:
            if locked:
                self._lock.release()
        snap = self._metrics.snapshot()
        lookups = sum(snap.hits.values()) + sum(snap.misses.values())
        for t in tiers:
            t["hits"] = sum(n for (name, _), n in snap.hits.items() if name == t["tier"])
            t["hit_ratio"] = t["hits"] / lookups if lookups else float("nan")
        th = self.config.thresholds
        return {"closed": closed, "locked": locked, "tiers": tiers, "metrics": snap,
                "lookups": lookups, "deltas": deltas, "rule": _component_name(self.thresholds),
                "verifier": "none" if self.verifier is None else _component_name(self.verifier),
                "settings": [(k, v) for k, v in rule_settings(th).items()
                             if k not in ("delta", "encoders")]
                if self.thresholds.name == th.rule else [],
                "encoders": {**{m: f"{n} (not loaded)" for m, n in self.config.encoders.items()
                                if m not in encoders}, **encoders}}

    def _plain(self) -> str:
        view = self._view()
        tiers = ", ".join(
            f"{t['tier']}: {t['backend'].replace(' + ', '+').split(' ')[0]} {t['policy']}" +
            ("" if t["entries"] is None else f" {t['entries']:,}"
             + ("" if t["max_entries"] is None else f"/{t['max_entries']:,}") + " entries")
            for t in view["tiers"])
        scopes = _scope_counts(view["tiers"])
        hits = sum(t["hits"] for t in view["tiers"])
        ratio = hits / view["lookups"] if view["lookups"] else float("nan")
        return (f"TieredCache({'closed; ' if view['closed'] else ''}{tiers}; "
                f"rule={view['rule']!r}, verifier={view['verifier']!r}"
                + ("" if scopes is None else f", scopes={len(scopes)}")
                + f", lookups={view['lookups']:,}, hit_ratio={fmt(ratio, 3)})")

    def _html(self) -> str:
        view = self._view()
        tiers = html_table(
            ["tier", "backend", "policy", "entries", "bytes", "max entries", "max bytes",
             "modality sets", "hits", "hit ratio"],
            [[t["tier"], t["backend"], t["policy"], t["entries"],
              None if t["bytes"] is None else fmt_bytes(t["bytes"]),
              "∞" if t["max_entries"] is None else t["max_entries"], fmt_bytes(t["max_bytes"]),
              t["modality_sets"], t["hits"], t["hit_ratio"]] for t in view["tiers"]],
            caption="Tiers (lookup order)")
        th = self.config.thresholds
        rule = html_fields([("rule", view["rule"]), *view["settings"],
                            *(("δ " + k, v) for k, v in sorted((view["deltas"] or {}).items())),
                            ("verifier", view["verifier"]),
                            ("verifier band / min", f"{fmt(th.verifier_band)} / "
                                                    f"{fmt(th.verifier_min)}"),
                            ("context δ", th.context_delta),
                            *((f"encoder {m}", e) for m, e in sorted(view["encoders"].items()))],
                           caption="Hit decision (δ: cosine ≥ 1 − δ)")
        counts = _scope_counts(view["tiers"])
        names = [t["tier"] for t in view["tiers"]]
        scopes = "" if counts is None else html_table(
            ["scope", *(f"entries {n}" for n in names)],
            [[scope, *(None if t["scopes"] is None else t["scopes"][scope]
                       for t in view["tiers"])]
             for scope, _ in counts.most_common()], caption=f"Scopes ({len(counts):,})",
            max_rows=20)
        note = "closed" if view["closed"] else None if view["locked"] else \
            "another call held the cache's lock: sizes read without it, scopes and δ not read"
        return html_card("TieredCache", tiers, rule, scopes,
                         *html_sections(view["metrics"], names), note=note)

    # -- writing -------------------------------------------------------------------------
    def _entry(self, query: Query, value: Any, lifetime: float | None, hints: dict[str, float],
               dims: dict[str, int], encode_times: list[float],
               kinds: list[str] | None = None) -> Entry:
        """The entry ``put`` would store, checked against ``dims`` (which then records its
        vectors' dims, so later items of a batch are checked against them too); its query's
        modality set is appended to ``kinds``."""
        prepared = prepare(query, dims, self.config.limits)
        kind = prepared.kind
        serving = [t for t, served in zip(self.tiers, self._routes) if kind in served]
        if not serving:
            raise InvalidInputError(f"no tier serves modality set {kind!r} (the tiers' "
                                    "modality_sets and route); nothing was stored")
        if lifetime is not None:
            lifetime = min(lifetime * self.config.freshness.ttl_factor(prepared.scope),
                           MAX_LIFETIME_S)
        stored = canonical_value(value)
        value_bytes = value_size(stored)
        if value_bytes > self.config.limits.value_bytes:
            raise SerializationError(f"value is {value_bytes:,} bytes encoded; limits.value_bytes "
                                     f"allows {self.config.limits.value_bytes:,}")
        encode_label(query.ground_truth)
        vectors, complete = self._vectors(prepared, dims, encode_times)
        if not complete:  # indexed under fewer modalities, it would answer other queries
            vectors = {}
        turns_vector = self._context_vector(prepared, encode_times)
        fingerprint = None if query.image is None else \
            image_fingerprint(query.image, self.config.limits.image_pixels)
        now = self._clock()
        size = value_bytes + sum(4 * len(v) for v in vectors.values()) + \
            _asked_size(query.text, prepared.context, turns_vector) + len(fingerprint or b"")
        if not any(t.capacity.admits(size) for t in serving):
            raise InvalidInputError(f"entry of {size} bytes is larger than every tier's "
                                    "max_bytes; nothing was stored")
        for modality, vec in vectors.items():
            if modality not in dims:
                check_ann_factory(self.config.l2, {modality: len(vec)})
            dims.setdefault(modality, len(vec))
        if kinds is not None:
            kinds.append(kind)
        return Entry(entry_id=prepared.key, scope=prepared.scope, exact_key=prepared.key,
                     value=stored, embeddings=vectors, size=size, created_at=now,
                     expires_at=None if lifetime is None else now + lifetime,
                     ground_truth=query.ground_truth, hints=hints, question=query.text,
                     context=prepared.context, context_vector=turns_vector,
                     image_fingerprint=fingerprint)

    def _write(self, entries: list[Entry], kinds: list[str],
               encode_times: list[float]) -> list[str | None]:
        """Write checked entries (of modality sets ``kinds``) through every tier that serves
        their set, durable first, one batch per run of entries a tier can hold; the result is
        that of one ``put`` per entry in order. Returns each entry's id, or None where no tier
        admitted it. Called without the lock: the store-backed tiers are written without it
        (:meth:`_write_stores`), then the tiers above under it (:meth:`_apply_write`); a write
        that reaches no store is made in one hold of the lock."""
        ids = [e.entry_id for e in entries]
        with self._lock:
            self._check_writable()
            self._check_dims([e.embeddings for e in entries])
            self._record_encodes(encode_times)
            if not self._reaches_store(kinds):
                return self._apply_write(entries, kinds, [])
            reserved = self._begin_writes(ids, entries)
        try:
            landed = self._unlocked_io(lambda: self._write_stores(entries, kinds))
            with self._lock:
                return self._apply_write(entries, kinds, landed)
        finally:
            self._end_writes(ids, reserved)

    def _reaches_store(self, kinds: Sequence[str]) -> bool:
        """Whether a store-backed tier serves one of the modality sets ``kinds``."""
        return any(isinstance(tier, StoreTier) and not served.isdisjoint(kinds)
                   for tier, served in zip(self.tiers, self._routes))

    def _begin_writes(self, entry_ids: Sequence[str], entries: Sequence[Entry]) -> list[str]:
        """Under the lock: register a write (or invalidation) of ``entry_ids`` as in flight, and
        reserve the dims its ``entries`` fix (the modalities reserved are returned)."""
        self._writing.update(entry_ids)
        self._writes += 1
        reserved = []
        for modality, vec in {m: v for e in entries for m, v in e.embeddings.items()}.items():
            if modality not in self._dims:
                self._reserved_dims.setdefault(modality, [len(vec), 0])[1] += 1
                reserved.append(modality)
        return reserved

    def _end_writes(self, entry_ids: Sequence[str], reserved: Sequence[str]) -> None:
        """Take the lock and end what :meth:`_begin_writes` began (the write applied or
        failed); ``close`` waits for the last one."""
        with self._lock:
            self._writing.subtract(entry_ids)
            for entry_id in entry_ids:
                if self._writing[entry_id] <= 0:
                    del self._writing[entry_id]
                    self._applied.pop(entry_id, None)
            for modality in reserved:
                self._reserved_dims[modality][1] -= 1
                if self._reserved_dims[modality][1] == 0:
                    del self._reserved_dims[modality]
            self._writes -= 1
            if self._writes == 0:
                self._writes_done.notify_all()

    def _write_stores(self, entries: list[Entry], kinds: list[str]) -> list[_StoreWrite]:
        """The store part of :meth:`_write`, without the lock (each tier lands its own
        writes one at a time): every store-backed tier, durable first, writes the runs of the entries routed
        to it that it can hold and deletes older versions of the others."""
        done = []
        for tier, served in zip(reversed(self.tiers), reversed(self._routes)):
            if not isinstance(tier, StoreTier):
                continue
            routed = [i for i, kind in enumerate(kinds) if kind in served]
            runs = [(fits, start, run, tier.put_landed(run) if fits
                     else tier.delete_landed([e.entry_id for e in run]))
                    for fits, start, run in _runs([entries[i] for i in routed], tier)]
            done.append(_StoreWrite(tier, routed, runs))
        return done

    def _apply_write(self, entries: list[Entry], kinds: list[str],
                     landed: Sequence[_StoreWrite]) -> list[str | None]:
        """Under the lock: account what the store part of a write did (``landed``), then write
        the tiers above the stores. An entry whose store call landed before another store call
        of its id already applied here is left out of them: that later one's result stands."""
        stored = [False] * len(entries)
        superseded: set[str] = set()
        for write in landed:
            for fits, start, run, done in write.runs:
                if fits:
                    self._account_run(write.tier, run, done.victims, done.admitted,
                                      write.routed[start:], stored)
                else:
                    self._uncover_below(write.tier)
            superseded |= self._claim_order(write.orders())
        for tier, served in zip(reversed(self.tiers), reversed(self._routes)):
            if isinstance(tier, StoreTier):
                continue
            routed = [i for i, kind in enumerate(kinds)
                      if kind in served and entries[i].entry_id not in superseded]
            for fits, start, run in _runs([entries[i] for i in routed], tier):
                if fits:
                    victims = tier.put_many(run)
                    self._account_run(tier, run, victims, tier.admitted(run), routed[start:],
                                      stored)
                else:
                    for entry in run:
                        tier.delete(entry.entry_id)  # an older, smaller version must not linger
                    self._uncover_below(tier)
        return self._finish_write(entries, stored)

    def _claim_order(self, orders: Mapping[str, int]) -> set[str]:
        """Under the lock: record, per entry id, the landing order of the store call about to be
        applied to the tiers above; return the ids a store call that landed later has already
        been applied for (this one is then superseded there)."""
        superseded = set()
        for entry_id, order in orders.items():
            if self._applied.get(entry_id, 0) > order:
                superseded.add(entry_id)
            else:
                self._applied[entry_id] = order
        return superseded

    def _account_run(self, tier: Tier, run: list[Entry], victims: list[str],
                     admitted: Sequence[bool], indexes: Sequence[int], stored: list[bool]) -> None:
        """Under the lock: the rule state, metrics and coverage after ``tier`` wrote ``run`` (the
        entries at ``indexes``), evicting ``victims``; ``stored`` marks those it admitted."""
        self._forget_rule_state(tier, victims)
        for i, ok in zip(indexes, admitted):
            stored[i] = stored[i] or ok
        self._metrics.count("evictions", tier.name, len(victims))
        self._metrics.count("puts", tier.name, len(run))
        if victims or self._missing(tier, run):
            self._uncover_below(tier)

    def _finish_write(self, entries: list[Entry], stored: list[bool]) -> list[str | None]:
        """Under the lock: each entry's id (None: no tier admitted it, counted), and the dims,
        guard and pending refreshes of those stored."""
        ids = [e.entry_id if ok else None for e, ok in zip(entries, stored)]
        for entry, entry_id in zip(entries, ids):
            if entry_id is None:
                self._metrics.count("not_stored", modality_set_name(entry.embeddings) or "none")
                continue
            for modality, vec in entry.embeddings.items():
                self._dims.setdefault(modality, len(vec))
            if self.guard is not None:
                self.guard.add(entry.entry_id)
            self._refreshing.pop(entry.entry_id, None)
        return ids

    def _apply_invalidation(self, key: str, landed: Sequence[tuple[StoreTier, Landed]]) -> bool:
        """Under the lock: after the store-backed tiers deleted ``key`` (``landed``), delete it
        from the tiers above, unless a store call of it that landed later was applied here
        already; whether any tier held it."""
        removed = any(done.victims for _, done in landed)
        superseded = set().union(*(self._claim_order({key: done.order}) for _, done in landed))
        if not superseded:
            removed = bool(self._delete_above_stores(key)) or removed
        self._forget_entry(key)
        return removed

    def _drop_above_stores(self, entry_id: str) -> None:
        """Under the lock: delete ``entry_id`` from the tiers that are not store-backed (an
        invalidation the store failed), searching below them again."""
        for tier in self._delete_above_stores(entry_id):
            self._uncover_below(tier)

    def _delete_above_stores(self, entry_id: str) -> list[Tier]:
        """Under the lock: delete ``entry_id`` from every tier that is not store-backed; the
        tiers that held it."""
        return [tier for tier in self.tiers
                if not isinstance(tier, StoreTier) and tier.delete(entry_id)]

    def _forget_entry(self, entry_id: str) -> None:
        """Under the lock: drop the rule's state and any pending refresh of ``entry_id``,
        which is leaving every tier."""
        self.thresholds.forget(entry_id)
        self._refreshing.pop(entry_id, None)

    def _held_in_memory(self, entry_id: str) -> bool:
        """Under the lock: whether a tier other than a store-backed one holds ``entry_id``."""
        return any(entry_id in tier for tier in self.tiers if not isinstance(tier, StoreTier))

    def _held_in_stores(self, entry_id: str) -> bool:
        """Whether a store-backed tier holds ``entry_id`` (store I/O: without the lock)."""
        return any(entry_id in tier for tier in self.tiers if isinstance(tier, StoreTier))

    def _known_in_stores(self, entry_id: str) -> bool:
        """Under the lock, without I/O: whether a store-backed tier's view holds ``entry_id``."""
        return any(tier.known_version(entry_id) is not None
                   for tier in self.tiers if isinstance(tier, StoreTier))

    def _missing(self, tier: Tier, run: list[Entry]) -> bool:
        """Whether semantic ``tier`` lacks an entry of ``run`` (its policy declined it) while a
        tier below is still covered by it (only then does it matter)."""
        below = self.tiers[self.tiers.index(tier) + 1:]
        return tier.semantic and any(self._covered[t.name] for t in below) and \
            any(e.entry_id not in tier for e in run)

    def _record_encodes(self, encode_times: list[float]) -> None:
        """Count encoder calls made while preparing entries that are now being stored."""
        for seconds in encode_times:
            self._metrics.time("encode", seconds)

    # -- lookup --------------------------------------------------------------------------
    def _lookup(self, query: Query, bypass: bool,
                origin_failed: bool) -> tuple[Hit | None, bool]:
        """The answer to ``query`` and whether to call ``on_stale`` for it: the exact tiers
        under the lock, then (after a miss) the query's encoders outside it, then the
        semantic tiers under it again; candidates that need the verifier are judged outside
        the lock and served under it only if they are still current. Store round trips are
        made outside the lock throughout (see the module docstring)."""
        self._check_open()
        start = time.perf_counter()
        dims = self._dims_now()
        prepared = prepare(query, dims, self.config.limits)
        unencoded = [m for m in prepared.modalities if m not in prepared.vectors]
        encodable = all(self._can_encode(m) for m in unencoded)
        context_pending = bool(prepared.context) and self._has_text_encoder()
        ready = not unencoded and not context_pending  # no encoder to run: search at once
        with self._lock:
            self._check_open()
            self._check_dims([prepared.vectors])
            if bypass or self._wants_bypass(prepared.text):
                self._metrics.count("bypasses", prepared.kind)
                return None, False
        self._revalidation_view(prepared.scope)  # store I/O without the lock
        answer, plan, stores = self._locked(
            self._exact_step(query, prepared, origin_failed, start, ready or encodable))
        if answer is not None:
            return answer
        for store in stores:  # what a search of it needs, without the lock
            self._unlocked_io(lambda: store.catch_up(prepared.scope, sweep=True))
        if ready:
            vectors, turns_vector = prepared.vectors, None
        else:
            vectors, _ = self._vectors(prepared, dims)
            turns_vector = self._context_vector(prepared)
        searched = self._search_outside(prepared, vectors, plan)  # faiss without the lock
        answer, nearest, pending = self._locked(self._semantic_step(
            query, prepared, vectors, turns_vector, origin_failed, searched, ready, start))
        if answer is not None:
            return answer
        verdicts = self._verdicts(query, pending)  # outside the lock: a slow judge blocks no one
        self._revalidation_view(prepared.scope)
        return self._locked(self._verified_step(query, prepared, pending, verdicts,
                                                origin_failed, nearest, start))

    def _locked(self, steps: _Steps[_T]) -> _T:
        """Run ``steps`` under the lock, except the store reads it asks for: each is made
        outside the lock (the tier guards its own view) and what it read is sent back;
        then the stores delete the entries the steps found expired (:meth:`_expire`)."""
        fetched: _Fetched | None = None
        while True:
            with self._lock:
                self._check_open()
                try:
                    fetch = next(steps) if fetched is None else steps.send(fetched)
                except StopIteration as done:
                    result = done.value
                    break
            fetched = self._unlocked_io(lambda: self._fetch(fetch))
        expired = self._expiring.__dict__.pop("entries", None)
        if expired:
            self._unlocked_io(lambda: self._delete_from_stores(expired))
        return result

    def _unlocked_io(self, call: Callable[[], _T]) -> _T:
        """``call()``, store I/O made without the lock; when the store fails because this
        cache was closed meanwhile, MMCacheError ("closed") instead."""
        try:
            return call()
        except StorageError:
            self._check_open()
            raise

    def _fetch(self, fetch: _Fetch) -> _Fetched:
        """The read ``fetch`` asks for, made without the lock."""
        resyncs = fetch.tier.resyncs
        start = time.perf_counter()
        entry = fetch.tier.get(fetch.scope, fetch.entry_id)
        return _Fetched(entry, resyncs, time.perf_counter() - start)

    def _read(self, tier: Tier, scope: str, entry_id: str
              ) -> _Steps[tuple[Entry | None, float]]:
        """Steps of :meth:`_locked`: ``tier.get(scope, entry_id)`` and its seconds. A
        store-backed tier is read outside the lock, and what was read is used only while the
        tier's view of the entry is the one it had then (else it is read again, at most
        ``STORE_READS`` times in all; then None)."""
        if not isinstance(tier, StoreTier):
            start = time.perf_counter()
            entry = tier.get(scope, entry_id)
            return entry, time.perf_counter() - start
        seconds = 0.0
        for _ in range(STORE_READS):
            fetched = yield _Fetch(tier, scope, entry_id)
            seconds += fetched.seconds
            if _still_read(tier, fetched):
                return fetched.entry, seconds
        return None, seconds

    def _exact_step(self, query: Query, p: PreparedQuery, origin_failed: bool, start: float,
                    searchable: bool) -> _Steps[tuple[tuple[Hit | None, bool] | None,
                                                      tuple[int, SemanticTier, int,
                                                            dict[str, float]] | None,
                                                      list[StoreTier]]]:
        """Steps of :meth:`_locked`: the exact lookup, then the answer when the lookup ends
        there (a hit, or no vectors to search with), else the in-memory search to make
        outside the lock (:meth:`_search_plan`) and the store-backed tiers to catch up
        before searching."""
        found = yield from self._exact(p, self._clock(), origin_failed)
        if found is not None or not searchable:
            return self._answer(query, p, found, None, start), None, []
        return None, self._search_plan(p), self._searched_stores(p)

    def _semantic_step(self, query: Query, p: PreparedQuery, vectors: Mapping[str, np.ndarray],
                       turns_vector: np.ndarray | None, origin_failed: bool,
                       searched: Mapping[int, _Searched], ready: bool, start: float
                       ) -> _Steps[tuple[tuple[Hit | None, bool] | None,
                                         dict[str, float] | None, list[_Pending]]]:
        """Steps of :meth:`_locked`: the semantic lookup, then its answer, or (None and) the
        nearest similarities and the candidates to judge outside the lock."""
        if not ready:
            self._check_dims([vectors])
        found, nearest, pending = yield from self._semantic(p, vectors, turns_vector,
                                                            self._clock(), origin_failed,
                                                            searched)
        if pending:
            return None, nearest, pending
        return self._answer(query, p, found, nearest, start), nearest, pending

    def _verified_step(self, query: Query, p: PreparedQuery, pending: Sequence[_Pending],
                       verdicts: Sequence[dict[str, float] | None], origin_failed: bool,
                       nearest: dict[str, float] | None,
                       start: float) -> _Steps[tuple[Hit | None, bool]]:
        """Steps of :meth:`_locked`: serve the first judged candidate still servable, and
        answer."""
        found = yield from self._serve_verified(p, pending, verdicts, self._clock(),
                                                origin_failed)
        return self._answer(query, p, found, nearest, start)

    def _answer(self, query: Query, p: PreparedQuery, found: _Found | None,
                nearest: Mapping[str, float] | None,
                start: float) -> tuple[Hit | None, bool]:
        """Count the outcome of a lookup, show it to the threshold rule (every lookup's
        nearest similarities) and remember a hit for ``feedback``; return the hit and whether
        this call is the one to start its refresh."""
        modalities = p.kind
        if found is not None:
            nearest = found[0].similarities
        self.thresholds.observe_lookup(p.scope, p.modalities, nearest)
        if found is None or found[0].explored:
            self._metrics.count("misses", modalities)
            self._metrics.time("get", time.perf_counter() - start)
            return None if found is None else self._remember(found[0], p, 0.0), False
        hit, entry, charged = found
        hit = self._remember(hit, p, charged)
        correct = None if query.ground_truth is None or entry.ground_truth is None \
            else query.ground_truth == entry.ground_truth
        self._metrics.hit(hit.tier, modalities, hit.freshness, correct)
        self._metrics.time("get", time.perf_counter() - start)
        return hit, hit.freshness == "stale-while-revalidate" and self._claims_refresh(hit)

    def _remember(self, hit: Hit, p: PreparedQuery, charged: float) -> Hit:
        """``hit`` with this lookup's serial, remembered for ``feedback``."""
        hit = dataclasses.replace(hit, lookup=next(self._serial))
        self._served[hit.lookup] = (hit.entry_id, p.scope, dict(hit.similarities),
                                    hit.entry_id != p.key, charged)
        if len(self._served) > FEEDBACK_WINDOW:
            self._served.popitem(last=False)
        return hit

    def _claims_refresh(self, hit: Hit) -> bool:
        """Whether ``on_stale`` should be called for ``hit``'s entry now: not while an earlier
        call's refresh is pending (until the entry is put again or REFRESH_TIMEOUT passes)."""
        if self._on_stale is None:
            return False
        now = self._clock()
        if self._refreshing.get(hit.entry_id, -math.inf) > now:
            return False
        if len(self._refreshing) >= 1024:  # forget refreshes that timed out
            self._refreshing = {k: t for k, t in self._refreshing.items() if t > now}
        self._refreshing[hit.entry_id] = now + REFRESH_TIMEOUT
        return True

    def _exact(self, p: PreparedQuery, now: float, origin_failed: bool) -> _Steps[_Found | None]:
        """Steps of :meth:`_locked`: the first servable copy of ``p``'s key, in tier order."""
        maybe = self.guard is None or self.guard.might_contain(p.key)
        kind = p.kind
        for level, tier in enumerate(self.tiers):
            if not self._probes(tier) or kind not in self._routes[level]:
                continue
            if not maybe and not tier.shared:
                self._metrics.count("guard_skips", f"{tier.name}:bloom")
                continue
            entry, seconds = yield from self._read(tier, p.scope, p.key)
            self._metrics.time(f"{tier.name}.exact", seconds)
            if entry is None or not self._current(entry, level):
                continue
            freshness = self._freshness(entry, now, origin_failed)
            if freshness is None:
                continue
            self._promote(entry, level, kind)
            return self._hit(entry, tier.name, freshness, {m: 1.0 for m in p.modalities}), \
                entry, 0.0
        return None

    def _searched_levels(self, kind: str) -> Iterator[tuple[int, Tier]]:
        """The semantic tiers (with their levels) a lookup of modality set ``kind`` searches,
        in order (under the lock)."""
        for level, tier in enumerate(self.tiers):
            # a covered tier holds nothing of this set that a semantic tier above serving it
            # lacks, unless that one is skipped
            if not tier.semantic or not self._probes(tier) or kind not in self._routes[level] \
                    or (self._covered[tier.name] and self.probe is None and
                        self._served_above(level, kind)):
                continue
            yield level, tier

    def _searched_stores(self, p: PreparedQuery) -> list[StoreTier]:
        """The store-backed tiers a lookup of ``p`` searches (under the lock)."""
        return [tier for _, tier in self._searched_levels(p.kind)
                if isinstance(tier, StoreTier)]

    def _revalidation_view(self, scope: str) -> None:
        """Bring the shared store's view of ``scope`` as up to date as revalidating a copy of
        it needs (``max_staleness``), without the lock: copies above the store found under
        it are then revalidated against that view (:meth:`_current`)."""
        store = self._shared_store
        if store is not None:
            self._unlocked_io(lambda: store.catch_up(scope, store.max_staleness))

    def _search_plan(self, p: PreparedQuery) -> tuple[int, SemanticTier, int,
                                                      dict[str, float]] | None:
        """Under the lock, what :meth:`_search_outside` may search without it: the first
        semantic tier a lookup of ``p`` searches when it is an in-memory one (its level, the
        tier, its ``writes`` now, the rule's floors now); None when there is none, or when
        δ = 0 leaves only exact lookups."""
        first = next(self._searched_levels(p.kind), None)
        if first is None or not isinstance(first[1], SemanticTier):
            return None
        floors = {m: self.thresholds.floor(m) for m in p.modalities}
        if any(f > 1.0 for f in floors.values()):
            return None
        return first[0], first[1], first[1].writes, floors

    def _search_outside(self, p: PreparedQuery, vectors: Mapping[str, np.ndarray],
                        plan: tuple[int, SemanticTier, int, dict[str, float]] | None
                        ) -> dict[int, _Searched]:
        """The planned search, run without the cache's lock (the tier's index guards itself,
        and other threads search beside it): {level: (the tier's ``writes`` when planned, the
        floors, the candidates, whether the spherical cap skipped it, seconds)}.
        :meth:`_semantic` uses it only while the tier has not changed since it was planned
        and the floors are the same, so the answer is the one a search under the lock gives."""
        if plan is None or len(vectors) != len(p.modalities):
            return {}
        level, tier, writes, floors = plan
        start = time.perf_counter()
        candidates, skipped = tier.find(p.scope, vectors, floors, SEARCH_K)
        return {level: (writes, floors, candidates, skipped, time.perf_counter() - start)}

    def _semantic(self, p: PreparedQuery, vectors: Mapping[str, np.ndarray],
                  turns_vector: np.ndarray | None, now: float, origin_failed: bool,
                  searched: Mapping[int, _Searched] | None = None
                  ) -> _Steps[tuple[_Found | None, dict[str, float] | None, list[_Pending]]]:
        """Steps of :meth:`_locked`, over the semantic tiers: the first servable δ-neighbour,
        served, or, when accepted candidates before it need the verifier, those candidates
        (and it, as the fallback) to judge; and the similarities of the nearest candidate
        seen (None: none reached the search floor). ``searched``: searches made outside the lock
        (:meth:`_search_outside`), used where still valid; other tiers are searched here."""
        if len(vectors) != len(p.modalities):
            return None, None, []
        floors = {m: self.thresholds.floor(m) for m in vectors}
        if any(f > 1.0 for f in floors.values()):  # δ = 0: exact only
            return None, None, []
        nearest: dict[str, float] | None = None
        pending: list[_Pending] = []
        kind = p.kind
        for level, tier in self._searched_levels(kind):
            start = time.perf_counter()
            outside = (searched or {}).get(level)
            if outside is not None and outside[0] == getattr(tier, "writes", None) and \
                    outside[1] == floors:
                _, _, candidates, skipped, seconds = outside
                start -= seconds
                if skipped:
                    self._metrics.count("guard_skips", f"{tier.name}:cap")
            else:  # the tier changed meanwhile (or was not searched): search it again
                candidates = self._search(tier, p.scope, vectors, floors)
            ready = None
            for cand in candidates:
                if nearest is None or min(cand.similarities.values()) > min(nearest.values()):
                    nearest = dict(cand.similarities)
                # a rule explores a candidate only while none before it waits for the verifier
                explore = not pending and \
                    self.thresholds.explores(cand.similarities, cand.entry_id, p.scope)
                if not explore and \
                        not self.thresholds.accepts(cand.similarities, cand.entry_id, p.scope):
                    continue
                entry, _ = yield from self._read(tier, p.scope, cand.entry_id)
                if entry is not None and not self._current(entry, level):
                    entry = None
                freshness = None if entry is None else self._freshness(entry, now, origin_failed)
                if freshness is None or not self._context_matches(p, turns_vector, entry):
                    continue
                if explore:
                    self._metrics.time(f"{tier.name}.semantic", time.perf_counter() - start)
                    return self._explored(entry, tier.name, freshness, cand), nearest, []
                judge = self._needs_verifier(p, cand.similarities, entry)
                pending.append(_Pending(level, entry, freshness, dict(cand.similarities), judge))
                if not judge:
                    ready = pending[-1]
                    break
            self._metrics.time(f"{tier.name}.semantic", time.perf_counter() - start)
            if ready is not None:
                if len(pending) > 1:
                    return None, nearest, pending
                return self._serve(p, ready, {}), nearest, []
        return None, nearest, pending

    def _needs_verifier(self, p: PreparedQuery, sims: Mapping[str, float], entry: Entry) -> bool:
        """Whether an accepted candidate goes to the verifier: there is one and the candidate
        is less than ``thresholds.verifier_band`` above the rule's threshold."""
        return self.verifier is not None and \
            self.thresholds.margin(sims, entry.entry_id, p.scope) < \
            self.config.thresholds.verifier_band

    def _verdicts(self, query: Query, pending: Sequence[_Pending]) -> list[dict[str, float] | None]:
        """The evidence to serve each pending candidate with, in order ({}: it needs no
        verifier; None: vetoed, or not judged because an earlier one passed). Runs outside
        the lock."""
        verdicts: list[dict[str, float] | None] = []
        for cand in pending:
            if verdicts and verdicts[-1] is not None:
                verdicts.append(None)
            elif not cand.judge:
                verdicts.append({})
            else:
                self._metrics.count("verifier_calls", self.tiers[cand.level].name)
                probability = checked_probability(self.verifier(query, cand.entry), self.verifier)
                verdicts.append({"verifier": probability}
                                if probability >= self.config.thresholds.verifier_min else None)
        return verdicts

    def _serve_verified(self, p: PreparedQuery, pending: Sequence[_Pending],
                        verdicts: Sequence[dict[str, float] | None], now: float,
                        origin_failed: bool) -> _Steps[_Found | None]:
        """Steps of :meth:`_locked`: serve the first judged candidate that is still the entry
        its tier holds, still servable and still accepted with its evidence."""
        for cand, evidence in zip(pending, verdicts):
            if evidence is None:
                continue
            entry, _ = yield from self._read(self.tiers[cand.level], p.scope,
                                             cand.entry.entry_id)
            if entry is None or not _same_write(entry, cand.entry) or \
                    not self._current(entry, cand.level) or \
                    self._freshness(entry, now, origin_failed) is None or \
                    not self.thresholds.accepts(cand.similarities, entry.entry_id, p.scope,
                                                evidence):
                continue
            return self._serve(p, dataclasses.replace(cand, entry=entry), evidence)
        return None

    def _serve(self, p: PreparedQuery, cand: _Pending, evidence: Mapping[str, float]) -> _Found:
        """Serve an accepted candidate: the rule charges it, the tiers above back-fill it."""
        charged = self.thresholds.served(cand.similarities, cand.entry.entry_id, p.scope,
                                         evidence)
        self._promote(cand.entry, cand.level, p.kind)
        hit = self._hit(cand.entry, self.tiers[cand.level].name, cand.freshness,
                        cand.similarities)
        if "verifier" in evidence:
            hit = dataclasses.replace(hit, verdict=evidence["verifier"])
        return hit, cand.entry, charged

    def _explored(self, entry: Entry, tier: str, freshness: str, cand: Candidate) -> _Found:
        """A candidate the rule explores: not served, not promoted, charged nothing; handed
        back marked ``explored`` for the caller to label."""
        hit = self._hit(entry, tier, freshness, cand.similarities)
        return dataclasses.replace(hit, explored=True), entry, 0.0

    def _served_above(self, level: int, kind: str) -> bool:
        """Whether a semantic tier above ``level`` serves modality set ``kind``."""
        return any(t.semantic and kind in served
                   for t, served in zip(self.tiers[:level], self._routes))

    def _probes(self, tier: Tier) -> bool:
        """Whether gets consult ``tier`` (see :attr:`probe`)."""
        return self.probe is None or tier.name in self.probe

    def _context_matches(self, p: PreparedQuery, turns_vector: np.ndarray | None,
                         entry: Entry) -> bool:
        """Whether the candidate's conversation context is close enough to the query's."""
        sim = context_similarity(p.context, turns_vector, entry.context, entry.context_vector)
        return sim is None or sim >= 1.0 - self.config.thresholds.context_delta

    def _search(self, tier: Tier, scope: str, vectors: Mapping[str, np.ndarray],
                floors: Mapping[str, float]) -> list[Candidate]:
        """``tier.search``, counting searches its spherical-cap pre-check skipped (an in-memory
        semantic tier, which other threads search outside the lock, says so itself, and so
        does a store-backed tier, searched in its view without store I/O)."""
        if isinstance(tier, (SemanticTier, StoreTier)):
            candidates, skipped = tier.find(scope, vectors, floors, SEARCH_K)
        else:  # another semantic tier: searched under the lock
            index = getattr(tier, "index", None)
            before = getattr(index, "skipped", 0)
            candidates = tier.search(scope, vectors, floors, SEARCH_K)
            skipped = getattr(index, "skipped", 0) != before
        if skipped:
            self._metrics.count("guard_skips", f"{tier.name}:cap")
        return candidates

    def _hit(self, entry: Entry, tier: str, freshness: str,
             similarities: Mapping[str, float]) -> Hit:
        sims = {m: min(1.0, float(s)) for m, s in similarities.items()}
        return Hit(value=detached(entry.value), tier=tier, similarity=min(sims.values()),
                   entry_id=entry.entry_id, freshness=freshness, similarities=sims)

    def _freshness(self, entry: Entry, now: float, origin_failed: bool) -> str | None:
        """How ``entry`` may be served now (None: not at all; purged once past every window)."""
        if entry.expires_at is None or now < entry.expires_at:
            return "fresh"
        age = now - entry.expires_at
        fr = self.config.freshness
        if age < fr.stale_while_revalidate:
            return "stale-while-revalidate"
        if origin_failed and age < fr.stale_if_error:
            return "stale-if-error"
        if age >= max(fr.stale_while_revalidate, fr.stale_if_error):
            self._expire(entry)
        return None

    def _expire(self, entry: Entry) -> None:
        """Drop ``entry``, past every window, from the tiers above the stores now, and have
        the stores compare-and-delete its version after this lookup, without the lock (a newer
        write of its key stays)."""
        self._delete_above_stores(entry.entry_id)
        self._forget_entry(entry.entry_id)
        self._expiring.__dict__.setdefault("entries", {})[entry.entry_id] = entry.version

    def _delete_from_stores(self, versions: Mapping[str, int]) -> None:
        """Compare-and-delete each entry id's version from every store-backed tier."""
        for tier in self.tiers:
            if isinstance(tier, StoreTier):
                for entry_id, version in versions.items():
                    tier.delete(entry_id, version)

    def _promote(self, entry: Entry, level: int, kind: str) -> None:
        """Back-fill ``entry`` (of modality set ``kind``) into every tier above ``level`` that
        serves its set and can hold it."""
        for tier, served in zip(self.tiers[:level], self._routes):
            if kind in served and tier.capacity.admits(entry.size):
                victims = tier.put(entry)
                self._metrics.count("evictions", tier.name, len(victims))
                if victims:
                    self._uncover_below(tier)
        if level > 0 and self.guard is not None:
            self.guard.add(entry.entry_id)  # the private tiers above now hold it

    def _current(self, entry: Entry, level: int) -> bool:
        """Whether ``entry``, found in tier ``level``, is the version a shared store below holds
        in its view (which the lookup caught up with before: :meth:`_revalidation_view`); a
        stale private copy is dropped from the tiers above the store. A copy above a store is
        not current while a write of its key is in flight (:meth:`_write`): it is kept, and the
        lookup goes on to the store."""
        if level < self._store_level and entry.entry_id in self._writing:
            return False  # a write of it is in flight: the store has the answer (kept here)
        store = self._shared_store
        if store is None or self.tiers.index(store) <= level:
            return True
        version = store.known_version(entry.entry_id)
        above = self.tiers[:self.tiers.index(store)]
        if store.resyncs != self._store_resyncs:  # versions from before may be reused now
            self._store_resyncs = store.resyncs
            for tier in above:
                for entry_id in list(tier.ids()):
                    tier.delete(entry_id)
                self._uncover_below(tier)
            return False
        if version == entry.version:
            return True
        for tier in above:
            tier.delete(entry.entry_id)
        return False

    def _uncover_below(self, tier: Tier) -> None:
        """Entries may have left semantic ``tier`` while staying below it: search below again."""
        if tier.semantic:
            for lower in self.tiers[self.tiers.index(tier) + 1:]:
                self._cover(lower, False)

    def _cover(self, tier: Tier, covered: bool) -> None:
        """Record whether ``tier`` is covered; a covered tier builds no ANN index."""
        if self._covered[tier.name] != covered:
            self._covered[tier.name] = covered
            index = getattr(tier, "index", None)
            if tier.semantic and index is not None:
                index.defer_ann(covered)

    def _forget_rule_state(self, tier: Tier, victims: Sequence[str]) -> None:
        """Drop the threshold rule's state of entries evicted from the last tier, their most
        durable home (copies above it then fall back to the rule's prior)."""
        if tier is self.tiers[-1]:
            for entry_id in victims:
                self.thresholds.forget(entry_id)

    def _purge(self, entry_id: str) -> bool:
        """Delete ``entry_id`` from every tier of a cache without a store."""
        removed = [tier.delete(entry_id) for tier in self.tiers]
        self._forget_entry(entry_id)
        return any(removed)

    # -- inputs --------------------------------------------------------------------------
    def _vectors(self, p: PreparedQuery, dims: Mapping[str, int],
                 encode_times: list[float] | None = None) -> tuple[dict[str, np.ndarray], bool]:
        """Unit vectors for the query's modalities (encoding raw inputs when an encoder
        exists; checked against ``dims``) and whether every modality has one; encoding
        seconds go to ``encode_times`` when given, else straight to the metrics. Callers
        run it outside the lock and check the dims again under it (``_check_dims``)."""
        vectors = dict(p.vectors)
        for modality in p.modalities:
            if modality in vectors:
                continue
            encoder = self._encoder(modality)
            if encoder is None:
                continue
            start = time.perf_counter()
            raw = np.asarray(encoder.encode([p.raw[modality]]))[0]
            vectors[modality] = unit_vector(raw.astype(np.float32, copy=False), modality,
                                            dims.get(modality))
            seconds = time.perf_counter() - start
            if encode_times is None:
                self._metrics.time("encode", seconds)
            else:
                encode_times.append(seconds)
        return vectors, len(vectors) == len(p.modalities)

    def _has_text_encoder(self) -> bool:
        return self._can_encode("text")

    def _can_encode(self, channel: str) -> bool:
        """Whether this cache has, or can load, the encoder of ``channel`` (a clip's keyframes:
        the image encoder's)."""
        return channel in self._encoders or _encoded_by(channel) in self.config.encoders

    def _context_vector(self, p: PreparedQuery,
                        encode_times: list[float] | None = None) -> np.ndarray | None:
        """The unit context vector of the query's relevant turns (None: no context or no text
        encoder; the context channel then compares the turns themselves)."""
        encoder = self._encoder("text") if p.context else None
        if encoder is None:
            return None
        start = time.perf_counter()
        vector = context_vector(np.asarray(encoder.encode(turn_texts(p.context)), np.float32))
        seconds = time.perf_counter() - start
        if encode_times is None:
            self._metrics.time("encode", seconds)
        else:
            encode_times.append(seconds)
        return vector

    def _dims_now(self) -> dict[str, int]:
        """A copy of the embedding dimension per modality, to check inputs outside the lock."""
        with self._lock:
            return dict(self._dims)

    def _check_dims(self, vector_sets: Sequence[Mapping[str, np.ndarray]]) -> None:
        """Under the lock: InvalidEmbeddingError if a vector's dimension differs from the one
        this cache expects now (another thread may have fixed it since the check outside the
        lock); vector sets earlier in the sequence fix dims for later ones, as a batch does."""
        dims = {m: dim for m, (dim, _) in self._reserved_dims.items()}
        dims.update(self._dims)
        for vectors in vector_sets:
            for modality, vec in vectors.items():
                expected = dims.setdefault(modality, len(vec))
                if expected != len(vec):
                    raise InvalidEmbeddingError(f"{modality} embedding has dimension "
                                                f"{len(vec)}; this cache expects {expected}")

    def _encoder(self, channel: str) -> Encoder | None:
        """The encoder of ``channel`` (a clip's keyframes: the image encoder's keyframe mean),
        loading one named in the config on first use (outside the cache's lock, so loading a
        model stalls only the calls that need it)."""
        modality = _encoded_by(channel)
        if modality not in self._encoders and modality in self.config.encoders:
            with self._loading:
                if modality not in self._encoders:
                    encoder = make_encoder(self.config.encoders[modality])
                    with self._lock:
                        self._add_encoder(modality, encoder)
        return self._encoders.get(channel)

    def _add_encoder(self, modality: str, encoder: Encoder) -> None:
        if modality not in MODALITIES:
            raise ConfigError(f"encoders: unknown modality {modality!r}; known: {list(MODALITIES)}"
                              + (" (a clip's keyframes go through the image encoder)"
                                 if modality == VIDEO else ""))
        if not callable(getattr(encoder, "encode", None)) or not isinstance(
                getattr(encoder, "dim", None), int):
            raise ConfigError(f"encoders.{modality} must have encode(inputs) and an int dim")
        known = self._dims.get(modality)
        if known is not None and known != encoder.dim:
            raise ConfigError(f"encoders.{modality} has dim {encoder.dim} but dims.{modality} "
                              f"is {known}")
        check_ann_factory(self.config.l2, {modality: encoder.dim})
        self._dims[modality] = encoder.dim
        self._encoders[modality] = encoder
        if modality == "image":
            self._encoders[VIDEO] = KeyframeMeanEncoder(encoder)

    def _lifetime(self, ttl: float | None) -> float | None:
        if ttl is None:
            return self.config.freshness.ttl
        if isinstance(ttl, bool) or not isinstance(ttl, (int, float)) or not (
                0 < ttl <= MAX_LIFETIME_S):
            raise InvalidInputError(f"ttl must be a positive number of seconds up to "
                                    f"{MAX_LIFETIME_S:.0f} (ten years), got {ttl!r}; "
                                    "ttl=None uses freshness.ttl")
        return float(ttl)

    def _wants_bypass(self, text: str | None) -> bool:
        return text is not None and any(t in text for t in self.config.freshness.bypass_tokens)

    # -- housekeeping --------------------------------------------------------------------
    def _encoder_facts(self) -> dict[str, str]:
        """``encoder:<modality>`` -> what makes that modality's vectors: the encoder's
        ``encoder_id``, or its registry name when the config names it."""
        facts = {f"encoder:{m}": f"registry:{name}" for m, name in self.config.encoders.items()}
        facts.update((f"encoder:{m}", e.encoder_id) for m, e in self._encoders.items()
                     if m != VIDEO and isinstance(getattr(e, "encoder_id", None), str))
        return facts

    def _adopt_stored_entries(self) -> None:
        """Learn dims and exact keys of entries already in persistent tiers; an empty
        private tier below a semantic one starts covered by it."""
        above_semantic = False
        for tier in self.tiers:
            self._cover(tier, above_semantic and not tier.shared and len(tier) == 0)
            above_semantic = above_semantic or tier.semantic
            for modality, dim in tier.dims().items():
                if self._dims.setdefault(modality, dim) != dim:
                    raise ConfigError(f"tier {tier.name} holds {modality} vectors of dim {dim}, "
                                      f"but this cache expects {self._dims[modality]}")
            if self.guard is not None and not tier.shared:
                for entry_id in tier.ids():
                    self.guard.add(entry_id)

    def _tier(self, name: str) -> Tier:
        for tier in self.tiers:
            if tier.name == name:
                return tier
        raise ConfigError(f"no tier named {name!r}; this cache has "
                          f"{[t.name for t in self.tiers]}")

    def _check_open(self) -> None:
        if self._closed:
            raise MMCacheError("this TieredCache is closed")

    def _check_writable(self) -> None:
        """Under the lock: MMCacheError when closed, or closing (``close`` waits for the writes
        in flight and refuses new ones)."""
        if self._closed or self._closing:
            raise MMCacheError("this TieredCache is closed")

    def _unless_the_store_fails(self, call: Callable[[], _T], failed: _T) -> _T:
        """``call()``; when a store tier fails inside it and ``l3.on_error`` is ``degrade``,
        ``failed`` instead, counted in ``metrics.errors`` and logged once per outage (a
        failing call changes nothing stored, so the cache stays as before)."""
        try:
            result = call()
        except StorageError as exc:
            if self.config.l3.on_error == "raise":
                raise
            self._metrics.count("errors", "l3")
            if not self._store_failing:
                self._store_failing = True
                _LOG.warning("the cache's store fails (%s): gets are misses and puts store "
                             "nothing until it answers again (l3.on_error: raise raises "
                             "instead)", exc)
            return failed
        if self._store_failing:
            self._store_failing = False
            _LOG.warning("the cache's store answers again")
        return result


def _policy_name(tier: Tier) -> str:
    """The registry name of a tier's eviction policy ("?" for a tier without a budget)."""
    budget = getattr(tier, "_budget", None)
    return "?" if budget is None else _component_name(budget.policy)


def _component_name(component: Any) -> str:
    """A name for a rule, verifier, policy or encoder: its registry ``name``, ``encoder_id``
    or ``__name__``, else its type's name (never a repr with an address)."""
    for attr in ("name", "encoder_id", "__name__"):
        value = getattr(component, attr, None)
        if isinstance(value, str) and value:
            return value if len(value) <= 60 else value[:59] + "…"
    return type(component).__name__


def _scope_counts(tiers: Sequence[Mapping[str, Any]]) -> "Counter[str] | None":
    """Entries per scope summed over the tiers whose scopes a display read (None: none)."""
    read = [t["scopes"] for t in tiers if t["scopes"] is not None]
    if not read:
        return None
    total: Counter[str] = Counter()
    for counts in read:
        total.update(counts)
    return total


def _when_done(future: Future[Any]) -> asyncio.Future[None]:
    """An asyncio future of the running loop that is set (to None) once ``future`` is done.
    Cancelling it does not cancel ``future`` (unlike ``asyncio.wrap_future``), and ``future``'s
    exception stays with it, for the caller that still awaits it to raise."""
    loop = asyncio.get_running_loop()
    waiter = loop.create_future()

    def settle(_: Future[Any]) -> None:
        if not waiter.done():
            waiter.set_result(None)

    def relay(done: Future[Any]) -> None:  # on the worker thread
        try:
            loop.call_soon_threadsafe(settle, done)
        except RuntimeError:  # the loop has closed: nobody waits any more
            pass

    future.add_done_callback(relay)
    return waiter


def _encoded_by(channel: str) -> str:
    """The modality whose encoder embeds ``channel`` (a clip's keyframes: the image's)."""
    return "image" if channel == VIDEO else channel


def _checked_hints(hints: Mapping[str, float] | None) -> dict[str, float]:
    """``hints`` as an entry stores them; InvalidInputError naming the first bad one."""
    if hints is None:
        return {}
    if not isinstance(hints, Mapping):
        raise InvalidInputError(f"hints must be a mapping of {list(HINT_NAMES)} to numbers, "
                                f"got {type(hints).__name__}")
    checked = {}
    for name, value in hints.items():
        if name not in HINT_NAMES:
            raise InvalidInputError(f"unknown hint {name!r}; known hints: {list(HINT_NAMES)}")
        number, positive = _real(value), name == "cost"
        if not math.isfinite(number) or number < 0 or (positive and number == 0):
            raise InvalidInputError(f"hint {name!r} must be a finite number "
                                    f"{'> 0' if positive else '>= 0'}, got {value!r}")
        checked[name] = number
    return checked


def _asked_size(question: str | None, context: Sequence[tuple[str, str]],
                turns_vector: np.ndarray | None) -> int:
    """Bytes an entry spends on what it was asked: question, context turns, context vector."""
    turns = sum(len(role.encode()) + len(content.encode()) for role, content in context)
    vector = 0 if turns_vector is None else 4 * len(turns_vector)
    return len((question or "").encode()) + turns + vector


def _still_read(tier: StoreTier, fetched: _Fetched) -> bool:
    """Whether what was read from ``tier`` outside the lock is still its view: no resync since,
    and the entry read (if any) is the version the tier knows now."""
    return tier.resyncs == fetched.resyncs and (
        fetched.entry is None or
        tier.known_version(fetched.entry.entry_id) == fetched.entry.version)


def _same_write(a: Entry, b: Entry) -> bool:
    """Whether two copies of an entry come from the same write (what a verifier judged)."""
    return a is b or (a.version, a.created_at, a.question, a.context, a.value) == \
        (b.version, b.created_at, b.question, b.context, b.value)


def _real(value: Any) -> float:
    """``value`` as a float, or nan when it is not a real number (bools are not)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        return math.nan
    try:
        return float(value)
    except OverflowError:
        return math.inf


def _hints_per_item(hints: Sequence[Mapping[str, float] | None] | None,
                    n: int) -> list[Mapping[str, float] | None]:
    """``put_many``'s hints as one entry per item (None: no hints)."""
    if hints is None:
        return [None] * n
    if isinstance(hints, (Mapping, str, bytes)) or not isinstance(hints, Sequence):
        raise InvalidInputError("put_many hints must be a sequence of mappings, one per item, "
                                f"got {type(hints).__name__}")
    if len(hints) != n:
        raise InvalidInputError(f"put_many got {n} queries but {len(hints)} hints")
    return list(hints)


def _runs(entries: list[Entry], tier: Tier) -> Iterator[tuple[bool, int, list[Entry]]]:
    """Consecutive entries grouped by whether ``tier``'s capacity can hold them, each run with
    the index of its first entry."""
    start = 0
    for fits, group in itertools.groupby(entries, lambda e: tier.capacity.admits(e.size)):
        run = list(group)
        yield fits, start, run
        start += len(run)
