"""The ASR→text audio encoder: Whisper transcript embedded by MiniLM."""

from __future__ import annotations

import numpy as np
import pytest

from mmcache.datasets import synthesize
from mmcache.encoders import get_encoder
from mmcache.errors import InvalidInputError


@pytest.fixture(scope="module")
def asr():
    return get_encoder("asr-minilm")


def test_spoken_and_typed_sentence_land_together(asr) -> None:
    clip = synthesize("turn on the kitchen lights", voice="en-us+f3", rate=150)
    spoken = asr.encode([clip.audio])
    typed = asr.text_encoder.encode(["turn on the kitchen lights", "what is the capital of France"])
    assert spoken.shape == (1, 384) and np.isclose(np.linalg.norm(spoken), 1.0, atol=1e-5)
    assert "kitchen" in asr.transcripts[0].lower()
    assert float(spoken[0] @ typed[0]) > 0.8 > 0.3 > float(spoken[0] @ typed[1])
    assert "whisper" in asr.encoder_id and "minilm" in asr.encoder_id


def test_empty_audio_is_rejected(asr) -> None:
    with pytest.raises(InvalidInputError):
        asr.encode([np.zeros(0, np.float32)])
