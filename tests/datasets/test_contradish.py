"""mmcache.datasets.contradish: contradish's policy questions, merged across versions, and the
labelled pairs made from them."""

from __future__ import annotations

from collections import Counter

from mmcache.datasets.contradish import load_policy_questions, policy_pairs


def test_questions_are_unique_with_rewordings_across_many_domains():
    questions = load_policy_questions()
    originals = [" ".join(q.original.lower().split()) for q in questions]
    assert len(originals) == len(set(originals)) >= 400
    assert len({q.id for q in questions}) == len(questions)
    assert len({q.domain for q in questions}) >= 20
    assert all(q.rewordings and q.original not in q.rewordings for q in questions)
    assert sum(len(q.rewordings) for q in questions) >= 3000


def test_pairs_hold_each_rewording_against_its_original_and_a_derived_other_question():
    questions = {q.id: q for q in load_policy_questions()}
    pairs = policy_pairs(seed=0)
    kinds = Counter(p.kind for p in pairs)
    assert kinds["rewording"] == sum(len(q.rewordings) for q in questions.values())
    assert kinds["derived-other-question"] == kinds["rewording"]
    for p in pairs[:200]:
        own = questions[p.source]
        assert p.query.text in own.rewordings and p.note == own.domain
        assert (p.cached.text == own.original) == p.same
        if not p.same:
            other = next(q for q in questions.values() if q.original == p.cached.text)
            assert other.domain == own.domain and other.id != own.id


def test_a_question_keeps_one_split_and_the_split_is_seeded():
    pairs = policy_pairs(seed=0)
    splits: dict[str, set[str]] = {}
    for p in pairs:
        splits.setdefault(p.source, set()).add(p.split)
    assert all(len(s) == 1 for s in splits.values())
    share = sum(s == {"train"} for s in splits.values()) / len(splits)
    assert 0.6 < share < 0.8
    assert [p.split for p in policy_pairs(seed=0)] == [p.split for p in pairs]
    assert [p.split for p in policy_pairs(seed=1)] != [p.split for p in pairs]
