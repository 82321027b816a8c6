"""nlpaug text augmenters, offline, seeded, on Debian's WordNet: what makes the text pairs.

:mod:`mmcache.datasets.pairs` makes its paraphrases and traps with `nlpaug
<https://github.com/makcedward/nlpaug>`_ (:data:`NLPAUG_SOURCE`) where nlpaug has a
transformation for the job:

* WordNet synonym swaps: ``naw.SynonymAug`` (:func:`synonym_swap`);
* antonym swaps, the first way a negation trap is made ("safe" -> "unsafe"):
  ``naw.AntonymAug`` (:func:`antonym_swap`);
* name, place, product and date-word swaps from lists of interchangeable tokens:
  ``naw.ReservedAug`` (:func:`reserved_swap`; nlpaug has no named-entity recogniser, so
  the lists, in :mod:`mmcache.datasets.pairs`, say which tokens are names);
* sentence reordering: ``nas.RandomSentAug`` (:func:`sentence_swap`).

nlpaug's WordNet augmenters read ``nltk.corpus.wordnet`` and tag parts of speech with
``nltk.pos_tag``; both would ``nltk.download`` what is missing. Neither happens here:
:func:`wordnet_reader` is nltk's own ``WordNetCorpusReader`` over the WordNet 3.0 files of
Debian's ``wordnet-base`` (copied into ``data/generated/nltk_data``, with the
``lexnames`` file Debian does not ship written from :data:`LEXNAMES`), handed to the
augmenters through :class:`DebianWordNet`, whose ``pos_tag`` takes the part of speech from
WordNet itself (a word is tagged only where all its senses share one part of speech; every
other token gets nlpaug's skip tag ``DT``), so no tagger model is needed.

Every call is seeded: nlpaug draws from Python's ``random`` and numpy's global generator,
so :func:`seeded` sets both from the caller's generator for the call and restores them
after; the same seed gives the same text on any machine. The tokenizer keeps the text's
own spacing (nlpaug's default one re-joins tokens with spaces: "don't" -> "don ' t").
"""

from __future__ import annotations

import random
import re
import tempfile
import warnings
from contextlib import contextmanager
from functools import lru_cache
from importlib.metadata import version
from pathlib import Path
from typing import Iterator, Sequence

import numpy as np

from mmcache.offline import missing_asset
from mmcache.paths import DATA_DIR
from mmcache.verify.wordnet import WORDNET_DIR, WORDNET_SOURCE

NLPAUG_VERSION = version("nlpaug")
NLTK_VERSION = version("nltk")
NLPAUG_SOURCE = (f"nlpaug {NLPAUG_VERSION} (SynonymAug, AntonymAug, ReservedAug, RandomSentAug) "
                 f"with nltk {NLTK_VERSION}'s WordNet reader over {WORDNET_SOURCE}")
#: Where the nltk_data layout (``corpora/wordnet``) is built from the Debian files.
NLTK_DATA_DIR = DATA_DIR / "generated" / "nltk_data"
#: WordNet 3.0's lexicographer files (``man 5 lexnames``): number, name, syntactic category.
LEXNAMES: tuple[str, ...] = (
    "adj.all", "adj.pert", "adv.all", "noun.Tops", "noun.act", "noun.animal", "noun.artifact",
    "noun.attribute", "noun.body", "noun.cognition", "noun.communication", "noun.event",
    "noun.feeling", "noun.food", "noun.group", "noun.location", "noun.motive", "noun.object",
    "noun.person", "noun.phenomenon", "noun.plant", "noun.possession", "noun.process",
    "noun.quantity", "noun.relation", "noun.shape", "noun.state", "noun.substance", "noun.time",
    "verb.body", "verb.change", "verb.cognition", "verb.communication", "verb.competition",
    "verb.consumption", "verb.contact", "verb.creation", "verb.emotion", "verb.motion",
    "verb.perception", "verb.possession", "verb.social", "verb.stative", "verb.weather",
    "adj.ppl")
_CATEGORY = {"noun": 1, "verb": 2, "adj": 3, "adv": 4}
_WORDNET_FILES = tuple(f"{kind}.{pos}" for kind in ("index", "data")
                       for pos in ("noun", "verb", "adj", "adv")) + \
    tuple(f"{pos}.exc" for pos in ("noun", "verb", "adj", "adv")) + ("cntlist.rev",)
#: Penn tags nlpaug maps to each WordNet part of speech (``s``: adjective satellite).
_PENN = {"n": "NN", "v": "VB", "a": "JJ", "s": "JJ", "r": "RB"}
#: The tag nlpaug's SynonymAug never swaps (and AntonymAug ignores).
SKIP_TAG = "DT"
_TOKEN = re.compile(r"\w+|[^\w\s]")
_SENTENCE = re.compile(r"(?<=[.!?])\s+")


# --------------------------------------------------------------------------- WordNet for nltk

def nltk_wordnet_root(root: Path = NLTK_DATA_DIR) -> Path:
    """``root``/corpora/wordnet laid out for nltk from Debian's files (built once)."""
    target = root / "corpora" / "wordnet"
    if not all((WORDNET_DIR / name).exists() for name in _WORDNET_FILES):
        raise missing_asset("WordNet", "`apt-get install wordnet-base`")
    target.mkdir(parents=True, exist_ok=True)
    for name in _WORDNET_FILES:
        dest = target / name
        if not dest.exists():
            # a copy (28 MB in all): nltk's path sandbox refuses symlinks and hard links
            # to files outside its data roots
            _write_atomically(dest, (WORDNET_DIR / name).read_bytes())
    lexnames = "".join(f"{i:02d}\t{name}\t{_CATEGORY[name.split('.')[0]]}\n"
                       for i, name in enumerate(LEXNAMES))
    path = target / "lexnames"
    if not path.exists() or path.read_text() != lexnames:
        _write_atomically(path, lexnames.encode())
    return target


def _write_atomically(dest: Path, data: bytes) -> None:
    """Write ``dest`` through a temporary file of this process's own, renamed into place, so
    processes that build the folder at once never read or remove each other's half-written files."""
    with tempfile.NamedTemporaryFile(dir=dest.parent, prefix=dest.name + ".", suffix=".tmp",
                                     delete=False) as tmp:
        tmp.write(data)
    Path(tmp.name).replace(dest)


@lru_cache(maxsize=1)
def wordnet_reader():
    """nltk's ``WordNetCorpusReader`` over Debian's WordNet 3.0 (no download, no omw)."""
    # deferred: the augmentation libraries load only for augmenters
    import nltk
    from nltk.corpus.reader.wordnet import WordNetCorpusReader

    target = nltk_wordnet_root()
    root = str(target.parent.parent)
    if root not in nltk.data.path:  # nltk opens files only under its data roots
        nltk.data.path.append(root)
    class DebianWordNetReader(WordNetCorpusReader):
        def map_wn(self, version="wordnet"):
            # nltk maps other WordNet versions onto 3.0 for the multilingual (OMW) data
            # through index.sense, which wordnet-base does not ship: this is 3.0, English only
            return None

    with warnings.catch_warnings():  # "multilingual functions are not available": none used
        warnings.simplefilter("ignore")
        return DebianWordNetReader(str(target), None)


def wordnet_pos(word: str, max_senses: int | None = None) -> str | None:
    """The one WordNet part of speech ("n", "v", "a", "r") of all ``word``'s senses (None:
    not in WordNet, senses in several parts of speech, or more than ``max_senses``)."""
    synsets = wordnet_reader().synsets(word)
    poses = {"a" if s.pos() == "s" else s.pos() for s in synsets}
    if len(poses) != 1 or (max_senses is not None and len(synsets) > max_senses):
        return None
    return poses.pop()


@lru_cache(maxsize=1)
def _nlpaug_wordnet():
    """The :class:`DebianWordNet` model class (defined once, on first use)."""
    # deferred: the augmentation libraries load only for augmenters
    import nlpaug.model.word_dict as nmw

    class DebianWordNet(nmw.WordNet):
        """nlpaug's WordNet model over :func:`wordnet_reader`, tagged from WordNet itself.

        ``eligible(token) -> bool`` says which tokens may be swapped; the others are tagged
        ``DT``. For synonyms a token is tagged with its one part of speech (see
        :func:`wordnet_pos`); for antonyms with the first of adjective, adverb, verb (a
        verb only where the word has no noun sense) in which its own lemma has an antonym.
        Candidates are single words (nlpaug would also offer "motor car"), and an antonym is
        one of the word's own lemma (nlpaug takes the antonyms of every lemma in every
        synset of the word, so "good" could become "empty").
        """

        def __init__(self, is_synonym: bool, eligible, max_senses: int | None):
            self.eligible, self.max_senses = eligible, max_senses
            super().__init__(lang="eng", is_synonym=is_synonym)

        def read(self):
            return wordnet_reader()

        def pos_tag(self, tokens):  # instance method on purpose: nlpaug calls self.model.pos_tag
            tags = []
            for token in tokens:
                pos = None
                if self.eligible(token):
                    pos = wordnet_pos(token, self.max_senses) if self.is_synonym else \
                        next((p for p in self._antonym_poses(token) if self.predict(token, p)),
                             None)
                tags.append((token, _PENN[pos] if pos else SKIP_TAG))
            return tags

        def _antonym_poses(self, word):
            # a verb only where the word is no noun: with no tagger, "string" / "function"
            # in "replace the string" would become "unstring" / "malfunction"
            return "ar" if self.model.synsets(word, pos="n") else "arv"

        def predict(self, word, pos=None):
            own = {word.lower()} | {self.model.morphy(word.lower(), p) for p in "nvar"}
            out = []
            for synset in self.model.synsets(word, pos=pos):
                for lemma in synset.lemmas():
                    if self.is_synonym:
                        names = [lemma.name()]
                    elif lemma.name().lower() in own:
                        names = [a.name() for a in lemma.antonyms()]
                    else:
                        names = []
                    out += [n for n in names if n.isalpha() and n.lower() != word.lower()
                            and n not in out]
            return out

    return DebianWordNet


# --------------------------------------------------------------------------- seeding, tokens

@contextmanager
def seeded(rng: np.random.Generator) -> Iterator[None]:
    """Seed Python's ``random`` and numpy's global generator from ``rng`` for the block
    (nlpaug samples from both), then restore both."""
    seed = int(rng.integers(2 ** 32))
    py_state, np_state = random.getstate(), np.random.get_state()
    random.seed(seed)
    np.random.seed(seed)
    try:
        yield
    finally:
        random.setstate(py_state)
        np.random.set_state(np_state)


class SpacingTokenizer:
    """Words and punctuation marks as nlpaug tokens; the reverse puts back the text's own
    whitespace (nlpaug substitutes token for token, so the gaps still line up)."""

    def __init__(self) -> None:
        self._gaps: list[str] = []

    def tokenize(self, text: str) -> list[str]:
        tokens, gaps, last = [], [], 0
        for m in _TOKEN.finditer(text):
            gaps.append(text[last:m.start()])
            tokens.append(m.group())
            last = m.end()
        self._gaps = gaps + [text[last:]]
        return tokens

    def reverse(self, tokens: Sequence[str]) -> str:
        if len(tokens) + 1 != len(self._gaps):  # not the last text tokenized: plain spaces
            # deferred: the augmentation libraries load only for augmenters
            from nlpaug.util.text.tokenizer import Tokenizer
            return Tokenizer.reverse_tokenizer(list(tokens))
        return "".join(g + t for g, t in zip(self._gaps, tokens)) + self._gaps[-1]


def _one(out) -> str:
    return out[0] if isinstance(out, list) else out


# --------------------------------------------------------------------------- the augmenters

def synonym_swap(text: str, rng: np.random.Generator, eligible, max_swaps: int = 2,
                 max_senses: int = 2) -> str:
    """``naw.SynonymAug`` (WordNet): up to ``max_swaps`` ``eligible`` words whose senses (at
    most ``max_senses``) share one part of speech swapped for a synonym."""
    # deferred: the augmentation libraries load only for augmenters
    import nlpaug.augmenter.word as naw

    tok = SpacingTokenizer()
    model = _nlpaug_wordnet()(True, eligible, max_senses)
    aug = _with_model(naw.SynonymAug, model, aug_min=1, aug_max=max_swaps, aug_p=0.3,
                      tokenizer=tok.tokenize, reverse_tokenizer=tok.reverse)
    with seeded(rng):
        return _one(aug.augment(text))


def antonym_swap(text: str, rng: np.random.Generator, eligible) -> str:
    """``naw.AntonymAug`` (WordNet): one ``eligible`` verb, adjective or adverb swapped for a
    direct antonym of its own lemma ("safe" -> "unsafe"); ``text`` itself when none has one."""
    # deferred: the augmentation libraries load only for augmenters
    import nlpaug.augmenter.word as naw

    tok = SpacingTokenizer()
    model = _nlpaug_wordnet()(False, eligible, None)
    aug = _with_model(naw.AntonymAug, model, aug_min=1, aug_max=1, aug_p=0.3,
                      tokenizer=tok.tokenize, reverse_tokenizer=tok.reverse)
    with seeded(rng):
        return _one(aug.augment(text))


def reserved_swap(text: str, groups: Sequence[Sequence[str]], rng: np.random.Generator) -> str:
    """``naw.ReservedAug``: one token (or phrase) of ``groups`` in ``text`` swapped for
    another of its group (case-sensitive; ``text`` itself when none occurs)."""
    # deferred: the augmentation libraries load only for augmenters
    import nlpaug.augmenter.word as naw

    # one group per token present, with the group's absent tokens as its only replacements
    # (so "New York to Paris" never becomes "New York to New York")
    per_token = []
    for group in groups:
        present = [g for g in group if re.search(rf"(?<![\w+#]){re.escape(g)}(?![\w+#])", text)]
        absent = [g for g in group if g.lower() not in text.lower()]
        per_token += [[g, *absent] for g in present if absent]
    if not per_token:
        return text
    tok = SpacingTokenizer()
    aug = naw.ReservedAug(reserved_tokens=per_token, case_sensitive=True,
                          aug_min=1, aug_max=1, aug_p=0.3, tokenizer=tok.tokenize,
                          reverse_tokenizer=tok.reverse)
    with seeded(rng):
        out = _one(aug.augment(text))
    # ReservedAug joins a phrase's words with its CONNECT_TOKEN before tokenizing and leaves
    # it in phrases it did not swap: put the space back
    return out.replace(naw.ReservedAug.CONNECT_TOKEN, " ")


def sentence_swap(text: str, rng: np.random.Generator) -> str | None:
    """``nas.RandomSentAug``: one sentence swapped with its neighbour (None: one sentence)."""
    # deferred: the augmentation libraries load only for augmenters
    import nlpaug.augmenter.sentence as nas

    def split(t: str) -> list[str]:  # nltk's sent_tokenize needs punkt, a download
        return _SENTENCE.split(t.strip())

    if len(split(text)) < 2:
        return None
    aug = nas.RandomSentAug(mode="neighbor", aug_min=1, aug_max=1, tokenizer=split)
    with seeded(rng):
        return _one(aug.augment(text))


def _with_model(cls, model, **kw):
    """An nlpaug WordNet augmenter whose model is ``model`` (not ``nltk.corpus.wordnet``)."""
    sub = type(cls.__name__, (cls,), {"get_model": classmethod(lambda c, *a, **k: model)})
    return sub(**kw)


__all__ = ["LEXNAMES", "NLPAUG_SOURCE", "NLPAUG_VERSION", "NLTK_DATA_DIR", "SpacingTokenizer",
           "antonym_swap", "nltk_wordnet_root", "reserved_swap", "seeded", "sentence_swap",
           "synonym_swap", "wordnet_pos", "wordnet_reader"]
