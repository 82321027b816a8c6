"""Seeded per-key splits."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mmcache.datasets import assign_splits, split_of
from mmcache.errors import InvalidInputError


@given(st.text(), st.integers(0, 1000))
def test_split_is_a_function_of_key_and_seed(key: str, seed: int) -> None:
    assert split_of(key, seed) == split_of(key, seed) in ("train", "val", "test")


def test_fractions_are_roughly_respected_and_seed_matters() -> None:
    keys = [f"item-{i}" for i in range(5000)]
    splits = assign_splits(keys, seed=0)
    share = {s: (splits == s).mean() for s in ("train", "val", "test")}
    assert abs(share["train"] - 0.7) < 0.03 and abs(share["test"] - 0.2) < 0.03
    assert (assign_splits(keys, seed=1) != splits).mean() > 0.3


def test_bad_fractions() -> None:
    with pytest.raises(InvalidInputError):
        split_of("x", fractions=(0.5, 0.5, 0.5))
