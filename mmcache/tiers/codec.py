"""Storing values and vectors without pickle: type-tagged bytes, raw float32.

Values are ``str``, ``bytes`` or JSON-able data (tags ``"str"``, ``"bytes"``,
``"json"``). Vectors are little-endian float32 bytes. Nothing here can run code
when a stored file is read back.
"""

from __future__ import annotations

import json
import math
from typing import Any, Mapping

import numpy as np

from mmcache.errors import SerializationError, StorageError


def encode_value(value: Any) -> tuple[str, bytes]:
    """``(tag, payload)`` for a storable value; SerializationError otherwise."""
    if isinstance(value, str):
        return "str", value.encode("utf-8", "surrogatepass")
    if isinstance(value, (bytes, bytearray, memoryview)):
        return "bytes", bytes(value)
    try:
        text = json.dumps(value, allow_nan=False, separators=(",", ":"))
    except (TypeError, ValueError, RecursionError) as exc:
        raise SerializationError(
            f"value of type {type(value).__name__} cannot be stored: use str, bytes or "
            f"JSON-able data ({exc})") from None
    return "json", text.encode("utf-8")


def decode_value(tag: str, payload: bytes) -> Any:
    """The value stored as ``(tag, payload)``."""
    if tag == "str":
        return bytes(payload).decode("utf-8", "surrogatepass")
    if tag == "bytes":
        return bytes(payload)
    if tag == "json":
        return json.loads(bytes(payload).decode("utf-8"))
    raise StorageError(f"stored value has unknown type tag {tag!r}")


def canonical_value(value: Any) -> Any:
    """The value as every tier will give it back (JSON data round-tripped, bytes frozen)."""
    tag, payload = encode_value(value)
    return decode_value(tag, payload) if tag != "str" else value


def detached(value: Any) -> Any:
    """A copy the caller may mutate without changing the cached value."""
    if isinstance(value, (list, dict)):
        return json.loads(json.dumps(value))
    return value


def value_size(value: Any) -> int:
    """Bytes the value occupies when encoded."""
    return len(encode_value(value)[1])


def vector_to_bytes(vector: np.ndarray) -> bytes:
    """Raw little-endian float32 bytes of a 1-D vector."""
    return np.ascontiguousarray(vector, dtype="<f4").tobytes()


def vector_from_bytes(blob: bytes, dim: int | None = None) -> np.ndarray:
    """The float32 vector stored in ``blob`` (checked against ``dim`` when given)."""
    if len(blob) % 4 or (dim is not None and len(blob) != 4 * dim):
        raise StorageError(f"stored vector has {len(blob)} bytes, expected {4 * (dim or 0)}")
    vec = np.frombuffer(blob, dtype="<f4").astype(np.float32)
    if not np.isfinite(vec).all() or not math.isfinite(float(vec @ vec)):
        raise StorageError("stored vector is not finite")
    return vec


def encode_label(label: Any) -> str | None:
    """JSON text of a ground-truth label (None stays None)."""
    if label is None:
        return None
    try:
        return json.dumps(label, allow_nan=False)
    except (TypeError, ValueError, RecursionError) as exc:
        raise SerializationError(f"ground_truth must be JSON-able ({exc})") from None


def decode_label(text: str | None) -> Any:
    """The label stored by :func:`encode_label`."""
    return None if text is None else json.loads(text)


def encode_turns(turns: tuple[tuple[str, str], ...]) -> str | None:
    """JSON text of an entry's conversation turns (None when it has none)."""
    return json.dumps([list(t) for t in turns]) if turns else None


def decode_turns(text: str | bytes | None) -> tuple[tuple[str, str], ...]:
    """The turns stored by :func:`encode_turns`; ValueError or TypeError when malformed."""
    if not text:
        return ()
    turns = tuple((str(role), str(content)) for role, content in json.loads(text))
    return turns


def encode_hints(hints: Mapping[str, float]) -> str | None:
    """JSON text of an entry's policy hints (None when it has none)."""
    return json.dumps(dict(hints), allow_nan=False) if hints else None


def decode_hints(text: str | bytes | None) -> dict[str, float]:
    """The hints stored by :func:`encode_hints` (none for None); ValueError, TypeError or
    AttributeError when the text is malformed."""
    return {} if text is None else {str(k): float(v) for k, v in json.loads(text).items()}
