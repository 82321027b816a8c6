"""mmcache.studies.cache_stream: lookups streamed through a real TieredCache that grows on
misses, counted as vCache counts them."""

from __future__ import annotations

import numpy as np
import pytest

from mmcache.datasets.pairs import Pair
from mmcache.cache import TieredCache
from mmcache.errors import InvalidInputError
from mmcache.studies.cache_stream import (Feedback, choose_static, class_stream, compare_configs,
                                          many_requests_stream, run_pairs, run_stream,
                                          static_config)
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


def test_the_many_requests_stream_draws_popular_classes_again_and_again():
    classes = [[f"{c}-{k}" for k in range(5)] for c in range(30)]
    texts, labels = many_requests_stream(classes, 600, seed=2)
    assert len(texts) == 600 and all(t in classes[c] for t, c in zip(texts, labels))
    assert np.bincount(labels).max() >= 60        # the most popular class: tens of lookups
    assert many_requests_stream(classes, 600, seed=2)[0] == texts
    with pytest.raises(InvalidInputError):
        many_requests_stream(classes, 0)


VCACHE = {"thresholds": {"rule": "vcache", "budget": 0.05}}


def test_vcache_labels_its_explored_misses_and_grows_only_past_a_wrong_candidate():
    vectors = _vectors()
    near = vectors["alpha two"]
    # the second lookup is explored (its nearest entry has no observations): right, so it is
    # not stored and its repeat is no exact hit; wrong (another class), so it is stored and
    # its repeat is one
    for labels, stored in (([0, 0, 0], False), ([0, 1, 1], True)):
        run = run_stream(["alpha one", "alpha two", "alpha two"], labels, VCACHE,
                         vectors=np.stack([vectors["alpha one"], near, near]), progress=False)
        assert run.explored_labels >= 1 and run.labels == 0
        assert run.summary()["explored_labels"] == run.explored_labels
        assert not run.served[1]
        assert (run.tier[2] == "l1") == stored    # the repeat is an exact hit iff stored


def test_vcache_learns_on_many_requests_and_keeps_its_budget():
    vectors = _vectors(noise=0.02)
    texts, labels = many_requests_stream(CLASSES, 400, seed=0)
    run = run_stream(texts, labels, VCACHE, vectors=np.stack([vectors[t] for t in texts]),
                     progress=False)
    summary = run.summary()
    assert summary["explored_labels"] > 0
    assert summary["hit_rate"] > summary["exact_hits"] / summary["lookups"]   # semantic hits too
    assert summary["error"] <= 0.05 + 0.03


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


# -- feedback regimes ---------------------------------------------------------------------------

def _spy_feedback(monkeypatch):
    """Record, for every label fed back, (lookups this cache has made so far, the lookup the hit
    served, the label); lookups counted by each cache's get calls."""
    calls = []
    real_get, real_feedback = TieredCache.get, TieredCache.feedback

    def get(self, query, *args, **kwargs):
        self.spied_gets = getattr(self, "spied_gets", 0) + 1
        return real_get(self, query, *args, **kwargs)

    def feedback(self, hit, correct):
        calls.append((self.spied_gets, hit.lookup, correct))
        return real_feedback(self, hit, correct)

    monkeypatch.setattr(TieredCache, "get", get)
    monkeypatch.setattr(TieredCache, "feedback", feedback)
    return calls


def _wide_stream():
    """Six lookups under δ = 2: the first misses, the other five are served (two wrongly)."""
    vectors = _vectors()
    texts = ["alpha one", "alpha two", "beta one", "alpha three", "beta two", "gamma"]
    labels = [0, 0, 1, 0, 1, 2]
    return texts, labels, np.stack([vectors[t] for t in texts])


def test_labels_arrive_at_the_lookups_the_regime_says(monkeypatch):
    calls = _spy_feedback(monkeypatch)
    texts, labels, vectors = _wide_stream()
    none = run_stream(texts, labels, static_config(2.0), vectors=vectors, progress=False)
    assert none.served.tolist() == [False, True, True, True, True, True] and calls == []
    assert none.labels == 0 and none.summary()["labels"] == 0
    right = none.correct[1:].tolist()
    # immediate: each served hit (lookups 2..6, counted from 1) labelled before the next get
    now = run_stream(texts, labels, static_config(2.0), vectors=vectors, progress=False,
                     feedback=Feedback.immediate())
    assert [(g, c) for g, _, c in calls] == list(zip([2, 3, 4, 5, 6], right))
    assert now.labels == 5 and now.summary()["labels"] == 5
    assert now.served.tolist() == none.served.tolist()   # a static δ does not learn
    # every hit, two lookups later: the hits of lookups 2, 3, 4 are labelled after lookups
    # 4, 5, 6; those of lookups 5 and 6 are still pending when the stream ends
    calls.clear()
    late = run_stream(texts, labels, static_config(2.0), vectors=vectors, progress=False,
                      feedback=Feedback("sampled", 1.0, 2))
    assert [(g, c) for g, _, c in calls] == list(zip([4, 5, 6], right[:3]))
    assert [lookup for _, lookup, _ in calls] == sorted(lookup for _, lookup, _ in calls)
    assert late.labels == 3


def test_sampled_labels_a_seeded_share_and_rate_zero_is_no_feedback(monkeypatch):
    calls = _spy_feedback(monkeypatch)
    texts, labels = class_stream(CLASSES, seed=0)
    vectors = _vectors()
    stacked = np.stack([vectors[t] for t in texts])
    args = (texts, labels, static_config(2.0))
    none = run_stream(*args, vectors=stacked, progress=False)
    zero = run_stream(*args, vectors=stacked, progress=False, feedback=Feedback.sampled(0.0, 0))
    assert calls == [] and zero.summary() == none.summary()
    half = [run_stream(*args, vectors=stacked, progress=False,
                       feedback=Feedback.sampled(0.5, 0, seed=s)).labels for s in range(20)]
    assert all(0 <= k <= 5 for k in half) and 0 < np.mean(half) < 5   # 5 hits, about half
    assert half == [run_stream(*args, vectors=stacked, progress=False,
                               feedback=Feedback.sampled(0.5, 0, seed=s)).labels
                    for s in range(20)]


def test_no_feedback_leaves_the_numbers_as_they_were():
    rows = compare_configs(CLASSES, _vectors(), {f"static δ={d}": static_config(d)
                                                for d in (0.0, 0.2, 2.0)}, seeds=[0, 1],
                           progress=False)
    again = compare_configs(CLASSES, _vectors(), {f"static δ={d}": static_config(d)
                                                 for d in (0.0, 0.2, 2.0)}, seeds=[0, 1],
                            progress=False, feedback=Feedback.none())
    assert rows == again and {r["feedback"] for r in rows} == {"none"}
    assert all(r["labels"] == 0 and r["verifier_calls"] == 0 for r in rows)
    # the numbers before regimes existed (static δ = 0.2 and 2 on seed 0's stream of CLASSES)
    by = {(r["rule"], r["seed"]): r for r in rows}
    assert by[("static δ=0.2", 0)]["served"] == 3 and by[("static δ=0.2", 0)]["wrong"] == 0
    assert by[("static δ=2.0", 0)]["served"] == 5 and by[("static δ=0.0", 0)]["served"] == 0


def _one_class_stream(n: int = 200):
    """``n`` wordings of one class, all within cosine ~0.99 of each other: every hit is right,
    which the shipped MiniLM prior (P(wrong | 0.99) ≈ 0.45) does not believe."""
    rng = np.random.default_rng(0)
    vectors = rng.standard_normal(16) + 0.08 * rng.standard_normal((n, 16))
    vectors = (vectors / np.linalg.norm(vectors, axis=1, keepdims=True)).astype(np.float32)
    return [f"w{i}" for i in range(n)], [0] * n, vectors


def test_immediate_feedback_corrects_an_error_budget_rule_whose_prior_is_wrong():
    texts, labels, vectors = _one_class_stream()
    config = {"thresholds": {"rule": "error-budget", "budget": 0.02},
              "encoders": {"text": "minilm"}}
    runs = {regime.label: run_stream(texts, labels, config, vectors=vectors, progress=False,
                                     feedback=regime)
            for regime in (Feedback.none(), Feedback.sampled(), Feedback.immediate())}
    none, sampled, now = (runs[k].summary() for k in ("none", "sampled 10% delay 50",
                                                      "immediate"))
    assert none["wrong"] == sampled["wrong"] == now["wrong"] == 0
    # without labels every hit is charged its prior risk, so hits stay rare; labelled right,
    # the charges are refunded and each entry's curve rises
    assert none["served"] < 20 and now["served"] > 5 * none["served"]
    assert now["labels"] == now["served"] and 0 < sampled["labels"] < now["labels"]
    assert none["labels"] == 0


def test_verifier_calls_are_counted():
    vectors = _vectors()
    texts, labels = ["alpha one", "alpha two", "beta one", "gamma"], [0, 0, 1, 2]
    config = {"thresholds": {**static_config(2.0)["thresholds"], "verifier": "edits"}}
    run = run_stream(texts, labels, config, vectors=np.stack([vectors[t] for t in texts]),
                     progress=False)
    # lookups 2..4 each find stored candidates; each is judged at least once
    assert run.verifier_calls >= 3 and run.summary()["verifier_calls"] == run.verifier_calls
    assert run_stream(texts, labels, static_config(2.0),
                      vectors=np.stack([vectors[t] for t in texts]),
                      progress=False).verifier_calls == 0


@pytest.mark.parametrize("kwargs", [{"rate": -0.1}, {"rate": 1.5}, {"rate": float("nan")},
                                    {"delay": -1}, {"delay": 2.5}, {"delay": True}])
def test_bad_regime_parameters_are_refused(kwargs):
    with pytest.raises(InvalidInputError):
        Feedback.sampled(**kwargs)


def test_an_unknown_regime_or_a_non_regime_is_refused():
    with pytest.raises(InvalidInputError):
        Feedback("sometimes")
    with pytest.raises(InvalidInputError):
        run_stream(["a"], [0], static_config(0.1), vectors=np.ones((1, 8), np.float32),
                   progress=False, feedback="immediate")
