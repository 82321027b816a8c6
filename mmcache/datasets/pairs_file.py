"""Your own labelled pairs, from a JSONL file: one pair per line, read into :class:`Pair` objects
that every threshold study takes (:func:`mmcache.studies.threshold_study.score_pairs`).

Each line is one JSON object. ``cached`` (the query whose answer the cache holds), ``query``
(the new query) and ``same`` (true when the cached answer is right for the new query) are
required; the queries are texts. Optional keys:

* ``cached_image`` / ``query_image``: an image file (PNG, JPEG, ...) beside the text;
* ``cached_audio`` / ``query_audio``: a WAV file; a side with audio may leave its text out
  (``"cached": null``);
* ``cached_context`` / ``query_context``: the conversation before the text, a list of
  ``{"role": ..., "content": ...}``, oldest first;
* ``source`` (what both queries were made from: pairs of one source stay in one split;
  default: the line number), ``kind`` (default ``"same"`` / ``"different"``), ``split``
  (default ``"test"``), ``note``.

Media paths are relative to the file's folder. A line that breaks any rule (unknown key,
wrong type, unreadable image or clip, empty side) raises :class:`~mmcache.errors.PairsFileError`
naming the line, and nothing is returned. :func:`write_pairs` writes texts and contexts.

    {"cached": "How do I reset my password?", "query": "How can I reset my password", "same": true}
    {"cached": "Is it safe to eat raw eggs?", "query": "Is it not safe to eat raw eggs?",
     "same": false, "kind": "negation", "source": "eggs"}
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Iterable

import numpy as np

from mmcache.datasets.pairs import Pair
from mmcache.errors import MMCacheError, PairsFileError
from mmcache.inputs import audio_16k, prepare
from mmcache.keys import decode_image
from mmcache.types import Query

REQUIRED_KEYS = ("cached", "query", "same")
OPTIONAL_KEYS = ("cached_image", "query_image", "cached_audio", "query_audio", "cached_context",
                 "query_context", "source", "kind", "split", "note")
SIDES = ("cached", "query")
#: A pairs file larger than this is refused before it is read (split it, or raise the bound).
MAX_FILE_BYTES = 512 * 2**20
#: The scope the loaded queries carry (pairs are compared one against the other, never stored).
SCOPE = "pairs-file"


def read_pairs(path: str | os.PathLike, *, max_bytes: int = MAX_FILE_BYTES) -> list[Pair]:
    """The labelled pairs of the JSONL file at ``path`` (see the module docstring)."""
    path = Path(path)
    try:
        size = path.stat().st_size
    except OSError as exc:
        raise PairsFileError(f"cannot read pairs file {path}: {exc.strerror}") from None
    if size > max_bytes:
        raise PairsFileError(f"pairs file {path} has {size:,} bytes; read_pairs reads at most "
                             f"{max_bytes:,} (max_bytes)")
    pairs = []
    with path.open(encoding="utf-8") as lines:
        for number, line in enumerate(lines, start=1):
            if line.strip():
                try:
                    pairs.append(_pair(json.loads(line), path.parent, number))
                except (ValueError, MMCacheError, OSError) as exc:
                    raise PairsFileError(f"{path}, line {number}: {exc}") from None
    if not pairs:
        raise PairsFileError(f"pairs file {path} holds no pairs")
    return pairs


def write_pairs(pairs: Iterable[Pair], path: str | os.PathLike) -> None:
    """Write text pairs (with their contexts, kind, source, split and note) as JSONL that
    :func:`read_pairs` reads back; pairs with images or audio are refused."""
    rows = []
    for pair in pairs:
        if pair.query.modalities() != ("text",) or pair.cached.modalities() != ("text",):
            raise PairsFileError("write_pairs writes text pairs only; write media paths by hand")
        rows.append({"cached": pair.cached.text, "query": pair.query.text, "same": pair.same,
                     "cached_context": list(pair.cached_context),
                     "query_context": list(pair.query_context), "source": pair.source,
                     "kind": pair.kind, "split": pair.split, "note": pair.note})
    Path(path).write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows),
                          encoding="utf-8")


def _pair(row: Any, folder: Path, number: int) -> Pair:
    if not isinstance(row, dict):
        raise PairsFileError("each line must be a JSON object")
    missing = [k for k in REQUIRED_KEYS if k not in row]
    unknown = sorted(set(row) - set(REQUIRED_KEYS) - set(OPTIONAL_KEYS))
    if missing or unknown:
        raise PairsFileError(f"missing keys {missing}, unknown keys {unknown}; a pair has "
                             f"{list(REQUIRED_KEYS)} and may have {list(OPTIONAL_KEYS)}")
    if not isinstance(row["same"], bool):
        raise PairsFileError(f"'same' must be true or false, got {row['same']!r}")
    cached, query = (_side(row, side, folder) for side in SIDES)
    present = set(cached.modalities()) | set(query.modalities())
    modality = "audio" if "audio" in present else "image" if "image" in present else "text"
    return Pair(query=query, cached=cached, same=row["same"],
                kind=_text(row, "kind", "same" if row["same"] else "different"),
                modality=modality, source=_text(row, "source", f"line-{number}"),
                split=_text(row, "split", "test"), note=_text(row, "note", ""),
                query_context=query.context, cached_context=cached.context)


def _side(row: dict[str, Any], side: str, folder: Path) -> Query:
    text, context = row[side], row.get(f"{side}_context") or []
    if text is not None and not isinstance(text, str):
        raise PairsFileError(f"'{side}' must be a string or null, got {type(text).__name__}")
    if not isinstance(context, list):
        raise PairsFileError(f"'{side}_context' must be a list of {{'role', 'content'}} turns")
    image, audio = (_media(row, f"{side}_{kind}", folder) for kind in ("image", "audio"))
    query = Query(text=text, scope=SCOPE, context=tuple(context),
                  image=None if image is None else np.asarray(decode_image(image).convert("RGB")),
                  audio=None if audio is None else audio_16k(audio))
    if query.modalities() == ():
        raise PairsFileError(f"the {side} side has no text, image or audio")
    prepare(query, {})  # the cache's own checks: sizes, context turns, text
    return query


def _media(row: dict[str, Any], key: str, folder: Path) -> bytes | None:
    name = row.get(key)
    if name is None:
        return None
    if not isinstance(name, str) or not name:
        raise PairsFileError(f"'{key}' must be a file path, got {name!r}")
    return (folder / name).read_bytes()


def _text(row: dict[str, Any], key: str, default: str) -> str:
    value = row.get(key, default)
    if not isinstance(value, str):
        raise PairsFileError(f"'{key}' must be a string, got {type(value).__name__}")
    return value
