"""The public contract with MiniLM, and conversation context in the hit decision."""

from __future__ import annotations

import pytest

import mmcache
from mmcache.thresholds import ErrorBudgetThreshold
from mmcache.thresholds.prior import load_priors

pytestmark = pytest.mark.slow

NETFLIX = [{"role": "user", "content": "I want to cancel my Netflix subscription."},
           {"role": "assistant", "content": "I can help with that. Do you want me to cancel "
                                            "your Netflix plan now?"}]
SPOTIFY = [{"role": "user", "content": "I want to cancel my Spotify Premium subscription."},
           {"role": "assistant", "content": "I can help with that. Do you want me to cancel "
                                            "your Spotify plan now?"}]
SMALL_TALK = [{"role": "user", "content": "hi there!"},
              {"role": "assistant", "content": "Hello! How can I help you today?"},
              {"role": "user", "content": "nice weather today"},
              {"role": "assistant", "content": "It sure is!"}]


@pytest.fixture(scope="module")
def contract_cache():
    cache = mmcache.TieredCache({"thresholds": {"rule": "error-budget", "budget": 0.02},
                                 "encoders": {"text": "minilm"}})
    yield cache
    cache.close()


def test_the_contract_as_written(contract_cache):
    cache = contract_cache
    assert isinstance(cache.thresholds, ErrorBudgetThreshold)
    assert cache.thresholds._prior["text"] == (load_priors()["text/minilm"].mean,
                                               load_priors()["text/minilm"].cov)
    history = [{"role": "user", "content": "My wifi keeps dropping."}]
    cache.put(mmcache.Query(text="How do I reset my router to factory settings?",
                            context=history, scope="tenant-a"), "Hold the reset button 10 s.")
    hit = cache.get(mmcache.Query(text="How can I reset my router to its factory settings?",
                                  context=history, scope="tenant-a"))
    if hit is not None:
        assert cache.feedback(hit, correct=False) is True
    trap = cache.get(mmcache.Query(text="How do I not reset my router to factory settings?",
                                   context=history, scope="tenant-a"))
    assert trap is None or trap.tier == "l2"


def test_a_paraphrase_hits_at_its_entrys_first_lookup_once_the_budget_allows(contract_cache):
    """The shipped prior serves a new entry at once; how risky a hit the 2 % budget affords
    depends on the lookups the scope has seen (wrong answers ÷ all lookups): on similarity
    alone P(wrong) ≈ 0.4, above the rule's ``tail``, so it waits until the allowance could
    absorb one wrong answer (0.02 · 51 ≥ 1)."""
    cache = contract_cache
    for i in range(50):                                       # ordinary misses in the scope
        assert cache.get(mmcache.Query(text=f"unrelated question number {i} about gardening",
                                       scope="tenant-b")) is None
    cache.put(mmcache.Query(text="What is the capital of France?", scope="tenant-b"), "Paris")
    hit = cache.get(mmcache.Query(text="What's the capital of France?", scope="tenant-b"))
    assert hit is not None and hit.tier == "l2" and hit.value == "Paris"
    assert cache.feedback(hit, correct=True) is True


def test_the_other_subscription_misses_and_small_talk_does_not_block(contract_cache):
    cache = mmcache.TieredCache({"thresholds": {"rule": "static", "delta": {"text": 0.1}},
                                 "encoders": {"text": "minilm"}})
    cache.put(mmcache.Query(text="yes, cancel it", context=NETFLIX, scope="t"),
              "Your Netflix subscription is cancelled.")
    assert cache.get(mmcache.Query(text="yes, cancel it", context=SPOTIFY, scope="t")) is None
    assert cache.get(mmcache.Query(text="yes, cancel it", scope="t")) is None
    hit = cache.get(mmcache.Query(text="yes, cancel it", context=SMALL_TALK + NETFLIX, scope="t"))
    assert hit is not None and hit.value.startswith("Your Netflix")
    hit = cache.get(mmcache.Query(text="yes please cancel it", context=SMALL_TALK[2:] + NETFLIX,
                                  scope="t"))
    assert hit is not None
    cache.close()
