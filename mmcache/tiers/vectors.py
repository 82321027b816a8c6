"""Vector search for the semantic tiers: one index per (scope, modality set, modality).

Each :class:`VectorIndex` keeps its L2-normalised float32 vectors in one
contiguous array (slots; deleted slots are tombstones until compaction).

* ``index="flat"`` — exact inner-product search straight over that array
  (``faiss.knn``, the same kernel as ``IndexFlatIP``; nothing is copied);
* ``index="auto"`` (default) — exact while the index holds fewer than
  ``ann_min_size`` vectors, then an ANN index built with ``faiss.index_factory``
  (``ann_factory``; any factory string works) and searched with ``ef_search`` (an inverted
  file probes ``ef_search / 4`` lists). Every ANN candidate is re-scored exactly against the
  stored vector. The default, ``IVF{nlist}(SQfp16),SQfp16``, is an inverted file of half-precision
  codes (they rank the candidates; the stored float32 vectors score them) over half-precision
  list centroids (a probe reads half the bytes; :func:`add_rows` files added vectors by one
  matrix product with the centroids, not through that quantizer) whose ``{nlist}`` is
  filled in when it is trained (:func:`lists_for`: about 8·√n lists for n vectors), so it is
  trained again, on every vector, once it holds :data:`RETRAIN_GROWTH` times the vectors it
  was trained on.

Inserts into the ANN index are batched behind a backlog: a vector is stored (and counted,
and covered by the spherical cap) at once, and slots not yet in the ANN index are searched
exactly beside it (``faiss.knn`` over that contiguous tail of the array), so a search never
builds the ANN structure and costs one ANN search plus a scan of the backlog. With
``background`` (the default) a daemon thread per ANN index inserts the backlog once it
exceeds ``max_backlog``: batch after batch, it adds the oldest ``BUILDER_BATCH`` vectors of
it to a copy of the ANN index and swaps the copy in (or, when the index is due for training,
trains a new one on every slot and adds them all), so no search or add waits for a build
(the backlog may outgrow ``max_backlog`` meanwhile, and a bulk ``add_many`` leaves all of it
pending); ``close()`` stops it. Without it, an add (or compacting remove) that takes
the backlog past ``max_backlog`` inserts its oldest vectors beyond that bound on the
caller's thread (one per add once the backlog is full; the switch to ANN and a rebuild after
compaction insert all but ``max_backlog`` at once). ``flush()`` returns once all of it is
inserted. Removing or replacing a vector not yet in the ANN index drops it from that
backlog (one in a batch being built becomes a tombstone instead).
The flat array is searched directly, so exact search has no backlog at all. A
``deferred`` index (a tier no lookup searches, see :meth:`SemanticIndex.defer_ann`) stays
exact whatever its size until it is no longer deferred.

Single-query search runs on one faiss/OpenMP thread (restored afterwards).
:class:`SemanticIndex` adds scopes, modality sets and the every-modality rule, and a
readers-writer guard of its own (:class:`ReadWriteLock`): searches share it, so several
threads may search at once (faiss releases the GIL while it searches) without any caller's
lock, while adds, removes, flushes and closes take it alone (a builder thread's swap needs
neither: it replaces the ANN index with a copy, under the index's own short lock). An
entry is indexed under the set of modalities it has vectors for, and a query only
ever searches the entries whose set equals its own: a text-only query never sees a
text + image entry, nor the reverse, and a video clip (``video`` + ``audio``) never an
``image`` + ``audio`` one. A candidate must be within its floor on
*every* modality of that set for the *same* entry.
"""

from __future__ import annotations

import atexit
import itertools
import math
import threading
import weakref
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass
from typing import Callable, Iterable, Iterator, Mapping, Sequence

import faiss
import numpy as np

from mmcache.errors import ConfigError
from mmcache.guard import SphericalCap
from mmcache.tiers.base import Candidate

class ReadWriteLock:
    """Many readers or one writer, writers first (a waiting writer holds back new readers).
    The writing thread may take it again, to read or write (reentrant)."""

    def __init__(self) -> None:
        self._cond = threading.Condition(threading.Lock())
        self._readers = 0
        self._writer: int | None = None
        self._depth = 0
        self._waiting = 0

    @contextmanager
    def reading(self) -> Iterator[None]:
        me = threading.get_ident()
        with self._cond:
            if self._writer == me:  # the writer reads what it is changing
                self._depth += 1
            else:
                while self._writer is not None or self._waiting:
                    self._cond.wait()
                self._readers += 1
        try:
            yield
        finally:
            self._release(me)

    @contextmanager
    def writing(self) -> Iterator[None]:
        me = threading.get_ident()
        with self._cond:
            if self._writer == me:
                self._depth += 1
            else:
                self._waiting += 1
                try:
                    while self._writer is not None or self._readers:
                        self._cond.wait()
                except BaseException:
                    self._cond.notify_all()  # readers held back for this writer go on
                    raise
                finally:
                    self._waiting -= 1
                self._writer, self._depth = me, 1
        try:
            yield
        finally:
            self._release(me)

    def _release(self, me: int) -> None:
        with self._cond:
            if self._writer == me:
                self._depth -= 1
                if not self._depth:
                    self._writer = None
                    self._cond.notify_all()
            else:
                self._readers -= 1
                if not self._readers:
                    self._cond.notify_all()


@dataclass(frozen=True)
class IndexSpec:
    """How a semantic tier indexes vectors (see the module docstring); the defaults equal
    ``CacheConfig.l2``'s, so a tier built directly behaves like one built from a config."""

    index: str = "auto"
    ann_factory: str = "IVF{nlist}(SQfp16),SQfp16"
    ann_min_size: int = 10_000
    ef_search: int = 128
    ef_construction: int = 64
    candidates: int = 8
    #: Compact when tombstones exceed this fraction of slots (ANN rebuilds are costly: 0.5).
    compact_fraction: float = 0.25
    #: Most vectors kept out of the ANN index, searched exactly beside it (a scan of
    #: 1024 x 512 floats is ~0.1 ms); a backlog past it is inserted into the ANN index.
    max_backlog: int = 1024
    #: Insert into the ANN index on a background thread (else on the caller's, as it adds).
    background: bool = True


#: Seconds an idle builder thread sleeps before it checks whether its index was collected.
BUILDER_RECHECK_S = 1.0
#: Most vectors a builder thread inserts per swap, so that a large backlog (a bulk load)
#: shrinks batch by batch; each swap copies the ANN index, so smaller costs more copies.
BUILDER_BATCH = 8192


#: An index whose factory names ``{nlist}`` is trained again, on every vector, once it holds
#: this many times the vectors it was last trained on.
RETRAIN_GROWTH = 4


def lists_for(size: int) -> int:
    """Inverted lists for an index trained on ``size`` vectors: the power of two nearest
    8·√size (more lists, fewer vectors scanned per probe), at most one per 8 vectors."""
    nearest = 2 ** round(math.log2(max(8 * math.sqrt(size), 1)))
    return max(1, min(nearest, 2 ** int(math.log2(max(size // 8, 1)))))


def factory_for(factory: str, size: int) -> str:
    """``factory`` with ``{nlist}`` replaced by :func:`lists_for` of ``size``."""
    return factory.replace("{nlist}", str(lists_for(size)))


def on_batch_built(count: int) -> None:
    """Called on a builder thread once a batch of ``count`` vectors is built, before it is
    swapped in (nothing by default; tests make builds slow with it)."""


@contextmanager
def one_faiss_thread() -> Iterator[None]:
    """Run the block with faiss on one OpenMP thread (single queries are 3x slower otherwise)."""
    before = faiss.omp_get_max_threads()
    if before != 1:
        faiss.omp_set_num_threads(1)
    try:
        yield
    finally:
        if before != 1:
            faiss.omp_set_num_threads(before)


class VectorIndex:
    """The vectors of one modality in one scope, searchable by cosine similarity. Callers
    serialise their own calls (as the tiers do, through :attr:`SemanticIndex.guard`, which
    lets searches run together but never beside a change); a builder thread, if any, runs
    beside them."""

    def __init__(self, dim: int, spec: IndexSpec) -> None:
        self.dim = dim
        self.spec = spec
        self._vecs = np.zeros((16, dim), dtype=np.float32)
        self._ids: list[str | None] = []
        self._slot: dict[str, int] = {}
        #: The ANN index once the index has switched to it; holds slots ``[0, _indexed)``.
        self._ann: faiss.Index | None = None
        self._indexed = 0
        #: Vectors the ANN index was last trained on (0 while it is untrained).
        self._trained_on = 0
        #: Slots below it keep their place: in the ANN index or in the batch being built.
        self._fixed = 0
        #: Bumped when a compaction renumbers the slots (a batch built before is discarded).
        self._generation = 0
        #: Guards the slots and the ANN index against the builder thread; held only briefly.
        self._lock = threading.Lock()
        self._wake = threading.Condition(self._lock)
        self._builder: threading.Thread | None = None
        self._flushing = 0
        self._closed = False
        self.cap = SphericalCap()
        self._refit_at = 64
        #: While set, the index stays exact (no ANN index is built) whatever its size.
        self.deferred = False

    def __len__(self) -> int:
        return len(self._slot)

    def __contains__(self, entry_id: str) -> bool:
        return entry_id in self._slot

    @property
    def uses_ann(self) -> bool:
        """Whether searches currently go through the ANN index."""
        return self._ann is not None

    def describe(self) -> str:
        """What searches go through: ``exact``, or the ANN index's factory string and how far
        a search explores it."""
        if self._ann is None or not self._indexed:
            return "exact"
        factory = factory_for(self.spec.ann_factory, self._trained_on)
        ivf = faiss.try_extract_index_ivf(self._ann)
        return f"{factory} nprobe={ivf.nprobe}" if ivf is not None else \
            f"{factory} efSearch={self.spec.ef_search}"

    @property
    def pending(self) -> int:
        """Vectors stored but not yet inserted into the ANN index (0 for exact search)."""
        return 0 if self._ann is None else len(self._ids) - self._indexed

    def vector(self, entry_id: str) -> np.ndarray | None:
        """The stored vector of ``entry_id`` (a read-only view), or None."""
        slot = self._slot.get(entry_id)
        return None if slot is None else self._vecs[slot]

    def add(self, entry_id: str, vector: np.ndarray) -> None:
        """Store ``vector`` (unit norm, float32) for ``entry_id``, replacing any previous one."""
        self.add_many([entry_id], np.asarray(vector)[None, :])

    def add_many(self, entry_ids: Sequence[str], vectors: np.ndarray) -> None:
        """Store row ``i`` of ``vectors`` (unit norm, float32) for ``entry_ids[i]`` (distinct
        ids), replacing previous ones; an ANN index gets them when the backlog overflows."""
        for entry_id in entry_ids:
            self.remove(entry_id)
        start, count = len(self._ids), len(entry_ids)
        if not count:
            return
        with self._lock:
            self._reserve(start + count)
            rows = self._vecs[start:start + count]
            rows[:] = vectors
            self._ids.extend(entry_ids)
            self._slot.update(zip(entry_ids, range(start, start + count)))
        self._include(rows)
        if self._ann is None and self._wants_ann():
            self._switch_to_ann()
        if len(self._slot) >= self._refit_at:
            while len(self._slot) >= self._refit_at:
                self._refit_at *= 2
            self.cap.refit(self._live_vectors())
        self._drain_overflow()

    def remove(self, entry_id: str) -> bool:
        """Forget ``entry_id``'s vector; False when it had none."""
        with self._lock:
            slot = self._slot.pop(entry_id, None)
            if slot is None:
                return False
            if self._ann is not None and slot >= self._fixed:
                self._drop_pending(slot)
            else:
                self._ids[slot] = None
                self._vecs[slot] = 0.0
            dead = len(self._ids) - len(self._slot)
            fraction = 0.5 if self._ann is not None else self.spec.compact_fraction
            compact = dead > 64 and dead > fraction * len(self._ids)
            if compact:
                self._compact()
        if compact:
            self._drain_overflow()
        return True

    def search(self, query: np.ndarray, floor: float,
               k: int) -> tuple[list[tuple[str, float]], bool]:
        """Live entries among the ``k`` nearest with similarity ≥ ``floor``, best first,
        and whether every entry ≥ ``floor`` is guaranteed to be in the list (the ANN index
        and, exactly, the backlog beside it are searched; neither is changed)."""
        if not self._slot:
            return [], True
        with self._lock:
            ann, start = self._ann, self._indexed
        n = len(self._ids)
        row = query[None, :]
        with one_faiss_thread():
            indexed, indexed_bound = _nearest(lambda kk: ann.search(row, kk), start, k)
            backlog = self._vecs[start:n]
            tail, tail_bound = _nearest(
                lambda kk: faiss.knn(row, backlog, kk, metric=faiss.METRIC_INNER_PRODUCT),
                n - start, k)
        # Tombstones may fill one part's k labels, so a live vector that part left out can beat
        # the other part's weaker ones: keep a vector only above the other part's bound.
        if not len(tail):  # the usual case, one part: no arrays to join
            slots, other_bound = indexed, itertools.repeat(tail_bound)
        elif not len(indexed):
            slots, other_bound = tail + start, itertools.repeat(indexed_bound)
        else:
            slots = np.concatenate([indexed, tail + start])
            other_bound = np.repeat([tail_bound, indexed_bound],
                                    [len(indexed), len(tail)]).tolist()
        sims = self._vecs[slots] @ query
        ids = self._ids
        # float32 against the floor (as numpy compares a float32 with a Python float), then as
        # exact Python floats against the bound
        found = [(ids[s], x) for s, x, above, b in zip(slots.tolist(), sims.tolist(),
                                                        (sims >= floor).tolist(), other_bound)
                 if above and x >= b and ids[s] is not None]
        found.sort(key=lambda pair: -pair[1])
        complete = max(indexed_bound, tail_bound) < floor and len(found) <= k
        return found[:k], complete

    def flush(self) -> None:
        """Return once every pending slot is in the ANN index."""
        with self._wake:
            self._flushing += 1
            self._wake.notify_all()
            try:
                while self.pending and self._builder is not None:
                    self._wake.wait()
            finally:
                self._flushing -= 1
        self._insert(keep=0)  # what a stopped builder left

    def close(self) -> None:
        """Stop the builder thread (after the batch it is building, without waiting for it);
        the index stays usable and inserts on the caller's thread from then on."""
        with self._wake:
            self._closed = True
            self._wake.notify_all()

    def _drop_pending(self, slot: int) -> None:
        """Free ``slot``, not yet in the ANN index, by moving the last slot into it."""
        last = len(self._ids) - 1
        moved = self._ids.pop()
        if slot != last:
            self._vecs[slot] = self._vecs[last]
            self._ids[slot] = moved
            if moved is not None:
                self._slot[moved] = slot

    def _reserve(self, slots: int) -> None:
        """Grow the vector array (at least doubling) to hold ``slots`` slots."""
        if slots > len(self._vecs):
            grown = np.zeros((max(slots, 2 * len(self._vecs)), self.dim), dtype=np.float32)
            grown[:len(self._ids)] = self._vecs[:len(self._ids)]
            self._vecs = grown

    def _include(self, rows: np.ndarray) -> None:
        """Grow the spherical cap over ``rows``: the row farthest from its centre suffices."""
        if self.cap.centre is None:
            self.cap.include(rows[0])
        self.cap.include(rows[int(np.argmin(rows @ self.cap.centre))])

    def defer_ann(self, deferred: bool) -> None:
        """Build no ANN index while ``deferred`` (searches stay exact; one already built
        stays); once not, switch to one if the index is large enough (its vectors then wait
        in the backlog)."""
        self.deferred = deferred
        if self._ann is None and self._wants_ann():
            self._switch_to_ann()
            self._drain_overflow()

    def _wants_ann(self) -> bool:
        return self.spec.index == "auto" and not self.deferred and \
            len(self._slot) >= self.spec.ann_min_size

    def _switch_to_ann(self) -> None:
        """Search through a new, empty ANN index (every slot pending, tombstones dropped),
        built by a builder thread if ``spec.background``."""
        if len(self._ids) != len(self._slot):
            self._compact()
        self._ann = self._new_ann(len(self._slot))
        if self.spec.background and not self._closed:
            self._builder = threading.Thread(target=_build_loop, daemon=True,
                                             args=(weakref.ref(self), self._wake),
                                             name=f"mmcache-index-builder-{id(self):x}")
            self._builder.start()
            _building.add(self)

    def _live_vectors(self) -> np.ndarray:
        if len(self._ids) == len(self._slot):  # no tombstones: every slot, without a copy
            return self._vecs[:len(self._ids)]
        return self._vecs[[self._slot[i] for i in self._slot]]

    def _compact(self) -> None:
        order = list(self._slot)
        vecs = self._vecs[[self._slot[i] for i in order]]
        self._vecs = np.zeros((max(16, 2 * len(order)), self.dim), dtype=np.float32)
        self._vecs[:len(order)] = vecs
        self._ids = list(order)
        self._slot = {eid: s for s, eid in enumerate(order)}
        self.cap.refit(vecs)
        self._generation += 1
        if self._ann is not None:  # rebuilt when the backlog overflows
            self._ann, self._indexed, self._fixed = self._new_ann(len(order)), 0, 0
            self._trained_on = 0

    def _new_ann(self, size: int) -> faiss.Index:
        """An empty ANN index made from ``ann_factory`` for ``size`` vectors (a bad string is
        a ConfigError)."""
        try:
            index = faiss.index_factory(self.dim, factory_for(self.spec.ann_factory, size),
                                        faiss.METRIC_INNER_PRODUCT)
        except RuntimeError as exc:
            raise ConfigError(f"ann_factory {self.spec.ann_factory!r} is not a faiss "
                              f"factory string: {exc}") from None
        _set_index_params(index, self.spec)
        return index

    def _drain_overflow(self) -> None:
        """Have the pending slots beyond ``max_backlog`` inserted: all of them by the builder
        thread, else the oldest on this thread."""
        if self._builder is None:
            self._insert(keep=self.spec.max_backlog)
        elif self.pending > self.spec.max_backlog:
            with self._wake:
                self._wake.notify_all()

    def _insert(self, keep: int) -> None:
        """Insert the pending slots, oldest first, into the ANN index on this thread, leaving
        the newest ``keep`` pending (training the index first if it needs training)."""
        if self._ann is None or self.pending <= keep:
            return
        end = len(self._ids) - keep
        if self._training_due():  # trained on every slot, as the builder trains
            self._ann, self._trained_on = self._trained(self._vecs[:len(self._ids)])
            self._indexed = 0
        add_rows(self._ann, self._vecs[self._indexed:end])
        self._indexed = self._fixed = end

    def _training_due(self) -> bool:
        """Whether the ANN index is to be trained afresh on every slot: it is untrained, or
        its ``{nlist}`` was chosen for fewer than 1 / :data:`RETRAIN_GROWTH` of the vectors."""
        return not self._ann.is_trained or (
            "{nlist}" in self.spec.ann_factory
            and len(self._slot) >= RETRAIN_GROWTH * self._trained_on)

    def _trained(self, rows: np.ndarray) -> tuple[faiss.Index, int]:
        """A new empty ANN index sized for and trained on ``rows`` (tombstones, all zeros,
        left out), and how many vectors it was trained on."""
        live = rows[rows.any(axis=1)]
        if not len(live):  # every row removed while the batch was taken: train on them
            live = rows
        ann = self._new_ann(len(live))
        if not ann.is_trained:
            ann.train(live)
        return ann, len(live)

    def _batch_due(self) -> bool:
        """Whether the builder thread should stop (closed) or build: the backlog is past
        ``max_backlog``, or past 0 while a flush waits."""
        return self._closed or self.pending > (0 if self._flushing else self.spec.max_backlog)

    def _take_batch(self) -> tuple[faiss.Index | None, np.ndarray, int, int, bool]:
        """The ANN index to add to, a copy of the rows to add (the backlog's oldest, at most
        :data:`BUILDER_BATCH`; or, when training is due, None and every slot, for a new
        index), where they end, the generation and whether a flush waits; the rows keep their
        slots until the batch is swapped in."""
        if self._training_due():  # every slot, uncopied: slots below _fixed change only to
            end = self._fixed = len(self._ids)  # tombstones, which searches leave out
            return None, self._vecs[:end], end, self._generation, self._flushing > 0
        end = self._fixed = min(len(self._ids), self._indexed + BUILDER_BATCH)
        return self._ann, self._vecs[self._indexed:end].copy(), end, self._generation, \
            self._flushing > 0

    def _build(self, ann: faiss.Index | None, rows: np.ndarray, end: int, generation: int,
               urgent: bool) -> None:
        """Add ``rows`` to a copy of ``ann`` (None: to a new index trained on them) and swap
        it in, unless a compaction came first."""
        with nullcontext() if urgent else one_faiss_thread():  # a flush waits: every thread
            if ann is None:
                built, trained_on = self._trained(rows)
            else:
                built, trained_on = faiss.clone_index(ann), self._trained_on
            add_rows(built, rows)
        on_batch_built(len(rows))
        with self._wake:
            if generation == self._generation:
                self._ann, self._indexed, self._trained_on = built, end, trained_on
            self._wake.notify_all()

    def _builder_stopped(self) -> None:
        with self._wake:
            self._builder = None
            self._wake.notify_all()


def _build_loop(ref: weakref.ref[VectorIndex], wake: threading.Condition) -> None:
    """A builder thread: insert the backlog of the index ``ref`` names into its ANN index,
    batch by batch, until that index is closed or collected (it is held only while building)."""
    try:
        while True:
            with wake:
                while (index := ref()) is not None and not index._batch_due():
                    index = None
                    wake.wait(BUILDER_RECHECK_S)
                if index is None or index._closed:
                    return
                batch = index._take_batch()
            index._build(*batch)
            del index, batch  # idle, hold neither the index nor the replaced ANN index
    finally:
        if (index := ref()) is not None:
            index._builder_stopped()


#: The indexes whose builder threads may be inside faiss, stopped and joined at exit.
_building: weakref.WeakSet[VectorIndex] = weakref.WeakSet()


@atexit.register
def _stop_builders() -> None:
    """Stop every builder thread and wait for it: one still inside faiss when the process
    exits aborts it."""
    indexes = list(_building)
    for index in indexes:
        index.close()
    for index in indexes:
        if (thread := index._builder) is not None:
            thread.join()


def add_rows(index: faiss.Index, rows: np.ndarray) -> None:
    """Add ``rows`` to ``index``. An inverted file whose coarse quantizer is not a flat index
    (the default's half-precision one) gets them assigned to their lists by one exact matrix
    product with its decoded centroids, not vector by vector through the quantizer."""
    ivf = faiss.downcast_index(index)
    if not len(rows) or not isinstance(ivf, faiss.IndexIVF) or \
            isinstance(faiss.downcast_index(ivf.quantizer), faiss.IndexFlat):
        index.add(rows)
        return
    rows = np.ascontiguousarray(rows, dtype=np.float32)
    centroids = ivf.quantizer.reconstruct_n(0, ivf.nlist)
    _, lists = faiss.knn(rows, centroids, 1, metric=ivf.metric_type)
    lists = np.ascontiguousarray(lists[:, 0])
    ivf.add_core(len(rows), faiss.swig_ptr(rows), None, faiss.swig_ptr(lists))


def _nearest(search: Callable[[int], tuple[np.ndarray, np.ndarray]], size: int,
             k: int) -> tuple[np.ndarray, float]:
    """Labels from ``search(kk)`` (scores and labels of the ``kk`` nearest of ``size``
    vectors) and a bound: every vector scoring above it is among those labels."""
    if size == 0:
        return np.zeros(0, dtype=np.int64), -math.inf
    kk = min(k, size)
    scores, labels = search(kk)
    return labels[0][labels[0] >= 0], -math.inf if kk >= size else float(scores[0][-1])


def _set_index_params(index: faiss.Index, spec: IndexSpec) -> None:
    hnsw = getattr(faiss.downcast_index(index), "hnsw", None)
    ivf = faiss.try_extract_index_ivf(index)
    if hnsw is not None:
        hnsw.efConstruction = spec.ef_construction
        hnsw.efSearch = spec.ef_search
    elif ivf is not None:
        ivf.nprobe = max(1, spec.ef_search // 4)
        ivf.cp.min_points_per_centroid = 1  # lists_for chose the lists: no warning on stderr


class SemanticIndex:
    """Vector indexes per (scope, modality set, modality) and the every-modality δ-neighbour
    search over the entries whose modality set equals the query's."""

    def __init__(self, spec: IndexSpec, precheck: bool = True) -> None:
        self.spec = spec
        self.precheck = precheck
        self._indexes: dict[tuple[str, frozenset[str], str], VectorIndex] = {}
        #: Searches skipped because a spherical-cap bound proved a miss.
        self.skipped = 0
        #: Searches share it; adds, removes, flushes and closes hold it alone (callers still
        #: serialise their changes, as the tiers do; searches need no caller's lock).
        self.guard = ReadWriteLock()
        self._counting = threading.Lock()
        #: Whether new and existing indexes build no ANN index (see :meth:`defer_ann`).
        self.deferred = False

    def dims(self) -> dict[str, int]:
        """Embedding dimension per modality over every scope."""
        return {m: idx.dim for (_, _, m), idx in self._indexes.items()}

    @property
    def uses_ann(self) -> bool:
        """Whether any index currently searches through its ANN structure."""
        return any(idx.uses_ann for idx in self._indexes.values())

    def describe(self) -> str:
        """:meth:`VectorIndex.describe` of the largest index (``exact`` when there is none)."""
        largest = max(self._indexes.values(), key=len, default=None)
        return "exact" if largest is None else largest.describe()

    def index(self, scope: str, modality: str,
              modalities: Iterable[str] | None = None) -> VectorIndex | None:
        """The index of ``modality`` over the entries of ``scope`` whose modality set is
        ``modalities`` (default: ``modality`` alone); None when it holds nothing yet."""
        kind = frozenset((modality,) if modalities is None else modalities)
        return self._indexes.get((scope, kind, modality))

    def add(self, scope: str, entry_id: str, vectors: Mapping[str, np.ndarray]) -> None:
        """Index every vector of one entry, under the set of its vectors' modalities."""
        self.add_many([(scope, entry_id, vectors)])

    def add_many(self, items: Iterable[tuple[str, str, Mapping[str, np.ndarray]]]) -> None:
        """Index every vector of many ``(scope, entry_id, vectors)`` entries, with one add
        per index; a later item of the same entry replaces an earlier one. An entry indexed
        before with another modality set must be removed first."""
        items = list(items)
        with self.guard.writing():
            self._add_many(items)

    def _add_many(self, items: Iterable[tuple[str, str, Mapping[str, np.ndarray]]]) -> None:
        latest: dict[tuple[str, str], Mapping[str, np.ndarray]] = {}
        for scope, entry_id, vectors in items:
            latest.pop((scope, entry_id), None)
            latest[(scope, entry_id)] = vectors
        groups: dict[tuple[str, frozenset[str], str], dict[str, np.ndarray]] = {}
        for (scope, entry_id), vectors in latest.items():
            kind = frozenset(vectors)
            for modality, vec in vectors.items():
                groups.setdefault((scope, kind, modality), {})[entry_id] = vec
        for key, group in groups.items():
            rows = np.stack(list(group.values()))
            idx = self._indexes.get(key)
            if idx is None:
                idx = self._indexes[key] = VectorIndex(rows.shape[1], self.spec)
                idx.deferred = self.deferred
            idx.add_many(list(group), rows)

    def remove(self, scope: str, entry_id: str, modalities: Iterable[str]) -> None:
        """Drop one entry's vectors; ``modalities`` is the set it was indexed under."""
        kind = frozenset(modalities)
        with self.guard.writing():
            self._remove(scope, entry_id, kind)

    def _remove(self, scope: str, entry_id: str, kind: frozenset[str]) -> None:
        for modality in kind:
            key = (scope, kind, modality)
            idx = self._indexes.get(key)
            if idx is not None:
                idx.remove(entry_id)
                if not len(idx):
                    del self._indexes[key]
                    idx.close()

    def defer_ann(self, deferred: bool) -> None:
        """Build no ANN index while ``deferred``, for a tier no lookup searches (it keeps
        its vectors, searched exactly if it is searched after all); once not, every index
        large enough switches to ANN, its builder inserting the backlog."""
        with self.guard.writing():
            self.deferred = deferred
            for idx in self._indexes.values():
                idx.defer_ann(deferred)

    def flush(self) -> None:
        """Return once every pending vector is in its ANN index (searches wait meanwhile)."""
        with self.guard.writing():
            for idx in self._indexes.values():
                idx.flush()

    def close(self) -> None:
        """Stop the builder threads of every index (see :meth:`VectorIndex.close`)."""
        with self.guard.writing():
            for idx in self._indexes.values():
                idx.close()

    def search(self, scope: str, vectors: Mapping[str, np.ndarray],
               floors: Mapping[str, float], k: int = 1) -> list[Candidate]:
        """Entries of ``scope`` with exactly the modalities of ``vectors``, at least
        ``floors[m]`` similar on every one of them, best first."""
        return self.find(scope, vectors, floors, k)[0]

    def find(self, scope: str, vectors: Mapping[str, np.ndarray],
             floors: Mapping[str, float], k: int = 1) -> tuple[list[Candidate], bool]:
        """:meth:`search`'s candidates and whether the spherical-cap pre-check skipped the
        search (safe beside other threads' searches, and beside changes: it holds
        :attr:`guard` to read)."""
        with self.guard.reading():
            return self._find(scope, vectors, floors, k)

    def _find(self, scope: str, vectors: Mapping[str, np.ndarray],
              floors: Mapping[str, float], k: int) -> tuple[list[Candidate], bool]:
        kind = frozenset(vectors)
        indexes = {m: self._indexes.get((scope, kind, m)) for m in vectors}
        if not vectors or any(idx is None or idx.dim != len(vectors[m])
                              for m, idx in indexes.items()):
            return [], False
        if self.precheck and not all(idx.cap.may_reach(vectors[m], floors[m])
                                     for m, idx in indexes.items()):
            with self._counting:
                self.skipped += 1
            return [], True
        primary = min(indexes, key=lambda m: len(indexes[m]))
        others = [m for m in indexes if m != primary]
        want = max(k, self.spec.candidates)
        while True:
            found, complete = indexes[primary].search(vectors[primary], floors[primary], want)
            out = []
            for entry_id, sim in found:
                sims = {primary: sim}
                for m in others:
                    vec = indexes[m].vector(entry_id)
                    sims[m] = -1.0 if vec is None else float(vec @ vectors[m])
                    if sims[m] < floors[m]:
                        break
                else:
                    out.append(Candidate(entry_id, sims))
            if len(out) >= k or complete:
                break
            want *= 4
        out.sort(key=lambda c: -c.similarity)
        return out[:k], False
