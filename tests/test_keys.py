"""Exact fingerprints: what must and must not share a key."""

from __future__ import annotations

import io

import numpy as np
import pytest
from PIL import Image

from mmcache import keys
from mmcache.errors import InvalidInputError, MissingScopeError
from mmcache.inputs import prepare
from mmcache.types import Query


def png(array: np.ndarray, fmt: str = "PNG") -> bytes:
    buf = io.BytesIO()
    Image.fromarray(array).save(buf, format=fmt)
    return buf.getvalue()


def photo(seed: int = 0) -> np.ndarray:
    from skimage import data

    return data.astronaut() if seed == 0 else data.chelsea()


def test_text_normalisation():
    assert keys.text_key("  A  Red\tDRESS\n") == keys.text_key("a red dress")
    assert keys.text_key("Ｃａｆé") == keys.text_key("café")     # NFKC full-width
    assert keys.text_key("a red dress") != keys.text_key("a red dresses")


def hamming(a: str, b: str) -> int:
    return bin(int(a, 16) ^ int(b, 16)).count("1")


def test_image_perceptual_hash_survives_lossless_reencoding_and_is_near_for_jpeg():
    img = photo(0)
    assert keys.image_key(png(img)) == keys.image_key(img)
    assert hamming(keys.image_key(png(img, "JPEG")), keys.image_key(img)) <= 8
    assert hamming(keys.image_key(photo(1)), keys.image_key(img)) > 64


def test_audio_fingerprint_is_deterministic_and_content_sensitive():
    rng = np.random.default_rng(0)
    a = (0.1 * rng.standard_normal(16_000)).astype(np.float32)
    b = (0.1 * rng.standard_normal(16_000)).astype(np.float32)
    assert keys.audio_key(a) == keys.audio_key(a.copy())
    assert keys.audio_key(a) != keys.audio_key(b)
    assert keys.audio_key(a[:100]) != keys.audio_key(b[:100])


def test_exact_key_separates_scopes_and_modality_sets():
    fp = {"text": keys.text_key("x")}
    assert keys.exact_key("a", fp) != keys.exact_key("b", fp)
    assert keys.exact_key("a", fp) != keys.exact_key("a", {"image": fp["text"]})
    # no ambiguity from concatenation
    assert keys.exact_key("ab", {"text": "c"}) != keys.exact_key("a", {"text": "bc"})


def test_query_key_prefers_raw_content_over_embeddings():
    rng = np.random.default_rng(1)
    v1, v2 = (rng.standard_normal(8).astype(np.float32) for _ in range(2))
    k1 = prepare(Query(text="hello", embeddings={"text": v1}, scope="s"), {}).key
    k2 = prepare(Query(text="Hello", embeddings={"text": v2}, scope="s"), {}).key
    assert k1 == k2
    e1 = prepare(Query(embeddings={"text": v1}, scope="s"), {}).key
    assert e1 == prepare(Query(embeddings={"text": v1.copy()}, scope="s"), {}).key
    assert e1 != prepare(Query(embeddings={"text": v2}, scope="s"), {}).key


@pytest.mark.parametrize("scope", [None, "", "   ", 5])
def test_scope_is_required(scope):
    with pytest.raises(MissingScopeError):
        keys.check_scope(scope)


def test_empty_text_rejected():
    with pytest.raises(InvalidInputError, match="empty"):
        keys.normalise_text("\u3000 ")
