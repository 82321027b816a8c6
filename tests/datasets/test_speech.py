"""Speech loaders: espeak-ng (synthetic), Asterisk and LibriVox (real), WAV decoding."""

from __future__ import annotations

import io

import numpy as np
import pytest
from scipy.io import wavfile

from mmcache.datasets.speech import (asterisk_transcripts, load_asterisk_prompts, load_librivox,
                                     normalise_transcript, read_wav, speak, synthesize, to_16k)
from mmcache.errors import InvalidInputError, InvalidMediaError
from mmcache.types import AUDIO_SAMPLE_RATE


def test_synthetic_clips_are_labelled_and_16k() -> None:
    clips = speak(["a red circle on the left"], voices=("en-us+f3", "en-gb+m3"), rates=(120, 180))
    assert [c.speaker for c in clips] == ["en-us+f3", "en-gb+m3"]
    assert all(c.synthetic and "synthetic" in c.source for c in clips)
    assert all(c.audio.dtype == np.float32 and 1.0 < c.seconds < 6.0 for c in clips)
    assert clips[0].seconds > clips[1].seconds  # slower rate, longer clip
    assert not np.allclose(clips[0].audio[:8000], clips[0].audio[8000:16000])  # not all padding


def test_synthesize_rejects_empty_text() -> None:
    with pytest.raises(InvalidInputError):
        synthesize("   ")


def test_asterisk_transcripts_are_unique_speech() -> None:
    pairs = asterisk_transcripts()
    keys = [normalise_transcript(t) for _, t in pairs]
    assert len(keys) == len(set(keys)) and 450 <= len(pairs) <= 530
    assert not any(name.startswith("silence/") or "[" in text for name, text in pairs)
    clips = load_asterisk_prompts(limit=3)
    assert all(not c.synthetic and c.licence == "CC-BY-SA-3.0" for c in clips)
    assert all(c.audio.dtype == np.float32 and np.abs(c.audio).max() <= 1.0 for c in clips)


def test_asterisk_max_seconds_filters() -> None:
    assert all(c.seconds <= 1.5 for c in load_asterisk_prompts(limit=20, max_seconds=1.5))


def test_librivox_clips() -> None:
    clips = load_librivox()
    assert len(clips) == 5 and all(not c.synthetic for c in clips)
    assert clips[1].text == "he was not an ill disposed young man"


def test_resampling_keeps_duration_and_pitch() -> None:
    t = np.arange(8000) / 8000
    tone = (0.5 * np.sin(2 * np.pi * 440 * t) * 32767).astype(np.int16)
    out = to_16k(tone, 8000)
    assert len(out) == AUDIO_SAMPLE_RATE
    peak_hz = np.argmax(np.abs(np.fft.rfft(out))) * AUDIO_SAMPLE_RATE / len(out)
    assert abs(peak_hz - 440) < 2


@pytest.mark.parametrize("payload", [b"", b"RIFF1234WAVEnot really", b"\x00" * 100])
def test_corrupt_wav_is_invalid_media(payload: bytes) -> None:
    with pytest.raises(InvalidMediaError):
        read_wav(payload)


def test_empty_and_nan_audio_are_invalid_media() -> None:
    buffer = io.BytesIO()
    wavfile.write(buffer, 16000, np.zeros(0, np.int16))
    with pytest.raises(InvalidMediaError):
        read_wav(buffer.getvalue())
    with pytest.raises(InvalidMediaError):
        to_16k(np.array([0.0, np.nan], np.float32), 16000)
