"""Vector indexes: exact flat search, ANN switch-over, tombstones, the every-modality rule."""

from __future__ import annotations

import faiss
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mmcache.errors import ConfigError
from mmcache.guard import SphericalCap
from mmcache.testing import near, unit
from mmcache.tiers.vectors import IndexSpec, SemanticIndex, VectorIndex

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


def test_semantic_index_add_many_groups_by_scope_and_modality():
    rng = np.random.default_rng(6)
    vecs = [unit(rng, DIM) for _ in range(4)]
    index = SemanticIndex(IndexSpec(index="flat"))
    index.add_many([("a", "x", {"text": vecs[0], "image": vecs[1]}), ("b", "y", {"text": vecs[2]}),
                    ("a", "x", {"text": vecs[3]})])
    assert len(index.index("a", "text")) == 1 and len(index.index("b", "text")) == 1
    assert np.array_equal(index.index("a", "text").vector("x"), vecs[3])
    assert np.array_equal(index.index("a", "image").vector("x"), vecs[1])
    assert index.search("b", {"text": vecs[0]}, {"text": 0.9}) == []
