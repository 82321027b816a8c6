"""Fitting and reporting the learned pair verifier, on small synthetic features."""

from __future__ import annotations

import numpy as np
import pytest

from mmcache.studies.pair_verifier import (Featurised, expected_calibration_error, fit,
                                           format_report, leave_one_source_out, report, scores)
from mmcache.verify.pair_model import FEATURES, SIGNS

IDF = np.ones(4, dtype=np.float32)


def source(seed: int, n: int = 400, informative: int = 0) -> Featurised:
    """Pairs whose label follows feature ``informative`` (cosine by default), half train."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, len(FEATURES)))
    same = x[:, informative] * SIGNS[informative] + 0.3 * rng.normal(size=n) > 0
    return Featurised(x, same, np.array(["train", "test"] * (n // 2)))


def test_fit_learns_an_informative_feature_within_its_sign() -> None:
    model = fit([source(0)], IDF, {"sources": "synthetic"})
    assert model.coef[0] > 1.0 and abs(model.coef[1]) < 0.5 * model.coef[0]
    assert all(c * s >= 0 for c, s in zip(model.coef, SIGNS))
    held = source(1)
    assert report(scores(model, held), held.same)["auc"] > 0.95


def test_a_feature_against_its_sign_is_not_learnt() -> None:
    flipped = source(0, informative=FEATURES.index("negation_differs"))
    flipped = Featurised(flipped.x, ~flipped.same, flipped.split)   # agreement means different
    assert fit([flipped], IDF, {}).coef[FEATURES.index("negation_differs")] == 0.0


def test_report_counts_passes_and_calibration() -> None:
    p = np.array([0.9, 0.9, 0.1, 0.1, 0.6])
    same = np.array([True, True, False, False, False])
    r = report(p, same)
    assert (r["n"], r["n_same"], r["passes_same"], r["passes_different"]) == (5, 2, 1.0, 1 / 3)
    assert r["auc"] == pytest.approx(1.0)
    assert expected_calibration_error(np.array([0.25] * 4), np.array([1, 0, 0, 0], bool)) == 0.0
    assert expected_calibration_error(np.array([1.0, 1.0]), np.array([False, False])) == 1.0


def test_each_source_is_measured_by_a_model_that_never_saw_it() -> None:
    data = {"a": source(0), "b": source(1, informative=2)}
    out = leave_one_source_out(data, IDF, {"probe": source(2)})
    assert out["a"]["fitted_on"] == ["b"] and out["b"]["fitted_on"] == ["a"]
    assert out["probe"]["fitted_on"] == ["a", "b"]
    assert out["a"]["n"] == 200 and out["a"]["auc"] < 0.65 < out["probe"]["auc"]
    assert format_report(out).count("\n") == 3
