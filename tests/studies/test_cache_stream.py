"""mmcache.studies.cache_stream: lookups streamed through a real TieredCache that grows on
misses, counted as vCache counts them."""

from __future__ import annotations

import numpy as np
import pytest

from mmcache.datasets.pairs import Pair
from mmcache.errors import InvalidInputError
from mmcache.studies.cache_stream import (choose_static, class_stream, compare_configs,
                                          run_pairs, run_stream, static_config)
from mmcache.types import Query

CLASSES = [["alpha one", "alpha two", "alpha three"], ["beta one", "beta two"], ["gamma"]]


def _vectors(seed: int = 0, noise: float = 0.05):
    """A unit vector per class, each wording its class's plus a little seeded noise."""
    rng = np.random.default_rng(seed)
    centres = np.linalg.qr(rng.standard_normal((8, 3)))[0].T
    return {w: ((v := centres[c] + noise * rng.standard_normal(8)) / np.linalg.norm(v)).astype(
                np.float32)
            for c, words in enumerate(CLASSES) for w in words}


def test_the_stream_holds_every_wording_once_and_depends_only_on_its_seed():
    texts, labels = class_stream(CLASSES, seed=3)
    assert sorted(texts) == sorted(w for c in CLASSES for w in c)
    assert all(t in CLASSES[c] for t, c in zip(texts, labels))
    assert class_stream(CLASSES, seed=3)[0] == texts
    assert len(class_stream(CLASSES, seed=3, n=4)[0]) == 4
    with pytest.raises(InvalidInputError):
        class_stream([["a"], []])


def test_popular_classes_come_first():
    classes = [[f"{c}-{k}" for k in range(50)] for c in range(20)]
    firsts = [class_stream(classes, seed=s, zipf=1.5)[1][:50] for s in range(5)]
    top = [np.bincount(f, minlength=20).max() / 50 for f in firsts]
    assert np.mean(top) > 0.25  # uniform order would give about 1/20 each


def test_a_miss_stores_and_a_near_lookup_of_the_same_class_is_served_right():
    vectors = _vectors()
    texts, labels = ["alpha one", "alpha two", "beta one", "gamma"], [0, 0, 1, 2]
    run = run_stream(texts, labels, static_config(0.2),
                     vectors=np.stack([vectors[t] for t in texts]), progress=False)
    assert run.served.tolist() == [False, True, False, False]
    assert run.correct.tolist() == [False, True, False, False]
    assert run.seen.tolist() == [False, True, False, False]
    summary = run.summary()
    assert (summary["hit_rate"], summary["error"], summary["true_hits_served"]) == (0.25, 0.0, 1.0)
    assert summary["error_low"] == 0.0 < summary["error_high"] < 1.0


def test_a_wide_threshold_serves_other_classes_and_counts_them_wrong():
    vectors = _vectors()
    texts, labels = class_stream(CLASSES, seed=0)
    run = run_stream(texts, labels, static_config(2.0),
                     vectors=np.stack([vectors[t] for t in texts]), progress=False)
    assert run.served[1:].all() and not run.served[0]   # δ = 2 serves everything stored
    assert (run.served & ~run.correct).sum() >= 2       # a class's first lookup is wrong
    assert run.summary()["wrong"] == int((run.served & ~run.correct).sum())


def test_static_delta_is_chosen_on_runs_within_budget():
    rows = compare_configs(CLASSES, _vectors(), {f"static δ={d}": static_config(d)
                                                for d in (0.0, 0.2, 2.0)}, seeds=[0, 1],
                           progress=False)
    assert len(rows) == 6 and {r["seed"] for r in rows} == {0, 1}
    assert choose_static(rows, budget=0.0) == "static δ=0.2"
    assert choose_static(rows, budget=1.0) == "static δ=2.0"
    assert choose_static([r for r in rows if r["rule"] == "static δ=2.0"], 0.0) is None


def test_vectors_handed_over_decide_as_the_encoder_would():
    from mmcache.encoders import get_encoder

    encoder = get_encoder("minilm")
    texts = ["How do I reset my password?", "how can I reset my password",
             "What is the capital of France?", "Which city is the capital of France?"]
    labels = [0, 0, 1, 1]
    config = {"thresholds": {"rule": "error-budget", "budget": 0.02},
              "encoders": {"text": "minilm"}}
    given = run_stream(texts, labels, config, vectors=encoder.encode(texts), progress=False)
    encoded = run_stream(texts, labels, config, encoders={"text": encoder}, progress=False)
    assert given.served.tolist() == encoded.served.tolist()


def _pair(cached: str, query: str, same: bool) -> Pair:
    return Pair(Query(text=query, scope="x"), Query(text=cached, scope="x"), same,
                "same" if same else "different", "text", cached, "test")


def test_each_pair_is_looked_up_in_its_own_scope_and_judged_by_its_label():
    vectors = _vectors()
    pairs = [_pair("alpha one", "alpha two", True), _pair("alpha one", "beta one", False),
             _pair("beta one", "beta two", False), _pair("gamma", "alpha three", True)]
    run = run_pairs(pairs, static_config(0.2), vectors=vectors, progress=False)
    assert run.served.tolist() == [True, False, True, False]   # near pairs only; no other scope
    assert run.correct.tolist() == [True, False, False, False]
    summary = run.summary()
    assert (summary["wrong"], summary["should_hit"], summary["true_hits_served"]) == (1, 2, 0.5)
    wide = run_pairs(pairs, static_config(2.0), vectors=vectors, progress=False)
    assert wide.served.all() and wide.summary()["wrong"] == 2
