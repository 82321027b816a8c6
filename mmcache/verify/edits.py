"""The built-in offline verifier: catches the small edits that embeddings miss.

Two texts that embed almost identically can still need different answers: a negation
("safe" / "not safe"), another number or date, another name or product, another topic
word, or the same follow-up message after another conversation. :func:`check_edits`
compares the query's and the entry's question (and their chat histories) token by
token and returns P(the entry's answer fits the query) with the reason. It is
rule-based: the cue lists below are general English (negation words, month / weekday /
relative-date words, years) and WordNet antonyms ("on" / "off"); it knows nothing of how :mod:`mmcache.datasets.pairs` makes its
traps beyond "one token changed", and its precision / recall per trap kind is measured
on the pairs' held-out split (notebook 02). Meaning-preserving rewrites it forgives:
reordering, politeness words, letter case, punctuation, and WordNet synonyms.
When the query and the entry both carry an image, :func:`verify_edits` first compares
the pictures (:mod:`mmcache.verify.image_check`): another picture vetoes the hit.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from mmcache.verify.wordnet import POS_FILES, antonyms, synonyms
from mmcache.verify.image_check import MAX_BLOCK_DIFFERENCE, block_difference

#: P(answer fits) returned for each reason (round numbers, not fitted: see module doc).
PROBABILITIES: dict[str, float] = {
    "identical": 0.99, "rewrite": 0.97, "negation": 0.03, "number": 0.03, "date": 0.03,
    "entity": 0.05, "antonym": 0.03, "context": 0.05, "context-missing": 0.3, "image": 0.03}
#: Each unmatched content word (not a synonym of one on the other side) halves P.
CONTENT_WORD_FACTOR = 0.5
#: Least share of the shorter history's content words the other history must contain.
MIN_CONTEXT_OVERLAP = 0.5

NEGATION_CUES = frozenset({"not", "no", "never", "without", "nor", "none", "nobody", "nothing",
                           "neither", "cannot", "nowhere"})
DATE_WORDS = frozenset(
    "january february march april may june july august september october november december "
    "monday tuesday wednesday thursday friday saturday sunday today tomorrow yesterday tonight "
    "next last previous ago q1 q2 q3 q4".split())
#: Function and politeness words: adding or dropping them does not change what is asked.
FILLER_WORDS = frozenset(
    """a an the and or but if of to in at by for with from as is are was were be been being do
    does did have has had can could should would will shall may might must this that these those
    it its i me my we our you your he she they them their what which who whom how why when where
    there here yes please hi hello hey thanks thank help quick question need some any just also
    so very really kindly dear sir madam""".split())

_YEAR = re.compile(r"1[89]\d\d|20\d\d")
_TOKEN = re.compile(r"[A-Za-z][A-Za-z'+#]*|\d+(?:[.,:]\d+)*")
_SENTENCE_START = re.compile(r"(?:^|[.!?:;]\s+|\n)\s*[\"'(]*$")


@dataclass(frozen=True)
class Verdict:
    """P(the entry's answer fits the query) and the reason the rules give."""

    probability: float
    reason: str
    detail: str = ""


def check_edits(query_text: str, query_context: Sequence[Any] | None,
                entry_text: str, entry_context: Sequence[Any] | None) -> Verdict:
    """Compare the query's question and history with the entry's; see the module doc.

    A history is a sequence of turns, ``{"role", "content"}`` or ``(role, content)``."""
    context = _check_context(query_context or (), entry_context or ())
    if context is not None:
        return context
    if query_text == entry_text:
        return Verdict(PROBABILITIES["identical"], "identical")
    q, e = _tokens(query_text), _tokens(entry_text)
    for reason, pick in (("negation", _negations), ("date", _dates), ("number", _numbers),
                         ("entity", lambda toks, text: _entities(text))):
        a, b = pick(q, query_text), pick(e, entry_text)
        if a != b:
            return Verdict(PROBABILITIES[reason], reason, _diff(a, b))
    unmatched = _unmatched_content(q, e)
    opposite = _antonym_pair(unmatched)
    if opposite:
        return Verdict(PROBABILITIES["antonym"], "antonym", opposite)
    p = PROBABILITIES["rewrite"] * CONTENT_WORD_FACTOR ** len(unmatched)
    return Verdict(p, "content" if unmatched else "rewrite", " ".join(sorted(unmatched)))


def check_image(query_image: object, entry_fingerprint: bytes) -> Verdict | None:
    """An "image" verdict when the query's picture is not the entry's
    (:func:`mmcache.verify.image_check.block_difference` above its limit); None when it is."""
    difference = block_difference(query_image, entry_fingerprint)
    if difference > MAX_BLOCK_DIFFERENCE:
        return Verdict(PROBABILITIES["image"], "image", f"block difference {difference:.2f}")
    return None


def verify_edits(query_text: str | None, query_context: Sequence[Any] | None,
                 entry_text: str | None, entry_context: Sequence[Any] | None, *,
                 query_image: object = None, entry_fingerprint: bytes | None = None) -> float:
    """P(the entry's answer fits the query): :func:`check_image`'s when both carry an image
    and the pictures differ, else :func:`check_edits`' (1.0 without text on either side)."""
    if query_image is not None and entry_fingerprint is not None:
        verdict = check_image(query_image, entry_fingerprint)
        if verdict is not None:
            return verdict.probability
    if query_text is None or entry_text is None:
        return 1.0
    return check_edits(query_text, query_context, entry_text, entry_context).probability


class EditVerifier:
    """The built-in verifier as a ``verifier(query, entry) -> probability`` callable
    (:class:`mmcache.verify.Verifier`): reads ``query.text`` / ``query.context`` /
    ``query.image`` and ``entry.question`` / ``entry.context`` / ``entry.image_fingerprint``
    (:func:`verify_edits`). With neither text nor images on both sides (speech) there is
    nothing to compare: 1.0."""

    name = "edits"

    def __call__(self, query: Any, entry: Any) -> float:
        return verify_edits(query.text, query.context, entry.question, entry.context,
                            query_image=query.image, entry_fingerprint=entry.image_fingerprint)


def _tokens(text: str) -> list[str]:
    return _TOKEN.findall(text)


def _negations(tokens: list[str], _: str) -> Counter:
    return Counter(t.lower() for t in tokens
                   if t.lower() in NEGATION_CUES or t.lower().endswith("n't"))


def _numbers(tokens: list[str], _: str) -> Counter:
    return Counter(t for t in tokens if t[0].isdigit() and not _YEAR.fullmatch(t))


def _dates(tokens: list[str], _: str) -> Counter:
    return Counter(t.lower() for t in tokens if t.lower() in DATE_WORDS or _YEAR.fullmatch(t))


def _entities(text: str) -> Counter:
    """Names: capitalised words not starting a sentence, acronyms, and C++-like tokens."""
    out = Counter()
    for m in _TOKEN.finditer(text):
        tok = m.group()
        if tok[0].isdigit() or tok.lower() in DATE_WORDS or tok.lower() in FILLER_WORDS:
            continue
        named = tok[0].isupper() and not _SENTENCE_START.search(text[:m.start()])
        if named or (len(tok) > 1 and tok.isupper()) or "+" in tok or "#" in tok:
            out[tok] += 1
    return out


def _content(tokens: list[str]) -> Counter:
    return Counter(t.lower() for t in tokens if not t[0].isdigit()
                   and t.lower() not in FILLER_WORDS and t.lower() not in NEGATION_CUES
                   and t.lower() not in DATE_WORDS)


def _unmatched_content(q: list[str], e: list[str]) -> list[str]:
    """Content words on one side only, after pairing each with a WordNet synonym on the other."""
    a, b = _content(q), _content(e)
    only_a, only_b = list((a - b).elements()), list((b - a).elements())
    left = []
    for word in only_a:
        match = next((w for w in only_b if _synonymous(word, w)), None)
        if match is None:
            left.append(word)
        else:
            only_b.remove(match)
    return left + only_b


def _antonym_pair(words: list[str]) -> str:
    """"a / b" for the first two unmatched words that are WordNet antonyms ("" if none)."""
    for i, a in enumerate(words):
        opposites = antonyms(a)
        for b in words[i + 1:]:
            if b in opposites:
                return f"{a} / {b}"
    return ""


def _synonymous(a: str, b: str) -> bool:
    return any(b in synonyms(a, pos) or a in synonyms(b, pos) for pos in POS_FILES)


def _check_context(query_context: Sequence[Any],
                   entry_context: Sequence[Any]) -> Verdict | None:
    """A verdict when the histories disagree; None when they agree or both are empty."""
    if not query_context and not entry_context:
        return None
    if not query_context or not entry_context:
        return Verdict(PROBABILITIES["context-missing"], "context-missing")
    q = set(_content(_tokens(" ".join(_turn_text(t) for t in query_context))))
    e = set(_content(_tokens(" ".join(_turn_text(t) for t in entry_context))))
    overlap = len(q & e) / max(1, min(len(q), len(e)))
    if overlap < MIN_CONTEXT_OVERLAP:
        return Verdict(PROBABILITIES["context"], "context", f"history overlap {overlap:.2f}")
    return None


def _turn_text(turn: Mapping[str, str] | Sequence[str]) -> str:
    """A turn's text: ``{"role", "content"}`` (a query's) or ``(role, content)`` (an entry's)."""
    return turn["content"] if isinstance(turn, Mapping) else turn[1]


def _diff(a: Counter, b: Counter) -> str:
    return f"{sorted((a - b).elements())} vs {sorted((b - a).elements())}"
