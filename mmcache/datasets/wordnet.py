"""WordNet 3.0 synonyms read straight from Debian's ``wordnet-base`` files.

nltk's reader refuses this layout (it wants a ``lexnames`` file Debian does not
ship, and nltk 3.10 sandboxes corpus paths), and the index/data format is a
documented plain-text one (``man 5 wndb``), so the two lookups used here read it
directly. Licence: the WordNet 3.0 licence (Princeton; free use, see
``/usr/share/doc/wordnet-base/copyright``).
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

from ..offline import missing_asset

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


@lru_cache(maxsize=4096)
def _synset_words(pos: str, offset: int) -> tuple[str, ...]:
    with (WORDNET_DIR / f"data.{POS_FILES[pos]}").open("rb") as fh:
        fh.seek(offset)
        fields = fh.readline().decode("utf-8").split()
    n_words = int(fields[3], 16)
    return tuple(fields[4 + 2 * k].split("(")[0].lower() for k in range(n_words))
