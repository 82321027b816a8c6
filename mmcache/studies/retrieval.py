"""Cross-modal retrieval metrics: R@k, median rank, bootstrap 95% CIs, chance levels.

A query is answered correctly by every gallery item with the same label (a
paraphrase class, a transcript id, a scene). The rank of a query is
1 + the number of *wrong* gallery items scoring at least as high as its best
correct item — ties count against the query, so a constant scorer sits at
chance or below, never above.
"""

from __future__ import annotations

from dataclasses import dataclass
from math import comb
from typing import Any, Sequence

import numpy as np

from mmcache.errors import InvalidInputError

DEFAULT_KS: tuple[int, ...] = (1, 5, 10)


def cosine_similarity(queries: np.ndarray, gallery: np.ndarray) -> np.ndarray:
    """``(n_queries, n_gallery)`` cosine similarities."""
    q, g = np.asarray(queries, np.float64), np.asarray(gallery, np.float64)
    if q.ndim != 2 or g.ndim != 2 or q.shape[1] != g.shape[1]:
        raise InvalidInputError(f"queries {q.shape} and gallery {g.shape} must be 2-D with the "
                                "same dimension")
    q = q / np.maximum(np.linalg.norm(q, axis=1, keepdims=True), 1e-12)
    g = g / np.maximum(np.linalg.norm(g, axis=1, keepdims=True), 1e-12)
    return q @ g.T


def ranks(similarity: np.ndarray, query_labels: Sequence[Any],
          gallery_labels: Sequence[Any]) -> np.ndarray:
    """The 1-based rank of each query's best correct gallery item (ties count against it)."""
    sim = np.asarray(similarity, np.float64)
    ql, gl = np.asarray(query_labels), np.asarray(gallery_labels)
    if sim.ndim != 2 or sim.shape != (len(ql), len(gl)):
        raise InvalidInputError(f"similarity {sim.shape} does not match {len(ql)} queries × "
                                f"{len(gl)} gallery items")
    if not np.isfinite(sim).all():
        raise InvalidInputError("similarity holds NaN or infinite values")
    correct = ql[:, None] == gl[None, :]
    if not correct.any(axis=1).all():
        missing = ql[~correct.any(axis=1)][:5]
        raise InvalidInputError(f"queries without a correct gallery item, e.g. labels {missing}")
    best = np.where(correct, sim, -np.inf).max(axis=1)
    return 1 + ((sim >= best[:, None]) & ~correct).sum(axis=1)


def recall_at(rank: np.ndarray, k: int) -> float:
    """Share of queries whose correct item is in the top ``k``."""
    return float((np.asarray(rank) <= k).mean())


def bootstrap_ci(rank: np.ndarray, statistic: str, n_boot: int = 1000, seed: int = 0,
                 level: float = 0.95) -> tuple[float, float]:
    """Percentile bootstrap CI (queries resampled) of ``"R@k"`` or ``"median_rank"``."""
    rank = np.asarray(rank)
    idx = np.random.default_rng(seed).integers(0, len(rank), size=(n_boot, len(rank)))
    samples = rank[idx]
    if statistic == "median_rank":
        values = np.median(samples, axis=1)
    elif statistic.startswith("R@"):
        values = (samples <= int(statistic[2:])).mean(axis=1)
    else:
        raise InvalidInputError(f"unknown statistic {statistic!r}; use 'R@k' or 'median_rank'")
    lo, hi = np.quantile(values, [(1 - level) / 2, (1 + level) / 2])
    return float(lo), float(hi)


@dataclass(frozen=True)
class RetrievalScores:
    """R@k and median rank of one retrieval run, with bootstrap CIs and chance levels."""

    n_queries: int
    n_gallery: int
    recall: dict[int, float]
    recall_ci: dict[int, tuple[float, float]]
    chance: dict[int, float]
    median_rank: float
    median_rank_ci: tuple[float, float]

    def as_dict(self) -> dict[str, Any]:
        """Flat JSON-able form: ``R@1``, ``R@1_ci``, ``R@1_chance``, ..., ``median_rank``."""
        out: dict[str, Any] = {"n_queries": self.n_queries, "n_gallery": self.n_gallery,
                               "median_rank": self.median_rank,
                               "median_rank_ci": list(self.median_rank_ci)}
        for k in self.recall:
            out[f"R@{k}"] = self.recall[k]
            out[f"R@{k}_ci"] = list(self.recall_ci[k])
            out[f"R@{k}_chance"] = self.chance[k]
        return out


def evaluate(similarity: np.ndarray, query_labels: Sequence[Any], gallery_labels: Sequence[Any],
             ks: Sequence[int] = DEFAULT_KS, n_boot: int = 1000, seed: int = 0) -> RetrievalScores:
    """Score a retrieval run: R@k (with CIs and chance) and median rank (with CI)."""
    rank = ranks(similarity, query_labels, gallery_labels)
    gl = np.asarray(gallery_labels)
    positives = (np.asarray(query_labels)[:, None] == gl[None, :]).sum(axis=1)
    return RetrievalScores(
        n_queries=len(rank), n_gallery=len(gl),
        recall={k: recall_at(rank, k) for k in ks},
        recall_ci={k: bootstrap_ci(rank, f"R@{k}", n_boot, seed) for k in ks},
        chance={k: chance_recall(len(gl), positives, k) for k in ks},
        median_rank=float(np.median(rank)),
        median_rank_ci=bootstrap_ci(rank, "median_rank", n_boot, seed))


def chance_recall(n_gallery: int, n_positive: int | Sequence[int], k: int) -> float:
    """Expected R@k of a uniformly random ranking (mean over queries with ``n_positive`` each)."""
    counts = np.atleast_1d(np.asarray(n_positive))
    if n_gallery < 1 or (counts < 1).any() or (counts > n_gallery).any():
        raise InvalidInputError(f"bad chance inputs: gallery {n_gallery}, positives {counts}")
    k = min(k, n_gallery)
    miss = [comb(n_gallery - int(m), k) / comb(n_gallery, k) for m in counts]
    return float(1 - np.mean(miss))


def fuse(similarities: Sequence[np.ndarray], weights: Sequence[float]) -> np.ndarray:
    """Weighted sum of similarity matrices (e.g. projected audio and ASR transcript)."""
    if len(similarities) != len(weights) or not similarities:
        raise InvalidInputError("fuse needs one weight per similarity matrix")
    shapes = {np.shape(s) for s in similarities}
    if len(shapes) != 1:
        raise InvalidInputError(f"similarity matrices differ in shape: {shapes}")
    return sum(w * np.asarray(s, np.float64) for s, w in zip(similarities, weights))


def best_fusion_weight(sim_a: np.ndarray, sim_b: np.ndarray, query_labels: Sequence[Any],
                       gallery_labels: Sequence[Any],
                       grid: Sequence[float] = tuple(np.linspace(0, 1, 21))) -> float:
    """The weight ``w`` of ``w·sim_a + (1−w)·sim_b`` with the best mean reciprocal rank.

    Pick it on validation data, never on the test queries.
    """
    scores = [np.mean(1.0 / ranks(fuse([sim_a, sim_b], [w, 1 - w]), query_labels, gallery_labels))
              for w in grid]
    return float(grid[int(np.argmax(scores))])
