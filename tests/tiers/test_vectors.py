"""Vector indexes: exact flat search, ANN switch-over, tombstones, the every-modality rule."""

from __future__ import annotations

from dataclasses import replace

import faiss
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mmcache.errors import ConfigError
from mmcache.guard import SphericalCap
from mmcache.lab.testing import near, unit
from mmcache.tiers.vectors import (RETRAIN_GROWTH, add_rows, IndexSpec, SemanticIndex, VectorIndex,
                                   lists_for)

DIM = 24


def filled(n: int, spec: IndexSpec, seed: int = 0) -> tuple[VectorIndex, np.ndarray]:
    rng = np.random.default_rng(seed)
    data = np.stack([unit(rng, DIM) for _ in range(n)])
    idx = VectorIndex(DIM, spec)
    for i, v in enumerate(data):
        idx.add(f"e{i}", v)
    return idx, data


def test_flat_search_equals_brute_force():
    idx, data = filled(300, IndexSpec(index="flat"))
    rng = np.random.default_rng(1)
    for _ in range(20):
        q = unit(rng, DIM)
        found, complete = idx.search(q, -1.0, 5)
        expect = np.argsort(-(data @ q))[:5]
        assert [e for e, _ in found] == [f"e{i}" for i in expect]
        assert [s for _, s in found] == pytest.approx(list((data @ q)[expect]), abs=1e-5)
        assert not complete
    assert idx.search(unit(rng, DIM), 0.99, 5) == ([], True)


def test_auto_switches_to_ann_and_still_finds_near_duplicates():
    idx, data = filled(400, IndexSpec(index="auto", ann_min_size=100))
    assert idx.uses_ann
    rng = np.random.default_rng(2)
    found = [idx.search(near(rng, data[i], 0.95), 0.9, 4)[0] for i in range(0, 400, 10)]
    assert all(f and f[0][0] == f"e{i}" for f, i in zip(found, range(0, 400, 10)))
    flat, _ = filled(400, IndexSpec(index="flat"))
    assert not flat.uses_ann


def test_any_factory_string_and_bad_ones():
    idx, data = filled(300, IndexSpec(index="auto", ann_min_size=200, ann_factory="IVF4,Flat",
                                      ef_search=16))
    assert idx.uses_ann
    assert idx.search(data[250], 0.99, 1)[0][0][0] == "e250"
    with pytest.raises(ConfigError, match="factory"):
        filled(5, IndexSpec(index="auto", ann_min_size=2, ann_factory="NoSuchIndex"))


@pytest.mark.parametrize("spec", [IndexSpec(index="flat"), IndexSpec(ann_min_size=50)])
def test_removed_vectors_are_never_returned_and_compaction_keeps_the_rest(spec):
    idx, data = filled(200, spec)
    removed = set(range(0, 200, 3)) | set(range(100, 180))
    for i in removed:
        assert idx.remove(f"e{i}")
    assert not idx.remove("e0") and len(idx) == 200 - len(removed)
    for i in range(200):
        found, _ = idx.search(data[i], 0.999, 3)
        assert [e for e, _ in found] == ([] if i in removed else [f"e{i}"])
    idx.add("e0", data[0])
    assert idx.search(data[0], 0.999, 1)[0][0][0] == "e0"


def test_search_uses_one_thread_and_restores_the_setting():
    idx, data = filled(50, IndexSpec(index="flat"))
    before = faiss.omp_get_max_threads()
    idx.search(data[0], 0.5, 1)
    assert faiss.omp_get_max_threads() == before


def test_every_modality_must_match_the_same_entry_even_past_the_first_candidates():
    rng = np.random.default_rng(3)
    index = SemanticIndex(IndexSpec(index="flat", candidates=2))
    text = unit(rng, DIM)
    images = [unit(rng, DIM) for _ in range(30)]
    for i, img in enumerate(images):    # identical text, different images
        index.add("s", f"e{i}", {"text": text, "image": img})
    floors = {"text": 0.9, "image": 0.9}
    hits = index.search("s", {"text": text, "image": near(rng, images[29], 0.95)}, floors)
    assert [c.entry_id for c in hits] == ["e29"]
    assert index.search("s", {"text": text, "image": unit(rng, DIM)}, floors) == []
    assert index.search("other", {"text": text, "image": images[0]}, floors) == []


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), spread=st.floats(0.3, 0.999), floor=st.floats(-0.5, 0.99))
def test_spherical_cap_precheck_never_hides_a_hit(seed, spread, floor):
    rng = np.random.default_rng(seed)
    centre = unit(rng, DIM)
    vectors = np.stack([near(rng, centre, rng.uniform(spread, 1.0)) for _ in range(20)])
    cap = SphericalCap()
    for v in vectors[:10]:
        cap.include(v)
    cap.refit(vectors[:10])
    for v in vectors[10:]:
        cap.include(v)
    for _ in range(10):
        q = near(rng, centre, rng.uniform(-1, 1))
        if not cap.may_reach(q, floor):
            assert float((vectors @ q).max()) < floor


@pytest.mark.parametrize("spec", [IndexSpec(index="flat"),
                                  IndexSpec(ann_min_size=50, ann_factory="HNSW16")],
                         ids=["flat", "auto-crossing-to-ann"])
def test_add_many_stores_what_one_add_each_would(spec):
    rng = np.random.default_rng(5)
    data = np.stack([unit(rng, DIM) for _ in range(120)])
    ids = [f"e{i % 90}" for i in range(120)]          # 30 ids written twice: the later wins
    one_by_one, bulk = VectorIndex(DIM, spec), VectorIndex(DIM, spec)
    for entry_id, vec in zip(ids[:20], data[:20]):
        one_by_one.add(entry_id, vec)
        bulk.add(entry_id, vec)
    for entry_id, vec in zip(ids[20:], data[20:]):
        one_by_one.add(entry_id, vec)
    latest = dict(zip(ids[20:], data[20:]))
    bulk.add_many(list(latest), np.stack(list(latest.values())))
    assert len(bulk) == len(one_by_one) == 90 and bulk.uses_ann == one_by_one.uses_ann
    for entry_id in latest:
        assert np.array_equal(bulk.vector(entry_id), one_by_one.vector(entry_id))
    for vec in data:
        assert bulk.cap.may_reach(vec, 0.999)       # the cap still contains every vector
        query = near(rng, vec, 0.999)
        found, expected = bulk.search(query, 0.99, 1)[0], one_by_one.search(query, 0.99, 1)[0]
        assert [i for i, _ in found] == [i for i, _ in expected]


def test_semantic_index_add_many_groups_by_scope_modality_set_and_modality():
    rng = np.random.default_rng(6)
    vecs = [unit(rng, DIM) for _ in range(6)]
    index = SemanticIndex(IndexSpec(index="flat"))
    index.add_many([("a", "x", {"text": vecs[0], "image": vecs[1]}), ("b", "y", {"text": vecs[2]}),
                    ("a", "z", {"text": vecs[4], "image": vecs[5]}), ("a", "x", {"text": vecs[3]})])
    assert len(index.index("a", "text")) == 1 and len(index.index("b", "text")) == 1
    assert np.array_equal(index.index("a", "text").vector("x"), vecs[3])  # the later item wins
    both = ("text", "image")
    assert index.index("a", "image") is None and len(index.index("a", "image", both)) == 1
    assert np.array_equal(index.index("a", "image", both).vector("z"), vecs[5])
    assert index.index("a", "text", both).vector("x") is None
    assert index.search("b", {"text": vecs[0]}, {"text": 0.9}) == []
    index.remove("a", "z", both)
    assert index.index("a", "text", both) is None and index.dims() == {"text": DIM}


_SETS = [("text",), ("image",), ("text", "image"), ("text", "image", "audio")]


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 2**32 - 1),
       entries=st.lists(st.tuples(st.sampled_from(_SETS), st.integers(0, 1)), min_size=1,
                        max_size=30),
       removed=st.sets(st.integers(0, 29)),
       query=st.tuples(st.sampled_from(_SETS), st.integers(0, 1)))
def test_semantic_search_sees_only_entries_with_the_query_modality_set(seed, entries, removed,
                                                                       query):
    """Entries and the query draw each modality's vector from two fixed ones: an entry is a
    hit exactly when it has the query's modality set and the same draws (similarity 1)."""
    rng = np.random.default_rng(seed)
    pool = {m: [unit(rng, DIM), unit(rng, DIM)] for m in ("text", "image", "audio")}
    index = SemanticIndex(IndexSpec(index="flat"))
    index.add_many([("s", f"e{i}", {m: pool[m][pick] for m in mods})
                    for i, (mods, pick) in enumerate(entries)])
    for i in removed & set(range(len(entries))):
        index.remove("s", f"e{i}", entries[i][0])
    mods, pick = query
    found = index.search("s", {m: pool[m][pick] for m in mods}, {m: 0.9 for m in mods},
                         k=len(entries))
    expected = {f"e{i}" for i, entry in enumerate(entries) if i not in removed
                and entry == (mods, pick)}
    assert {c.entry_id for c in found} == expected
    assert all(set(c.similarities) == set(mods) for c in found)


@pytest.mark.parametrize("size, lists", [(1, 1), (50, 4), (1_000, 64), (10_000, 1024),
                                         (40_000, 2048), (100_000, 2048), (400_000, 4096)])
def test_an_inverted_file_has_about_8_sqrt_n_lists_and_at_most_one_per_8_vectors(size, lists):
    assert lists_for(size) == lists


@pytest.mark.parametrize("background", [False, True])
def test_the_default_inverted_file_is_trained_again_once_it_holds_four_times_its_training(
        background):
    """Trained on what it holds at the switch, the default index keeps its lists until it
    holds RETRAIN_GROWTH times that, then is trained on every vector, with the lists of its
    new size; searches find each vector's near duplicate throughout, as exact search does."""
    spec = IndexSpec(ann_min_size=100, max_backlog=10, background=background)
    idx, data = filled(100, spec)
    idx.flush()
    first = idx._trained_on
    assert first == 100 and faiss.extract_index_ivf(idx._ann).nlist == lists_for(first)
    rng = np.random.default_rng(3)
    more = np.stack([unit(rng, DIM) for _ in range(RETRAIN_GROWTH * first)])
    for i, vec in enumerate(more[:RETRAIN_GROWTH * first - 101]):
        idx.add(f"m{i}", vec)
    idx.flush()
    assert idx._trained_on == first                        # one short of the growth
    for i, vec in enumerate(more[RETRAIN_GROWTH * first - 101:], RETRAIN_GROWTH * first - 101):
        idx.add(f"m{i}", vec)
    idx.flush()
    assert idx._trained_on >= RETRAIN_GROWTH * first - spec.max_backlog
    assert faiss.extract_index_ivf(idx._ann).nlist == lists_for(idx._trained_on) > \
        lists_for(first)
    stored = np.concatenate([data, more])
    names = [f"e{i}" for i in range(len(data))] + [f"m{i}" for i in range(len(more))]
    for i in range(0, len(stored), 7):
        assert found_ids(idx, near(rng, stored[i], 0.97), floor=0.9, k=1) == [names[i]]
    idx.close()


# -- the backlog: vectors not yet in the ANN index, searched exactly, drained on overflow ----
# (inserting on the caller's thread, so the state after each call is exact; the background
# builder has its own tests in test_vectors_builder.py)
HNSW = IndexSpec(ann_min_size=50, ann_factory="HNSW16", max_backlog=64, background=False)


def found_ids(idx: VectorIndex, query: np.ndarray, floor: float = 0.999, k: int = 3) -> list[str]:
    return [entry_id for entry_id, _ in idx.search(query, floor, k)[0]]


def ann_state(idx: VectorIndex) -> tuple[int, int]:
    """(vectors in the ANN structure, vectors in the backlog)."""
    return (0 if idx._ann is None else idx._ann.ntotal), idx.pending


def test_switch_to_ann_keeps_a_small_backlog_exact_and_searches_never_build_it():
    idx, data = filled(49, HNSW)
    assert not idx.uses_ann and idx.pending == 0          # exact search has no backlog
    idx.remove("e3")                                      # a tombstone from the flat days
    idx.add("e3", data[3])
    idx.add("e49", data[0])
    assert idx.uses_ann and ann_state(idx) == (0, 50) and len(idx) == 50  # tombstone dropped
    assert "e49" in idx and np.array_equal(idx.vector("e49"), data[0])
    assert found_ids(idx, data[5]) == ["e5"]
    assert sorted(found_ids(idx, data[0])) == ["e0", "e49"]   # the same vector twice
    assert all(found_ids(idx, data[i]) == [f"e{i}"] for i in range(1, 49))
    assert ann_state(idx) == (0, 50)                      # searching built nothing


def test_adds_past_the_bound_insert_the_oldest_pending_vectors():
    idx, data = filled(64, HNSW)
    assert ann_state(idx) == (0, 64)                      # at the bound, not past it
    rng = np.random.default_rng(7)
    extra = [unit(rng, DIM) for _ in range(10)]
    idx.add("x0", extra[0])
    assert ann_state(idx) == (1, 64)                      # one past the bound: one inserted
    idx.add_many([f"x{i}" for i in range(1, 5)], np.stack(extra[1:5]))
    for i in range(5, 10):
        idx.add(f"x{i}", extra[i])
    assert ann_state(idx) == (10, 64) and len(idx) == 74
    assert [found_ids(idx, v) for v in extra] == [[f"x{i}"] for i in range(10)]
    assert all(found_ids(idx, data[i]) == [f"e{i}"] for i in range(64))
    assert ann_state(idx) == (10, 64)


def test_switching_to_ann_past_the_bound_inserts_all_but_the_bound_at_once():
    idx, data = filled(49, replace(HNSW, max_backlog=20))
    assert ann_state(idx) == (0, 0)
    idx.add("e49", data[0])
    assert ann_state(idx) == (30, 20)
    assert sorted(found_ids(idx, data[0])) == ["e0", "e49"]
    assert all(found_ids(idx, data[i]) == [f"e{i}"] for i in range(1, 49))


def test_many_single_adds_never_leave_a_search_to_insert_anything():
    spec = replace(HNSW, ann_min_size=40, max_backlog=25)
    idx = VectorIndex(DIM, spec)
    rng = np.random.default_rng(10)
    data = [unit(rng, DIM) for _ in range(400)]
    for i, vec in enumerate(data):
        idx.add(f"e{i}", vec)
        assert idx.pending <= spec.max_backlog
        before = ann_state(idx)
        assert found_ids(idx, data[int(rng.integers(0, i + 1))], floor=0.999, k=1)
        assert ann_state(idx) == before


def overflowed(spec: IndexSpec = HNSW) -> tuple[VectorIndex, np.ndarray]:
    """An index whose 65 vectors are all in the ANN structure (``flush``: none pending)."""
    idx, data = filled(65, spec)
    idx.flush()
    assert ann_state(idx) == (65, 0)
    return idx, data


def test_removing_a_pending_id_drops_it_from_the_backlog():
    idx, data = overflowed()
    rng = np.random.default_rng(8)
    extra = [unit(rng, DIM) for _ in range(8)]
    for i, vec in enumerate(extra):
        idx.add(f"x{i}", vec)
    assert idx.remove("x0") and idx.remove("x5") and idx.remove("x7")
    assert idx.pending == 5 and len(idx) == 70 and "x5" not in idx
    assert idx.remove("e1") and idx.pending == 5          # already indexed: a tombstone
    assert not idx.remove("x5")
    for i, vec in enumerate(extra):
        assert found_ids(idx, vec) == ([] if i in (0, 5, 7) else [f"x{i}"])
    assert found_ids(idx, data[1]) == [] and found_ids(idx, data[2]) == ["e2"]
    assert all(np.array_equal(idx.vector(f"x{i}"), extra[i]) for i in (1, 2, 3, 4, 6))


def test_re_adding_a_pending_id_replaces_it():
    idx, data = overflowed()
    rng = np.random.default_rng(9)
    old, new = unit(rng, DIM), unit(rng, DIM)
    idx.add("x", old)
    idx.add("y", data[7])
    idx.add("x", new)
    assert idx.pending == 2 and len(idx) == 67 and np.array_equal(idx.vector("x"), new)
    assert found_ids(idx, old) == [] and found_ids(idx, new) == ["x"]
    assert sorted(found_ids(idx, data[7])) == ["e7", "y"]


def test_compaction_rebuilds_the_ann_index_in_the_remove_that_overflows_the_backlog():
    idx, data = filled(300, HNSW)                          # 236 in the ANN index, 64 pending
    assert ann_state(idx) == (236, 64)
    for i in range(151):                                   # the 151st tombstone compacts
        idx.remove(f"e{i}")
    assert idx.uses_ann and ann_state(idx) == (85, 64) and len(idx) == 149  # rebuilt at once
    small, small_data = filled(129, HNSW)
    assert ann_state(small) == (65, 64)
    for i in range(65):
        small.remove(f"e{i}")
    assert ann_state(small) == (0, 64)                     # compacted: 64 fit in the backlog
    for index, vecs, gone in ((idx, data, 151), (small, small_data, 65)):
        before = ann_state(index)
        assert all(found_ids(index, vecs[i]) == ([] if i < gone else [f"e{i}"])
                   for i in range(len(vecs)))
        assert ann_state(index) == before


def test_flush_inserts_the_backlog_now():
    idx, data = filled(60, HNSW)
    idx.flush()
    assert ann_state(idx) == (60, 0)
    assert all(found_ids(idx, data[i]) == [f"e{i}"] for i in range(60))


_IDS = st.integers(0, 15)
_OPS = st.lists(st.one_of(
    st.tuples(st.just("add"), st.lists(_IDS, min_size=1, max_size=6, unique=True)),
    st.tuples(st.just("remove"), _IDS),
    st.tuples(st.just("search"), _IDS, st.sampled_from([-1.0, 0.0, 0.5, 0.95]),
              st.integers(1, 4))), min_size=1, max_size=60)


@settings(max_examples=80, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), max_backlog=st.integers(0, 6), ops=_OPS)
def test_ann_with_a_backlog_answers_like_an_eager_flat_index(seed, max_backlog, ops):
    """An exact ANN index ("Flat") switched on at 4 vectors, with a backlog of at most
    ``max_backlog`` vectors searched beside it, against the flat index over the same
    add/remove/search sequence: the same entries every time, and no search changes what
    the ANN index holds."""
    rng = np.random.default_rng(seed)
    lazy = SemanticIndex(IndexSpec(index="auto", ann_factory="Flat", ann_min_size=4,
                                   max_backlog=max_backlog, background=False))
    eager = SemanticIndex(IndexSpec(index="flat"))
    for op in ops:
        if op[0] == "add":
            items = [("s", f"e{i}", {"text": unit(rng, DIM)}) for i in op[1]]
            for index in (lazy, eager):
                index.add_many(items)
        elif op[0] == "remove":
            for index in (lazy, eager):
                index.remove("s", f"e{op[1]}", ("text",))
        else:
            _, near_id, floor, k = op
            stored = eager.index("s", "text")
            target = None if stored is None else stored.vector(f"e{near_id}")
            query = unit(rng, DIM) if target is None else near(rng, target, 0.9)
            before = None if lazy.index("s", "text") is None else ann_state(lazy.index("s", "text"))
            got, want = (index.search("s", {"text": query}, {"text": floor}, k)
                         for index in (lazy, eager))
            assert [c.entry_id for c in got] == [c.entry_id for c in want]
            assert [c.similarity for c in got] == pytest.approx([c.similarity for c in want],
                                                                abs=1e-6)
            if before is not None:
                assert ann_state(lazy.index("s", "text")) == before
        a, b = lazy.index("s", "text"), eager.index("s", "text")
        assert (a is None) == (b is None)
        if a is not None:
            assert len(a) == len(b) and a.pending <= max_backlog
            for i in range(16):
                assert (a.vector(f"e{i}") is None) == (b.vector(f"e{i}") is None)
                if b.vector(f"e{i}") is not None:
                    assert np.array_equal(a.vector(f"e{i}"), b.vector(f"e{i}"))


@pytest.mark.parametrize("spec", [IndexSpec(index="flat"),
                                  IndexSpec(ann_min_size=1, ann_factory="HNSW16",
                                            max_backlog=0, background=False)],
                         ids=["flat", "hnsw"])
def test_a_similarity_equal_to_the_floor_in_float32_is_kept(spec):
    """Similarities are float32: one that equals the floor rounded to float32 (0.9 is
    0.89999998 there) passes it, as numpy compares a float32 with a Python float."""
    dim = 8
    index = VectorIndex(dim, spec)
    vec = np.zeros(dim, np.float32)
    vec[0], vec[1] = np.float32(0.9), np.float32(np.sqrt(1 - 0.81))
    index.add("edge", vec)
    index.add("far", np.eye(dim, dtype=np.float32)[3])
    query = np.eye(dim, dtype=np.float32)[0]
    found, _ = index.search(query, 0.9, 2)
    assert found == [("edge", float(np.float32(0.9)))]
    assert float(np.float32(0.9)) < 0.9
    assert index.uses_ann == (spec.index != "flat") and index.pending == 0 or spec.index == "flat"


def test_a_deferred_index_stays_exact_until_it_is_no_longer_deferred():
    """Past ann_min_size a deferred index builds nothing and answers as exact search; once
    not deferred it switches to ANN, every vector pending, with the same answers."""
    rng = np.random.default_rng(9)
    data = np.stack([unit(rng, DIM) for _ in range(120)])
    index, exact = SemanticIndex(IndexSpec(ann_min_size=50)), SemanticIndex(IndexSpec("flat"))
    index.defer_ann(True)
    for i in range(0, 120, 40):
        for idx in (index, exact):
            idx.add_many(("s", f"e{j}", {"text": data[j]}) for j in range(i, i + 40))
    queries = [near(rng, v, 0.95) for v in data[::7]]

    def answers(idx: SemanticIndex) -> list[list[str]]:
        return [[c.entry_id for c in idx.search("s", {"text": q}, {"text": 0.8}, 3)]
                for q in queries]

    vectors = index.index("s", "text")
    assert not vectors.uses_ann and answers(index) == answers(exact)
    index.defer_ann(False)
    assert vectors.uses_ann and vectors.pending == 120 and answers(index) == answers(exact)
    index.close()


@pytest.mark.parametrize("factory", ["IVF64(SQfp16),SQfp16", "IVF64,SQfp16", "HNSW16"])
def test_add_rows_files_vectors_where_the_index_itself_would(factory):
    rng = np.random.default_rng(3)
    rows = rng.standard_normal((3000, 32)).astype(np.float32)
    rows /= np.linalg.norm(rows, axis=1, keepdims=True)
    ours = faiss.index_factory(32, factory, faiss.METRIC_INNER_PRODUCT)
    ours.train(rows)
    theirs = faiss.clone_index(ours)
    add_rows(ours, rows[:1000])
    add_rows(ours, rows[1000:])
    theirs.add(rows[:1000])
    theirs.add(rows[1000:])
    ivf = faiss.try_extract_index_ivf(ours)
    if ivf is not None:
        ivf.nprobe = faiss.try_extract_index_ivf(theirs).nprobe = 4
        sizes = [ivf.invlists.list_size(i) for i in range(ivf.nlist)]
        twin = faiss.try_extract_index_ivf(theirs)
        assert sizes == [twin.invlists.list_size(i) for i in range(twin.nlist)]
    queries = rows[:200] + 0.05 * rng.standard_normal((200, 32)).astype(np.float32)
    assert ours.ntotal == theirs.ntotal == 3000
    assert np.array_equal(ours.search(queries, 5)[1], theirs.search(queries, 5)[1])
