"""Value types of the public API: :class:`Query`, :class:`VideoClip`, :class:`Hit`, :class:`Entry`,
and the names of the vector channels and modality sets a cache keeps apart."""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping, Sequence

import numpy as np

#: Modalities a query may carry as raw input, each with its own encoder. A video clip
#: (:class:`VideoClip`) is keyframes (image encoder) plus its audio track (audio encoder).
MODALITIES: tuple[str, ...] = ("text", "image", "audio")
#: The vector channel of a clip's keyframes (their mean in the image encoder's space).
VIDEO = "video"
#: Every vector channel an entry may carry: the modalities, and a clip's keyframes (its track
#: is the ``audio`` channel). A clip's set (``video`` + ``audio``) is indexed apart from a
#: still image + audio, so neither ever matches the other.
CHANNELS: tuple[str, ...] = MODALITIES + (VIDEO,)

#: Sample rate every audio array must have unless the query declares another one.
AUDIO_SAMPLE_RATE = 16_000


@dataclass(frozen=True)
class VideoClip:
    """A video clip: its keyframes in order (``frames``: a list or tuple of images as
    :attr:`Query.image` takes them, or an ``N×H×W×C`` uint8 array) and its audio track
    (``audio``: as :attr:`Query.audio` takes it, at the query's ``audio_rate``)."""

    frames: Sequence[bytes | np.ndarray] | np.ndarray
    audio: np.ndarray | bytes


@dataclass(frozen=True)
class Query:
    """One cache request.

    ``text`` is a string; ``image`` is encoded image bytes (PNG/JPEG/...) or an
    ``H×W[×C]`` uint8 array; ``audio`` is a 1-D float32 array at
    ``audio_rate`` Hz (16 kHz by default). ``video`` is a :class:`VideoClip` (keyframes and
    track); a clip query may carry text, but no still ``image`` or ``audio`` (its track is
    the clip's). ``embeddings`` maps a channel (:data:`CHANNELS`) to a precomputed 1-D
    float32 vector, which the cache uses instead of its encoders: for a clip, ``"video"``
    is its keyframes' vector and ``"audio"`` its track's.
    ``scope`` is the isolation namespace (tenant, model, system-prompt hash, ...):
    required, and entries never match across scopes. ``context`` is the conversation
    before ``text`` (the last user message): ``[{"role": ..., "content": ...}, ...]``,
    oldest first; its latest turns are part of the hit decision (:mod:`mmcache.context`).
    """

    text: str | None = None
    image: bytes | np.ndarray | None = None
    audio: np.ndarray | None = None
    video: VideoClip | None = None
    embeddings: Mapping[str, np.ndarray] = field(default_factory=dict)
    scope: str | None = None
    audio_rate: int = AUDIO_SAMPLE_RATE
    ground_truth: Any = None  # optional label (e.g. intent id) used only for false-hit metrics
    context: Sequence[Mapping[str, str]] = ()

    def modalities(self) -> tuple[str, ...]:
        """The channels present in this query, as raw input or as embedding (a clip: ``video``
        and ``audio``, its track)."""
        present = {"text": self.text is not None, "image": self.image is not None,
                   "audio": self.audio is not None or self.video is not None,
                   VIDEO: self.video is not None}
        for name in self.embeddings:
            present[name] = True
        return tuple(m for m in CHANNELS if present.get(m)) + tuple(
            sorted(m for m in present if m not in CHANNELS and present[m]))


def modality_set_name(channels: Iterable[str]) -> str:
    """The name of a set of channels: its modalities joined by ``+`` (``"text+image"``), a
    clip's keyframes and track as ``video`` (``"video"``, ``"text+video"``)."""
    present = set(channels)
    if VIDEO in present:
        present.discard("audio")
    return "+".join(m for m in CHANNELS if m in present)


def modality_set_channels(name: str) -> frozenset[str]:
    """The channels of a modality set named as :func:`modality_set_name` names it (any order
    of its ``+`` parts; ``video`` brings its track); ValueError for a name of no set."""
    parts = [p.strip() for p in name.split("+")] if isinstance(name, str) else [name]
    channels = set(parts) | ({"audio"} if VIDEO in parts else set())
    if not all(p in CHANNELS for p in parts) or len(set(parts)) != len(parts) or \
            {"image", VIDEO} <= channels:
        raise ValueError(f"{name!r} names no modality set: join some of {list(MODALITIES)} with "
                         "'+', or write 'video' (a clip: keyframes and track) with or without "
                         "'text'")
    return frozenset(channels)


#: Every modality set a query can have, by name: each non-empty set of :data:`MODALITIES`,
#: and a clip with or without text.
SET_NAMES: tuple[str, ...] = tuple(
    modality_set_name(ms) for r in range(1, len(MODALITIES) + 1)
    for ms in itertools.combinations(MODALITIES, r)) + (VIDEO, f"text+{VIDEO}")


def is_clip_set(name: str) -> bool:
    """Whether the modality set called ``name`` is a video clip's (with or without text)."""
    return VIDEO in name.split("+")


def is_multimodal(name: str) -> bool:
    """Whether the modality set called ``name`` has two or more modalities (a clip has two:
    keyframes and track)."""
    return "+" in name or is_clip_set(name)


@dataclass(frozen=True)
class Hit:
    """A cache answer: the stored value, where it came from and how close it was.

    ``similarity`` is the smallest per-modality cosine similarity between the
    query and the entry (1.0 for an exact hit). ``freshness`` is ``"fresh"``,
    ``"stale-while-revalidate"`` or ``"stale-if-error"``.
    """

    value: Any
    tier: str
    similarity: float
    entry_id: str
    freshness: str = "fresh"
    similarities: Mapping[str, float] = field(default_factory=dict)
    #: The serial of the lookup that served it, in the cache that served it (for feedback).
    lookup: int | None = None


#: Per-entry signals a put may give the tiers' eviction policies (``TieredCache.put(hints=)``):
#: ``cost``, the miss cost the entry saves (e.g. seconds of inference; finite, > 0), and
#: ``entropy``, the attention entropy of its answer (finite, >= 0).
HINT_NAMES: tuple[str, ...] = ("cost", "entropy")


@dataclass
class Entry:
    """A stored entry as the tiers keep it; ``hints``: its policy signals (:data:`HINT_NAMES`)."""

    entry_id: str
    scope: str
    exact_key: str
    value: Any
    embeddings: dict[str, np.ndarray]
    size: int
    created_at: float
    expires_at: float | None = None
    ground_truth: Any = None
    hints: dict[str, float] = field(default_factory=dict)
    #: The shared store's sequence number of the write that stored this entry (None: not
    #: stored there); a private copy of another version is stale.
    version: int | None = None
    #: What the entry was asked: the query's text and its relevant conversation turns
    #: (``((role, content), ...)``, :mod:`mmcache.context`), for verifiers.
    question: str | None = None
    context: tuple[tuple[str, str], ...] = ()
    #: The unit context vector of those turns (None: no context, or no text encoder).
    context_vector: np.ndarray | None = None
    #: What the entry keeps of the query's image for verifiers
    #: (:func:`mmcache.verify.image_check.image_fingerprint`; None: no image).
    image_fingerprint: bytes | None = None
