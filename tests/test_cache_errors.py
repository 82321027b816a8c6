"""Bad input: every case raises its typed error and leaves the cache exactly as it was."""

from __future__ import annotations

import io
import sqlite3
import struct
import wave
import zlib

import numpy as np
import pytest
from PIL import Image

import mmcache
from mmcache.errors import (ConfigError, InvalidEmbeddingError, InvalidInputError,
                            InvalidMediaError, MissingScopeError, SerializationError,
                            StorageError, UnknownModalityError)
from mmcache.lab.testing import unit
from mmcache.types import Query, VideoClip

from cache_helpers import snapshot

DIM = 16
RNG = np.random.default_rng(3)
GOOD = unit(RNG, DIM)


def wav_bytes(rate: int, seconds: float = 0.5) -> bytes:
    pcm = (np.sin(np.arange(int(rate * seconds)) * 0.05) * 10_000).astype("<i2")
    buf = io.BytesIO()
    with wave.open(buf, "wb") as w:
        w.setnchannels(1), w.setsampwidth(2), w.setframerate(rate)
        w.writeframes(pcm.tobytes())
    return buf.getvalue()


@pytest.fixture
def cache(tmp_path):
    c = mmcache.TieredCache({"l3": {"backend": "sqlite", "path": str(tmp_path / "c.db")}})
    c.put(Query(text="kept", embeddings={"text": GOOD}, scope="s"), {"v": 1})
    c.put(Query(embeddings={"image": unit(RNG, DIM)}, scope="t"), "img")
    yield c
    c.close()


def png_claiming(width: int, height: int) -> bytes:
    """A PNG whose header (with a valid checksum) claims ``width``×``height`` pixels."""
    buf = io.BytesIO()
    Image.fromarray(np.zeros((1, 1), np.uint8)).save(buf, format="PNG")
    data = bytearray(buf.getvalue())
    ihdr = bytearray(data[12:29])              # b"IHDR" and its 13 bytes
    ihdr[4:12] = struct.pack(">II", width, height)
    data[12:29] = ihdr
    data[29:33] = struct.pack(">I", zlib.crc32(bytes(ihdr)))
    return bytes(data)


BAD_QUERIES = {
    "nan embedding": (Query(embeddings={"text": np.full(DIM, np.nan, np.float32)}, scope="s"),
                      InvalidEmbeddingError),
    "inf embedding": (Query(embeddings={"text": np.r_[np.inf, np.ones(DIM - 1)].astype(np.float32)},
                            scope="s"), InvalidEmbeddingError),
    "zero-norm embedding": (Query(embeddings={"text": np.zeros(DIM, np.float32)}, scope="s"),
                            InvalidEmbeddingError),
    "wrong dimension": (Query(embeddings={"text": unit(RNG, DIM + 1)}, scope="s"),
                        InvalidEmbeddingError),
    "wrong dtype": (Query(embeddings={"text": GOOD.astype(np.float64)}, scope="s"),
                    InvalidEmbeddingError),
    "2-D embedding": (Query(embeddings={"text": GOOD[None, :]}, scope="s"), InvalidEmbeddingError),
    "list embedding": (Query(embeddings={"text": list(GOOD)}, scope="s"), InvalidEmbeddingError),
    "empty text": (Query(text="", scope="s"), InvalidInputError),
    "blank text": (Query(text=" \n\t ", scope="s"), InvalidInputError),
    "non-str text": (Query(text=42, scope="s"), InvalidInputError),
    "corrupt image bytes": (Query(image=b"\x89PNG\r\n\x1a\nnot really", scope="s"),
                            InvalidMediaError),
    "empty image bytes": (Query(image=b"", scope="s"), InvalidMediaError),
    "float image array": (Query(image=np.zeros((8, 8), np.float32), scope="s"), InvalidMediaError),
    "empty audio": (Query(audio=np.zeros(0, np.float32), scope="s"), InvalidMediaError),
    "stereo audio array": (Query(audio=np.zeros((2, 100), np.float32), scope="s"),
                           InvalidMediaError),
    "int audio array": (Query(audio=np.zeros(100, np.int16), scope="s"), InvalidMediaError),
    "nan audio": (Query(audio=np.full(100, np.nan, np.float32), scope="s"), InvalidMediaError),
    "8 kHz WAV, rate not declared": (Query(audio=wav_bytes(8000), scope="s"), InvalidMediaError),
    "corrupt WAV": (Query(audio=b"RIFF....WAVEjunk", scope="s"), InvalidMediaError),
    "bad audio rate": (Query(audio=np.ones(100, np.float32), audio_rate=0, scope="s"),
                       InvalidMediaError),
    "unknown modality": (Query(embeddings={"smell": GOOD}, scope="s"), UnknownModalityError),
    "missing scope": (Query(text="hello"), MissingScopeError),
    "empty scope": (Query(text="hello", scope=""), MissingScopeError),
    "nothing at all": (Query(scope="s"), InvalidInputError),
    "lone surrogate": (Query(text="caf\udce9", scope="s"), InvalidInputError),
    "text over the limit": (Query(text="x" * 100_001, scope="s"), InvalidInputError),
    "image array over the limit": (Query(image=np.zeros((7000, 7000), np.uint8), scope="s"),
                                   InvalidMediaError),
    "PNG header over the limit": (Query(image=png_claiming(20_000, 20_000), scope="s"),
                                  InvalidMediaError),
    "EPS image": (Query(image=b"%!PS-Adobe-3.0 EPSF-3.0\n%%BoundingBox: 0 0 8 8\n", scope="s"),
                  InvalidMediaError),
    "audio rate near 1e9 Hz": (Query(audio=np.ones(100, np.float32), audio_rate=999_999_937,
                                     scope="s"), InvalidMediaError),
    "audio over the limit": (Query(audio=np.zeros(600 * 16_000 + 1, np.float32), scope="s"),
                             InvalidMediaError),
    "context over the limit": (Query(text="hi", scope="s", context=[
        {"role": "user", "content": "x" * 100_001}]), InvalidInputError),
    "clip of too many frames": (Query(video=VideoClip(frames=[np.zeros((4, 4, 3), np.uint8)] * 257,
                                                      audio=np.ones(100, np.float32)), scope="s"),
                                InvalidMediaError),
}


@pytest.mark.parametrize("case", sorted(BAD_QUERIES))
def test_bad_query_on_put_and_get_changes_nothing(cache, case):
    query, error = BAD_QUERIES[case]
    before = snapshot(cache)
    with pytest.raises(error):
        cache.put(query, "value")
    with pytest.raises(error):
        cache.get(query)
    assert snapshot(cache) == before


def nested(depth: int) -> list:
    value: list = []
    for _ in range(depth):
        value = [value]
    return value


@pytest.mark.parametrize("value", [object(), {"a": {1, 2}}, float("nan"), [1, float("inf")],
                                   {"f": lambda: 0}, nested(100_000)])
def test_unserialisable_values_are_rejected(cache, value):
    before = snapshot(cache)
    with pytest.raises(SerializationError):
        cache.put(Query(text="new", embeddings={"text": unit(RNG, DIM)}, scope="s"), value)
    assert snapshot(cache) == before


def test_unserialisable_ground_truth_and_bad_ttl_are_rejected(cache):
    before = snapshot(cache)
    with pytest.raises(SerializationError):
        cache.put(Query(text="new", scope="s", ground_truth=object()), "x")
    with pytest.raises(SerializationError):
        cache.put(Query(text="new", scope="s", ground_truth=nested(100_000)), "x")
    for ttl in (0, -5, float("nan"), float("inf"), "10", 1e17):
        with pytest.raises(InvalidInputError):
            cache.put(Query(text="new", scope="s"), "x", ttl=ttl)
    assert snapshot(cache) == before


def test_failing_store_leaves_memory_tiers_unchanged(cache, monkeypatch, caplog):
    before = snapshot(cache)

    def broken(entries):
        raise StorageError("disk full (simulated)")

    monkeypatch.setattr(cache.tier("l3"), "put_many", broken)
    new = Query(text="new", embeddings={"text": unit(RNG, DIM)}, scope="s")
    assert cache.put(new, "x") is None                   # degraded: not stored, counted
    assert cache.put_many([new, new], ["x", "y"]) == [None, None]
    assert cache.metrics.errors == {"l3": 2}
    assert caplog.text.count("store fails") == 1          # once per outage
    cache.config.l3.on_error = "raise"
    with pytest.raises(StorageError):
        cache.put(new, "x")
    monkeypatch.undo()
    assert snapshot(cache) == before


def test_failing_store_transaction_leaves_every_tier_and_its_policy_order_unchanged(
        tmp_path, monkeypatch):
    """The L3 write fails after its budget chose a victim: that victim stays the next one."""
    cache = mmcache.TieredCache({"l1": {"max_entries": 2}, "l2": {"max_entries": 2},
                                 "l3": {"backend": "sqlite", "path": str(tmp_path / "c.db"),
                                        "max_entries": 2}})
    for i in range(2):
        cache.put(Query(text=f"kept {i}", embeddings={"text": unit(RNG, DIM)}, scope="s"), i)
    before = snapshot(cache)

    class Broken:
        def __enter__(self):
            raise sqlite3.OperationalError("disk I/O error (simulated)")

        def __exit__(self, *exc):
            return False

    monkeypatch.setattr(cache.tier("l3").store, "_transaction", Broken)
    assert cache.put(Query(text="new", embeddings={"text": unit(RNG, DIM)}, scope="s"),
                     "x") is None
    monkeypatch.undo()
    assert snapshot(cache) == before
    cache.close()


def test_the_snapshot_sees_policy_order_guard_and_threshold_state(cache):
    before = snapshot(cache)
    cache.get(Query(text="kept", embeddings={"text": GOOD}, scope="s"))   # L1 order changes
    assert snapshot(cache) != before
    before = snapshot(cache)
    cache.guard.add("never-stored")
    assert snapshot(cache) != before
    rule = mmcache.TieredCache({"thresholds": {"rule": "percentile"}})
    before = snapshot(rule)
    rule.thresholds.observe_lookup("s", ("text",), {"text": 0.95})
    assert snapshot(rule) != before
    rule.close()


def test_bad_ann_factory_is_refused_when_the_cache_opens(tmp_path):
    """Not at the put that first fills an index to ann_min_size, after L3 committed it."""
    path = tmp_path / "bad.db"
    with pytest.raises(ConfigError, match="l2.ann_factory"):
        mmcache.TieredCache({"l2": {"ann_factory": "HNSW32,Bogus", "ann_min_size": 1},
                             "l3": {"backend": "sqlite", "path": str(path)}})
    assert not path.exists()


def test_ann_factory_unfit_for_a_new_dimension_is_refused_at_that_put():
    cache = mmcache.TieredCache({"l2": {"ann_factory": "PQ48"}})   # fits 384-d, not 512-d
    before = snapshot(cache)
    with pytest.raises(ConfigError, match="l2.ann_factory 'PQ48' .* 512-d"):
        cache.put(Query(text="x", embeddings={"text": unit(RNG, 512)}, scope="s"), "v")
    assert snapshot(cache) == before
    assert cache.put(Query(text="x", embeddings={"text": unit(RNG, 384)}, scope="s"), "v")
    cache.close()


def test_declared_non_16k_rate_is_resampled_not_rejected(cache):
    q8k = Query(audio=wav_bytes(8000), audio_rate=8000, scope="s")
    cache.put(q8k, "speech")
    assert cache.get(q8k).value == "speech"
    arr = np.sin(np.arange(4000) * 0.05).astype(np.float32)
    cache.put(Query(audio=arr, audio_rate=8000, scope="s"), "array speech")
    assert cache.get(Query(audio=arr, audio_rate=8000, scope="s")).value == "array speech"


def test_errors_are_value_errors_and_name_the_problem(cache):
    with pytest.raises(ValueError, match="dimension 17; this cache expects 16"):
        cache.get(Query(embeddings={"text": unit(RNG, DIM + 1)}, scope="s"))
    with pytest.raises(ValueError, match="dtype float64"):
        cache.get(Query(embeddings={"text": GOOD.astype(np.float64)}, scope="s"))


def test_a_value_over_the_limit_is_refused_and_the_limit_is_a_config_key(tmp_path):
    cache = mmcache.TieredCache({"limits": {"value_bytes": 100}})
    q = Query(text="big", embeddings={"text": unit(RNG, DIM)}, scope="s")
    with pytest.raises(SerializationError, match="limits.value_bytes"):
        cache.put(q, "x" * 101)
    assert cache.put(q, "x" * 100) is not None
    with pytest.raises(ConfigError, match="limits.text_chars"):
        mmcache.TieredCache({"limits": {"text_chars": 0}})
    cache.close()
