"""Conversation context as part of the hit decision (seed 000 ch. 5 session-context key).

A query's ``context`` is the conversation before its text: a sequence of mappings with
string ``role`` and ``content``. Only the last :data:`CONTEXT_TURNS` turns count, and
the latest count most:

- exact side: the exact key includes a hash of those turns, normalised as text keys
  are (:func:`context_key`), so "yes, cancel it" after one chat never shares a key with
  the same words after another, while small talk older than the window changes nothing;
- semantic side: a *context vector*, the text encoder's embeddings of those turns
  weighted ``CONTEXT_DECAY ** age`` (the latest turn weighs 1) and L2-normalised, is kept
  per entry and compared with the query's as its own channel: a candidate needs cosine ≥
  ``1 − thresholds.context_delta`` there as well. Earlier, unrelated turns weigh little,
  so they do not block a true hit. Without a text encoder the channel falls back to
  equality of the normalised turns. A candidate with context never matches a query
  without it, nor the reverse.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import numpy as np
import xxhash

from mmcache.errors import InvalidInputError
from mmcache.keys import check_text, normalise_text

#: Turns of the conversation (the latest ones) that take part in the hit decision.
CONTEXT_TURNS = 4
#: Weight factor per turn of age in the context vector.
CONTEXT_DECAY = 0.5

Turns = tuple[tuple[str, str], ...]


def check_context(context: Any) -> Turns:
    """The relevant turns of ``context`` as ``((role, content), ...)``; InvalidInputError
    naming the first malformed turn."""
    if not isinstance(context, (list, tuple)) and (  # the usual types first: ABC checks cost
            isinstance(context, (str, bytes, Mapping)) or not isinstance(context, Sequence)):
        raise InvalidInputError("Query.context must be a list of {'role': str, 'content': str} "
                                f"mappings, got {type(context).__name__}")
    turns = []
    for i, turn in enumerate(context):
        if not isinstance(turn, Mapping):
            raise InvalidInputError(f"Query.context[{i}] must be a mapping with 'role' and "
                                    f"'content', got {type(turn).__name__}")
        role, content = turn.get("role"), turn.get("content")
        if not isinstance(role, str) or not role.strip() or not isinstance(content, str):
            raise InvalidInputError(f"Query.context[{i}] needs a non-empty string 'role' and a "
                                    f"string 'content', got role={role!r}, "
                                    f"content={type(content).__name__}")
        check_text(content, f"Query.context[{i}]['content']")
        check_text(role, f"Query.context[{i}]['role']")
        turns.append((role.strip().lower(), content))
    return tuple(t for t in turns if t[1].strip())[-CONTEXT_TURNS:]


def context_key(turns: Turns) -> str | None:
    """Hash of the normalised turns (None for no context)."""
    if not turns:
        return None
    digest = xxhash.xxh3_128()
    for role, content in turns:
        for part in (role, normalise_text(content)):
            raw = part.encode("utf-8")
            digest.update(len(raw).to_bytes(8, "little"))
            digest.update(raw)
    return digest.hexdigest()


def context_vector(turn_vectors: np.ndarray) -> np.ndarray:
    """The unit context vector of the turns' embeddings (oldest first)."""
    ages = np.arange(len(turn_vectors))[::-1]
    weighted = (CONTEXT_DECAY ** ages)[:, None] * np.asarray(turn_vectors, np.float32)
    total = weighted.sum(axis=0)
    return (total / np.linalg.norm(total)).astype(np.float32)


def turn_texts(turns: Turns) -> list[str]:
    """What the text encoder embeds for each turn."""
    return [f"{role}: {content}" for role, content in turns]


def context_similarity(query_turns: Turns, query_vector: np.ndarray | None,
                       entry_turns: Turns, entry_vector: np.ndarray | None) -> float | None:
    """The context channel's similarity (None when neither side has context)."""
    if not query_turns and not entry_turns:
        return None
    if not query_turns or not entry_turns:
        return -1.0
    if query_vector is not None and entry_vector is not None:
        return float(query_vector @ entry_vector)
    return 1.0 if context_key(query_turns) == context_key(entry_turns) else -1.0
