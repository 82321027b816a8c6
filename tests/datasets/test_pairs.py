"""Labelled pairs: split disjoint by source, labels consistent, traps really differ, deterministic."""

from __future__ import annotations

import re

import numpy as np
import pytest

from mmcache.datasets import augment
from mmcache.datasets.pairs import (PAIRS_PROVENANCE, SAME_KINDS, SMALL_TALK, SMOKE_SIZES,
                                    TRAP_KINDS, load_pairs, make_trap, paraphrase,
                                    render_bar_chart)
from mmcache.verify.wordnet import synonyms
from mmcache.errors import InvalidInputError


@pytest.fixture(scope="module")
def pairs() -> dict[str, list]:
    return {split: load_pairs(split, seed=3, sizes=SMOKE_SIZES) for split in ("train", "test")}


#: Small talk prepended to histories: the same in every split on purpose.
_SHARED_BY_DESIGN = {t["content"] for t in SMALL_TALK}


def _sources(pairs: list) -> set[str]:
    """Every source text/image/history a split's pairs were made from."""
    out = set()
    for p in pairs:
        out.add(p.source)
        out |= {t["content"] for t in p.query_context + p.cached_context} - _SHARED_BY_DESIGN
        if p.modality == "text" and p.kind not in ("context-same", "context-other"):
            out.add(p.cached.text)
    return out


def test_splits_share_no_source(pairs) -> None:
    assert pairs["train"] and pairs["test"]
    assert not _sources(pairs["train"]) & _sources(pairs["test"])
    assert {p.split for p in pairs["train"]} == {"train"}
    assert {p.split for p in pairs["test"]} == {"test"}


def test_every_modality_and_family_is_present(pairs) -> None:
    everything = pairs["train"] + pairs["test"]
    kinds = {(p.modality, p.kind) for p in everything}
    for expected in [("text", "paraphrase"), ("text", "negation"), ("text", "novel"),
                     ("text", "context-same"), ("text", "context-other"),
                     ("image", "near-duplicate"), ("image", "same-class-other-photo"),
                     ("image", "chart-bar-change"), ("audio", "voice-change"),
                     ("audio", "one-word-change")]:
        assert expected in kinds


def test_labels_follow_kinds_and_modalities_match(pairs) -> None:
    for p in pairs["train"] + pairs["test"]:
        assert p.same == (p.kind in SAME_KINDS), p.kind
        assert p.query.modalities() == p.cached.modalities()
        assert p.modality in p.query.modalities()


def test_traps_really_differ_from_their_source(pairs) -> None:
    for p in pairs["train"] + pairs["test"]:
        if p.modality == "text" and not p.same and p.kind != "context-other":
            assert p.query.text != p.cached.text
        if p.kind == "context-other":
            assert p.query.text == p.cached.text and p.query_context != p.cached_context
        if p.kind == "chart-bar-change":
            assert not np.array_equal(p.query.image, p.cached.image)
        if p.kind == "one-word-change":
            assert p.query.ground_truth != p.cached.ground_truth
        if p.kind == "number-change":
            assert re.findall(r"\d+", p.query.text) != re.findall(r"\d+", p.cached.text)


def test_same_seed_same_pairs_other_seed_other_split() -> None:
    a = load_pairs("test", seed=3, modalities=["text"], sizes=SMOKE_SIZES)
    b = load_pairs("test", seed=3, modalities=["text"], sizes=SMOKE_SIZES)
    c = load_pairs("test", seed=4, modalities=["text"], sizes=SMOKE_SIZES)
    assert [(p.query.text, p.kind, p.note) for p in a] == [(p.query.text, p.kind, p.note) for p in b]
    assert {p.source for p in a} != {p.source for p in c}


@pytest.mark.parametrize("text, kind, gone, note", [
    ("Is ibuprofen safe with alcohol?", "negation", "safe", "AntonymAug"),
    ("How do I lower the volume?", "negation", "lower", "AntonymAug"),
    ("Why doesn't my code compile?", "negation", "doesn't", "'doesn't' -> 'does'"),
    ("Explain what a process is", "negation", None, "'is' -> 'is not'"),
    ("Write a sorting function in Python", "scope-change", "Python", "ReservedAug"),
    ("Write an email for beginners", "scope-change", None, "ReservedAug"),
    ("Plan a 3 day trip to Paris", "number-change", "3", "3 -> 6"),
    ("What happened in 2008 in Japan?", "date-change", "2008", "2008 ->"),
    ("Book a table for next week on Monday", "date-change", None, "ReservedAug"),
    ("What happened in 2008 in Japan?", "entity-swap", "Japan", "ReservedAug"),
    ("Flights from New York to Paris", "entity-swap", None, "ReservedAug"),
])
def test_each_trap_edits_the_cue(text, kind, gone, note) -> None:
    trap, said = make_trap(text, kind, np.random.default_rng(0))
    assert trap != text and note in said
    if gone:
        assert gone not in trap
    assert "nnnnn" not in trap  # ReservedAug's phrase joiner does not leak


def test_swaps_never_repeat_a_name_already_in_the_text() -> None:
    for seed in range(20):
        trap, _ = make_trap("Flights from New York to Paris", "entity-swap",
                            np.random.default_rng(seed))
        assert trap.count("New York") + trap.count("Paris") == 1, trap
        assert trap.startswith("Flights from ") and " to " in trap


def test_augmenters_keep_the_texts_own_spacing_and_punctuation() -> None:
    text = "Don't make it long.\nIs it safe (really)?  Thanks!"
    trap, _ = make_trap(text, "negation", np.random.default_rng(0))
    assert trap != text and "safe" not in trap  # only "safe" has an antonym here
    assert trap.startswith("Don't make it long.\nIs it ") and trap.endswith(" (really)?  Thanks!")


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_same_seed_same_trap_and_rewrite(seed) -> None:
    text = "Is it safe to drive an old car in Germany on Monday? Explain in 3 steps for kids."
    for kind in TRAP_KINDS:
        a = make_trap(text, kind, np.random.default_rng(seed))
        b = make_trap(text, kind, np.random.default_rng(seed))
        assert a == b and a is not None and a[0] != text, kind
    for how in ("synonym", "reorder", "polite"):
        assert paraphrase(text, how, np.random.default_rng(seed)) == \
            paraphrase(text, how, np.random.default_rng(seed)) != text


def test_augmenters_leave_the_global_random_state_alone() -> None:
    import random

    random.seed(7)
    np.random.seed(7)
    before = (random.random(), np.random.random())
    random.seed(7)
    np.random.seed(7)
    make_trap("Is ibuprofen safe with alcohol?", "negation", np.random.default_rng(0))
    paraphrase("How to tell if a customer segment is well segmented?", "synonym",
               np.random.default_rng(0))
    assert (random.random(), np.random.random()) == before


def test_nltk_never_downloads(monkeypatch) -> None:
    """WordNet comes from Debian's files and POS from WordNet: nltk.download and the
    network are never touched (both are made to fail here)."""
    import socket

    import nltk

    def refuse(*args, **kwargs):
        raise AssertionError("network or nltk.download used")

    monkeypatch.setattr(nltk, "download", refuse)
    monkeypatch.setattr(nltk, "pos_tag", refuse)
    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)
    augment.wordnet_reader.cache_clear()
    reader = augment.wordnet_reader()
    assert reader.get_version() == "3.0"
    assert "automobile" in [l.name() for l in reader.synset("car.n.01").lemmas()]
    rng = np.random.default_rng(0)
    assert paraphrase("Tell me about the instructor of the course", "synonym", rng) != \
        "Tell me about the instructor of the course"
    assert make_trap("Is ibuprofen safe with alcohol?", "negation", rng)[0] != \
        "Is ibuprofen safe with alcohol?"
    assert load_pairs("test", seed=1, modalities=["text"], sizes=SMOKE_SIZES)


def test_provenance_names_nlpaug_and_its_version() -> None:
    assert f"nlpaug {augment.NLPAUG_VERSION}" in PAIRS_PROVENANCE
    assert "wordnet-base" in PAIRS_PROVENANCE and augment.NLPAUG_VERSION == "1.1.11"


def test_trap_that_does_not_apply_is_none_and_unknown_kind_raises() -> None:
    assert make_trap("hello there", "number-change", np.random.default_rng(0)) is None
    with pytest.raises(InvalidInputError, match="trap kind"):
        make_trap("hello", "typo", np.random.default_rng(0))
    assert set(TRAP_KINDS) >= {"negation", "entity-swap", "number-change", "date-change"}


def test_paraphrases_keep_the_content() -> None:
    rng = np.random.default_rng(0)
    text = "Explain the difference between a process and a thread. Keep it short."
    assert paraphrase(text, "reorder", rng) == "Keep it short. Explain the difference between " \
                                              "a process and a thread."
    assert paraphrase(text, "polite", rng).endswith(text[1:])
    assert paraphrase("hello", "reorder", rng) is None
    swapped = paraphrase("Tell me about the instructor of the course", "synonym", rng)
    assert swapped is not None and "teacher" in swapped  # instructor's one synonym
    assert paraphrase("What is it? Is it there?", "synonym", rng) is None  # nothing to swap
    assert synonyms("instructor", "n") == ["teacher"]
    assert "automobile" in synonyms("car", "n") and synonyms("qwertyuiop", "n") == []


def test_bad_arguments_raise_typed_errors() -> None:
    with pytest.raises(InvalidInputError, match="split"):
        load_pairs("val")
    with pytest.raises(InvalidInputError, match="modalities"):
        load_pairs("train", modalities=["video"])
    with pytest.raises(InvalidInputError, match="bar heights"):
        render_bar_chart([1.5])
