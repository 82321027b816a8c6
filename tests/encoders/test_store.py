"""The embedding store: encode once per (content, encoder id), never pickle."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from mmcache.encoders import HashingTestEncoder
from mmcache.encoders.store import EmbeddingStore, content_hash
from mmcache.errors import InvalidEmbeddingError, InvalidInputError


class CountingEncoder(HashingTestEncoder):
    """The hashing stand-in, counting how many inputs it was asked to encode."""

    def __init__(self, dim: int = 16) -> None:
        super().__init__("text", dim)
        self.calls: list[int] = []

    def encode(self, inputs):
        self.calls.append(len(inputs))
        return super().encode(inputs)


def test_second_pass_reads_from_disk_without_encoding(tmp_path):
    texts = [f"caption {i}" for i in range(50)]
    enc = CountingEncoder()
    first = EmbeddingStore(tmp_path).encode(enc, texts)
    assert sum(enc.calls) == 50
    second = EmbeddingStore(tmp_path).encode(enc, texts)  # a fresh process-like store object
    assert sum(enc.calls) == 50, "the encoder must not run for stored inputs"
    np.testing.assert_array_equal(first, second)
    np.testing.assert_allclose(first, enc.encode(texts), atol=0)


def test_only_new_inputs_are_encoded_and_order_is_kept(tmp_path):
    enc = CountingEncoder()
    store = EmbeddingStore(tmp_path)
    store.encode(enc, ["a", "b"])
    out = store.encode(enc, ["c", "b", "a", "c"])
    assert enc.calls == [2, 1]
    np.testing.assert_array_equal(out, enc.encode(["c", "b", "a", "c"]))


def test_encoder_id_separates_entries(tmp_path):
    store = EmbeddingStore(tmp_path)
    a, b = CountingEncoder(), CountingEncoder()
    b.encoder_id = "stand-in:other-weights"
    store.encode(a, ["x"])
    store.encode(b, ["x"])
    assert a.calls == [1] and b.calls == [1]
    assert (a.encoder_id, "x") in store and (b.encoder_id, "y") not in store


def test_shards_load_without_pickle(tmp_path):
    EmbeddingStore(tmp_path).encode(CountingEncoder(), ["x", "y"])
    shards = list(tmp_path.rglob("*.npz"))
    assert len(shards) == 1
    with np.load(shards[0], allow_pickle=False) as data:
        assert data["vectors"].dtype == np.float32 and data["vectors"].shape == (2, 16)


def test_arrays_and_bytes_are_hashed_by_content():
    a = np.arange(6, dtype=np.float32)
    assert content_hash(a) == content_hash(a.copy())
    assert content_hash(a) != content_hash(a.reshape(2, 3))
    assert content_hash(a) != content_hash(a.astype(np.float64))
    assert content_hash(b"x") != content_hash("x")
    with pytest.raises(InvalidInputError):
        content_hash(object())


def test_bad_encoder_output_is_rejected_and_nothing_stored(tmp_path):
    class Broken(CountingEncoder):
        def encode(self, inputs):
            return np.full((len(inputs), self.dim), np.nan, dtype=np.float32)

    store = EmbeddingStore(tmp_path)
    with pytest.raises(InvalidEmbeddingError):
        store.encode(Broken(), ["x"])
    assert not list(tmp_path.rglob("*.npz"))


@settings(max_examples=25, deadline=None)
@given(st.lists(st.text(min_size=1, max_size=8), max_size=12))
def test_store_equals_direct_encoding(tmp_path_factory, texts):
    enc = CountingEncoder(dim=8)
    out = EmbeddingStore(tmp_path_factory.mktemp("s")).encode(enc, texts)
    assert out.shape == (len(texts), 8)
    if texts:
        np.testing.assert_array_equal(out, enc.encode(texts))


def test_encoding_a_pool_shows_progress_per_batch_unless_silenced(tmp_path, monkeypatch, capsys):
    import mmcache.metrics

    monkeypatch.setattr(mmcache.metrics, "PROGRESS_DELAY_S", 0.0)
    monkeypatch.delenv("MMCACHE_PROGRESS", raising=False)
    texts = [f"caption {i}" for i in range(40)]
    enc = CountingEncoder()
    EmbeddingStore(tmp_path / "a").encode(enc, texts, batch_size=16)
    err = capsys.readouterr().err
    assert "encoding" in err and "40/40" in err and enc.calls == [16, 16, 8]
    EmbeddingStore(tmp_path / "a").encode(enc, texts)  # all stored: nothing to encode, no bar
    assert capsys.readouterr().err == ""
    EmbeddingStore(tmp_path / "b").encode(enc, texts, progress=False)
    monkeypatch.setenv("MMCACHE_PROGRESS", "0")
    EmbeddingStore(tmp_path / "c").encode(enc, texts)
    assert capsys.readouterr().err == ""
    with pytest.raises(InvalidInputError):
        EmbeddingStore(tmp_path / "d").encode(enc, texts, progress=1)
    assert not (tmp_path / "d").exists()
