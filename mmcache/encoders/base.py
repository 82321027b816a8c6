"""The encoder protocol the cache and the notebooks use, and a named test stand-in.

An encoder turns raw inputs of one modality into L2-normalised float32 vectors.
``encoder_id`` names the weights exactly (architecture + weights + hash), so every
result and every stored embedding can say which weights produced it.
"""

from __future__ import annotations

import hashlib
from typing import Any, Protocol, Sequence, runtime_checkable

import numpy as np


@runtime_checkable
class Encoder(Protocol):
    """Maps a batch of raw inputs of one modality to an ``(n, dim)`` float32 array."""

    modality: str
    dim: int
    encoder_id: str

    def encode(self, inputs: Sequence[Any]) -> np.ndarray: ...


class HashingTestEncoder:
    """STAND-IN for tests only: deterministic pseudo-random unit vectors from a content hash.

    Equal inputs map to equal vectors and different inputs to unrelated ones; it
    knows nothing about meaning and must never produce a reported result.
    """

    def __init__(self, modality: str = "text", dim: int = 64) -> None:
        self.modality = modality
        self.dim = dim
        self.encoder_id = f"stand-in:hashing-test-encoder/{modality}/{dim}"

    def encode(self, inputs: Sequence[Any]) -> np.ndarray:
        return np.stack([self._vector(x) for x in inputs]).astype(np.float32)

    def _vector(self, item: Any) -> np.ndarray:
        raw = item if isinstance(item, bytes) else np.asarray(item).tobytes() \
            if isinstance(item, np.ndarray) else str(item).encode()
        seed = int.from_bytes(hashlib.sha256(raw).digest()[:8], "little")
        v = np.random.default_rng(seed).standard_normal(self.dim)
        return v / np.linalg.norm(v)
