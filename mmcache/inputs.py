"""Checking a :class:`mmcache.Query` and turning it into what the tiers need.

:func:`prepare` validates every part of a query (scope, text, image, audio, video clip,
embeddings) and computes its exact key without running any encoder; it raises a
typed :class:`~mmcache.errors.InvalidInputError` subclass naming the problem.
A clip query (``Query.video``, or an ``embeddings["video"]`` vector) is text at most plus
the clip: its keyframes (the ``video`` channel) and its track (the ``audio`` channel); a
still image or a ``Query.audio`` beside it is refused, and so is a clip without a track.
Embeddings must be 1-D float32, finite, non-zero and of the modality's expected
dimension; they come back L2-normalised. Audio is 1-D float at ``audio_rate``
(16 kHz unless declared; another declared rate is resampled) or WAV bytes, whose
header rate must be 16 kHz unless the query declares that same rate.
"""

from __future__ import annotations

import io
import math
import wave
from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import Any, Mapping

import numpy as np
from scipy.signal import resample_poly

from mmcache import keys
from mmcache.context import Turns, check_context, context_key
from mmcache.errors import (
    InvalidEmbeddingError,
    InvalidInputError,
    InvalidMediaError,
    UnknownModalityError,
)
from mmcache.types import AUDIO_SAMPLE_RATE, CHANNELS, VIDEO, Limits, Query, VideoClip, \
    modality_set_name

#: Vectors with a smaller L2 norm count as zero.
MIN_NORM = 1e-6


@dataclass
class PreparedQuery:
    """A validated query: scope, exact key, raw inputs per modality and unit vectors."""

    scope: str
    key: str
    modalities: tuple[str, ...]
    raw: dict[str, Any] = field(default_factory=dict)
    vectors: dict[str, np.ndarray] = field(default_factory=dict)
    text: str | None = None
    context: Turns = ()

    @cached_property
    def kind(self) -> str:
        """The name of the query's modality set (:func:`~mmcache.types.modality_set_name`)."""
        return modality_set_name(self.modalities)


def prepare(query: Query, dims: Mapping[str, int], limits: Limits = Limits()) -> PreparedQuery:
    """Validate ``query`` (within ``limits``) and compute its exact key; vectors hold only
    given embeddings."""
    if not isinstance(query, Query):
        raise InvalidInputError(f"expected an mmcache.Query, got {type(query).__name__}")
    scope = keys.check_scope(query.scope)
    if not isinstance(query.embeddings, Mapping):
        raise InvalidEmbeddingError("Query.embeddings must map modality names to vectors")
    for name in query.embeddings:
        if name not in CHANNELS:
            raise UnknownModalityError(f"unknown modality {name!r}; known: {list(CHANNELS)}")
    vectors = {m: unit_vector(v, m, dims.get(m)) for m, v in query.embeddings.items()}
    raw: dict[str, Any] = {}
    hashes: dict[str, str] = {}
    if query.text is not None:
        if isinstance(query.text, str) and len(query.text) > limits.text_chars:
            raise InvalidInputError(f"text has {len(query.text):,} characters; "
                                    f"limits.text_chars allows {limits.text_chars:,}")
        hashes["text"] = keys.text_key(query.text)
        raw["text"] = query.text
    if query.image is not None:
        hashes["image"] = keys.image_key(query.image, limits.image_pixels)
        raw["image"] = query.image
    if query.audio is not None:
        raw["audio"] = audio_16k(query.audio, query.audio_rate, limits)
        hashes["audio"] = keys.audio_key(raw["audio"])
    if query.video is not None:
        raw[VIDEO], raw["audio"] = clip_16k(query.video, query.audio_rate, limits)
        hashes[VIDEO] = keys.video_key(raw[VIDEO], limits.image_pixels)
        hashes["audio"] = keys.audio_key(raw["audio"])
    for m, vec in vectors.items():
        hashes.setdefault(m, "emb:" + keys.vector_key(vec))
    if not hashes:
        raise InvalidInputError("query has no text, image, audio, video or embedding")
    if VIDEO in hashes:
        check_clip_query(query, hashes)
    modalities = tuple(m for m in CHANNELS if m in hashes)
    turns = check_context(query.context)
    if sum(len(content) for _, content in turns) > limits.context_chars:
        raise InvalidInputError(f"the conversation context has over {limits.context_chars:,} "
                                "characters (limits.context_chars)")
    if turns:
        hashes["context"] = context_key(turns)
    return PreparedQuery(scope, keys.exact_key(scope, hashes), modalities, raw, vectors,
                         query.text, turns)


def clip_16k(clip: Any, rate: int = AUDIO_SAMPLE_RATE,
             limits: Limits = Limits()) -> tuple[tuple[Any, ...], np.ndarray]:
    """A clip's keyframes (decoded when they are hashed, :func:`mmcache.keys.video_key`) and its
    track as :func:`audio_16k` returns it; InvalidMediaError naming the problem otherwise."""
    if not isinstance(clip, VideoClip):
        raise InvalidMediaError(f"video must be an mmcache.VideoClip, got {type(clip).__name__}")
    frames = clip.frames
    if isinstance(frames, np.ndarray) and frames.ndim == 4:
        frames = tuple(frames)
    if not isinstance(frames, (list, tuple)):
        raise InvalidMediaError("video frames must be a list or tuple of images or an N×H×W×C "
                                f"uint8 array, got {type(frames).__name__}")
    if not frames:
        raise InvalidMediaError("video clip has no frames")
    if len(frames) > limits.video_frames:
        raise InvalidMediaError(f"video clip has {len(frames)} keyframes; limits.video_frames "
                                f"allows {limits.video_frames}")
    try:
        track = audio_16k(clip.audio, rate, limits)
    except InvalidMediaError as exc:
        raise InvalidMediaError(f"video track: {exc}") from None
    return tuple(frames), track


def check_clip_query(query: Query, hashes: Mapping[str, str]) -> None:
    """InvalidInputError unless a clip query (``hashes`` has ``video``) carries its track and
    neither a still image nor a ``Query.audio`` beside the clip."""
    if "image" in hashes:
        raise InvalidInputError("a query carries a video clip or a still image, not both")
    if query.audio is not None:
        raise InvalidInputError("a clip's track is VideoClip.audio (or embeddings['audio']), "
                                "not Query.audio")
    if "audio" not in hashes:
        raise InvalidInputError("a video clip needs its audio track (VideoClip.audio or "
                                "embeddings['audio'])")


def unit_vector(vector: Any, modality: str, dim: int | None) -> np.ndarray:
    """``vector`` L2-normalised, after checking dtype, shape, dimension and values."""
    if not isinstance(vector, np.ndarray):
        raise InvalidEmbeddingError(f"{modality} embedding must be a numpy float32 array, got "
                                    f"{type(vector).__name__}")
    if vector.dtype != np.float32:
        raise InvalidEmbeddingError(f"{modality} embedding has dtype {vector.dtype}; "
                                    "expected float32 (use .astype(np.float32))")
    if vector.ndim != 1 or vector.size == 0:
        raise InvalidEmbeddingError(f"{modality} embedding must be 1-D and non-empty, got shape "
                                    f"{vector.shape}")
    if dim is not None and vector.size != dim:
        raise InvalidEmbeddingError(f"{modality} embedding has dimension {vector.size}; this "
                                    f"cache expects {dim}")
    wide = vector.astype(np.float64)
    norm = math.sqrt(float(wide @ wide))  # what np.linalg.norm computes; NaN or ∞ stays so
    if not math.isfinite(norm):
        raise InvalidEmbeddingError(f"{modality} embedding contains NaN or infinite values")
    if norm < MIN_NORM:
        raise InvalidEmbeddingError(f"{modality} embedding has zero norm ({norm:.3g})")
    return vector / np.float32(norm)


def audio_16k(audio: Any, rate: int = AUDIO_SAMPLE_RATE, limits: Limits = Limits()) -> np.ndarray:
    """A finite, non-empty 1-D float32 signal at 16 kHz, from an array or WAV bytes, within
    ``limits`` (rate and duration)."""
    if not isinstance(rate, int) or isinstance(rate, bool) or not 0 < rate <= limits.audio_rate:
        raise InvalidMediaError(f"audio_rate must be a positive integer (Hz) up to "
                                f"limits.audio_rate={limits.audio_rate}, got {rate!r}")
    if isinstance(audio, (bytes, bytearray, memoryview)):
        samples, header_rate = _read_wav(bytes(audio))
        if header_rate != AUDIO_SAMPLE_RATE and rate != header_rate:
            raise InvalidMediaError(
                f"audio is {header_rate} Hz but the query declares {rate} Hz; pass "
                f"audio_rate={header_rate} to have it resampled to 16 kHz")
        audio, rate = samples, header_rate
    if not isinstance(audio, np.ndarray):
        raise InvalidMediaError(f"audio must be a float array or WAV bytes, got "
                                f"{type(audio).__name__}")
    if audio.dtype.kind != "f":
        raise InvalidMediaError(f"audio array must be float (float32 at 16 kHz), got {audio.dtype}")
    if audio.ndim != 1:
        raise InvalidMediaError(f"audio must be a 1-D mono signal, got shape {audio.shape}")
    if audio.size == 0:
        raise InvalidMediaError("audio is empty")
    if audio.size > limits.audio_seconds * rate:
        raise InvalidMediaError(f"audio lasts {audio.size / rate:.1f} s; limits.audio_seconds "
                                f"allows {limits.audio_seconds:g}")
    if not np.isfinite(audio).all():
        raise InvalidMediaError("audio contains NaN or infinite samples")
    signal = audio.astype(np.float32)
    if rate != AUDIO_SAMPLE_RATE:
        g = math.gcd(AUDIO_SAMPLE_RATE, rate)
        signal = resample_poly(signal, AUDIO_SAMPLE_RATE // g, rate // g).astype(np.float32)
    return signal


def _read_wav(data: bytes) -> tuple[np.ndarray, int]:
    try:
        with wave.open(io.BytesIO(data)) as wav:
            width, channels, rate = wav.getsampwidth(), wav.getnchannels(), wav.getframerate()
            frames = wav.readframes(wav.getnframes())
    except (wave.Error, EOFError, ValueError) as exc:
        raise InvalidMediaError(f"audio bytes are not a readable WAV file: {exc}") from None
    if width != 2:
        raise InvalidMediaError(f"WAV audio must be 16-bit PCM, got {8 * width}-bit")
    pcm = np.frombuffer(frames, dtype="<i2").astype(np.float32) / 32768.0
    return pcm.reshape(-1, channels).mean(axis=1), rate


def text_only(query: Query) -> Query:
    """``query`` with its text (and text embedding) alone: the text-fallback lookup.
    Raises :class:`InvalidInputError` for a query without text."""
    if "text" not in query.modalities():
        raise InvalidInputError("text-fallback needs a query with text")
    return replace(query, image=None, audio=None, video=None,
                   embeddings={m: v for m, v in query.embeddings.items() if m == "text"})
