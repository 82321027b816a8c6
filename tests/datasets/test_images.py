"""Fashion-MNIST and scikit-image loaders."""

from __future__ import annotations

import numpy as np
import pytest

from mmcache.datasets import (FASHION_CLASSES, fashion_captions, load_fashion_mnist,
                              load_skimage_photos)
from mmcache.errors import InvalidInputError


def test_fashion_splits_are_disjoint_and_sized() -> None:
    val = load_fashion_mnist("val")
    test = load_fashion_mnist("test", limit=500)
    assert len(val) == 5_000 and len(test) == 500
    train_ids = set(load_fashion_mnist("train", limit=2_000).ids)
    assert not train_ids & set(val.ids)
    assert val.images.shape[1:] == (28, 28) and val.images.dtype == np.uint8
    assert set(np.unique(val.labels)) == set(range(10))


def test_fashion_limit_is_seeded() -> None:
    a, b = load_fashion_mnist("test", limit=50, seed=1), load_fashion_mnist("test", limit=50, seed=1)
    c = load_fashion_mnist("test", limit=50, seed=2)
    assert a.ids == b.ids and a.ids != c.ids


def test_fashion_captions_name_the_class() -> None:
    data = load_fashion_mnist("test", limit=20)
    for caption, label in zip(data.captions, data.labels):
        assert FASHION_CLASSES[label] in caption
    assert fashion_captions(9)[0] == "a photo of an ankle boot"
    assert len(set(fashion_captions(0))) == len(fashion_captions(0))


@pytest.mark.parametrize("kwargs", [{"split": "dev"}, {"split": "train", "limit": 0}])
def test_fashion_bad_arguments(kwargs: dict) -> None:
    with pytest.raises(InvalidInputError):
        load_fashion_mnist(**kwargs)


def test_fashion_bad_label() -> None:
    with pytest.raises(InvalidInputError):
        fashion_captions(10)


def test_skimage_photos_have_captions() -> None:
    photos = load_skimage_photos(size=32)
    assert len(photos) >= 15
    assert photos.images.shape[1:] == (32, 32, 3)
    assert len(set(photos.captions)) == len(photos)
