"""The built-in edit verifier: traps get a low probability, rewrites a high one."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from mmcache.verify.edits import EditVerifier, check_edits, verify_edits

HISTORY = ({"role": "user", "content": "Write a cover letter for a data analyst job at a bank"},
           {"role": "assistant", "content": "Dear hiring manager, I am applying for ..."})
OTHER = ({"role": "user", "content": "Plan a vegetarian dinner menu for six guests"},
         {"role": "assistant", "content": "Starter: roasted beetroot salad ..."})
SMALL_TALK = ({"role": "user", "content": "Hi there, hope you are doing well!"},
              {"role": "assistant", "content": "Hello! How can I help?"})


@pytest.mark.parametrize("query, entry, reason", [
    ("Is ibuprofen safe with alcohol?", "Is ibuprofen not safe with alcohol?", "negation"),
    ("Why doesn't my build pass?", "Why does my build pass?", "negation"),
    ("Plan a 3 day trip to Rome", "Plan a 5 day trip to Rome", "number"),
    ("What happened in 2008?", "What happened in 2011?", "date"),
    ("Book a table for tomorrow", "Book a table for today", "date"),
    ("Write a sorting function in Python", "Write a sorting function in Rust", "entity"),
    ("Compare Google and Apple", "Compare Google and Tesla", "entity"),
    ("Explain recursion to beginners", "Explain recursion to experts", "content"),
    ("please turn on the kitchen lights", "please turn off the kitchen lights", "antonym"),
    ("Lock the front door", "Unlock the front door", "antonym"),
])
def test_traps_score_low_with_their_reason(query, entry, reason) -> None:
    verdict = check_edits(query, None, entry, None)
    assert verdict.reason == reason and verdict.probability < 0.5


@pytest.mark.parametrize("query, entry", [
    ("Explain the difference between a process and a thread.",
     "Explain the difference between a process and a thread."),
    ("Hi! explain the difference between a process and a thread.",
     "Explain the difference between a process and a thread."),
    ("Keep it short. Explain what a thread is.", "Explain what a thread is. Keep it short."),
    ("I want you to act as a deep learning teacher", "I want you to act as a deep learning "
                                                      "instructor"),
])
def test_meaning_preserving_rewrites_score_high(query, entry) -> None:
    assert verify_edits(query, None, entry, None) > 0.9


def test_history_decides_follow_ups() -> None:
    assert verify_edits("continue", HISTORY, "continue", HISTORY) > 0.9
    assert verify_edits("continue", SMALL_TALK + HISTORY, "continue", HISTORY) > 0.9
    other = check_edits("continue", OTHER, "continue", HISTORY)
    assert other.reason == "context" and other.probability < 0.5
    assert check_edits("continue", HISTORY, "continue", None).reason == "context-missing"


def test_class_wrapper_reads_query_text_and_entry_question_and_ignores_textless() -> None:
    verifier = EditVerifier()
    query = SimpleNamespace(image=None, text="continue", context=OTHER)
    entry_turns = tuple((t["role"], t["content"]) for t in HISTORY)  # how entries keep turns
    assert verifier(query, SimpleNamespace(image_fingerprint=None, question="continue", context=entry_turns)) < 0.5
    assert verifier(SimpleNamespace(image=None, text="continue", context=HISTORY),
                    SimpleNamespace(image_fingerprint=None, question="continue", context=entry_turns)) > 0.9
    assert verifier(SimpleNamespace(image=None, text="Is it safe?", context=()),
                    SimpleNamespace(image_fingerprint=None, question="Is it not safe?", context=())) < 0.5
    assert verifier(SimpleNamespace(image=None, text=None, context=()),
                    SimpleNamespace(image_fingerprint=None, question="Is it safe?", context=())) == 1.0


def test_registered_as_edits_and_vetoes_a_negation_in_the_cache() -> None:
    pytest.importorskip("sentence_transformers")
    import mmcache
    from mmcache.verify import make_verifier

    assert isinstance(make_verifier("edits"), EditVerifier)
    cache = mmcache.TieredCache({"thresholds": {"rule": "static", "delta": {"text": 0.3},
                                                "verifier": "edits", "verifier_band": 2.0},
                                 "encoders": {"text": "minilm"}})
    try:
        cache.put(mmcache.Query(text="Is ibuprofen safe with alcohol?", scope="t"), "answer")
        assert cache.get(mmcache.Query(text="Is ibuprofen not safe with alcohol?", scope="t")) \
            is None
        hit = cache.get(mmcache.Query(text="Is ibuprofen safe with alcohol? Thanks!", scope="t"))
        assert hit is not None and hit.value == "answer"
    finally:
        cache.close()
