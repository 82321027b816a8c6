"""Speech → text embedding through a transcript (the "ASR→text" rung of the baseline ladder).

Whisper transcribes each clip (greedy, temperature 0) and a text encoder embeds the
transcript, so a spoken query lands in the same space as typed text. Design notes
and BrewCLIP found this strong where learned audio projections are weak.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from mmcache.encoders.base import Encoder


class TranscriptEncoder:
    """Audio encoder = ``text_encoder(whisper.transcribe(clip))``; ``transcripts`` keeps the last ones."""

    modality = "audio"

    def __init__(self, whisper=None, text_encoder: Encoder | None = None) -> None:
        from mmcache.encoders import get_encoder  # the package imports this module lazily

        self.whisper = whisper if whisper is not None else get_encoder("whisper")
        self.text_encoder = text_encoder if text_encoder is not None else get_encoder("minilm")
        self.dim = self.text_encoder.dim
        self.encoder_id = f"asr[{self.whisper.model.weights_id}]->{self.text_encoder.encoder_id}"
        self.transcripts: list[str] = []

    def encode(self, inputs: Sequence[np.ndarray]) -> np.ndarray:
        """``(n, dim)`` unit vectors of the transcripts of ``n`` 16 kHz clips."""
        self.transcripts = [self.whisper.transcribe(clip) for clip in inputs]
        return self.text_encoder.encode(self.transcripts)
