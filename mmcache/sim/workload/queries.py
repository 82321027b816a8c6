"""A workload's modality sets by index, and how its rows become queries and real vectors.

:data:`MODALITY_SETS` lists the sets a query can carry (each single modality at its
:data:`mmcache.types.MODALITIES` index, then the pairs, the triple and video: keyframes in the
image space, the track in the audio space); their names are :mod:`mmcache.types`' names
(:func:`mmcache.types.modality_set_name` of each set's channels). The order of the index is
part of every simulated result: keep it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Mapping, Sequence

import numpy as np

from mmcache.errors import InvalidEmbeddingError
from mmcache.types import CHANNELS, MODALITIES, VIDEO, Query, VideoClip, modality_set_name

if TYPE_CHECKING:
    from mmcache.encoders import EmbeddingStore, Encoder
    from mmcache.sim.workload.stream import Workload
from mmcache.datasets.variants import apply_image_variant, clip_keyframes, image_variant

#: Keys :meth:`Workload.to_trace` can key a trace by.
TRACE_KEYS = ("exact", "intent", "intent-modality")


#: The modality sets a query can carry, by index: each single modality at its
#: :data:`mmcache.types.MODALITIES` index, then the pairs, the triple and, last, a video clip
#: (:data:`VIDEO_SET`: keyframes in the image space, the track in the audio space, so its
#: tuple is the still image + audio set's).
MODALITY_SETS: tuple[tuple[str, ...], ...] = (
    ("text",), ("image",), ("audio",), ("text", "image"), ("text", "audio"), ("image", "audio"),
    ("text", "image", "audio"), ("image", "audio"))


#: The index of the video clip's modality set (an int; :data:`mmcache.types.VIDEO` is the
#: name of its keyframes' channel and of the set).
VIDEO_SET = len(MODALITY_SETS) - 1


#: The channel (:data:`mmcache.types.CHANNELS` index) of each modality of each modality set
#: (a clip's keyframes are the ``video`` channel, its track the audio channel).
SET_CHANNELS: tuple[tuple[int, ...], ...] = tuple(
    tuple(CHANNELS.index(m) for m in ms) for ms in MODALITY_SETS[:VIDEO_SET]) + (
    (CHANNELS.index(VIDEO), CHANNELS.index("audio")),)


#: Their names, :func:`mmcache.types.modality_set_name` of each set's channels (modalities
#: joined by ``+``; the clip's is ``"video"``): the keys of
#: :attr:`WorkloadConfig.multimodal_mix`.
MODALITY_SET_NAMES: tuple[str, ...] = tuple(
    modality_set_name(CHANNELS[c] for c in channels) for channels in SET_CHANNELS)


@dataclass(frozen=True, eq=False)
class RealEmbeddings:
    """Real vectors of one modality of a workload: one row per distinct input, from one encoder.

    ``rows`` maps (intent, variant) of every query carrying the modality to its input's
    row of ``vectors``; ``prompts`` are the text prompts the texts were made from (empty
    for image and audio); ``kind`` says which encoder embedded which inputs.
    """

    encoder_id: str
    kind: str
    prompts: tuple[str, ...]
    rows: Mapping[tuple[int, int], int]
    vectors: np.ndarray

    def vector(self, intent: int, variant: int) -> np.ndarray:
        """The unit vector of the text of (intent, variant)."""
        return self.vectors[self.rows[(intent, variant)]]


def first_modality(modality_set: np.ndarray) -> np.ndarray:
    """Per query, the :data:`MODALITIES` index of the first modality of its ``modality_set``."""
    return np.array([MODALITIES.index(ms[0]) for ms in MODALITY_SETS], np.int8)[modality_set]


def stream_query(workload: Workload, i: int, *, text: str | None = None,
                 image: np.ndarray | None = None, audio: np.ndarray | None = None,
                 scope: str) -> Query:
    """Query ``i`` of ``workload`` with every vector it carries and the inputs given of its
    modalities (``image`` as :func:`query_image` makes it); a video clip as a
    :class:`~mmcache.types.VideoClip` of those keyframes and the ``audio`` track (the vectors
    under ``"video"`` and ``"audio"``, so the cache files it under its own set)."""
    modality_set, intent = int(workload.modality_set[i]), int(workload.intent[i])
    embeddings = dict(zip((CHANNELS[c] for c in SET_CHANNELS[modality_set]), workload.vectors(i)))
    if modality_set == VIDEO_SET:
        clip = None if image is None or audio is None else VideoClip(image, audio)
        return Query(video=clip, embeddings=embeddings, scope=scope, ground_truth=intent)
    return Query(text=text, image=image, audio=audio, embeddings=embeddings, scope=scope,
                 ground_truth=intent)


def query_image(photo: np.ndarray, modality_set: int, variant: int) -> np.ndarray:
    """The image a query of ``modality_set`` carries of ``photo``: its ``variant``, or for a
    video clip its keyframes (:func:`clip_keyframes`)."""
    if modality_set == VIDEO_SET:
        return clip_keyframes(photo, variant)
    return apply_image_variant(photo, image_variant(variant))


#: New texts per store shard and encode call: one call spans many batches, which the text
#: encoder sorts by token length, so a batch pads to near its own longest text.
TEXT_STORE_BATCH = 2048


def encode_checked(encoder: Encoder, texts: Sequence[Any], store: EmbeddingStore | None,
                   store_batch: int = 256) -> np.ndarray:
    """Read-only ``(len(texts), encoder.dim)`` unit vectors of the inputs ``texts`` (via
    ``store`` if any, ``store_batch`` new inputs per encode call and shard); raises
    :class:`InvalidEmbeddingError` for anything else."""
    if not len(texts):
        vectors = np.zeros((0, encoder.dim), np.float32)
    else:
        raw = store.encode(encoder, texts, store_batch) if store is not None \
            else encoder.encode(texts)
        vectors = np.asarray(raw, dtype=np.float32)
        if vectors.shape != (len(texts), encoder.dim) or not np.isfinite(vectors).all() \
                or not np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-3):
            raise InvalidEmbeddingError(
                f"encoder {encoder.encoder_id!r} returned shape {vectors.shape} (or values that "
                f"are not finite unit vectors); expected ({len(texts)}, {encoder.dim}) unit rows")
    vectors.flags.writeable = False
    return vectors


def modality_set_index(name: str) -> int:
    """The :data:`MODALITY_SETS` index of ``"text+image"`` (any order) or ``"video"``; -1 if
    there is none."""
    if name.strip() == VIDEO:
        return VIDEO_SET
    parts = sorted(p.strip() for p in name.split("+"))
    return next((k for k, ms in enumerate(MODALITY_SETS[:VIDEO_SET]) if sorted(ms) == parts), -1)
