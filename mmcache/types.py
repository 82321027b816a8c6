"""Value types of the public API: :class:`Query`, :class:`Hit`, :class:`Entry`."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

import numpy as np

#: Modalities a query may carry. Video is represented as frames (image) + audio (in
#: CacheBench-MM a modality set of its own, :data:`mmcache.workload.VIDEO`).
MODALITIES: tuple[str, ...] = ("text", "image", "audio")

#: Sample rate every audio array must have unless the query declares another one.
AUDIO_SAMPLE_RATE = 16_000


@dataclass(frozen=True)
class Query:
    """One cache request.

    ``text`` is a string; ``image`` is encoded image bytes (PNG/JPEG/...) or an
    ``H×W[×C]`` uint8 array; ``audio`` is a 1-D float32 array at
    ``audio_rate`` Hz (16 kHz by default). ``embeddings`` maps a modality name to a
    precomputed 1-D float32 vector, which the cache uses instead of its encoders.
    ``scope`` is the isolation namespace (tenant, model, system-prompt hash, ...):
    required, and entries never match across scopes. ``context`` is the conversation
    before ``text`` (the last user message): ``[{"role": ..., "content": ...}, ...]``,
    oldest first; its latest turns are part of the hit decision (:mod:`mmcache.context`).
    """

    text: str | None = None
    image: bytes | np.ndarray | None = None
    audio: np.ndarray | None = None
    embeddings: Mapping[str, np.ndarray] = field(default_factory=dict)
    scope: str | None = None
    audio_rate: int = AUDIO_SAMPLE_RATE
    ground_truth: Any = None  # optional label (e.g. intent id) used only for false-hit metrics
    context: Sequence[Mapping[str, str]] = ()

    def modalities(self) -> tuple[str, ...]:
        """The modalities present in this query, as raw input or as embedding."""
        present = {"text": self.text is not None, "image": self.image is not None,
                   "audio": self.audio is not None}
        for name in self.embeddings:
            present[name] = True
        return tuple(m for m in MODALITIES if present.get(m)) + tuple(
            sorted(m for m in present if m not in MODALITIES and present[m]))


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
    #: (:func:`mmcache.image_check.image_fingerprint`; None: no image).
    image_fingerprint: bytes | None = None
