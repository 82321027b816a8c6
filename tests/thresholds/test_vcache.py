"""The ``vcache`` rule (vCache's exploration probability, reimplemented from its paper) and the
public path that labels an explored miss: ``TieredCache.get`` → ``Hit.explored`` → ``feedback``."""

from __future__ import annotations

import asyncio
import math

import numpy as np
import pytest

import mmcache
from mmcache import Query
from mmcache.build import make_threshold
from mmcache.config import ThresholdConfig
from mmcache.errors import InvalidInputError, UnknownHitError
from mmcache.thresholds import RULES, StaticThreshold, VCacheThreshold
from mmcache.thresholds.vcache import fit_entry
from prior_helpers import true_p
from cache_helpers import unit

TEXT = {"text": 0.9}


def labelled(rule: VCacheThreshold, entry: str, labels) -> VCacheThreshold:
    for s, ok in labels:
        rule.feedback({"text": s}, entry, ok)
    return rule


# -- the exploration probability -----------------------------------------------------------
def test_an_entry_without_observations_is_always_explored():
    rule = VCacheThreshold(budget=0.02)
    assert rule.tau(TEXT, "new") == 1.0
    assert all(rule.explores(TEXT, "new") for _ in range(50))
    assert not rule.explores({"text": 0.4}, "new")          # below the search floor: a miss


def test_tau_falls_as_consistent_labels_accumulate():
    rule = VCacheThreshold(budget=0.05)
    rng = np.random.default_rng(0)
    taus = []
    for n in range(1, 41):
        s = float(rng.uniform(0.6, 1.0))
        rule.feedback({"text": s}, "e", s > 0.8)             # correct above 0.8, wrong below
        if n in (2, 5, 8):
            taus.append(rule.tau({"text": 0.97}, "e"))
    assert taus[0] > taus[1] > taus[2]
    assert rule.tau({"text": 0.9}, "e") < 0.1               # well above the learnt threshold
    assert rule.tau({"text": 0.75}, "e") > 0.9              # below it: still explored


def test_separated_labels_keep_the_fit_finite_and_tau_above_zero_after_a_handful():
    for labels in ([(0.9, True)] * 5, [(0.95, True), (0.92, True), (0.6, False), (0.65, False),
                                         (0.97, True)], [(0.7, False)] * 5):
        fit = fit_entry(labels, floor=0.5)
        assert fit.separated
        assert all(math.isfinite(v) and v > 0 for v in (fit.sd_t, fit.gamma))
        rule = labelled(VCacheThreshold(budget=0.02), "e", labels)
        assert rule.tau({"text": 0.99}, "e") > 0.5


def test_overlapping_labels_use_the_fitted_curve():
    labels = [(0.7, False), (0.8, True), (0.75, False), (0.78, False), (0.9, True), (0.72, True)]
    fit = fit_entry(labels, floor=0.5)
    assert not fit.separated and 0.5 < fit.t < 1.0 and fit.gamma > 0


def vcache_stream(rule: VCacheThreshold, seed: int, n: int = 4000, entries: int = 20
                  ) -> tuple[float, float]:
    """vCache's protocol on lookups whose correctness is the known sigmoid of s: an explored
    lookup labels its entry, any other is served. Returns (hit rate, served wrong ÷ lookups)."""
    rng = np.random.default_rng(seed)
    hits = wrong = 0
    for _ in range(n):
        entry, s = f"e{rng.integers(entries)}", float(rng.uniform(0.75, 1.0))
        correct = bool(rng.random() < true_p(s))
        if rule.explores({"text": s}, entry):
            rule.feedback({"text": s}, entry, correct)
        elif rule.accepts({"text": s}, entry):
            hits += 1
            wrong += not correct
    return hits / n, wrong / n


@pytest.mark.parametrize("budget", [0.02, 0.05])
def test_realised_error_stays_near_the_budget_while_it_serves(budget):
    results = [vcache_stream(VCacheThreshold(budget, seed=seed), seed) for seed in range(3)]
    # 4000 lookups: a margin of 0.01 over the budget for sampling noise
    assert max(e for _, e in results) <= budget + 0.01, results
    assert min(h for h, _ in results) > 0.05, results


def test_exploration_is_reproducible_under_a_seed():
    def draws(seed):
        rule = labelled(VCacheThreshold(0.05, seed=seed), "e",
                        [(0.9, True), (0.95, True), (0.7, False)] * 4)
        return [rule.explores({"text": s}, "e") for s in np.linspace(0.8, 1.0, 200)]
    assert draws(3) == draws(3)
    assert draws(3) != draws(4)


def test_the_rule_is_registered_and_built_from_config():
    rule = make_threshold(ThresholdConfig(rule="vcache", budget=0.05, search_floor=0.6, seed=7))
    assert isinstance(rule, VCacheThreshold) and rule.name == "vcache"
    assert (rule.budget, rule.floor("text")) == (0.05, 0.6)
    assert "vcache" in RULES and "vcache-paper" not in RULES


def test_other_rules_never_explore():
    assert not StaticThreshold({"text": 2.0}).explores(TEXT, "e")


# -- the public path: get → explored miss → feedback ---------------------------------------
DIM = 16
RNG = np.random.default_rng(5)


BASE = unit(RNG.normal(size=DIM))
NEAR = unit(BASE + 0.25 * unit(RNG.normal(size=DIM)))   # cos ≈ 0.97


def q(text: str, vec: np.ndarray) -> Query:
    return Query(text=text, embeddings={"text": vec}, scope="s")


@pytest.fixture
def cache():
    with mmcache.TieredCache({"thresholds": {"rule": "vcache", "budget": 0.02}}) as cache:
        cache.put(q("stored question", BASE), "answer")
        yield cache


def test_get_returns_an_unserved_explored_candidate_that_feedback_labels(cache):
    hit = cache.get(q("near question", NEAR))               # no observations: explored
    assert hit is not None and hit.explored and hit.value == "answer"
    assert hit.tier == "l2" and hit.similarity > 0.9 and hit.lookup is not None
    assert "explored" in repr(hit)
    assert sum(cache.metrics.misses.values()) == 1 and not sum(cache.metrics.hits.values())
    assert cache.thresholds.observations(hit.entry_id) == ()
    assert cache.feedback(hit, correct=True) is True
    assert cache.thresholds.observations(hit.entry_id) == ((pytest.approx(hit.similarity), True),)
    with pytest.raises(UnknownHitError):                    # labelled once
        cache.feedback(hit, True)


def test_feedback_on_a_plain_miss_or_with_a_bad_label_changes_nothing(cache):
    hit = cache.get(q("near question", NEAR))
    state = lambda: (dict(cache.thresholds._entries), list(cache._served.items()),  # noqa: E731
                     cache.thresholds._rng.bit_generator.state)
    before = state()
    with pytest.raises(UnknownHitError):
        cache.feedback(None, True)                          # a plain miss: nothing explored
    with pytest.raises(InvalidInputError):
        cache.feedback(hit, 1)                              # not a bool
    assert state() == before


def test_afeedback_labels_an_explored_miss(cache):
    async def explore_and_label():
        hit = await cache.aget(q("near question", NEAR))
        return hit, await cache.afeedback(hit, False)
    hit, updated = asyncio.run(asyncio.wait_for(explore_and_label(), 60))
    assert hit.explored and updated is True
    assert cache.thresholds.observations(hit.entry_id)[-1][1] is False


class _ExploresFar(StaticThreshold):
    """Accepts everything; would explore any candidate but the nearest."""

    def __init__(self, nearest: str) -> None:
        super().__init__({"text": 2.0})
        self.nearest = nearest

    def explores(self, similarities, entry_id=None, scope=None) -> bool:
        return entry_id != self.nearest


def test_no_candidate_is_explored_while_one_before_it_waits_for_the_verifier():
    with mmcache.TieredCache({"thresholds": {"verifier_band": 2.0}},
                             verifier=lambda query, entry: 0.9) as cache:
        nearest = cache.put(q("stored question", BASE), "answer")
        cache.put(q("other question", unit(RNG.normal(size=DIM))), "other")   # far from NEAR
        cache.thresholds = _ExploresFar(nearest)
        hit = cache.get(q("near question", NEAR))
    assert hit is not None and not hit.explored and hit.verdict == 0.9
