"""GPTCache (sqlite + faiss) as a benchmark baseline, configured fairly.

GPTCache is installed only for the benchmark (``pip install -e '.[bench]'``). It is
fed the same precomputed embeddings as mmcache, through its public ``adapter.api``
get/put path, with three settings that its defaults would otherwise get wrong:

* ``max_size`` above the number of entries (the default 1000 silently evicts);
* ``auto_flush`` above the number of puts (the default rewrites the whole faiss
  index to disk every 20 puts);
* the threshold mapped onto its faiss path, which scores ``4 - ||q - e||²`` for
  unit vectors: ``cos ≥ t`` is ``similarity_threshold = (1 + t) / 2`` with
  :class:`SearchDistanceEvaluation` (cos ≥ 0.9 → 0.95).
"""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

import numpy as np

_SYNC_NAMES = {0: "OFF", 1: "NORMAL", 2: "FULL", 3: "EXTRA"}


def gptcache_threshold(cosine: float) -> float:
    """GPTCache's ``similarity_threshold`` equal to ``cos ≥ cosine`` on its faiss path."""
    return (1.0 + cosine) / 2.0


class GPTCacheBaseline:
    """A GPTCache instance over sqlite + faiss ("IDMap,Flat", L2) in ``data_dir``.

    Prompts are opaque ids; the embedding function looks their vectors up, so both
    caches compare exactly the same embeddings.
    """

    def __init__(self, data_dir: Path, dim: int, cosine_threshold: float,
                 max_entries: int) -> None:
        # deferred: GPTCache is the bench extra's baseline, not a dependency
        from gptcache import Cache, Config
        from gptcache.manager import CacheBase, VectorBase, get_data_manager
        from gptcache.processor.pre import get_prompt
        from gptcache.similarity_evaluation.distance import SearchDistanceEvaluation

        data_dir.mkdir(parents=True, exist_ok=True)
        self._vectors: dict[str, np.ndarray] = {}
        self._manager = get_data_manager(
            CacheBase("sqlite", sql_url=f"sqlite:///{data_dir / 'gptcache.db'}"),
            VectorBase("faiss", dimension=dim, index_path=str(data_dir / "faiss.index")),
            max_size=max_entries + 1)
        self._cache = Cache()
        self._cache.init(
            pre_embedding_func=get_prompt,
            embedding_func=self._embed,
            data_manager=self._manager,
            similarity_evaluation=SearchDistanceEvaluation(),
            config=Config(similarity_threshold=gptcache_threshold(cosine_threshold),
                          auto_flush=max_entries + 1))

    def _embed(self, prompt: str, **_: object) -> np.ndarray:
        return self._vectors[prompt]

    def load(self, prompts: Sequence[str], answers: Sequence[str],
             vectors: np.ndarray) -> None:
        """Bulk-insert entries through GPTCache's own ``import_data``."""
        self._manager.import_data(list(prompts), list(answers), list(vectors),
                                  [None] * len(prompts))

    def put(self, prompt: str, answer: str, vector: np.ndarray) -> None:
        """One put through ``gptcache.adapter.api.put``."""
        # deferred: GPTCache is the bench extra's baseline, not a dependency
        from gptcache.adapter.api import put

        self._vectors[prompt] = vector
        try:
            put(prompt, answer, cache_obj=self._cache)
        finally:
            del self._vectors[prompt]

    def get(self, prompt: str, vector: np.ndarray) -> str | None:
        """One lookup through ``gptcache.adapter.api.get``; None on a miss."""
        # deferred: GPTCache is the bench extra's baseline, not a dependency
        from gptcache.adapter.api import get

        self._vectors[prompt] = vector
        try:
            return get(prompt, cache_obj=self._cache)
        finally:
            del self._vectors[prompt]

    def sqlite_settings(self) -> str:
        """Journal mode and synchronous level of GPTCache's SQLite store (its defaults)."""
        with self._manager.s._engine.connect() as conn:
            journal = conn.exec_driver_sql("PRAGMA journal_mode").scalar()
            sync = conn.exec_driver_sql("PRAGMA synchronous").scalar()
        return f"journal_mode={journal}, synchronous={_SYNC_NAMES.get(sync, sync)}"

    def close(self) -> None:
        """Flush and close GPTCache's stores."""
        self._manager.close()
