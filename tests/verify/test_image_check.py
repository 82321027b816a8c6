"""The built-in verifier's image side (mmcache.verify.image_check) and its use by the cache."""

from __future__ import annotations

import io
from types import SimpleNamespace

import numpy as np
import pytest
from PIL import Image

from mmcache.datasets.pairs import render_bar_chart
from mmcache.verify.edits import EditVerifier, verify_edits
from mmcache.errors import InvalidMediaError
from mmcache.verify.image_check import (MAX_BLOCK_DIFFERENCE, SIDE, block_difference,
                                        image_fingerprint)
from mmcache.datasets.variants import ImageVariant, apply_image_variant

HEIGHTS = np.array([0.3, 0.8, 0.5, 0.6])


def _photo(seed: int) -> np.ndarray:
    """A smooth random grey-level scene (blurred noise), 64×64 RGB."""
    noise = np.random.default_rng(seed).uniform(0, 255, (8, 8)).astype(np.uint8)
    grey = np.asarray(Image.fromarray(noise).resize((64, 64), Image.Resampling.BICUBIC))
    return np.repeat(grey[..., None], 3, axis=2)


def test_fingerprint_is_side_squared_bytes_from_arrays_and_encoded_bytes() -> None:
    chart = render_bar_chart(HEIGHTS)
    png = io.BytesIO()
    Image.fromarray(chart).save(png, format="PNG")
    assert len(image_fingerprint(chart)) == SIDE * SIDE
    assert image_fingerprint(png.getvalue()) == image_fingerprint(chart)


@pytest.mark.parametrize("crop, brightness, scale", [(0.9, 1.0, 1.0), (1.0, 0.8, 1.0),
                                                     (1.0, 1.0, 0.5), (0.85, 1.15, 1.3)])
def test_near_duplicates_pass(crop: float, brightness: float, scale: float) -> None:
    photo = _photo(1)
    variant = apply_image_variant(photo, ImageVariant(crop, brightness, scale))
    assert block_difference(variant, image_fingerprint(photo)) <= MAX_BLOCK_DIFFERENCE


def test_another_photo_and_a_changed_bar_are_rejected() -> None:
    assert block_difference(_photo(2), image_fingerprint(_photo(1))) > MAX_BLOCK_DIFFERENCE
    changed = HEIGHTS.copy()
    changed[2] += 0.4
    chart = image_fingerprint(render_bar_chart(HEIGHTS))
    assert block_difference(render_bar_chart(changed), chart) > MAX_BLOCK_DIFFERENCE
    dimmed = (render_bar_chart(HEIGHTS) * 0.9).astype(np.uint8)
    assert block_difference(dimmed, chart) <= MAX_BLOCK_DIFFERENCE


def test_bad_fingerprints_and_images_are_typed_errors() -> None:
    with pytest.raises(InvalidMediaError, match="fingerprint"):
        block_difference(_photo(1), b"short")
    with pytest.raises(InvalidMediaError):
        image_fingerprint(np.zeros((4, 4), np.float32))


def test_the_edits_verifier_vetoes_another_picture_and_keeps_the_text_checks() -> None:
    chart, question = render_bar_chart(HEIGHTS), "What values does this chart show?"
    changed = HEIGHTS.copy()
    changed[0] += 0.4
    entry = SimpleNamespace(question=question, context=(), image_fingerprint=image_fingerprint(chart))
    verifier = EditVerifier()
    assert verifier(SimpleNamespace(text=question, context=(), image=chart), entry) > 0.9
    assert verifier(SimpleNamespace(text=question, context=(),
                                    image=render_bar_chart(changed)), entry) < 0.5
    assert verify_edits("Is it safe?", None, "Is it not safe?", None, query_image=chart,
                        entry_fingerprint=entry.image_fingerprint) < 0.5
    assert verify_edits(None, None, None, None, query_image=chart,
                        entry_fingerprint=entry.image_fingerprint) == 1.0


def test_the_cache_keeps_the_fingerprint_counts_it_and_vetoes_a_changed_chart() -> None:
    import mmcache

    vector = {"image": np.ones(8, np.float32)}  # every image embeds alike: only pixels differ
    cache = mmcache.TieredCache({"thresholds": {"rule": "static", "delta": {"image": 0.1},
                                                "verifier": "edits", "verifier_band": 2.0}})
    try:
        chart = render_bar_chart(HEIGHTS)
        changed = HEIGHTS.copy()
        changed[1] -= 0.4
        cache.put(mmcache.Query(image=chart, embeddings=vector, scope="t"), "four bars")
        entry = next(iter(cache.tiers[0].scan()))
        assert entry.image_fingerprint == image_fingerprint(chart)
        assert entry.size >= SIDE * SIDE
        assert cache.get(mmcache.Query(image=render_bar_chart(changed), embeddings=vector,
                                       scope="t")) is None
        dimmed = (chart * 0.9).astype(np.uint8)
        hit = cache.get(mmcache.Query(image=dimmed, embeddings=vector, scope="t"))
        assert hit is not None and hit.value == "four bars"
    finally:
        cache.close()
