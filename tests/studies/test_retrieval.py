"""Retrieval metrics: ranks, R@k, chance, bootstrap CIs, fusion."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mmcache.errors import InvalidInputError
from mmcache.studies.retrieval import (best_fusion_weight, bootstrap_ci, chance_recall,
                                       cosine_similarity, evaluate, fuse, ranks, recall_at)


def test_perfect_and_reversed_similarity() -> None:
    labels = np.arange(20)
    sim = np.eye(20)
    assert (ranks(sim, labels, labels) == 1).all()
    assert (ranks(-np.eye(20), labels, labels) == 20).all()


def test_ties_count_against_the_query() -> None:
    labels = np.arange(10)
    assert (ranks(np.zeros((10, 10)), labels, labels) == 10).all()


def test_multiple_positives_use_the_best_one() -> None:
    sim = np.array([[0.1, 0.9, 0.5, 0.8]])
    assert ranks(sim, [7], [7, 1, 2, 7])[0] == 2  # best positive 0.8, beaten only by 0.9


def test_chance_matches_random_rankings() -> None:
    rng = np.random.default_rng(0)
    gallery = np.repeat(np.arange(25), 2)  # 50 items, two correct per query
    queries = rng.integers(0, 25, 4000)
    rank = ranks(rng.random((4000, 50)), queries, gallery)
    for k in (1, 5, 10):
        assert abs(recall_at(rank, k) - chance_recall(50, 2, k)) < 0.02
    assert chance_recall(100, 1, 1) == pytest.approx(0.01)
    assert chance_recall(10, 1, 50) == 1.0


@settings(max_examples=40, deadline=None)
@given(st.integers(2, 40), st.integers(1, 60), st.integers(0, 10_000))
def test_scores_are_consistent(n_gallery: int, n_queries: int, seed: int) -> None:
    rng = np.random.default_rng(seed)
    gallery = np.arange(n_gallery)
    queries = rng.integers(0, n_gallery, n_queries)
    sim = rng.standard_normal((n_queries, n_gallery))
    scores = evaluate(sim, queries, gallery, n_boot=200, seed=seed)
    r = [scores.recall[k] for k in (1, 5, 10)]
    assert r == sorted(r) and all(0 <= x <= 1 for x in r)
    for k in (1, 5, 10):
        lo, hi = scores.recall_ci[k]
        assert lo <= scores.recall[k] <= hi
    lo, hi = scores.median_rank_ci
    assert 1 <= lo <= hi <= n_gallery
    assert set(scores.as_dict()) >= {"R@1", "R@1_ci", "R@1_chance", "median_rank"}


def test_ci_narrows_with_more_queries() -> None:
    rng = np.random.default_rng(1)
    small, large = rng.integers(1, 4, 50), rng.integers(1, 4, 5000)
    w_small = np.subtract(*bootstrap_ci(small, "R@1")[::-1])
    w_large = np.subtract(*bootstrap_ci(large, "R@1")[::-1])
    assert w_large < w_small / 4


def test_cosine_similarity_ignores_scale() -> None:
    a = np.array([[1.0, 0.0], [0.0, 2.0]])
    assert np.allclose(cosine_similarity(a * 5, a), np.eye(2))


def test_fusion_weight_picks_the_informative_scorer() -> None:
    rng = np.random.default_rng(2)
    labels = np.arange(30)
    good, noise = np.eye(30) + 0.1 * rng.random((30, 30)), rng.random((30, 30))
    assert best_fusion_weight(good, noise, labels, labels) >= 0.5
    assert best_fusion_weight(noise, good, labels, labels) <= 0.5
    assert np.allclose(fuse([good, noise], [1, 0]), good)


@pytest.mark.parametrize("call", [
    lambda: ranks(np.zeros((2, 3)), [0, 1], [0, 1]),
    lambda: ranks(np.zeros((1, 2)), [5], [0, 1]),
    lambda: ranks(np.full((1, 1), np.nan), [0], [0]),
    lambda: cosine_similarity(np.ones((2, 3)), np.ones((2, 4))),
    lambda: bootstrap_ci(np.ones(3), "mean"),
    lambda: chance_recall(5, 6, 1),
    lambda: fuse([np.ones((2, 2)), np.ones((3, 2))], [0.5, 0.5]),
])
def test_bad_inputs_raise(call) -> None:
    with pytest.raises(InvalidInputError):
        call()
