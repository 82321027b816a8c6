"""The public contract with MiniLM, and conversation context in the hit decision."""

from __future__ import annotations

import pytest

import mmcache
from mmcache.thresholds import ErrorBudgetThreshold

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
    assert "text" in cache.thresholds._prior                  # the shipped (text, minilm) prior
    cache.put(mmcache.Query(text="How do I reset my router to factory settings?",
                            context=[{"role": "user", "content": "My wifi keeps dropping."}],
                            scope="tenant-a"), "Hold the reset button for 10 s.")
    hit = cache.get(mmcache.Query(text="how do I reset my router to factory settings",
                                  context=[{"role": "user", "content": "My wifi keeps dropping."}],
                                  scope="tenant-a"))
    assert hit is not None and hit.tier == "l2"               # a paraphrase, first lookup
    assert cache.feedback(hit, correct=False) is True
    trap = cache.get(mmcache.Query(text="How do I not reset my router to factory settings?",
                                   context=[{"role": "user", "content": "My wifi keeps "
                                                                        "dropping."}],
                                   scope="tenant-a"))
    assert trap is None or trap.similarity < 1.0              # does not crash


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
