"""Modality-set names: a clip's keyframes and track are one set, ``video``, not image + audio."""

from __future__ import annotations

import numpy as np
import pytest

from mmcache.types import (SET_NAMES, Query, VideoClip, is_clip_set, is_multimodal,
                           modality_set_channels, modality_set_name)


def test_names_and_channels_round_trip_for_every_set():
    for name in SET_NAMES:
        assert modality_set_name(modality_set_channels(name)) == name
    assert modality_set_channels("video") == {"video", "audio"}
    assert modality_set_channels("audio+text+video") == {"text", "video", "audio"}
    assert modality_set_name(["audio", "image"]) == "image+audio" != modality_set_name(
        ["audio", "video"])


@pytest.mark.parametrize("bad", ["image+video", "smell", "text+text", "", "Text"])
def test_names_of_no_set_are_refused(bad):
    with pytest.raises(ValueError, match="names no modality set"):
        modality_set_channels(bad)


def test_a_clip_is_multimodal_and_a_clip_set():
    assert is_multimodal("video") and is_multimodal("text+image") and not is_multimodal("audio")
    assert is_clip_set("text+video") and not is_clip_set("image+audio")


def test_a_clip_query_has_the_video_and_audio_channels():
    frames = [np.zeros((4, 4, 3), np.uint8)]
    query = Query(text="t", video=VideoClip(frames, np.zeros(10, np.float32)), scope="s")
    assert query.modalities() == ("text", "audio", "video")
