"""Rendered compositional scenes and their paraphrase classes."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mmcache.datasets import Scene, all_scenes, make_scenes, render_scene, scene_captions
from mmcache.datasets.scenes import COLOURS
from mmcache.errors import InvalidInputError


def test_at_least_100_distinct_captions_with_known_classes() -> None:
    captions, labels, variants = scene_captions()
    assert len(set(captions)) == len(captions) >= 100
    scenes = all_scenes()
    for caption, label in zip(captions, labels):
        scene = scenes[label]
        assert scene.colour in caption  # every paraphrase names its colour
    assert np.bincount(labels).min() == np.bincount(labels).max() == variants.max() + 1


def test_make_scenes_is_seeded_and_jittered() -> None:
    a, b = make_scenes(2, size=32, seed=3), make_scenes(2, size=32, seed=3)
    assert np.array_equal(a.images, b.images) and a.ids == b.ids
    assert not np.array_equal(a.images[0], a.images[1])  # two renderings of one scene differ
    assert a.labels[0] == a.labels[1]
    assert len(a) == 2 * len(all_scenes())


@settings(max_examples=30, deadline=None)
@given(st.integers(0, len(all_scenes()) - 1), st.integers(0, 2**31))
def test_rendered_shape_has_its_colour_on_its_side(index: int, seed: int) -> None:
    scene = all_scenes()[index]
    image = render_scene(scene, 48, np.random.default_rng(seed)).astype(int)
    target = np.array(COLOURS[scene.colour])
    mask = np.abs(image - target).max(axis=-1) <= 20
    assert mask.sum() > 30
    ys, xs = np.nonzero(mask)
    cx, cy = xs.mean() / 48, ys.mean() / 48
    expected = {"left": cx < 0.4, "right": cx > 0.6, "top": cy < 0.4, "bottom": cy > 0.6,
                "centre": 0.4 < cx < 0.6 and 0.4 < cy < 0.6}
    assert expected[scene.position]


def test_bad_scenes_are_rejected() -> None:
    with pytest.raises(InvalidInputError):
        render_scene(Scene("hexagon", "red", "left"))
    with pytest.raises(InvalidInputError):
        render_scene(all_scenes()[0], size=8)
    with pytest.raises(InvalidInputError):
        make_scenes(0)
