"""L1: exact-key entries in process memory, bounded by entries and bytes."""

from __future__ import annotations

from collections import Counter
from typing import Iterator, Sequence

from mmcache.policies import EvictionPolicy
from mmcache.types import Entry
from mmcache.tiers.base import Budget, BudgetedTier, Capacity, admit_all, gone_ids, policy_hints


class MemoryTier(BudgetedTier):
    """Entries by exact key (the key already holds the scope); a policy picks victims."""

    def __init__(self, capacity: Capacity = Capacity(), policy: EvictionPolicy | str = "lru",
                 name: str = "l1") -> None:
        self.name = name
        self._budget = Budget(capacity, policy)
        self._entries: dict[str, Entry] = {}

    def put_many(self, entries: Sequence[Entry]) -> list[str]:
        victims, kept = admit_all(self._budget, entries, self.clock())
        for entry_id in gone_ids(victims, entries):
            self._drop(entry_id)
        self._store(kept)
        return victims

    def get(self, scope: str, entry_id: str) -> Entry | None:
        entry = self._entries.get(entry_id)
        if entry is None or entry.scope != scope:
            return None
        for dropped in self._budget.touch(entry_id, **policy_hints(entry, self.clock())):
            self._drop(dropped)
        return self._entries.get(entry_id)

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

    def backend(self) -> str:
        return "memory"

    def scopes(self) -> Counter[str]:
        return Counter(e.scope for e in list(self._entries.values()))

    def _store(self, entries: list[Entry]) -> None:
        """Keep admitted entries, each id once (subclasses also index them)."""
        self._entries.update((e.entry_id, e) for e in entries)

    def _drop(self, entry_id: str) -> bool:
        """Forget an entry the budget no longer holds; False if it was not here."""
        return self._entries.pop(entry_id, None) is not None
