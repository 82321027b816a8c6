"""Fixed, seeded train/val/test splits.

A split is decided per *key* (an item id, a caption, a scene class, ...) by
hashing the key with the seed, so an item keeps its split when the data set
grows or is reordered, and every item sharing a key lands in the same split.
"""

from __future__ import annotations

import hashlib
from typing import Hashable, Iterable

import numpy as np

from mmcache.errors import InvalidInputError

SPLITS: tuple[str, ...] = ("train", "val", "test")
#: Default fractions of keys in train / val / test.
DEFAULT_FRACTIONS: tuple[float, float, float] = (0.7, 0.1, 0.2)


def split_of(key: Hashable, seed: int = 0,
             fractions: tuple[float, float, float] = DEFAULT_FRACTIONS) -> str:
    """The split ("train", "val" or "test") that ``key`` belongs to under ``seed``."""
    _check_fractions(fractions)
    digest = hashlib.sha256(f"{seed}\x00{key!r}".encode()).digest()
    u = int.from_bytes(digest[:8], "little") / 2**64
    cut_train, cut_val = fractions[0], fractions[0] + fractions[1]
    return "train" if u < cut_train else "val" if u < cut_val else "test"


def assign_splits(keys: Iterable[Hashable], seed: int = 0,
                  fractions: tuple[float, float, float] = DEFAULT_FRACTIONS) -> np.ndarray:
    """The split of every key, as an array of strings aligned with ``keys``."""
    return np.array([split_of(k, seed, fractions) for k in keys], dtype=object)


def _check_fractions(fractions: tuple[float, float, float]) -> None:
    if len(fractions) != 3 or min(fractions) < 0 or abs(sum(fractions) - 1) > 1e-9:
        raise InvalidInputError(
            f"split fractions must be three non-negative numbers summing to 1, got {fractions}")
