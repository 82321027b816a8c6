"""The pair verifier's report as ledger figures: what the docs check reads back."""

from __future__ import annotations

import numpy as np

from mmcache.lab.bench import ledger
from mmcache.lab.bench.verifier_report import report_figures
from mmcache.studies.pair_verifier import Featurised, fit, leave_one_source_out
from mmcache.verify.pair_model import FEATURES

IDF = np.ones(4, dtype=np.float32)


def source(seed: int, n: int = 40) -> Featurised:
    """Pairs whose label follows the cosine feature, half of them train."""
    x = np.random.default_rng(seed).normal(size=(n, len(FEATURES)))
    return Featurised(x, x[:, 0] > 0, np.array(["train", "test"] * (n // 2)))


def test_every_score_and_coefficient_is_recorded_and_read_back(tmp_path) -> None:
    data = {"a": source(0), "b": source(1)}
    model = fit([d.part("train") for d in data.values()], IDF, {})
    results = leave_one_source_out(data, IDF, {"probe": source(2)})
    ledger.record("verifier_report", report_figures(model, results), {"seed": 0}, tmp_path)
    (run,) = ledger.read(tmp_path)
    figures = ledger.figures(run)["figures"]
    assert figures["a: n"] == 20 and figures["probe: AUC"] == results["probe"]["auc"]
    assert figures["b: pass different"] == results["b"]["passes_different"]
    assert [figures[f"coefficient: {f}"] for f in FEATURES] == list(model.coef)
    assert {r.baseline for r in run["ratios"] if r.name.startswith("probe")} == {"fitted on a+b"}
