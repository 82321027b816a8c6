"""KeyframeMeanEncoder: a clip's vector is the renormalised mean of its frames' vectors."""

from __future__ import annotations

import numpy as np

from mmcache.encoders import HashingTestEncoder, KeyframeMeanEncoder


def test_clips_of_different_lengths_get_their_own_frame_means():
    image = HashingTestEncoder("image", 16)
    frames = [np.full((4, 4, 3), k, np.uint8) for k in range(5)]
    out = KeyframeMeanEncoder(image).encode([frames[:2], frames[2:], np.stack(frames[:1])])
    per_frame = image.encode(frames)
    for row, rows in zip(out, (per_frame[:2], per_frame[2:], per_frame[:1])):
        mean = rows.mean(axis=0)
        assert np.allclose(row, mean / np.linalg.norm(mean), atol=1e-6)
    assert out.dtype == np.float32 and out.shape == (3, 16)
    assert KeyframeMeanEncoder(image).encoder_id == f"{image.encoder_id}/keyframe-mean-v1"
