"""L2: entries in memory plus one FAISS index per (scope, modality) for δ-neighbour search.

How to choose the index (``CacheConfig.l2``; see :mod:`mmcache.tiers.vectors`):
``{"index": "flat"}`` is exact inner-product search at every size (the benchmark's
"exact flat"); the default ``{"index": "auto"}`` is exact below ``ann_min_size``
vectors per index and ``ann_factory`` (``"HNSW32"``, ``ef_search`` 128) above.
"""

from __future__ import annotations

from typing import Iterator, Mapping

import numpy as np

from ..policies import EvictionPolicy, make_policy
from ..types import Entry
from .base import Budget, Candidate, Capacity, Tier
from .vectors import IndexSpec, SemanticIndex


class SemanticTier(Tier):
    """In-memory entries, searchable by exact id and by per-modality cosine similarity."""

    semantic = True

    def __init__(self, capacity: Capacity = Capacity(), policy: EvictionPolicy | str = "lru",
                 spec: IndexSpec = IndexSpec(), precheck: bool = True, name: str = "l2") -> None:
        self.name = name
        self._budget = Budget(capacity, make_policy(policy) if isinstance(policy, str) else policy)
        self._entries: dict[str, Entry] = {}
        self.index = SemanticIndex(spec, precheck=precheck)

    @property
    def capacity(self) -> Capacity:
        return self._budget.capacity

    def usage(self) -> tuple[int, int]:
        return len(self._entries), self._budget.nbytes

    def put(self, entry: Entry) -> list[str]:
        victims = self._budget.admit(entry.entry_id, entry.size)
        for victim in victims:
            self._drop(victim)
        self._drop(entry.entry_id)
        if entry.entry_id in self._budget:
            self._entries[entry.entry_id] = entry
            self.index.add(entry.scope, entry.entry_id, entry.embeddings)
        return victims

    def get(self, scope: str, entry_id: str) -> Entry | None:
        entry = self._entries.get(entry_id)
        if entry is None or entry.scope != scope:
            return None
        for dropped in self._budget.touch(entry_id):
            self._drop(dropped)
        return self._entries.get(entry_id)

    def search(self, scope: str, vectors: Mapping[str, np.ndarray],
               floors: Mapping[str, float], k: int = 1) -> list[Candidate]:
        return self.index.search(scope, vectors, floors, k)

    def dims(self) -> dict[str, int]:
        return self.index.dims()

    def delete(self, entry_id: str) -> bool:
        self._budget.remove(entry_id)
        return self._drop(entry_id)

    def evict(self) -> str | None:
        victim = self._budget.pick_victim()
        if victim is not None:
            self._drop(victim)
        return victim

    def scan(self) -> Iterator[Entry]:
        return iter(list(self._entries.values()))

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, entry_id: str) -> bool:
        return entry_id in self._entries

    def close(self) -> None:
        self._entries.clear()
        self.index = SemanticIndex(self.index.spec, self.index.precheck)

    def _drop(self, entry_id: str) -> bool:
        entry = self._entries.pop(entry_id, None)
        if entry is None:
            return False
        self.index.remove(entry.scope, entry_id, tuple(entry.embeddings))
        return True
