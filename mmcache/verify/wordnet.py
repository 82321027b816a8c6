"""WordNet 3.0 synonyms read straight from Debian's ``wordnet-base`` files.

nltk's reader refuses this layout as it is (it wants a ``lexnames`` file Debian
does not ship, and nltk 3.10 sandboxes corpus paths), and the index/data format is a
documented plain-text one (``man 5 wndb``), so the lookups the built-in verifier
(:mod:`mmcache.verify.edits`) uses read it directly; the pairs' nlpaug augmenters
get nltk's own reader over a copy of these files (:mod:`mmcache.datasets.augment`).
Licence: the WordNet 3.0 licence (Princeton; free use, see
``/usr/share/doc/wordnet-base/copyright``).
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

from mmcache.offline import missing_asset

WORDNET_DIR = Path("/usr/share/wordnet")
WORDNET_SOURCE = "WordNet 3.0 (Princeton) via Debian wordnet-base"
#: WordNet's file suffix per part of speech.
POS_FILES: dict[str, str] = {"n": "noun", "v": "verb", "a": "adj", "r": "adv"}


def synonyms(word: str, pos: str) -> list[str]:
    """One-word synonyms of ``word`` in its most frequent ``pos`` sense ("n", "v", "a", "r")."""
    offsets = _index(pos).get(word.lower())
    if not offsets:
        return []
    words = _synset_words(pos, offsets[0])
    return [w for w in words if w != word.lower() and "_" not in w and w.isalpha()]


def antonyms(word: str) -> set[str]:
    """Direct WordNet antonyms of ``word`` over all its senses and parts of speech."""
    out: set[str] = set()
    for pos in POS_FILES:
        for offset in _index(pos).get(word.lower(), ()):
            out |= set(_synset_antonyms(pos, offset, word.lower()))
    return out


def senses(word: str) -> int:
    """How many senses ``word`` has over all parts of speech (0: not in WordNet)."""
    return sum(len(_index(pos).get(word.lower(), ())) for pos in POS_FILES)


@lru_cache(maxsize=None)
def _index(pos: str) -> dict[str, tuple[int, ...]]:
    path = WORDNET_DIR / f"index.{POS_FILES[pos]}"
    if not path.exists():
        raise missing_asset("WordNet", "`apt-get install wordnet-base`")
    out: dict[str, tuple[int, ...]] = {}
    with path.open(encoding="utf-8") as fh:
        for line in fh:
            if line.startswith(" "):  # licence header
                continue
            fields = line.split()
            n_synsets, n_pointers = int(fields[2]), int(fields[3])
            out[fields[0]] = tuple(int(x) for x in fields[6 + n_pointers:6 + n_pointers + n_synsets])
    return out


@lru_cache(maxsize=8192)
def _synset_fields(pos: str, offset: int) -> tuple[str, ...]:
    with (WORDNET_DIR / f"data.{POS_FILES[pos]}").open("rb") as fh:
        fh.seek(offset)
        return tuple(fh.readline().decode("utf-8").split())


def _synset_words(pos: str, offset: int) -> tuple[str, ...]:
    fields = _synset_fields(pos, offset)
    return tuple(fields[4 + 2 * k].split("(")[0].lower() for k in range(int(fields[3], 16)))


def _synset_antonyms(pos: str, offset: int, word: str) -> list[str]:
    """Antonyms of ``word``'s lemma in one synset (WordNet's lexical "!" pointers)."""
    fields = _synset_fields(pos, offset)
    words = _synset_words(pos, offset)
    if word not in words:
        return []
    at = 4 + 2 * len(words)
    out = []
    for k in range(int(fields[at])):
        symbol, target, target_pos, source_target = fields[at + 1 + 4 * k:at + 5 + 4 * k]
        source = int(source_target[:2], 16)
        if symbol == "!" and source == words.index(word) + 1:
            target_words = _synset_words("a" if target_pos == "s" else target_pos, int(target))
            out.append(target_words[int(source_target[2:], 16) - 1])
    return out
