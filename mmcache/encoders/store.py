"""An on-disk embedding store: encode each input once per encoder.

Embeddings are keyed by the input's content hash and the encoder's ``encoder_id``
(which names the weights and options exactly), so a changed model never serves
stale vectors. Each encoder has one folder under ``data/embeddings/``; every
call that encodes something new writes one shard ``.npz`` (content hashes +
float32 vectors, no pickle), written atomically.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from mmcache.errors import InvalidEmbeddingError, InvalidInputError
from mmcache.metrics import progress_bar, progress_enabled
from mmcache.paths import DATA_DIR
from mmcache.encoders.base import Encoder

DEFAULT_ROOT = DATA_DIR / "embeddings"


def content_hash(item: Any) -> str:
    """A sha256 hex digest of an input's content (text, bytes, array, PIL image)."""
    h = hashlib.sha256()
    if isinstance(item, str):
        h.update(b"str\0" + item.encode("utf-8"))
    elif isinstance(item, (bytes, bytearray, memoryview)):
        h.update(b"bytes\0" + bytes(item))
    else:
        arr = _as_array(item)
        h.update(f"array\0{arr.dtype.str}\0{arr.shape}\0".encode())
        h.update(np.ascontiguousarray(arr).tobytes())
    return h.hexdigest()


def _as_array(item: Any) -> np.ndarray:
    try:
        arr = np.asarray(item)
    except Exception as exc:  # noqa: BLE001 - anything numpy cannot read is bad input
        raise InvalidInputError(f"cannot hash input of type {type(item).__name__}") from exc
    if arr.dtype == object:
        raise InvalidInputError(f"cannot hash input of type {type(item).__name__}")
    return arr


class EmbeddingStore:
    """Caches ``encoder.encode`` results on disk, keyed by content hash and encoder id."""

    def __init__(self, root: str | Path = DEFAULT_ROOT) -> None:
        self.root = Path(root)
        self._index: dict[str, dict[str, tuple[Path, int]]] = {}

    def encode(self, encoder: Encoder, inputs: Sequence[Any], batch_size: int = 256, *,
               progress: bool | None = None) -> np.ndarray:
        """``encoder.encode(inputs)``, reading stored vectors and encoding only new inputs.

        Encoding shows a progress bar over the new inputs, updated per batch, once it has run
        two seconds (:func:`mmcache.metrics.progress_bar`; ``progress=False`` or
        ``MMCACHE_PROGRESS=0`` silences it)."""
        progress_enabled(progress)  # a bad argument fails before any encoding
        keys = [content_hash(x) for x in inputs]
        index = self._load_index(encoder.encoder_id)
        missing = sorted({k: i for i, k in enumerate(keys) if k not in index}.values())
        if missing:
            with progress_bar(len(missing), f"encoding ({_short(encoder.encoder_id)})",
                              unit="input", progress=progress) as bar:
                for start in range(0, len(missing), batch_size):
                    chunk = missing[start:start + batch_size]
                    vectors = self._checked(encoder, encoder.encode([inputs[i] for i in chunk]),
                                            len(chunk))
                    self._write_shard(encoder.encoder_id, [keys[i] for i in chunk], vectors)
                    bar.update(len(chunk))
        return self._gather(encoder, keys, index)

    def __contains__(self, pair: tuple[str, Any]) -> bool:
        """``(encoder_id, input) in store``: whether that input's embedding is stored."""
        encoder_id, item = pair
        return content_hash(item) in self._load_index(encoder_id)

    def _folder(self, encoder_id: str) -> Path:
        return self.root / hashlib.sha256(encoder_id.encode()).hexdigest()[:16]

    def _load_index(self, encoder_id: str) -> dict[str, tuple[Path, int]]:
        if encoder_id not in self._index:
            index: dict[str, tuple[Path, int]] = {}
            for shard in sorted(self._folder(encoder_id).glob("*.npz")):
                with np.load(shard, allow_pickle=False) as data:
                    for row, key in enumerate(data["keys"]):
                        index[key.decode()] = (shard, row)
            self._index[encoder_id] = index
        return self._index[encoder_id]

    @staticmethod
    def _checked(encoder: Encoder, vectors: np.ndarray, n: int) -> np.ndarray:
        vectors = np.asarray(vectors, dtype=np.float32)
        if vectors.shape != (n, encoder.dim) or not np.isfinite(vectors).all():
            raise InvalidEmbeddingError(
                f"encoder {encoder.encoder_id!r} returned shape {vectors.shape} (or non-finite "
                f"values); expected ({n}, {encoder.dim})")
        return vectors

    def _write_shard(self, encoder_id: str, keys: list[str], vectors: np.ndarray) -> None:
        folder = self._folder(encoder_id)
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "encoder.json").write_text(json.dumps({"encoder_id": encoder_id}))
        name = hashlib.sha256("".join(keys).encode()).hexdigest()[:20] + ".npz"
        save_npz(folder / name, keys=np.array([k.encode() for k in keys], dtype="S64"),
                 vectors=vectors)
        index = self._index[encoder_id]
        for row, key in enumerate(keys):
            index[key] = (folder / name, row)

    def _gather(self, encoder: Encoder, keys: list[str],
                index: dict[str, tuple[Path, int]]) -> np.ndarray:
        out = np.empty((len(keys), encoder.dim), dtype=np.float32)
        by_shard: dict[Path, list[tuple[int, int]]] = {}
        for i, key in enumerate(keys):
            shard, row = index[key]
            by_shard.setdefault(shard, []).append((i, row))
        for shard, pairs in by_shard.items():
            with np.load(shard, allow_pickle=False) as data:
                vectors = data["vectors"]
            dst, src = zip(*pairs)
            out[list(dst)] = vectors[list(src)]
        return out


def _short(encoder_id: str, keep: int = 40) -> str:
    """An encoder id cut for a progress bar's label."""
    return encoder_id if len(encoder_id) <= keep else encoder_id[:keep - 1] + "…"


def save_npz(path: Path, **arrays: np.ndarray) -> None:
    """Write ``arrays`` to the ``.npz`` file ``path`` atomically (a reader never sees half a
    file; the folder must exist)."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".tmp")
    with os.fdopen(fd, "wb") as fh:
        np.savez(fh, **arrays)
    os.replace(tmp, path)
