"""Encoders for text, images and speech (offline), projection heads, embedding store.

:func:`get_encoder` resolves an encoder by name (what cache configs name):

* ``"minilm"`` (alias ``"text"``) — all-MiniLM-L6-v2 text embeddings, 384-d;
* ``"clip"`` — open_clip image embeddings (``modality="text"`` for its text side);
  the offline default is the small CLIP trained by ``make models``;
* ``"whisper"`` (alias ``"audio"``) — pooled Whisper tiny.en encoder states, 384-d;
* ``"asr-minilm"`` — speech embedded through its Whisper transcript by MiniLM, 384-d;
* ``"hashing-test"`` — the named test stand-in (never for reported results).

They are registered in :data:`ENCODERS` (a :class:`mmcache.registry.Registry`: name -> factory
of an :class:`Encoder`); ``ENCODERS.register("my-encoder", MyEncoder)`` makes
``{"encoders": {"text": "my-encoder"}}`` a valid config.

:class:`KeyframeMeanEncoder` embeds a video clip's keyframes through an image encoder.

Heavy libraries (torch, transformers, open_clip, whisper) are imported only when an encoder is built.
"""

from __future__ import annotations

from typing import Any, Callable

from mmcache.encoders.base import Encoder, HashingTestEncoder
from mmcache.encoders.clip import load_clip_encoder
from mmcache.encoders.keyframes import KeyframeMeanEncoder
from mmcache.encoders.store import EmbeddingStore
from mmcache.encoders.text import MiniLMEncoder
from mmcache.encoders.whisper import WhisperEncoder, load_whisper
from mmcache.errors import ConfigError
from mmcache.registry import Registry

__all__ = ["Encoder", "HashingTestEncoder", "KeyframeMeanEncoder", "EmbeddingStore",
           "ENCODERS", "ENCODER_NAMES", "get_encoder", "load_whisper"]


def _asr_minilm(**kw: Any) -> Encoder:
    from mmcache.encoders.asr import TranscriptEncoder  # it builds its parts with get_encoder

    return TranscriptEncoder(**kw)


#: Encoder name -> factory (called with :func:`get_encoder`'s keyword options).
ENCODERS: Registry[Callable[..., Encoder]] = Registry("encoder", {
    "minilm": MiniLMEncoder, "text": MiniLMEncoder,
    "clip": load_clip_encoder,
    "whisper": WhisperEncoder, "audio": WhisperEncoder,
    "asr-minilm": _asr_minilm,
    "hashing-test": HashingTestEncoder,
}, error=ConfigError)
_BUILT: dict[tuple, Encoder] = {}


def __getattr__(name: str) -> Any:
    if name == "ENCODER_NAMES":  # names get_encoder accepts, registered ones included
        return ENCODERS.names()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def get_encoder(name: str, **kw: Any) -> Encoder:
    """The encoder called ``name`` built with ``kw``; equal requests share one instance."""
    factory = ENCODERS.lookup(name)
    try:
        key = (name, factory, tuple(sorted(kw.items())))  # a replaced factory builds anew
        hash(key)
    except TypeError:  # unhashable options (arrays, models): build a fresh one
        return factory(**kw)
    if key not in _BUILT:
        _BUILT[key] = factory(**kw)
    return _BUILT[key]

