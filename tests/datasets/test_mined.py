"""mmcache.datasets.mined: ShareGPT pairs found by cosine and labelled by written rules; the rules
on hand-made pairs, undecidable pairs dropped and counted, determinism for a seed, the committed
file and its hand-checked sample."""

from __future__ import annotations

import json
import zlib
from collections import Counter
from itertools import islice

import numpy as np
import pytest

from mmcache.datasets.mined import (COUNTS_PATH, PAIRS_PATH, label, mine_pairs,
                                    mined_sharegpt_pairs)
from mmcache.datasets.pairs_file import read_pairs, write_pairs
from mmcache.datasets.prompts import iter_sharegpt_conversations
from mmcache.errors import InvalidInputError
from mmcache.paths import DATA_DIR

HAND_CHECKED = DATA_DIR / "mined" / "hand_checked.jsonl"


def _encode(texts):
    """Hashed bag of words plus one shared direction: every pair of texts has a high cosine."""
    out = np.zeros((len(texts), 65), np.float32)
    out[:, 64] = 4.0
    for row, text in enumerate(texts):
        for word in text.lower().split():
            out[row, zlib.crc32(word.encode()) % 64] += 1.0
    return out / np.linalg.norm(out, axis=1, keepdims=True)


def _conv(conv_id, *user_turns):
    turns = []
    for text in user_turns:
        turns += [{"role": "user", "content": text}, {"role": "assistant", "content": "ok"}]
    return conv_id, turns


@pytest.mark.parametrize("cached, query, finding, expected", [
    ("Explain quantum computing in simple terms", "explain quantum computing in simple terms!",
     "cross-conversation", (True, "normalised-identical")),
    ("Can you write a poem about spring please", "write a poem about spring",
     "cross-conversation", (True, "filler-only")),
    ("write a 5 line poem about the sea", "write a 10 line poem about the sea",
     "cross-conversation", (False, "numbers-differ")),
    ("how do I sort a list in python", "how do I sort a list in javascript", "re-ask",
     (False, "language-differs")),
    ("what is c++ used for in games", "what is c# used for in games", "cross-conversation",
     (False, "language-differs")),
    ("how do I sort a list in python", "how do I reverse a list in python",
     "cross-conversation", (None, "undecided")),
    ("sort a list in python", "how do I sort a list", "cross-conversation",
     (None, "undecided")),  # one side names no language: not decided
    # a re-ask that points back into the conversation, or is too short to stand alone
    ("rewrite it in a formal tone please", "rewrite it in a formal tone please", "re-ask",
     (None, "undecided")),
    ("finish the response", "finish the response", "re-ask", (None, "undecided")),
    ("finish the response", "finish the response", "cross-conversation",
     (True, "normalised-identical")),
    ("how do I sort a list in python quickly", "how do I sort a list in python quickly",
     "re-ask", (True, "normalised-identical")),
    ("write me a poem about spring", "write me a poem about spring 2", "cross-conversation",
     (False, "numbers-differ")),
])
def test_the_written_rules_label_hand_made_pairs(cached, query, finding, expected):
    assert label(cached, query, finding) == expected


def test_a_pair_both_rules_claim_is_a_conflict():
    # equal words, but the digit runs differ by their separator: "3.5" / "3,5"
    assert label("is 3.5 bigger than 3", "is 3,5 bigger than 3", "cross-conversation") == \
        (None, "conflict")


def test_undecidable_pairs_are_dropped_and_counted():
    conversations = [
        _conv("a", "sort a list in python", "sort a list in python"),
        _conv("b", "how do I sort a list in python quickly and well",
              "how do I sort a list in python quickly and well", "give me 5 ideas for dinner",
              "give me 7 ideas for dinner"),
        _conv("c", "how do I reverse a list in python"),
        _conv("d", "can you tell me how do I sort a list in python"),
    ]
    pairs, counts = mine_pairs(conversations, _encode, min_cos=0.5, k=3, per_conversation=10)
    dropped = sum(n for reasons in counts.dropped.values() for n in reasons.values())
    assert sum(counts.candidates.values()) == len(pairs) + dropped and dropped > 0
    assert counts.kept == dict(Counter(p.kind for p in pairs))
    for p in pairs:
        finding, rule = p.kind.split("/")
        assert label(p.cached.text, p.query.text, finding) == (p.same, rule)
    kinds = {(p.kind, p.cached.text, p.query.text) for p in pairs}
    assert ("cross-conversation/filler-only", "sort a list in python",
            "can you tell me how do I sort a list in python") not in kinds  # "tell me" is no filler
    assert ("re-ask/numbers-differ", "give me 5 ideas for dinner",
            "give me 7 ideas for dinner") in kinds
    assert ("re-ask/normalised-identical", "how do I sort a list in python quickly and well",
            "how do I sort a list in python quickly and well") in kinds
    # conversation a's re-ask has fewer than six words: not self-contained, so not decided
    assert counts.dropped["re-ask"]["undecided"] >= 1
    assert not any(p.note.endswith("a / a") for p in pairs)


def test_pairs_sharing_a_text_share_a_source_and_split():
    conversations = [_conv(f"c{i}", f"write a {n} line poem about the sea")
                     for i, n in enumerate((2, 3, 4, 5, 6, 2))]
    pairs, _ = mine_pairs(conversations, _encode, min_cos=0.5, k=5)
    assert len(pairs) >= 5
    assert len({p.source for p in pairs}) == 1 and len({p.split for p in pairs}) == 1


def test_the_miner_is_deterministic_for_a_seed_on_real_prompts():
    def run(seed):
        conversations = list(islice(iter_sharegpt_conversations(), 400))
        pairs, counts = mine_pairs(conversations, _encode, seed=seed, min_cos=0.9)
        return [(p.kind, p.same, p.cached.text, p.query.text, p.source, p.split, p.note)
                for p in pairs], counts

    first, counts = run(0)
    assert first and run(0) == (first, counts)
    assert {p[0].split("/")[0] for p in first} == {"cross-conversation", "re-ask"}
    assert [p[5] for p in run(1)[0]] != [p[5] for p in first]  # the seed draws the splits


def test_minilm_pairs_round_trip_through_read_pairs(tmp_path):
    pairs, counts = mined_sharegpt_pairs(150)
    assert counts.conversations == 150 and pairs
    write_pairs(pairs, tmp_path / "mined.jsonl")
    back = read_pairs(tmp_path / "mined.jsonl")
    assert [(p.cached.text, p.query.text, p.same, p.kind, p.source, p.split, p.note)
            for p in back] == \
        [(p.cached.text, p.query.text, p.same, p.kind, p.source, p.split, p.note) for p in pairs]


@pytest.mark.parametrize("conversations, options, match", [
    ([("", [])], {}, "conversation id"),
    ([("a", "hello there")], {}, "turns must be a list"),
    ([("a", [{"role": "user", "content": 3}])], {}, "a turn must be"),
    ([], {"min_cos": 0.0}, "min_cos"),
    ([], {"k": 0}, "k >= 1"),
    ([], {"min_chars": 50, "max_chars": 10}, "min_chars"),
])
def test_bad_input_gets_a_typed_error(conversations, options, match):
    with pytest.raises(InvalidInputError, match=match):
        mine_pairs(conversations, _encode, **options)


def test_an_encoder_returning_the_wrong_shape_or_zero_vectors_is_refused():
    conversations = [_conv("a", "how do I sort a list in python")]
    with pytest.raises(InvalidInputError, match="shape"):
        mine_pairs(conversations, lambda texts: np.ones((len(texts) + 1, 4)))
    with pytest.raises(InvalidInputError, match="zero vector"):
        mine_pairs(conversations, lambda texts: np.zeros((len(texts), 4)))
    with pytest.raises(InvalidInputError, match="finding"):
        label("a b c", "a b c", "same-user")
    with pytest.raises(InvalidInputError, match="n_conversations"):
        mined_sharegpt_pairs(0)


def test_the_committed_file_is_what_its_rules_and_counts_say():
    assert PAIRS_PATH.stat().st_size <= 1_100_000
    pairs = read_pairs(PAIRS_PATH)
    counts = json.loads(COUNTS_PATH.read_text())
    assert counts["kept"] == dict(Counter(p.kind for p in pairs))
    assert counts["command"].startswith("python -m mmcache.datasets.mined")
    for p in pairs:
        finding, rule = p.kind.split("/")
        assert label(p.cached.text, p.query.text, finding) == (p.same, rule)
    splits: dict[str, set[str]] = {}
    for p in pairs:
        splits.setdefault(p.source, set()).add(p.split)
    assert all(len(s) == 1 for s in splits.values())
    assert {"train", "test"} == {p.split for p in pairs}


def test_the_hand_checked_sample_is_drawn_from_the_committed_file():
    committed = {(p.cached.text, p.query.text): p for p in read_pairs(PAIRS_PATH)}
    rows = [json.loads(line) for line in HAND_CHECKED.read_text().splitlines() if line.strip()]
    assert len(rows) >= 40
    for row in rows:
        pair = committed[(row["cached"], row["query"])]
        assert (row["kind"], row["rule_same"]) == (pair.kind, pair.same)
        assert isinstance(row["hand_same"], bool) and row["why"]
