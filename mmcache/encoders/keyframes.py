"""Video clips embedded through an image encoder: one vector per clip from its keyframes."""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from mmcache.encoders.base import Encoder


class KeyframeMeanEncoder:
    """Embeds video clips, each a sequence of keyframes (images, or an ``N×H×W×C`` stack): the
    image ``encoder`` embeds every frame, the clip's vector is their renormalised mean."""

    modality = "image"

    def __init__(self, encoder: Encoder) -> None:
        self.encoder, self.dim = encoder, encoder.dim
        self.encoder_id = f"{encoder.encoder_id}/keyframe-mean-v1"

    def encode(self, clips: Sequence[Sequence[Any]]) -> np.ndarray:
        """One unit float32 vector per clip (clips may have different numbers of frames)."""
        per_frame = np.asarray(self.encoder.encode([f for clip in clips for f in clip]),
                               np.float32)
        ends = np.cumsum([len(clip) for clip in clips])
        mean = np.stack([per_frame[end - len(clip):end].mean(axis=0)
                         for clip, end in zip(clips, ends)])
        return mean / np.linalg.norm(mean, axis=1, keepdims=True)
