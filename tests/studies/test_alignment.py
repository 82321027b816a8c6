"""The alignment experiment's pieces, on synthetic embeddings with a known map."""

from __future__ import annotations

import numpy as np
import pytest

from mmcache.studies.alignment import (AlignmentTask, evaluate_ladder, recall_vs_pairs,
                                       temperature_sweep)
from mmcache.datasets import assign_splits
from mmcache.errors import InvalidInputError

FAST = {"linear": {"steps": 80}, "mlp": {"steps": 80, "hidden": 64}}


def _task(seed: int = 0, n_items: int = 60, per_item: int = 3) -> AlignmentTask:
    rng = np.random.default_rng(seed)
    meanings = rng.standard_normal((n_items, 16))
    labels = np.repeat(np.arange(n_items), per_item)
    mixing = rng.standard_normal((16, 24))
    queries = meanings[labels] @ mixing + 0.5 * rng.standard_normal((len(labels), 24))
    noisy_direct = meanings[labels] + 1.5 * rng.standard_normal((len(labels), 16))
    return AlignmentTask("toy", queries, meanings[labels], labels,
                         assign_splits(labels, seed=seed), direct={"asr": noisy_direct})


def test_ladder_has_every_method_and_learned_heads_beat_chance() -> None:
    table = evaluate_ladder(_task(), head_kw=FAST, n_boot=100).set_index("method")
    assert list(table.index) == ["chance", "ridge", "procrustes", "linear", "mlp", "asr",
                                 "fused(linear+asr)"]
    for method in ("ridge", "linear", "mlp"):
        assert table.loc[method, "R@1"] > table.loc["chance", "R@1"] + 0.3
        lo, hi = table.loc[method, "R@1_ci"]
        assert lo <= table.loc[method, "R@1"] <= hi
    assert 0 <= table.loc["fused(linear+asr)", "fusion_weight"] <= 1


def test_fixed_gallery_is_used() -> None:
    task = _task()
    meanings = task.targets[np.unique(task.labels, return_index=True)[1]]
    task.gallery, task.gallery_labels = meanings, np.arange(len(meanings))
    table = evaluate_ladder(task, heads=("ridge",), n_boot=50)
    assert (table["n_gallery"].dropna() == len(meanings)).all()


def test_recall_grows_with_training_pairs() -> None:
    curve = recall_vs_pairs(_task(), sizes=[6, 100], steps=80)
    assert list(curve["train_pairs"]) == [6, 100]
    assert curve["R@1"].iloc[1] > curve["R@1"].iloc[0]


def test_temperature_sweep_reports_fixed_and_learnt() -> None:
    sweep = temperature_sweep(_task(), [0.05, 1.0], steps=60)
    assert list(sweep["learnt"]) == [False, False, True]
    assert sweep["temperature"].iloc[0] == pytest.approx(0.05)


def test_misaligned_rows_are_rejected() -> None:
    task = _task()
    with pytest.raises(InvalidInputError):
        AlignmentTask("bad", task.queries, task.targets[:-1], task.labels, task.splits)
    with pytest.raises(InvalidInputError):
        AlignmentTask("bad", task.queries, task.targets, task.labels,
                      np.full(len(task.labels), "train"))
