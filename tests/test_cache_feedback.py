"""cache.feedback, the verifier stage, δ edge cases and context validation in a TieredCache."""

from __future__ import annotations

import numpy as np
import pytest

import mmcache
from mmcache import Query
from mmcache.errors import ConfigError, InvalidInputError, UnknownHitError
from mmcache.thresholds import ErrorBudgetThreshold
from mmcache.verify import VERIFIERS, make_verifier

from cache_helpers import snapshot, unit

DIM = 16
RNG = np.random.default_rng(7)


BASE = unit(RNG.normal(size=DIM))
NEAR = unit(BASE + 0.25 * unit(RNG.normal(size=DIM)))   # cos ≈ 0.97


def q(text: str, vec: np.ndarray, scope: str = "s", **kw) -> Query:
    return Query(text=text, embeddings={"text": vec}, scope=scope, **kw)


def cache_with(rule: dict | None = None, **kw) -> mmcache.TieredCache:
    cache = mmcache.TieredCache({"thresholds": rule or {"rule": "static",
                                                        "delta": {"text": 0.1}}}, **kw)
    cache.put(q("stored question", BASE), "answer")
    return cache


def test_delta_zero_serves_exact_keys_only():
    cache = cache_with({"rule": "static", "delta": {"text": 0.0}})
    assert cache.get(q("other words", BASE)) is None           # same vector, other text
    assert cache.get(q("stored question", BASE)).tier == "l1"


def test_delta_two_serves_any_candidate_in_scope():
    cache = cache_with({"rule": "static", "delta": {"text": 2.0}})
    assert cache.get(q("anything", -BASE)) is not None
    assert cache.get(q("anything", -BASE, scope="other")) is None


def test_feedback_reaches_the_rule_once_and_rejects_foreign_hits():
    cache = cache_with()
    hit = cache.get(q("near question", NEAR))
    assert hit is not None and hit.lookup is not None
    seen = []
    cache.thresholds.feedback = lambda *args: seen.append(args)
    assert cache.feedback(hit, correct=False) is True
    assert seen == [(dict(hit.similarities), hit.entry_id, False, "s", 0.0)]  # static: no charge
    before = snapshot(cache)
    with pytest.raises(UnknownHitError):                       # already labelled
        cache.feedback(hit, correct=False)
    other = cache_with()
    with pytest.raises(UnknownHitError):                       # another cache's hit
        other.feedback(hit, correct=True)
    with pytest.raises(UnknownHitError):
        cache.feedback("not a hit", correct=True)
    with pytest.raises(InvalidInputError):
        cache.feedback(cache.get(q("near again", NEAR)), correct="no")
    assert len(seen) == 1


def test_feedback_on_exact_or_evicted_hits_is_a_documented_noop():
    cache = cache_with()
    exact = cache.get(q("stored question", BASE))
    assert cache.feedback(exact, correct=False) is False
    near = cache.get(q("near question", NEAR))
    cache.invalidate(q("stored question", BASE))
    assert cache.feedback(near, correct=False) is False


def test_a_failed_feedback_changes_nothing():
    cache = cache_with({"rule": "error-budget", "prior": None})
    before = snapshot(cache)
    with pytest.raises(UnknownHitError):
        cache.feedback(mmcache.Hit("x", "l2", 0.9, "nope", lookup=12345), correct=False)
    with pytest.raises(InvalidInputError):
        cache.feedback(mmcache.Hit("x", "l2", 0.9, "nope", lookup=1), correct=None)
    assert snapshot(cache) == before


def test_error_budget_entry_stops_serving_after_wrong_feedback(tmp_path):
    from prior_helpers import synthetic_priors

    rule = ErrorBudgetThreshold(0.05, synthetic_priors(tmp_path), {"text": "test"}, credit=50)
    cache = cache_with(threshold=rule)
    served = 0
    for i in range(8):
        hit = cache.get(q(f"paraphrase {i}", NEAR))
        if hit is None:
            break
        served += 1
        cache.feedback(hit, correct=False)
    assert served >= 1                                         # first lookup served
    assert cache.get(q("paraphrase again", NEAR)) is None      # then stricter: stopped


def test_verifier_vetoes_candidates_near_the_threshold():
    calls = []

    def judge(query, entry):
        calls.append((query.text, entry.question))
        return 0.1

    band = {"rule": "static", "delta": {"text": 0.1}, "verifier_band": 0.5}
    cache = cache_with(band, verifier=judge)
    assert cache.get(q("near question", NEAR)) is None
    assert calls == [("near question", "stored question")]
    far = cache_with({**band, "verifier_band": 0.0}, verifier=judge)
    assert far.get(q("near question", NEAR)) is not None       # outside the band: not asked
    assert cache.get(q("stored question", BASE)) is not None   # exact: no verifier


def test_metrics_count_every_verifier_call_by_the_judged_tier():
    calls = []

    def judge(query, entry):
        calls.append(query.text)
        return 0.9 if query.text == "passes" else 0.1

    cache = cache_with({"rule": "static", "delta": {"text": 0.1}, "verifier_band": 0.5},
                       verifier=judge)
    assert cache.metrics.verifier_calls == {}
    assert cache.get(q("near question", NEAR)) is None          # judged, vetoed
    assert cache.get(q("passes", NEAR)).verdict == 0.9          # judged, served
    assert cache.get(q("stored question", BASE)).tier == "l1"   # exact: not asked
    assert calls == ["near question", "passes"]
    assert cache.metrics.verifier_calls == {"l2": 2}
    assert cache_with().metrics.verifier_calls == {}            # no verifier: nothing counted


def test_verifier_must_return_a_probability_and_a_bad_one_changes_nothing():
    cache = cache_with({"rule": "static", "delta": {"text": 0.1}, "verifier_band": 0.5},
                       verifier=lambda query, entry: 1.5)
    before = snapshot(cache)
    with pytest.raises(InvalidInputError, match="probability"):
        cache.get(q("near question", NEAR))
    assert snapshot(cache) == before


def test_no_verifier_means_the_stage_is_skipped():
    assert VERIFIERS["none"] is None and make_verifier("none") is None
    with pytest.raises(ConfigError, match="verifier"):
        mmcache.TieredCache({"thresholds": {"verifier": "oracle"}})
    with pytest.raises(ConfigError):
        mmcache.TieredCache(verifier=0.5)


@pytest.mark.parametrize("context", [
    "a string", [{"role": "user"}], [{"role": 3, "content": "x"}], [["user", "hi"]],
    [{"role": "", "content": "x"}], {"role": "user", "content": "x"},
])
def test_bad_context_is_refused_and_changes_nothing(context):
    cache = cache_with()
    before = snapshot(cache)
    with pytest.raises(InvalidInputError, match="context"):
        cache.put(q("x", NEAR, context=context), "v")
    with pytest.raises(InvalidInputError, match="context"):
        cache.get(q("x", NEAR, context=context))
    assert snapshot(cache) == before


def test_context_is_in_the_exact_key_and_gates_semantic_hits_without_an_encoder():
    cache = mmcache.TieredCache()
    netflix = [{"role": "user", "content": "Cancel my Netflix subscription"}]
    spotify = [{"role": "user", "content": "Cancel my Spotify subscription"}]
    cache.put(q("yes, cancel it", BASE, context=netflix), "cancelled Netflix")
    assert cache.get(q("yes, cancel it", BASE, context=spotify)) is None
    assert cache.get(q("yes, cancel it", BASE)) is None
    assert cache.get(q(" yes, cancel it\n", BASE, context=netflix)).tier == "l1"
    assert cache.get(q("yes please cancel it", NEAR, context=netflix)) is not None


def test_percentile_rule_in_a_cache_sees_misses_too():
    cache = cache_with({"rule": "percentile", "percentile": 50, "window": 20, "min_samples": 10,
                        "delta": {"text": 0.1}, "delta_min": 0.01, "delta_max": 0.5})
    for i in range(20):                                        # lookups far from the entry
        assert cache.get(q(f"far {i}", unit(RNG.normal(size=DIM)))) is None
    assert cache.thresholds.delta("text", "s") == pytest.approx(0.5)   # δ grew: no ratchet
    assert cache.thresholds.delta("text", "other") == pytest.approx(0.1)


def test_a_verifier_error_changes_nothing_stored():
    cache = cache_with({"rule": "static", "delta": {"text": 0.1}, "verifier_band": 0.5},
                       verifier=lambda query, entry: 1 / 0)
    before = snapshot(cache)
    with pytest.raises(ZeroDivisionError):
        cache.get(q("near question", NEAR))
    assert snapshot(cache) == before


@pytest.mark.parametrize("offset", [None, 0.02])
@pytest.mark.parametrize("correct", [True, False])
def test_feedback_settles_exactly_what_serving_charged(tmp_path, offset, correct):
    """The ledger gets back the served hit's charge (verifier evidence included; through a
    scheduler's OffsetThreshold too), so a right answer leaves it at 0 and a wrong one at 1."""
    from prior_helpers import synthetic_priors
    from mmcache.scheduler import OffsetThreshold

    inner = ErrorBudgetThreshold(0.05, synthetic_priors(tmp_path), {"text": "test"}, credit=50)
    rule = inner if offset is None else OffsetThreshold(inner)
    if offset is not None:
        rule.offsets["text"] = offset
    band = {"rule": "static", "verifier_band": 2.0, "verifier_min": 0.5}
    cache = cache_with(band, threshold=rule, verifier=lambda query, entry: 0.9)
    hit = cache.get(q("paraphrase", NEAR))
    assert hit is not None
    assert inner.realised("s")[1] > 0.1                        # charged with the verifier's 0.9
    assert cache.feedback(hit, correct=correct) is True
    assert inner.realised("s")[1] == pytest.approx(0.0 if correct else 1.0, abs=1e-9)


def test_a_slow_verifier_does_not_block_other_lookups():
    """The verifier runs outside the cache's lock: while one lookup waits on a slow judge,
    an exact lookup in another thread is answered."""
    import threading

    entered, release = threading.Event(), threading.Event()

    def slow_judge(query, entry):
        entered.set()
        assert release.wait(10)
        return 0.9

    cache = cache_with({"rule": "static", "delta": {"text": 0.1}, "verifier_band": 0.5},
                       verifier=slow_judge)
    result = {}
    judged = threading.Thread(target=lambda: result.setdefault("hit", cache.get(
        q("near question", NEAR))))
    judged.start()
    assert entered.wait(10)
    other = {}
    exact = threading.Thread(target=lambda: other.setdefault("hit", cache.get(
        q("stored question", BASE))))
    exact.start()
    exact.join(5)
    done_while_judging = not exact.is_alive()
    release.set()
    judged.join(10)
    exact.join(10)
    assert done_while_judging and other["hit"] is not None
    assert result["hit"] is not None and result["hit"].value == "answer"


def test_a_candidate_rewritten_while_it_was_judged_is_not_served():
    cache = None

    def judge(query, entry):
        cache.put(q("stored question", BASE), "new answer")   # another writer, meanwhile
        return 0.9

    cache = cache_with({"rule": "static", "delta": {"text": 0.1}, "verifier_band": 0.5},
                       verifier=judge)
    assert cache.get(q("near question", NEAR)) is None
    hit = cache.get(q("stored question", BASE))
    assert hit is not None and hit.value == "new answer"


def test_entry_size_counts_question_and_context():
    cache = mmcache.TieredCache({"thresholds": {"rule": "static"}})
    turns = [{"role": "user", "content": "é" * 100}]
    short = cache._entry(q("x", BASE), "answer", None, {}, {}, [])
    long = cache._entry(q("x" * 50, BASE, context=turns), "answer", None, {}, {}, [])
    assert long.size - short.size == 49 + len("user") + 200


def test_the_rule_forgets_entries_evicted_from_the_last_tier(tmp_path):
    from prior_helpers import synthetic_priors

    rule = ErrorBudgetThreshold(0.5, synthetic_priors(tmp_path), {"text": "test"}, credit=50)
    cache = mmcache.TieredCache({"l1": {"max_entries": 2}, "l2": {"max_entries": 2}},
                                threshold=rule)
    for i in range(6):
        vec = unit(RNG.normal(size=DIM))
        cache.put(q(f"stored {i}", vec), i)
        hit = cache.get(q(f"asked another way {i}", unit(vec + 0.05 * unit(
            RNG.normal(size=DIM)))))
        assert hit is not None and hit.tier == "l2"
        cache.feedback(hit, correct=True)          # per-entry state for entry i
    assert len(rule._entries) == 2                 # the evicted entries' state is gone
    assert set(rule._entries) == set(cache.tier("l2").ids())
    cache.close()
