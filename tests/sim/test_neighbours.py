"""The pruned range search of mmcache.sim.cachebench.neighbours finds exactly the pairs a brute-force search
over all distinct vectors finds (same neighbour sets, same cosines up to float32 rounding), on
generated workloads with close sibling intents, multimodal queries, novel queries and identical
vectors, on adversarial pairs exactly at the cutoff, and under a grouping that prunes nothing;
and on a workload with many intents it computes a small share of the pairs. The same holds when
the centres' cosines come from a half-precision GEMM (bfloat16 or float16, forced here at every
size), whose error bound is checked against measured errors."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from mmcache.sim.cachebench import neighbours
from mmcache.errors import ConfigError
from mmcache.sim.cachebench.neighbours import half_precision_error, neighbour_table, range_search
from mmcache.sim.workload import generate

#: Cosines of the pruned and the brute-force search differ by float32 rounding only.
COS_ATOL = 1e-4


def distinct_vectors(workload, table):
    """Each distinct tuple's vectors, indexed by tuple id, and its modality set."""
    first = np.unique(workload.exact_keys(), return_index=True)[1]
    vecs = [None] * (table.nb_ptr.shape[0] - 1)
    sets = np.zeros(len(vecs), np.int64)
    for key, i in enumerate(first.tolist()):
        vecs[table.vid_of_key[key]] = workload.vectors(i)
        sets[table.vid_of_key[key]] = workload.modality_set[i]
    return vecs, sets


def assert_matches_brute_force(workload, cutoff):
    """Every tuple's neighbours equal those of a dense search of its modality set."""
    table = neighbour_table(workload, cutoff)
    vecs, sets = distinct_vectors(workload, table)
    brute_pairs = 0
    for s in np.unique(sets):
        ids = np.flatnonzero(sets == s)
        mats = [np.stack([vecs[v][j] for v in ids]) for j in range(len(vecs[ids[0]]))]
        sims = [mat @ mat.T for mat in mats]
        near = np.logical_and.reduce([sim >= np.float32(cutoff) for sim in sims])
        brute_pairs += ids.size ** 2
        for r, v in enumerate(ids.tolist()):
            lo, hi = table.nb_ptr[v], table.nb_ptr[v + 1]
            np.testing.assert_array_equal(table.nb_vid[lo:hi], ids[near[r]])
            for j, sim in enumerate(sims):
                np.testing.assert_allclose(table.nb_cos[lo:hi, j], sim[r, near[r]],
                                           atol=COS_ATOL)
            assert np.isinf(table.nb_cos[lo:hi, len(sims):]).all()
    return table, brute_pairs


CASES = {
    "close-siblings": {"n_intents": 400, "sibling_cos": 0.96, "paraphrase_cos": 0.92,
                       "zipf_alpha": 0.6},
    "multimodal": {"n_intents": 200, "multimodal_mix": {"image+audio": 0.3, "text+image": 0.2,
                                                        "text+image+audio": 0.2}},
    "video": {"n_intents": 200, "multimodal_mix": {"video": 0.3, "image+audio": 0.3}},
    "novel-and-spread": {"n_intents": 300, "novel_share": 0.2, "paraphrase_cos": 0.8,
                         "paraphrase_spread": 0.15},
}


@pytest.mark.parametrize("name", sorted(CASES))
@pytest.mark.parametrize("cutoff", [0.7, 0.85])
def test_pruned_table_equals_the_brute_force_table(name, cutoff):
    table, _ = assert_matches_brute_force(generate(n_queries=3_000, seed=11, **CASES[name]),
                                           cutoff)
    assert table.nb_vid.shape[0] > table.nb_ptr.shape[0] - 1  # pairs beyond each tuple itself


def test_identical_vectors_of_two_intents_share_a_row():
    workload = generate(n_queries=1_500, n_intents=100, seed=5, modality_mix={"text": 1.0})
    for a, v in {(int(a), int(v)) for a, v in zip(workload.intent, workload.variant)}:
        twin = a - a % 2
        workload._vectors[(a, 0, v)] = workload._draw_embedding(0, twin, twin // 5, v)
    table, _ = assert_matches_brute_force(workload, 0.8)
    assert table.nb_ptr.shape[0] - 1 < table.keys.shape[0]


def test_many_intents_compute_a_small_share_of_the_pairs():
    table, brute_pairs = assert_matches_brute_force(
        generate(n_queries=12_000, n_intents=2_000, seed=6, zipf_alpha=0.3), 0.85)
    assert table.pairs_computed < brute_pairs / 20


def boundary_groups(cos, radius, dim=64, seed=0):
    """Two groups of two unit vectors in a random plane of R^dim: centres 2·radius + θ apart
    (θ = arccos(cos)), radii ``radius``, and one cross pair (1, 2) exactly θ apart."""
    theta = np.arccos(cos)
    angles = np.array([-radius, radius, radius + theta, 3 * radius + theta])
    basis = np.linalg.qr(np.random.default_rng(seed).standard_normal((dim, 2)))[0]
    return (np.cos(angles)[:, None] * basis[:, 0] + np.sin(angles)[:, None] * basis[:, 1]
            ).astype(np.float32)


@pytest.mark.parametrize("seed", range(8))
def test_pairs_at_the_cutoff_across_groups_are_not_pruned(seed):
    cutoff, cols = 0.85, np.array([0, 64])
    vecs = boundary_groups(cutoff + 2e-6, radius=0.2, seed=seed)  # just inside, past rounding
    pruned = range_search(vecs, cols, np.array([0, 0, 1, 1]), cutoff)
    unpruned = range_search(vecs, cols, np.zeros(4, np.int64), cutoff)
    for got, want in zip(pruned[:3], unpruned[:3]):
        np.testing.assert_array_equal(got, want)
    ptr, col = pruned[0], pruned[1]
    assert 2 in col[ptr[1]:ptr[2]] and 1 in col[ptr[2]:ptr[3]]
    assert pruned[3] == unpruned[3] == 16  # the two groups are each other's candidates


def test_a_grouping_that_prunes_nothing_is_still_exact_and_far_groups_are_pruned():
    workload = generate(n_queries=2_000, n_intents=150, seed=7)
    table = neighbour_table(workload, 0.85)
    vecs, sets = distinct_vectors(workload, table)
    ids = np.flatnonzero(sets == 0)
    mat = np.stack([vecs[v][0] for v in ids])
    rng = np.random.default_rng(0)
    for group in (rng.integers(0, 3, ids.size), np.arange(ids.size)):
        ptr, col, _, computed = range_search(mat, np.array([0, mat.shape[1]]), group, 0.85)
        near = mat @ mat.T >= np.float32(0.85)
        for r in range(ids.size):
            np.testing.assert_array_equal(col[ptr[r]:ptr[r + 1]], np.flatnonzero(near[r]))
        if group.max() == 2:
            assert computed == ids.size ** 2  # three random groups: nothing to prune
        else:
            assert computed < ids.size ** 2 / 20  # singletons: radius 0, far pairs pruned


def test_threads_give_the_same_table():
    workload = generate(n_queries=3_000, seed=11, **CASES["multimodal"])
    one, two = (neighbour_table(workload, 0.8, threads=n) for n in (1, 2))
    for field in ("keys", "key_of_request", "vid_of_key", "members_ptr", "members", "nb_ptr",
                  "nb_vid", "nb_cos", "set_size"):
        np.testing.assert_array_equal(getattr(one, field), getattr(two, field))
    assert one.pairs_computed == two.pairs_computed


@pytest.mark.parametrize("threads", [0, -1, 1.5, True])
def test_a_bad_thread_count_is_refused(threads):
    with pytest.raises(ConfigError, match="threads"):
        neighbour_table(generate(n_queries=100, n_intents=10, seed=8), 0.8, threads=threads)


def test_a_cutoff_outside_the_cosine_range_is_refused():
    with pytest.raises(ConfigError):
        neighbour_table(generate(n_queries=100, n_intents=10, seed=8), -1.5)


@pytest.fixture(params=[torch.bfloat16, torch.float16], ids=["bfloat16", "float16"])
def half_gemm(request, monkeypatch):
    """Every table below uses a half-precision GEMM of ``request.param`` for the centres."""
    dtype = request.param
    monkeypatch.setattr(neighbours, "HALF_PRECISION_FROM", 0)
    monkeypatch.setattr(neighbours, "half_precision_format", lambda: (dtype, torch.finfo(dtype).eps / 2))
    return dtype


@pytest.mark.parametrize("name", sorted(CASES))
def test_a_half_precision_gemm_gives_the_brute_force_table(half_gemm, name):
    assert_matches_brute_force(generate(n_queries=3_000, seed=11, **CASES[name]), 0.85)


@pytest.mark.parametrize("seed", range(4))
def test_a_half_precision_gemm_keeps_pairs_at_the_cutoff(half_gemm, seed):
    cutoff, cols = 0.85, np.array([0, 64])
    vecs = boundary_groups(cutoff + 2e-6, radius=0.2, seed=seed)
    pruned = range_search(vecs, cols, np.array([0, 0, 1, 1]), cutoff)
    assert 2 in pruned[1][pruned[0][1]:pruned[0][2]] and pruned[3] == 16


def test_the_half_precision_error_bound_holds_on_unit_vectors(half_gemm):
    rng = np.random.default_rng(3)
    for dim in (3, 64, 128, 512):
        vecs = rng.standard_normal((400, dim)).astype(np.float32)
        vecs[:50] *= rng.random((50, dim)) < 0.1  # sparse rows: components below normal range
        vecs[200:] = vecs[:200] + 0.05 * rng.standard_normal((200, dim))  # near pairs too
        vecs = vecs[np.linalg.norm(vecs, axis=1) > 0]
        vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
        exact = vecs.astype(np.float64) @ vecs.T.astype(np.float64)
        low = torch.from_numpy(vecs).to(half_gemm)
        error = np.abs((low @ low.T).float().numpy() - exact).max()
        bound = half_precision_error(torch.finfo(half_gemm).eps / 2, dim)
        assert error <= bound
        assert error > bound / 50  # the bound is not vacuous


def test_distinct_rows_keep_first_appearance_order_and_survive_a_hash_collision(monkeypatch):
    rng = np.random.default_rng(4)
    mat = rng.standard_normal((50, 8)).astype(np.float32)
    mat[[10, 30, 31]] = mat[[3, 20, 3]]
    mat[40] = -0.0 * mat[40]  # -0.0 differs from 0.0 byte for byte
    want_vid = np.unique([r.tobytes() for r in mat], return_inverse=True)[1]
    for colliding in (False, True):
        if colliding:  # every row hashes alike: the rows themselves must tell them apart
            monkeypatch.setattr(neighbours, "_row_hashes",
                                lambda words: np.zeros(words.shape[0], np.uint64))
        distinct, vid = neighbours._distinct_rows(mat)
        assert distinct.shape[0] == 47
        np.testing.assert_array_equal(distinct[vid], mat)
        np.testing.assert_array_equal(vid[:4], [0, 1, 2, 3])  # first appearance order
        assert vid[10] == vid[3] == vid[31] and vid[30] == vid[20]
        assert len(set(zip(vid.tolist(), want_vid.tolist()))) == 47  # the same partition
