"""Labelled pairs: split disjoint by source, labels consistent, traps really differ, deterministic."""

from __future__ import annotations

import re

import numpy as np
import pytest

from mmcache.datasets.pairs import (SAME_KINDS, SMALL_TALK, SMOKE_SIZES, TRAP_KINDS, load_pairs,
                                    make_trap, paraphrase, render_bar_chart)
from mmcache.datasets.wordnet import synonyms
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


@pytest.mark.parametrize("text, kind, changed", [
    ("Is ibuprofen safe with alcohol?", "negation", "Isn't"),
    ("Why doesn't my code compile?", "negation", "does"),
    ("Write a sorting function in Python", "scope-change", None),
    ("Plan a 3 day trip to Paris", "number-change", "6"),
    ("What happened in 2008 in Japan?", "date-change", None),
    ("What happened in 2008 in Japan?", "entity-swap", None),
])
def test_each_trap_edits_the_cue(text, kind, changed) -> None:
    trap, note = make_trap(text, kind, np.random.default_rng(0))
    assert trap != text and note
    if changed:
        assert changed in trap


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
    assert synonyms("instructor", "n") == ["teacher"]
    assert "automobile" in synonyms("car", "n") and synonyms("qwertyuiop", "n") == []


def test_bad_arguments_raise_typed_errors() -> None:
    with pytest.raises(InvalidInputError, match="split"):
        load_pairs("val")
    with pytest.raises(InvalidInputError, match="modalities"):
        load_pairs("train", modalities=["video"])
    with pytest.raises(InvalidInputError, match="bar heights"):
        render_bar_chart([1.5])
