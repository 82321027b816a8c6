"""Exact keys: what must and must not share a key."""

from __future__ import annotations

import io
import wave

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


def test_text_key_normalises_only_what_cannot_change_the_meaning():
    assert keys.text_key("  a red dress\n") == keys.text_key("a red dress")
    assert keys.text_key("cafe\u0301") == keys.text_key("caf\u00e9")   # NFC: one character
    assert keys.text_key("a red dress") != keys.text_key("a red dresses")


@pytest.mark.parametrize("one, other", [
    ("what is 10\u00b2", "what is 102"),                    # NFKC would merge them
    ("Ｃａｆé", "Café"),                                       # full-width is other text
    ("Polish history", "polish history"),                   # case folding would merge them
    ("if x:\n    y()\nz()", "if x:\n    y()\n    z()"),     # indentation is code
    ("a  b", "a b"),
])
def test_exact_keys_keep_different_questions_apart(one, other):
    assert keys.text_key(one) != keys.text_key(other)
    assert prepare(Query(text=one, scope="s"), {}).key != prepare(Query(text=other, scope="s"),
                                                                  {}).key


@pytest.mark.parametrize("query", [
    Query(text="caf\ud800", scope="s"),
    Query(text="ok", scope="tenant-\udfff"),
    Query(text="ok", scope="s", context=[{"role": "user", "content": "x\ud83d"}]),
])
def test_lone_surrogates_are_refused_with_a_typed_error(query):
    with pytest.raises(InvalidInputError, match="surrogate"):
        prepare(query, {})


def bar_chart(second_bar: int = 32, blue: int = 200) -> np.ndarray:
    """A white 64×64 RGB chart with two bars; the second is ``second_bar`` px high, in
    ``blue``."""
    img = np.full((64, 64, 3), 255, np.uint8)
    img[64 - 30:, 10:22] = (30, 60, 200)
    img[64 - second_bar:, 36:48] = (30, 60, blue)
    return img


def test_image_key_is_the_decoded_pixels_so_lossless_reencodings_share_it():
    img = photo(0)
    assert keys.image_key(png(img)) == keys.image_key(img)
    reencoded = io.BytesIO()
    Image.open(io.BytesIO(png(img))).save(reencoded, format="PNG", compress_level=1)
    assert reencoded.getvalue() != png(img)
    assert keys.image_key(reencoded.getvalue()) == keys.image_key(img)
    chart = bar_chart()
    palette = io.BytesIO()
    Image.fromarray(chart).quantize(colors=4).save(palette, format="PNG")
    assert Image.open(palette).mode == "P"
    assert keys.image_key(palette.getvalue()) == keys.image_key(chart)


def test_image_key_changes_with_any_pixel_and_with_lossy_copies():
    chart = bar_chart()
    assert keys.image_key(bar_chart(second_bar=35)) != keys.image_key(chart)   # 3 px taller
    assert keys.image_key(bar_chart(blue=190)) != keys.image_key(chart)  # same 256-bit pHash
    one_pixel = chart.copy()
    one_pixel[40, 40, 2] -= 1                 # same 256-bit pHash
    assert keys.image_key(one_pixel) != keys.image_key(chart)
    assert keys.image_key(png(photo(0), "JPEG")) != keys.image_key(photo(0))
    assert keys.image_key(photo(1)) != keys.image_key(photo(0))


def test_image_key_includes_the_shape_and_mode_of_the_pixels():
    chart = bar_chart()
    flat = chart.reshape(64, 64 * 3)          # the same bytes as one grey 64×192 image
    assert keys.image_key(flat) != keys.image_key(chart)
    assert keys.image_key(chart.reshape(32, 128, 3)) != keys.image_key(chart)
    rgba = np.dstack([chart, np.full((64, 64), 255, np.uint8)])
    assert keys.image_key(rgba) != keys.image_key(chart)


def test_audio_key_is_the_decoded_samples():
    rng = np.random.default_rng(0)
    a = (0.1 * rng.standard_normal(16_000)).astype(np.float32)
    assert keys.audio_key(a) == keys.audio_key(a.copy())
    nudged = a.copy()
    nudged[8_000] += 1e-4                      # inaudible, and not the same recording
    assert keys.audio_key(nudged) != keys.audio_key(a)
    assert keys.audio_key(a[:-1]) != keys.audio_key(a)
    silence = np.zeros(100, np.float32)
    assert keys.audio_key(-silence) == keys.audio_key(silence)   # -0.0 is 0.0


def test_audio_key_is_taken_after_decoding_and_resampling():
    pcm = (np.random.default_rng(1).uniform(-0.5, 0.5, 8_000) * 32768).astype("<i2")
    samples = pcm.astype(np.float32) / 32768.0
    wav = io.BytesIO()
    with wave.open(wav, "wb") as out:
        out.setnchannels(1)
        out.setsampwidth(2)
        out.setframerate(16_000)
        out.writeframes(pcm.tobytes())
    as_wav = prepare(Query(audio=wav.getvalue(), scope="s"), {}).key
    assert as_wav == prepare(Query(audio=samples, scope="s"), {}).key
    at_8k = prepare(Query(audio=samples[::2], audio_rate=8_000, scope="s"), {})
    assert at_8k.key == prepare(Query(audio=at_8k.raw["audio"], scope="s"), {}).key


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
    k2 = prepare(Query(text=" hello ", embeddings={"text": v2}, scope="s"), {}).key
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
