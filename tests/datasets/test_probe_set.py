"""data/probes/near_misses.jsonl: the hand-written probe set of near-miss question pairs reads
with read_pairs, and keeps the shape data/README.md describes (kinds, labels, counts, sources,
what an order swap is)."""

from __future__ import annotations

import collections
import string

import pytest

from mmcache.datasets.pairs_file import read_pairs
from mmcache.paths import PROJECT_ROOT

PATH = PROJECT_ROOT / "data" / "probes" / "near_misses.jsonl"
DIFFERENT_KINDS = {"order-swap", "role-swap", "unit-change", "comparative-flip", "audience",
                   "negation", "number", "entity", "scope-change"}
SAME_KINDS = {"paraphrase", "typo", "politeness", "context-irrelevant"}
MIN_PER_KIND = 12


@pytest.fixture(scope="module")
def pairs():
    return read_pairs(PATH)


def _words(text: str) -> list[str]:
    return sorted(text.lower().translate(str.maketrans("", "", string.punctuation)).split())


def test_every_kind_is_listed_labelled_its_way_and_well_stocked(pairs):
    kinds = collections.Counter(p.kind for p in pairs)
    assert set(kinds) == DIFFERENT_KINDS | SAME_KINDS
    assert min(kinds.values()) >= MIN_PER_KIND, kinds
    for pair in pairs:
        assert pair.kind in (SAME_KINDS if pair.same else DIFFERENT_KINDS), pair.source


def test_both_labels_in_their_ranges(pairs):
    labels = collections.Counter(p.same for p in pairs)
    assert 130 <= labels[False] <= 170
    assert 75 <= labels[True] <= 105
    assert 220 <= len(pairs) <= 260


def test_no_duplicate_or_identical_pairs_and_unique_sources(pairs):
    texts = [(p.cached.text, p.query.text) for p in pairs]
    assert len(set(texts)) == len(texts)
    assert all(cached != query for cached, query in texts)
    sources = [p.source for p in pairs]
    assert len(set(sources)) == len(sources)
    assert not any(s.startswith("line-") for s in sources)   # every line names its source


def test_texts_are_plain_and_trimmed(pairs):
    for pair in pairs:
        for text in (pair.cached.text, pair.query.text, pair.note):
            assert text == text.strip() and text.isascii() and "  " not in text, pair.source
        assert pair.modality == "text" and pair.split == "test"


def test_an_order_swap_keeps_the_words_and_changes_their_order(pairs):
    swaps = [p for p in pairs if p.kind == "order-swap"]
    assert swaps and not any(p.same for p in swaps)
    for pair in swaps:
        assert _words(pair.cached.text) == _words(pair.query.text), pair.source
