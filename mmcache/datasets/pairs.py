"""Labelled query pairs for δ-neighbour experiments: should ``query`` be served ``cached``'s answer?

Every :class:`Pair` comes from one *source* (a ShareGPT prompt or conversation, a
photo, a chart, a spoken sentence) and is labelled ``same`` (the cached answer fits
the query) or not, with the ``kind`` of edit that made it:

* text (real ShareGPT prompts; no licence stated): ``paraphrase`` (WordNet synonyms,
  polite prefixes, sentence reordering) and traps ``negation``, ``entity-swap``,
  ``number-change``, ``date-change``, ``scope-change`` made from the same prompt by nlpaug
  where it has the transformation (:mod:`mmcache.datasets.augment`: synonym and antonym
  swaps on Debian's WordNet, name / place / product / date-word swaps from the lists
  below, sentence swaps) and by hand where it has none (polite prefixes, "not" / "n't"
  negation, changed numbers and years), and
  ``novel`` (another prompt that shares the most words with it); multi-turn pairs from
  ShareGPT conversations: ``context-same`` (same history with small talk prepended)
  and ``context-other`` (the same follow-up message after another conversation);
* image + text (Fashion-MNIST and scikit-image photos, real; bar charts, rendered
  here, synthetic): ``near-duplicate`` (crop / brightness), ``same-class-other-photo``,
  ``chart-near-duplicate`` and ``chart-bar-change`` (one bar's height changed);
* audio (espeak-ng, synthetic speech): ``voice-change`` (the same sentence by two other
  voices), ``one-word-change`` ("turn on" / "turn off", same voice) and ``novel``.

The split is decided per source (:func:`mmcache.datasets.splits.split_of`, 70 % train /
30 % test; a conversation is kept only where its chat and its prompt fall in the same
split) and every pair's partner comes from its own split, so no source appears in both. The same ``seed`` gives the same pairs. Text contexts travel with the pair
(``query_context`` / ``cached_context``, lists of ``{"role", "content"}``).
"""

from __future__ import annotations

import difflib
import re
import zlib
from dataclasses import dataclass
from functools import lru_cache
from typing import Callable, Iterable, Sequence

import numpy as np

from mmcache.datasets import augment
from mmcache.datasets.images import load_fashion_mnist, load_skimage_photos
from mmcache.datasets.prompts import iter_sharegpt_conversations, load_prompts
from mmcache.datasets.speech import VOICES, synthesize
from mmcache.datasets.splits import split_of
from mmcache.datasets.variants import ImageVariant, apply_image_variant
from mmcache.errors import InvalidInputError
from mmcache.types import Query

#: Splits :func:`load_pairs` accepts.
PAIR_SPLITS: tuple[str, ...] = ("train", "test")
PAIR_FRACTIONS = (0.7, 0.0, 0.3)
PAIR_MODALITIES: tuple[str, ...] = ("text", "image", "audio")
#: Kinds whose pairs should hit (every other kind must not).
SAME_KINDS: frozenset[str] = frozenset(
    {"paraphrase", "context-same", "near-duplicate", "chart-near-duplicate", "voice-change"})
TRAP_KINDS: tuple[str, ...] = ("negation", "entity-swap", "number-change", "date-change",
                               "scope-change")
PAIRS_PROVENANCE = (
    "text: ShareGPT V3 prompts and conversations (real; no licence stated) with rewrites and "
    f"traps made by {augment.NLPAUG_SOURCE} (synonym, antonym, name / place / date-word and "
    "sentence swaps) and by mmcache.datasets.pairs (polite prefixes, not-negation, numbers, "
    "years); image: Fashion-MNIST "
    "(MIT) and scikit-image photos (real) plus bar charts rendered in code (synthetic); "
    "audio: espeak-ng speech (synthetic)")
SCOPE = "pairs"


@dataclass(frozen=True, eq=False)
class Pair:
    """One labelled pair: is ``cached``'s answer right for ``query``?

    ``source`` names what both queries were made from (the unit of the split);
    ``note`` says what was edited; contexts are the chat histories of text pairs.
    """

    query: Query
    cached: Query
    same: bool
    kind: str
    modality: str
    source: str
    split: str
    note: str = ""
    query_context: tuple[dict[str, str], ...] = ()
    cached_context: tuple[dict[str, str], ...] = ()


@dataclass(frozen=True)
class PairSizes:
    """How many sources of each family :func:`load_pairs` draws (before the split)."""

    prompts: int = 1200
    conversations: int = 160
    photos: int = 120
    charts: int = 60
    sentences: int = 60


#: Tiny sizes for smoke runs and tests.
SMOKE_SIZES = PairSizes(prompts=120, conversations=40, photos=24, charts=12, sentences=8)


def load_pairs(split: str = "train", seed: int = 0,
               modalities: Iterable[str] = PAIR_MODALITIES,
               sizes: PairSizes = PairSizes()) -> list[Pair]:
    """The labelled pairs of ``split`` ("train" or "test") for ``modalities``, made with ``seed``."""
    if split not in PAIR_SPLITS:
        raise InvalidInputError(f"unknown split {split!r}; use one of {PAIR_SPLITS}")
    modalities = tuple(modalities)
    unknown = set(modalities) - set(PAIR_MODALITIES)
    if unknown or not modalities:
        raise InvalidInputError(f"modalities must be some of {PAIR_MODALITIES}, got {modalities}")
    makers: dict[str, list[Callable[[str, int, PairSizes], list[Pair]]]] = {
        "text": [text_pairs, context_pairs], "image": [photo_pairs, chart_pairs],
        "audio": [speech_pairs]}
    return [p for m in modalities for make in makers[m] for p in make(split, seed, sizes)]


def pair_split(source: str, seed: int) -> str:
    """The split of a source key under ``seed`` ("train" or "test")."""
    return split_of(source, seed, PAIR_FRACTIONS)


def _rng(seed: int, source: str) -> np.random.Generator:
    return np.random.default_rng([seed, zlib.crc32(source.encode())])


def _text_query(text: str) -> Query:
    return Query(text=text, scope=SCOPE)


# --------------------------------------------------------------------------- text rewrites

_STOPWORDS = frozenset("""a an the and or but if of to in on at by for with from as is are was
were be been being do does did have has had can could should would will shall may might must this
that these those it its i me my we our you your he she they them their what which who whom how why
when where there here not no yes please write give make create about into than then also just like
some any each more most very""".split())
_POLITE = ("Please help me with this: ", "Hi! ", "Could you help? ", "Quick question: ",
           "I need some help. ")
_WORD = re.compile(r"[A-Za-z]+")


def paraphrase(text: str, how: str, rng: np.random.Generator) -> str | None:
    """A meaning-preserving rewrite of ``text``: "synonym" (nlpaug ``SynonymAug``, WordNet),
    "polite" (a polite prefix: by hand, nlpaug has none) or "reorder" (nlpaug
    ``RandomSentAug``: one sentence swapped with its neighbour). None: it does not apply."""
    if how == "polite":
        prefix = _POLITE[int(rng.integers(len(_POLITE)))]
        return prefix + text[0].lower() + text[1:] if text[:1].isupper() and \
            not text[1:2].isupper() else prefix + text
    if how == "reorder":
        return augment.sentence_swap(text, rng)
    if how == "synonym":
        # lower-case content words with at most two senses, all of one part of speech
        out = augment.synonym_swap(text, rng, _content_word, max_swaps=2, max_senses=2)
        return None if out == text else out
    raise InvalidInputError(f"unknown paraphrase {how!r}")


def _content_word(word: str) -> bool:
    return word.islower() and len(word) >= 4 and word not in _STOPWORDS


# --------------------------------------------------------------------------- text traps

_NEGATABLE = re.compile(r"\b(is|are|was|were|can|could|should|would|will|does|do|did|has|have)\b",
                        re.IGNORECASE)
_NEGATED = re.compile(r"\b(\w+)n't\b|\bnot\b|\bnever\b", re.IGNORECASE)
_ENTITY_GROUPS: tuple[tuple[str, ...], ...] = (
    ("China", "India", "Japan", "Germany", "France", "Canada", "Brazil", "Mexico", "Italy",
     "Spain", "Australia", "Russia", "Korea", "Nigeria", "Egypt", "Turkey", "Vietnam",
     "Indonesia", "Pakistan", "Kenya", "Israel", "Ukraine", "Poland", "Sweden", "Norway",
     "Argentina", "Singapore", "Thailand", "Philippines", "Malaysia", "Iran", "Saudi Arabia"),
    ("America", "Europe", "Asia", "Africa"),
    ("California", "Texas", "Florida", "New York", "Ohio", "Georgia", "Washington", "Virginia",
     "NSW", "Victoria", "Queensland", "Ontario", "Quebec"),
    ("London", "Paris", "Tokyo", "Berlin", "Beijing", "Shanghai", "Sydney", "Toronto", "Seattle",
     "Chicago", "Boston", "Dubai", "Singapore", "Mumbai", "Madrid", "Rome"),
    ("Google", "Apple", "Microsoft", "Amazon", "Tesla", "Netflix", "Facebook", "Samsung",
     "Nike", "Starbucks", "Walmart", "Uber", "Airbnb", "Spotify"),
    ("John", "Mary", "David", "Sarah", "Michael", "Emma", "James", "Lisa", "Tom", "Anna",
     "Peter", "Alice", "Bob", "Kevin", "Jessica", "Jack", "Alex", "Chris", "Daniel", "Sam",
     "Mark", "Paul", "Jane", "Emily", "Olivia", "Harry", "Elon Musk", "Steve Jobs", "Bill Gates",
     "Shakespeare", "Einstein"),
    ("OpenAI", "ChatGPT", "Twitter", "LinkedIn", "Instagram", "TikTok", "YouTube", "Shopify",
     "Salesforce", "Oracle", "IBM", "Intel", "Nvidia"),
)
_SCOPE_GROUPS: tuple[tuple[str, ...], ...] = (
    # no "C++" / "C#": ReservedAug reads a multi-token entry as a regular expression
    ("Python", "Java", "JavaScript", "TypeScript", "Rust", "PHP", "Ruby", "Kotlin", "Swift",
     "Golang"),
    ("React", "Angular", "Vue", "Django", "Flask", "Laravel", "Spring"),
    ("Windows", "Linux", "macOS", "Android", "iOS"),
    ("AWS", "Azure", "GCP"),
    ("MySQL", "PostgreSQL", "MongoDB", "SQLite", "Redis"),
    ("beginners", "experts", "kids", "children", "students", "adults", "managers"),
    ("email", "essay", "tweet", "poem", "blog post", "speech", "story", "report"),
)
_MONTHS = ("January", "February", "March", "April", "May", "June", "July", "August",
           "September", "October", "November", "December")
_WEEKDAYS = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday")
_RELATIVE_DAYS = ("today", "tomorrow", "yesterday", "next week", "last week", "next month",
                  "last month", "next year", "last year")
_QUARTERS = ("Q1", "Q2", "Q3", "Q4")
_YEAR = re.compile(r"\b(19[5-9]\d|20[0-4]\d)\b")
_NUMBER = re.compile(r"(?<![\w.])(\d+)(?![\w.]*\d)")


def make_trap(text: str, kind: str, rng: np.random.Generator) -> tuple[str, str] | None:
    """``(trap text, note)``: ``text`` edited so its answer changes (None: ``kind`` does not apply).

    * ``negation``: nlpaug ``AntonymAug`` swaps one word for its WordNet antonym ("safe" ->
      "dangerous", "increase" -> "decrease"); where no word has one, a "not" / "n't" is
      added or removed by hand (nlpaug has no negation transformation);
    * ``entity-swap`` / ``scope-change``: nlpaug ``ReservedAug`` swaps a name, place,
      company or product (``_ENTITY_GROUPS``) or a language, platform, audience or genre
      (``_SCOPE_GROUPS``) for another of its list: nlpaug has no named-entity recogniser, so
      these hand-made lists say what a name is;
    * ``number-change`` (by hand: nlpaug has no number transformation): the first number
      that is not a year, +1..3 below 10 and doubled above;
    * ``date-change``: a year moved by 1..3 (by hand, as numbers), else nlpaug
      ``ReservedAug`` over months, weekdays, relative days and quarters.
    """
    makers = {"negation": _negate,
              "entity-swap": lambda t, r: _swap(t, _ENTITY_GROUPS, r),
              "scope-change": lambda t, r: _swap(t, _SCOPE_GROUPS, r),
              "number-change": _change_number, "date-change": _change_date}
    if kind not in makers:
        raise InvalidInputError(f"unknown trap kind {kind!r}; known: {TRAP_KINDS}")
    return makers[kind](text, rng)


def _edit_note(old: str, new: str) -> str:
    """"'a' -> 'b'" for the words that differ between ``old`` and ``new``."""
    a, b = old.split(), new.split()
    changes = [(" ".join(a[i1:i2]), " ".join(b[j1:j2])) for tag, i1, i2, j1, j2 in
               difflib.SequenceMatcher(a=a, b=b, autojunk=False).get_opcodes() if tag != "equal"]
    return "; ".join(f"'{x}' -> '{y}'" for x, y in changes)


def _negate(text: str, rng: np.random.Generator) -> tuple[str, str] | None:
    swapped = augment.antonym_swap(text, rng, _content_word)
    if swapped != text:
        return swapped, f"antonym {_edit_note(text, swapped)} (nlpaug AntonymAug)"
    return _negate_by_hand(text)


def _negate_by_hand(text: str) -> tuple[str, str] | None:
    """Remove the first negation cue, or negate the first auxiliary verb (nlpaug has no
    negation transformation)."""
    m = _NEGATED.search(text)
    if m:  # remove the first negation cue
        word = m.group()
        if word.lower().endswith("n't"):
            base = {"can't": "can", "won't": "will"}.get(word.lower(), word[:-3])
            return text[:m.start()] + base + text[m.end():], f"'{word}' -> '{base}'"
        return re.sub(r"\s{2,}", " ", text[:m.start()] + text[m.end():]).strip(), \
            f"removed '{word}'"
    m = _NEGATABLE.search(text)
    if not m:
        return None
    word = m.group()
    if word[0].isupper():  # a question's leading auxiliary: "Can you" -> "Can't you"
        new = {"Can": "Can't", "Will": "Won't"}.get(word, word + "n't")
    else:
        new = word + " not"
    return text[:m.start()] + new + text[m.end():], f"'{word}' -> '{new}'"


def _swap(text: str, groups: Sequence[Sequence[str]], rng: np.random.Generator
          ) -> tuple[str, str] | None:
    """nlpaug ``ReservedAug``: one token of ``groups`` in ``text`` for another of its group."""
    swapped = augment.reserved_swap(text, groups, rng)
    if swapped == text:
        return None
    return swapped, f"{_edit_note(text, swapped)} (nlpaug ReservedAug)"


def _change_number(text: str, rng: np.random.Generator) -> tuple[str, str] | None:
    for m in _NUMBER.finditer(text):
        if _YEAR.fullmatch(m.group()):
            continue
        old = int(m.group())
        new = old + int(rng.integers(1, 4)) if old < 10 else old * 2
        return text[:m.start()] + str(new) + text[m.end():], f"{old} -> {new}"
    return None


def _change_date(text: str, rng: np.random.Generator) -> tuple[str, str] | None:
    m = _YEAR.search(text)
    if m:
        new = str(int(m.group()) + int(rng.choice([-3, -2, -1, 1, 2, 3])))
        return text[:m.start()] + new + text[m.end():], f"{m.group()} -> {new}"
    return _swap(text, (_MONTHS, _WEEKDAYS, _RELATIVE_DAYS, _QUARTERS), rng)


# --------------------------------------------------------------------------- text pairs

@lru_cache(maxsize=8)
def _prompts(n: int) -> tuple[str, ...]:
    return tuple(load_prompts(n, min_chars=20, max_chars=300))


def text_pairs(split: str, seed: int, sizes: PairSizes = PairSizes()) -> list[Pair]:
    """Paraphrases, traps and novel pairs from ShareGPT prompts of ``split``."""
    prompts = [p for p in _prompts(sizes.prompts) if pair_split(f"prompt:{p}", seed) == split]
    words = [set(w.lower() for w in _WORD.findall(p)) - _STOPWORDS for p in prompts]
    pairs = []
    for i, prompt in enumerate(prompts):
        source = f"prompt:{prompt}"
        rng = _rng(seed, source)
        cached = _text_query(prompt)

        def add(text: str, same: bool, kind: str, note: str) -> None:
            pairs.append(Pair(_text_query(text), cached, same, kind, "text", source, split, note))

        for how in rng.permutation(["synonym", "polite", "reorder"])[:2]:
            text = paraphrase(prompt, str(how), rng)
            if text is not None and text != prompt:
                add(text, True, "paraphrase", str(how))
        for kind in TRAP_KINDS:
            trap = make_trap(prompt, kind, rng)
            if trap is not None and trap[0] != prompt:
                add(trap[0], False, kind, trap[1])
        if len(prompts) > 1:
            overlap = [len(words[i] & w) / (1 + len(words[i] | w)) if j != i else -1.0
                       for j, w in enumerate(words)]
            other = prompts[int(np.argmax(overlap))]
            add(other, False, "novel", "the most word-sharing other prompt")
    return pairs


#: The small talk a context-same pair prepends to its history (it should not block a hit).
SMALL_TALK = ({"role": "user", "content": "Hi there, hope you are doing well!"},
               {"role": "assistant", "content": "Hello! I'm doing well, thanks. How can I help?"})
_FOLLOW_UP_MAX_CHARS = 40
_HISTORY_MAX_CHARS = 400


@lru_cache(maxsize=4)
def _follow_ups(n: int) -> tuple[tuple[str, str, tuple[dict[str, str], ...], str], ...]:
    """``(conversation id, short follow-up message, history before it, the history's user
    prompt)``, the first ``n`` found.

    A follow-up is a short user message (≤ 40 characters) whose normalised text is
    said in at least one other conversation ("continue", "make it shorter", ...).
    """

    found, counts = [], {}
    for conv_id, turns in iter_sharegpt_conversations():
        for k in range(2, len(turns)):
            msg = " ".join(turns[k]["content"].split())
            if turns[k]["role"] == "user" and 2 <= len(msg) <= _FOLLOW_UP_MAX_CHARS \
                    and turns[k - 1]["role"] == "assistant" and turns[k - 2]["role"] == "user":
                history = tuple({"role": t["role"], "content": " ".join(t["content"].split())
                                 [:_HISTORY_MAX_CHARS]} for t in turns[k - 2:k])
                prompt = " ".join(turns[k - 2]["content"].split())
                found.append((conv_id, msg.lower(), history, prompt))
                counts[msg.lower()] = counts.get(msg.lower(), 0) + 1
                break
        if len(found) >= 8 * n:
            break
    shared = [f for f in found if counts[f[1]] >= 2]
    return tuple(shared[:n])


def _conversation_source(conv_id: str) -> str:
    """ShareGPT splits long chats into ids ``<chat>_<part>``: the chat is the source."""
    return f"conversation:{conv_id.rsplit('_', 1)[0]}"


def context_pairs(split: str, seed: int, sizes: PairSizes = PairSizes()) -> list[Pair]:
    """Multi-turn pairs: the same follow-up message after the same or another history."""
    convs = [c[:3] for c in _follow_ups(sizes.conversations)
             if pair_split(_conversation_source(c[0]), seed) == split
             and pair_split(f"prompt:{c[3]}", seed) == split]
    by_message: dict[str, list[tuple[str, tuple[dict[str, str], ...]]]] = {}
    for conv_id, msg, history in convs:
        by_message.setdefault(msg, []).append((conv_id, history))
    pairs = []
    for conv_id, msg, history in convs:
        source = _conversation_source(conv_id)
        query = _text_query(msg)
        pairs.append(Pair(query, _text_query(msg), True, "context-same", "text", source, split,
                          "small talk prepended to the same history",
                          query_context=SMALL_TALK + history, cached_context=history))
        others = [h for c, h in by_message[msg] if _conversation_source(c) != source]
        if others:
            other = others[int(_rng(seed, source).integers(len(others)))]
            pairs.append(Pair(query, _text_query(msg), False, "context-other", "text", source,
                              split, "same message after another conversation",
                              query_context=history, cached_context=other))
    return pairs


# --------------------------------------------------------------------------- image pairs

_PHOTO_QUESTIONS = ("What is shown in this photo?", "Describe this picture.",
                    "What item is in this image?")
_CHART_QUESTION = "What values does this bar chart show?"


def _near_duplicate(pixels: np.ndarray, rng: np.random.Generator) -> tuple[np.ndarray, str]:
    """A centre crop (85–95 % per side, resized back) with a brightness change (±20 %)."""

    crop, brightness = float(rng.uniform(0.85, 0.95)), float(rng.uniform(0.8, 1.2))
    out = apply_image_variant(pixels, ImageVariant(crop, brightness, 1.0 / crop))
    return _fit(out, pixels.shape[:2]), f"crop {crop:.2f}, brightness {brightness:.2f}"


def _fit(pixels: np.ndarray, shape: tuple[int, int]) -> np.ndarray:
    """Nearest-neighbour resize (or pad) to ``shape`` so variants keep the source's size."""
    rows = np.minimum((np.arange(shape[0]) + 0.5) * pixels.shape[0] / shape[0],
                      pixels.shape[0] - 1).astype(int)
    cols = np.minimum((np.arange(shape[1]) + 0.5) * pixels.shape[1] / shape[1],
                      pixels.shape[1] - 1).astype(int)
    return np.ascontiguousarray(pixels[rows][:, cols])


def _image_query(question: str, pixels: np.ndarray) -> Query:
    return Query(text=question, image=pixels, scope=SCOPE)


def photo_pairs(split: str, seed: int, sizes: PairSizes = PairSizes()) -> list[Pair]:
    """Near-duplicate photos (should hit) and another photo of the same class (must not)."""

    fashion = load_fashion_mnist("test", limit=sizes.photos, seed=0)
    photos = load_skimage_photos()
    items = [(fashion.ids[i], fashion.images[i], int(fashion.labels[i])) for i in range(len(fashion))]
    items += [(photos.ids[i], photos.images[i], -1) for i in range(len(photos))]
    items = [it for it in items if pair_split(f"photo:{it[0]}", seed) == split]
    pairs = []
    for item_id, pixels, label in items:
        source = f"photo:{item_id}"
        rng = _rng(seed, source)
        question = _PHOTO_QUESTIONS[int(rng.integers(len(_PHOTO_QUESTIONS)))]
        cached = _image_query(question, pixels)
        variant, note = _near_duplicate(pixels, rng)
        pairs.append(Pair(_image_query(question, variant), cached, True, "near-duplicate",
                          "image", source, split, note))
        peers = [it for it in items if it[2] == label and label >= 0 and it[0] != item_id]
        if peers:
            other_id, other, _ = peers[int(rng.integers(len(peers)))]
            pairs.append(Pair(_image_query(question, other), cached, False,
                              "same-class-other-photo", "image", source, split, other_id))
    return pairs


def render_bar_chart(heights: Sequence[float], size: int = 64) -> np.ndarray:
    """A ``size``×``size`` RGB bar chart (white background, one colour per bar; synthetic)."""
    heights = np.asarray(heights, float)
    if heights.ndim != 1 or not 1 <= len(heights) <= 8 or not ((heights >= 0) & (heights <= 1)).all():
        raise InvalidInputError("bar heights must be 1..8 values in [0, 1]")
    img = np.full((size, size, 3), 255, np.uint8)
    img[size - 4, 2:size - 2] = 0  # x axis
    width = (size - 8) // len(heights)
    colours = np.array([[31, 119, 180], [255, 127, 14], [44, 160, 44], [214, 39, 40],
                        [148, 103, 189], [140, 86, 75], [227, 119, 194], [127, 127, 127]])
    for k, h in enumerate(heights):
        top = size - 4 - int(round(h * (size - 12)))
        left = 4 + k * width
        img[top:size - 4, left + 1:left + width - 1] = colours[k]
    return img


def chart_pairs(split: str, seed: int, sizes: PairSizes = PairSizes()) -> list[Pair]:
    """Rendered bar charts: a brightness-changed copy (should hit) and one bar changed (must not)."""
    pairs = []
    for c in range(sizes.charts):
        source = f"chart:{c}"
        if pair_split(source, seed) != split:
            continue
        rng = np.random.default_rng([0, c])  # the chart itself is fixed; the edits vary by seed
        heights = rng.uniform(0.2, 1.0, int(rng.integers(3, 7)))
        edit = _rng(seed, source)
        chart = render_bar_chart(heights)
        cached = _image_query(_CHART_QUESTION, chart)
        factor = float(edit.uniform(0.85, 0.95))
        dimmed = (chart.astype(np.float32) * factor).astype(np.uint8)
        pairs.append(Pair(_image_query(_CHART_QUESTION, dimmed), cached, True,
                          "chart-near-duplicate", "image", source, split,
                          f"brightness {factor:.2f}"))
        bar = int(edit.integers(len(heights)))
        changed = heights.copy()
        changed[bar] = heights[bar] - 0.4 if heights[bar] > 0.6 else heights[bar] + 0.4
        pairs.append(Pair(_image_query(_CHART_QUESTION, render_bar_chart(changed)), cached, False,
                          "chart-bar-change", "image", source, split,
                          f"bar {bar}: {heights[bar]:.2f} -> {changed[bar]:.2f}"))
    return pairs


# --------------------------------------------------------------------------- speech pairs

#: (word, its opposite) and the objects they apply to; sentences differ by that one word.
SPEECH_COMMANDS: tuple[tuple[str, str, tuple[str, ...]], ...] = (
    ("turn on", "turn off", ("the kitchen lights", "the heating", "the radio", "the fan",
                             "the porch light", "the television", "the oven", "the kettle",
                             "the bedroom lamp", "the air conditioner", "the alarm")),
    ("open", "close", ("the garage door", "the blinds", "the front gate", "the window",
                       "the curtains", "the sunroof", "the skylight", "the shutters",
                       "the bathroom window")),
    ("lock", "unlock", ("the front door", "the car", "the back door", "the phone", "the safe",
                        "the shed", "the side gate", "the tablet")),
    ("start", "stop", ("the dishwasher", "the timer", "the music", "the vacuum cleaner",
                       "the washing machine", "the sprinklers", "the recording", "the dryer",
                       "the coffee machine", "the slideshow")),
    ("raise", "lower", ("the volume", "the temperature", "the shades", "the brightness",
                        "the desk", "the bed")),
    ("mute", "unmute", ("the speaker", "the microphone", "the doorbell", "the notifications")),
    ("arm", "disarm", ("the alarm system", "the security cameras", "the motion sensor")),
)


def speech_sentences() -> list[tuple[str, str]]:
    """Every (sentence, its one-word opposite) of :data:`SPEECH_COMMANDS`."""
    return [(f"please {on} {obj}", f"please {off} {obj}")
            for on, off, objects in SPEECH_COMMANDS for obj in objects]


def speech_pairs(split: str, seed: int, sizes: PairSizes = PairSizes()) -> list[Pair]:
    """espeak-ng speech (synthetic): two other voices (should hit), one word changed, another
    sentence."""

    sentences = speech_sentences()[:sizes.sentences]
    mine = [s for s in sentences if pair_split(f"sentence:{s[0]}", seed) == split]
    pairs = []
    for k, (sentence, opposite) in enumerate(mine):
        source = f"sentence:{sentence}"
        rng = _rng(seed, source)
        voice, *others = (VOICES[int(i)] for i in rng.choice(len(VOICES), 3, replace=False))
        other_voice = others[0]
        cached = _speech_query(sentence, voice)
        pairs += [Pair(_speech_query(sentence, v), cached, True, "voice-change", "audio", source,
                       split, f"{voice} -> {v}") for v in others]
        pairs.append(Pair(_speech_query(opposite, voice), cached, False, "one-word-change",
                          "audio", source, split, f"'{sentence}' -> '{opposite}'"))
        if len(mine) > 1:
            other = mine[(k + 1 + int(rng.integers(len(mine) - 1))) % len(mine)][0]
            pairs.append(Pair(_speech_query(other, other_voice), cached, False, "novel", "audio",
                              source, split, other))
    return pairs


def _speech_query(sentence: str, voice: str) -> Query:
    return Query(audio=_spoken(sentence, voice), scope=SCOPE, ground_truth=sentence)


@lru_cache(maxsize=512)
def _spoken(sentence: str, voice: str) -> np.ndarray:

    audio = synthesize(sentence, voice=voice, rate=150).audio
    audio.setflags(write=False)
    return audio


__all__ = ["PAIR_MODALITIES", "PAIR_SPLITS", "PAIRS_PROVENANCE", "SAME_KINDS", "SMOKE_SIZES",
           "TRAP_KINDS", "Pair", "PairSizes", "chart_pairs", "context_pairs", "load_pairs",
           "make_trap", "pair_split", "paraphrase", "photo_pairs", "render_bar_chart",
           "speech_pairs", "speech_sentences", "text_pairs"]
