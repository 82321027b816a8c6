"""The encoder protocol the cache and the notebooks use, a named test stand-in, and the fixed
torch state that training and feature computation run under.

An encoder turns raw inputs of one modality into L2-normalised float32 vectors.
``encoder_id`` names the weights exactly (architecture + weights + hash), so every
result and every stored embedding can say which weights produced it.
"""

from __future__ import annotations

import hashlib
from contextlib import contextmanager
from typing import Any, Iterator, Protocol, Sequence, runtime_checkable

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


@contextmanager
def fixed_torch_state(threads: int = 1, flush_denormal: bool = False) -> Iterator[None]:
    """Run the block with ``threads`` torch threads, CPU flush-to-zero of subnormal floats set
    to ``flush_denormal`` and ``torch.use_deterministic_algorithms(True, warn_only=True)``,
    whatever the process set before; the previous state comes back on exit.

    Thread count and flush-to-zero change float results in their last bits (a reduction split
    over two threads sums in another order), so without this a run's weights depend on what
    ran before it in the process.
    """
    # deferred: model libraries load only where a model runs
    import torch

    before = (torch.get_num_threads(), _flushes_denormals(),
              torch.are_deterministic_algorithms_enabled(),
              torch.is_deterministic_algorithms_warn_only_enabled())
    torch.set_num_threads(threads)
    torch.set_flush_denormal(flush_denormal)
    torch.use_deterministic_algorithms(True, warn_only=True)
    try:
        yield
    finally:
        torch.set_num_threads(before[0])
        torch.set_flush_denormal(before[1])
        torch.use_deterministic_algorithms(before[2], warn_only=before[3])


def _flushes_denormals() -> bool:
    """Whether CPU float ops flush subnormal results to zero now (torch has no getter)."""
    # deferred: model libraries load only where a model runs
    import torch

    return torch.tensor([1e-30]).mul(1e-10).item() == 0.0
