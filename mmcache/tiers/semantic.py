"""L2: entries in memory plus one FAISS index per (scope, modality set, modality) for δ-neighbour
search (see :mod:`mmcache.tiers.vectors`).

How to choose the index (``CacheConfig.l2``; see :mod:`mmcache.tiers.vectors`):
``{"index": "flat"}`` is exact inner-product search at every size (the benchmark's
"exact flat"); the default ``{"index": "auto"}`` is exact below ``ann_min_size``
vectors per index and ``ann_factory`` (``"IVF{nlist}(SQfp16),SQfp16"``, ``ef_search`` 128) above.
"""

from __future__ import annotations

from typing import Mapping

import numpy as np

from mmcache.policies import EvictionPolicy
from mmcache.types import Entry
from mmcache.tiers.base import Candidate, Capacity
from mmcache.tiers.memory import MemoryTier
from mmcache.tiers.vectors import IndexSpec, SemanticIndex


class SemanticTier(MemoryTier):
    """In-memory entries, searchable by exact id and by per-modality cosine similarity."""

    semantic = True

    def __init__(self, capacity: Capacity = Capacity(), policy: EvictionPolicy | str = "lru",
                 spec: IndexSpec = IndexSpec(), precheck: bool = True, name: str = "l2") -> None:
        super().__init__(capacity, policy, name)
        self.index = SemanticIndex(spec, precheck=precheck)
        #: Bumped by every change of the entries held (stored, dropped, closed): a search
        #: made outside the cache's lock still holds when it has not moved since.
        self.writes = 0

    def search(self, scope: str, vectors: Mapping[str, np.ndarray],
               floors: Mapping[str, float], k: int = 1) -> list[Candidate]:
        return self.index.search(scope, vectors, floors, k)

    def find(self, scope: str, vectors: Mapping[str, np.ndarray],
             floors: Mapping[str, float], k: int = 1) -> tuple[list[Candidate], bool]:
        """:meth:`search` and whether the spherical-cap pre-check skipped it; safe beside
        other threads' searches and changes, without the cache's lock
        (:meth:`SemanticIndex.find`)."""
        return self.index.find(scope, vectors, floors, k)

    def dims(self) -> dict[str, int]:
        return self.index.dims()

    def backend(self) -> str:
        spec = self.index.spec
        index = "flat" if spec.index == "flat" else \
            f"{spec.index}: {spec.ann_factory} from {spec.ann_min_size:,} vectors"
        return f"memory + faiss ({index})"

    def close(self) -> None:
        self.writes += 1
        super().close()
        self.index.close()
        self.index = SemanticIndex(self.index.spec, self.index.precheck)

    def _store(self, entries: list[Entry]) -> None:
        self.writes += 1
        super()._store(entries)
        self.index.add_many((e.scope, e.entry_id, e.embeddings) for e in entries)

    def _drop(self, entry_id: str) -> bool:
        entry = self._entries.pop(entry_id, None)
        if entry is None:
            return False
        self.writes += 1
        self.index.remove(entry.scope, entry_id, tuple(entry.embeddings))
        return True
