"""Helpers for tests and experiments: a hand-driven clock, vectors at a chosen cosine."""

from __future__ import annotations

import numpy as np


def unit(rng: np.random.Generator, dim: int = 32) -> np.ndarray:
    """A random unit float32 vector."""
    v = rng.standard_normal(dim).astype(np.float32)
    return v / np.linalg.norm(v)


def near(rng: np.random.Generator, v: np.ndarray, cos: float) -> np.ndarray:
    """A unit float32 vector whose cosine similarity to unit vector ``v`` is ``cos``."""
    w = rng.standard_normal(len(v))
    w -= (w @ v) * v
    w /= np.linalg.norm(w)
    return (cos * v + np.sqrt(1 - cos**2) * w).astype(np.float32)


class FakeClock:
    """A clock (seconds) that moves only when told: pass it as ``TieredCache(clock=...)``."""

    def __init__(self, now: float = 1000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        """Move the clock forward."""
        self.now += seconds
