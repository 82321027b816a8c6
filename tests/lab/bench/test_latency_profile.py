"""The latency profile's miss-inference entries time the models that run here, and say so."""

from __future__ import annotations

import pytest

from mmcache.lab import clip_training
from mmcache.lab.bench.latency_profile import audio_inference, image_inference

pytestmark = pytest.mark.slow


def test_a_speech_miss_is_a_timed_whisper_transcription():
    entry = audio_inference(3)
    assert entry["n"] == 3 and entry["median_ms"] > 0 and entry["sigma"] >= 0
    assert entry["source"].startswith("whisper:tiny.en/") and "transcription" in entry["source"]
    assert "3 clips" in entry["source"]


def test_an_image_miss_is_a_timed_clip_zero_shot_classification():
    if not (clip_training.model_dir() / "model_card.json").is_file():
        pytest.skip("the offline CLIP is not trained here (`make models`; `make figures` trains it)")
    entry = image_inference(3)
    assert entry["n"] == 3 and entry["median_ms"] > 0
    assert entry["source"].startswith("clip:") and "zero-shot classification" in entry["source"]
    assert "10 Fashion-MNIST class prompts" in entry["source"] and "3 photos" in entry["source"]
