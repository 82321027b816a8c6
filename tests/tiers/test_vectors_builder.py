"""The background builder of :class:`VectorIndex`: batches enter the ANN index on a daemon
thread while the backlog is searched exactly beside it; no get or put waits for a build,
answers equal those of an index that inserts on the caller's thread (and exact search),
removals during a build are honoured, ``flush`` empties the backlog, and the thread stops
when its index or cache is closed (or collected)."""

from __future__ import annotations

import gc
import threading
import time
from dataclasses import replace

import numpy as np
import pytest

import mmcache
from mmcache.inputs import prepare
from mmcache.lab.testing import near, unit
from mmcache.tiers import vectors
from mmcache.tiers.vectors import IndexSpec, SemanticIndex, VectorIndex

DIM = 24
SPEC = IndexSpec(ann_min_size=50, ann_factory="HNSW16", max_backlog=20)
#: Seconds each batch is made to take in the latency test.
SLOW_BUILD_S = 0.5


class Gate:
    """A stand-in for ``vectors.on_batch_built`` that holds every built batch, before it is
    swapped in, until the test lets it through (``step``) or opens the gate for good."""

    def __init__(self) -> None:
        self._held = threading.Semaphore(0)
        self._go = threading.Semaphore(0)
        self.opened = False

    def __call__(self, count: int) -> None:
        self._held.release()
        if not self.opened:
            self._go.acquire(timeout=30)  # never hang the suite if a test fails

    def wait_held(self, timeout: float = 30.0) -> bool:
        """Whether a batch reached the gate within ``timeout`` seconds."""
        return self._held.acquire(timeout=timeout)

    def step(self) -> None:
        self._go.release()

    def open(self) -> None:
        self.opened = True
        self._go.release(1000)


@pytest.fixture
def gate(monkeypatch) -> Gate:
    g = Gate()
    monkeypatch.setattr(vectors, "on_batch_built", g)
    yield g
    g.open()


def builders() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("mmcache-index-builder")]


def ntotal(idx: VectorIndex) -> int:
    return 0 if idx._ann is None else idx._ann.ntotal


def found(idx: VectorIndex, query: np.ndarray, floor: float = 0.999, k: int = 3) -> list[str]:
    return sorted(entry_id for entry_id, _ in idx.search(query, floor, k)[0])


@pytest.mark.parametrize("factory", ["HNSW16", IndexSpec.ann_factory])
def test_gets_and_puts_never_wait_for_a_slow_build(monkeypatch, factory):
    """Every batch takes SLOW_BUILD_S longer; puts and gets through a TieredCache run on
    while two batches build, each far faster than one batch (for the default inverted file
    the first batch trains it)."""
    batches = []
    monkeypatch.setattr(vectors, "on_batch_built",
                        lambda count: (time.sleep(SLOW_BUILD_S), batches.append(count)))
    cache = mmcache.TieredCache({"thresholds": {"delta": {"text": 0.1}},
                                 "l2": {"ann_min_size": 200, "ann_factory": factory}})
    rng = np.random.default_rng(0)
    stored, put_s, get_s = [], [], []
    gc.disable()  # a full collection of the test process's heap is no wait for a build
    try:
        while len(batches) < 2:
            vec = unit(rng, DIM)
            t0 = time.perf_counter()
            cache.put(mmcache.Query(embeddings={"text": vec}, scope="s"), f"a{len(stored)}")
            put_s.append(time.perf_counter() - t0)
            stored.append(vec)
            source = int(rng.integers(len(stored)))
            query = mmcache.Query(embeddings={"text": near(rng, stored[source], 0.99)}, scope="s")
            t0 = time.perf_counter()
            hit = cache.get(query)
            get_s.append(time.perf_counter() - t0)
            assert hit is not None and hit.value == f"a{source}"
            assert len(stored) < 200_000, "the builder never built two batches"
        assert cache.tier("l2").index.uses_ann
    finally:
        gc.enable()
        own = [idx._builder for idx in cache.tier("l2").index._indexes.values()
               if idx._builder is not None]
        cache.close()
        for thread in own:  # a batch still building must not reach a later test's gate
            thread.join(30)
    assert max(put_s) < SLOW_BUILD_S / 5 and max(get_s) < SLOW_BUILD_S / 5, \
        (max(put_s), max(get_s), len(stored))


def test_put_many_and_the_gets_after_it_never_wait_for_a_build(gate, monkeypatch):
    """A bulk load far past one batch, every built batch held at the gate: put_many returns
    and gets answer right (the backlog searched exactly) while nothing has been swapped in,
    and the builder then shrinks the backlog batch by batch, each BUILDER_BATCH vectors."""
    monkeypatch.setattr(vectors, "BUILDER_BATCH", 300)
    rng = np.random.default_rng(5)
    data = np.stack([unit(rng, DIM) for _ in range(2000)])
    with mmcache.TieredCache({"thresholds": {"delta": {"text": 0.1}},
                              "l2": {"ann_min_size": 200, "ann_factory": "HNSW16"}}) as cache:
        cache.put_many([mmcache.Query(embeddings={"text": v}, scope="s") for v in data],
                       [f"a{i}" for i in range(len(data))])
        scope = prepare(mmcache.Query(embeddings={"text": data[0]}, scope="s"), {}).scope
        idx = cache.tier("l2").index.index(scope, "text")
        assert gate.wait_held() and idx.pending == len(data)  # built, held before its swap
        for i in rng.choice(len(data), 20, replace=False):
            hit = cache.get(mmcache.Query(embeddings={"text": near(rng, data[i], 0.99)},
                                          scope="s"))
            assert hit is not None and hit.value == f"a{i}"
        pending = [idx.pending]
        for _ in range(4):
            gate.step()
            deadline = time.monotonic() + 30
            while idx.pending == pending[-1] and time.monotonic() < deadline:
                time.sleep(0.01)
            pending.append(idx.pending)
        gate.open()
        assert pending == [2000, 1700, 1400, 1100, 800] and ntotal(idx) == 1200


def test_put_many_answers_equal_with_and_without_the_builder_and_exact_search():
    """The same bulk load into a cache whose L2 builds in the background, one that inserts
    on the caller's thread, and an exact one: the same answer to every query, while the
    builder still has a backlog and after it is flushed."""
    rng = np.random.default_rng(6)
    data = np.stack([unit(rng, DIM) for _ in range(1500)])
    queries = [near(rng, data[i], 0.97) if i % 2 else unit(rng, DIM) for i in range(300)]
    settings = {"thresholds": {"delta": {"text": 0.1}}, "l2": {"ann_min_size": 200}}
    caches = [mmcache.TieredCache(settings) for _ in range(2)]
    caches.append(mmcache.TieredCache({**settings, "l2": {"index": "flat"}}))
    inline = caches[1].tier("l2").index
    inline.spec = replace(inline.spec, background=False)
    for cache in caches:
        cache.put_many([mmcache.Query(embeddings={"text": v}, scope="s") for v in data],
                       [f"a{i}" for i in range(len(data))])

    def answers(cache: mmcache.TieredCache) -> list[str | None]:
        hits = [cache.get(mmcache.Query(embeddings={"text": q}, scope="s")) for q in queries]
        return [None if h is None else h.value for h in hits]

    before = [answers(cache) for cache in caches]
    caches[0].tier("l2").index.flush()
    after = answers(caches[0])
    for cache in caches:
        cache.close()
    assert before[0] == before[1] == before[2] == after
    assert sum(a is not None for a in after) >= 100


def test_answers_equal_inline_inserts_and_exact_search_while_batches_build(gate):
    """Random adds, replacements, removals (compactions among them) and searches on three
    indexes: exact ANN ("Flat") built in the background with batches held at the gate and
    let through at random points, the same inserting on the caller's thread, and the flat
    index: the same entries and similarities after every search."""
    rng = np.random.default_rng(3)
    spec = IndexSpec(ann_factory="Flat", ann_min_size=30, max_backlog=8)
    background, inline = SemanticIndex(spec), SemanticIndex(replace(spec, background=False))
    exact = SemanticIndex(IndexSpec(index="flat"))
    indexes, held, holds = (background, inline, exact), False, 0
    for step in range(1500):
        op = rng.random()
        if op < 0.55:
            items = [("s", f"e{i}", {"text": unit(rng, DIM)})
                     for i in rng.choice(400, int(rng.integers(1, 4)), replace=False)]
            for index in indexes:
                index.add_many(items)
        elif op < 0.8:
            gone = f"e{rng.integers(400)}"
            for index in indexes:
                index.remove("s", gone, ("text",))
        else:
            stored = exact.index("s", "text")
            target = None if stored is None else stored.vector(f"e{rng.integers(400)}")
            query = unit(rng, DIM) if target is None else near(rng, target, 0.95)
            floor, k = float(rng.choice([-1.0, 0.5, 0.9])), int(rng.integers(1, 6))
            got, same, want = (index.search("s", {"text": query}, {"text": floor}, k)
                               for index in indexes)
            assert [c.entry_id for c in got] == [c.entry_id for c in want] == \
                [c.entry_id for c in same], step
            assert [c.similarity for c in got] == pytest.approx([c.similarity for c in want],
                                                                abs=1e-6)
        if not held and rng.random() < 0.2:
            held = gate.wait_held(timeout=0.02)    # a batch is built and waits to swap in
            holds += held
        elif held and rng.random() < 0.3:
            gate.step()
            held = False
    assert holds > 10
    gate.open()
    background.flush()
    idx = background.index("s", "text")
    assert idx.pending == 0 and ntotal(idx) == len(idx._ids)
    assert len(idx) == len(exact.index("s", "text"))
    background.close()


def test_hnsw_answers_with_and_without_the_builder_match_exact_search():
    """HNSW built in the background and on the caller's thread, over the same vectors
    (a near duplicate queried for each): every answer is the exact nearest one."""
    rng = np.random.default_rng(4)
    data = np.stack([unit(rng, DIM) for _ in range(600)])
    queries = np.stack([near(rng, v, 0.97) for v in data])
    truth = np.argmax(queries @ data.T, axis=1)
    spec = IndexSpec(ann_factory="HNSW16", ann_min_size=100, max_backlog=50)
    answers = []
    for index in (VectorIndex(DIM, spec), VectorIndex(DIM, replace(spec, background=False))):
        seen = []
        for i, vec in enumerate(data):
            index.add(f"e{i}", vec)
            seen.append([e for e, _ in index.search(queries[i // 2], 0.9, 1)[0]])
        index.flush()
        seen += [[e for e, _ in index.search(q, 0.9, 1)[0]] for q in queries]
        answers.append(seen)
        index.close()
    want = [[f"e{truth[i // 2]}"] for i in range(600)] + [[f"e{t}"] for t in truth]
    assert answers[0] == answers[1] == want


def filled(n: int, spec: IndexSpec = SPEC, seed: int = 0) -> tuple[VectorIndex, np.ndarray]:
    rng = np.random.default_rng(seed)
    data = np.stack([unit(rng, DIM) for _ in range(n)])
    idx = VectorIndex(DIM, spec)
    for i, v in enumerate(data):
        idx.add(f"e{i}", v)
    return idx, data


def test_removals_and_replacements_during_a_build_are_honoured(gate):
    idx, data = filled(50)                         # the switch to ANN: a batch of all 50
    assert gate.wait_held()
    rng = np.random.default_rng(1)
    extra = np.stack([unit(rng, DIM) for _ in range(30)])
    idx.add_many([f"x{i}" for i in range(30)], extra)
    new5 = unit(rng, DIM)
    idx.remove("e3")                               # in the batch being built
    idx.add("e5", new5)                            # replaced while in the batch
    idx.remove("x7")                               # in the backlog behind it
    gone = {"e3": data[3], "e5": data[5], "x7": extra[7]}

    def check() -> None:
        assert all(found(idx, v) == [] for v in gone.values())
        assert found(idx, new5) == ["e5"]
        assert all(found(idx, data[i]) == [f"e{i}"] for i in range(50) if i not in (3, 5))
        assert all(found(idx, extra[i]) == [f"x{i}"] for i in range(30) if i != 7)
        assert len(idx) == 78 and "e3" not in idx and "x7" not in idx
        assert np.array_equal(idx.vector("e5"), new5)

    assert ntotal(idx) == 0 and idx.pending == 80  # none swapped in yet; two tombstones
    check()
    gate.step()                                    # the first batch goes in
    assert gate.wait_held()                        # and the rest is built behind it
    assert ntotal(idx) == 50
    check()
    idx.remove("x3")                               # in the second batch
    gone["x3"] = extra[3]
    gate.open()
    idx.flush()
    assert idx.pending == 0 and ntotal(idx) == len(idx._ids)
    assert found(idx, extra[3]) == [] and len(idx) == 77
    idx.close()


def test_a_compaction_during_a_build_discards_the_batch(gate):
    idx, data = filled(50)
    assert gate.wait_held()                        # a batch of 50 waits to swap in
    for i in range(150):
        idx.add(f"x{i}", data[i % 50])
    gate.step()
    assert gate.wait_held()
    for i in range(150):                           # the 101st tombstone compacts
        idx.remove(f"x{i}")
    assert ntotal(idx) == 0 and idx.pending == 50
    gate.open()
    idx.flush()
    assert idx.pending == 0 and ntotal(idx) == len(idx) == 50
    assert all(found(idx, data[i]) == [f"e{i}"] for i in range(50))
    idx.close()


def test_flush_waits_for_the_builder_and_leaves_nothing_pending(gate):
    idx, data = filled(50)
    assert gate.wait_held()
    idx.add("late", unit(np.random.default_rng(2), DIM))
    done = threading.Event()
    flusher = threading.Thread(target=lambda: (idx.flush(), done.set()))
    flusher.start()
    assert not done.wait(0.2)                      # the batch is still held
    gate.open()
    flusher.join(30)
    assert done.is_set() and idx.pending == 0 and ntotal(idx) == 51
    assert found(idx, data[7]) == ["e7"]
    idx.close()


def test_the_builder_is_a_daemon_that_stops_when_the_cache_closes():
    before = set(builders())
    cache = mmcache.TieredCache({"l2": {"ann_min_size": 50, "ann_factory": "HNSW16"}})
    rng = np.random.default_rng(5)
    for i in range(60):
        for scope in ("a", "b"):
            cache.put(mmcache.Query(embeddings={"text": unit(rng, DIM)}, scope=scope), f"{i}")
    started = [t for t in builders() if t not in before]
    assert len(started) == 2 and all(t.daemon for t in started)
    cache.close()
    for thread in started:
        thread.join(10)
    assert not any(t.is_alive() for t in started)


def test_a_collected_index_stops_its_builder(monkeypatch):
    monkeypatch.setattr(vectors, "BUILDER_RECHECK_S", 0.05)
    idx, _ = filled(60)
    idx.flush()
    thread = idx._builder
    assert thread is not None and thread.is_alive()
    del idx
    gc.collect()
    thread.join(10)
    assert not thread.is_alive()


def test_a_closed_index_inserts_on_the_callers_thread():
    idx, data = filled(60)
    thread = idx._builder
    idx.close()
    thread.join(10)
    for i in range(60, 200):
        idx.add(f"e{i}", unit(np.random.default_rng(i), DIM))
    assert idx._builder is None and idx.pending == SPEC.max_backlog
    assert found(idx, data[9]) == ["e9"]


# -- searches without the caller's lock: SemanticIndex.guard (issue 27 item 3) -----------------
def test_the_guard_lets_readers_share_it_and_a_writer_hold_it_alone():
    guard = vectors.ReadWriteLock()
    both_in = threading.Barrier(2)

    def read() -> None:
        with guard.reading():
            both_in.wait(5)  # broken unless two readers are inside at once

    readers = [threading.Thread(target=read) for _ in range(2)]
    for t in readers:
        t.start()
    for t in readers:
        t.join(5)
    assert not both_in.broken
    order: list[str] = []
    with guard.writing():
        with guard.writing(), guard.reading():  # the writer may take it again, and read
            order.append("writer")
        reader = threading.Thread(target=lambda: guard.reading().__enter__() or
                                  order.append("reader"))
        reader.start()
        reader.join(0.2)
        assert reader.is_alive(), "a reader got in beside the writer"
        order.append("writer done")
    reader.join(5)
    assert order == ["writer", "writer done", "reader"]


@pytest.mark.parametrize("spec", [IndexSpec(index="flat"), SPEC], ids=["flat", "hnsw"])
def test_searches_beside_adds_removes_and_compactions_find_every_stable_vector(spec):
    """Threads search with no caller's lock while another adds and removes (compacting the
    slots, swapping built batches): a vector present throughout is always found, as itself."""
    rng = np.random.default_rng(7)
    stable = np.stack([unit(rng, DIM) for _ in range(30)])
    churn = np.stack([unit(rng, DIM) for _ in range(400)])
    index = SemanticIndex(spec)
    index.add_many(("s", f"stable-{i}", {"text": v}) for i, v in enumerate(stable))
    done, failures = threading.Event(), []

    def search(seed: int) -> None:
        r = np.random.default_rng(seed)
        try:
            while not done.is_set():
                i = int(r.integers(len(stable)))
                found = index.search("s", {"text": stable[i]}, {"text": 0.99}, k=1)
                if [c.entry_id for c in found] != [f"stable-{i}"] or \
                        abs(found[0].similarity - 1.0) > 1e-4:
                    failures.append((i, found))
        except Exception as exc:  # noqa: BLE001 - every failure of a searcher is the finding
            failures.append(repr(exc))

    searchers = [threading.Thread(target=search, args=(s,)) for s in range(3)]
    for t in searchers:
        t.start()
    try:
        for round_ in range(4):
            for j, v in enumerate(churn):
                index.add("s", f"churn-{j}", {"text": v})
            for j in range(len(churn)):  # enough tombstones to compact, more than once
                index.remove("s", f"churn-{j}", ["text"])
    finally:
        done.set()
        for t in searchers:
            t.join(10)
        index.close()
    assert failures == []
