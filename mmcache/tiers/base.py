"""The tier interface every cache tier implements, and the capacity budget they share.

A tier stores :class:`mmcache.types.Entry` objects. ``entry_id`` is the entry's
exact key, which already contains the scope hash, so two scopes never share an
id. The cache talks to tiers only through :class:`Tier`:

* ``put(entry)`` stores (or replaces) an entry and returns the ids it evicted;
* ``get(scope, entry_id)`` is the exact lookup (it counts as an access for the policy);
* ``search(scope, vectors, floors, k)`` is the semantic lookup *within one scope*
  (tiers with ``semantic = True``); it returns :class:`Candidate` s whose every
  query modality is at least ``floors[modality]`` similar, best first;
* ``delete(entry_id)``, ``evict()`` (one victim chosen by the tier's policy),
  ``capacity``/``usage()``, ``__len__``, ``scan()`` (all entries) and ``close()``.

A tier whose store other processes write too sets ``shared = True``: the cache's
penetration guard then never skips a lookup in it on the strength of its local
Bloom filter.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Iterator, Mapping

import numpy as np

from ..policies import EvictionPolicy
from ..types import Entry


@dataclass(frozen=True)
class Capacity:
    """Limits of one tier; ``None`` means unlimited in that dimension."""

    max_entries: int | None = None
    max_bytes: int | None = None

    def admits(self, size: int) -> bool:
        """Whether one entry of ``size`` bytes could ever fit in an empty tier."""
        return (self.max_entries is None or self.max_entries >= 1) and (
            self.max_bytes is None or size <= self.max_bytes)

    def exceeded(self, entries: int, nbytes: int) -> bool:
        """Whether ``entries`` entries totalling ``nbytes`` bytes break a limit."""
        return (self.max_entries is not None and entries > self.max_entries) or (
            self.max_bytes is not None and nbytes > self.max_bytes)


@dataclass(frozen=True)
class Candidate:
    """A semantic-search result: an entry id and its cosine similarity per modality."""

    entry_id: str
    similarities: Mapping[str, float] = field(default_factory=dict)

    @property
    def similarity(self) -> float:
        """The smallest per-modality similarity (the one that decides a hit)."""
        return min(self.similarities.values()) if self.similarities else 0.0


class Budget:
    """Capacity accounting plus an eviction policy: decides which ids must leave.

    The owning tier keeps the data; the budget keeps sizes and asks the policy for
    victims. ``admit`` returns the victims the tier must then drop.
    """

    def __init__(self, capacity: Capacity, policy: EvictionPolicy) -> None:
        self.capacity = capacity
        self.policy = policy
        self.sizes: dict[str, int] = {}
        self.nbytes = 0

    def admit(self, key: str, size: int) -> list[str]:
        """Account ``key`` (``size`` bytes), evicting until it fits; return the victims.

        A key already resident is re-sized in place. The caller checks
        ``capacity.admits(size)`` first.
        """
        victims: list[str] = []
        if key in self.sizes:
            self.nbytes -= self.sizes.pop(key)
            self.policy.remove(key)
        while self.sizes and self.capacity.exceeded(len(self.sizes) + 1, self.nbytes + size):
            victim = str(self.policy.evict())
            self.nbytes -= self.sizes.pop(victim)
            victims.append(victim)
        self.policy.insert(key, size)
        self.sizes[key] = size
        self.nbytes += size
        return victims

    def touch(self, key: str) -> None:
        """Record an access to resident ``key``."""
        if key in self.sizes:
            self.policy.access(key)

    def remove(self, key: str) -> bool:
        """Forget ``key``; False when it was not resident."""
        if key not in self.sizes:
            return False
        self.nbytes -= self.sizes.pop(key)
        self.policy.remove(key)
        return True

    def pick_victim(self) -> str | None:
        """Let the policy choose one resident key, forget it and return it."""
        if not self.sizes:
            return None
        victim = str(self.policy.evict())
        self.nbytes -= self.sizes.pop(victim)
        return victim


class Tier(ABC):
    """One level of the cache (memory, semantic index, SQLite, Redis, ...)."""

    #: Short name used in hits and metrics: ``"l1"``, ``"l2"``, ``"l3"``.
    name: str = ""
    #: True when the tier answers :meth:`search`.
    semantic: bool = False
    #: True when other processes write the same store (the local Bloom filter is incomplete).
    shared: bool = False

    @property
    @abstractmethod
    def capacity(self) -> Capacity:
        """The tier's limits."""

    @abstractmethod
    def usage(self) -> tuple[int, int]:
        """``(entries, bytes)`` currently held."""

    @abstractmethod
    def put(self, entry: Entry) -> list[str]:
        """Store or replace ``entry``; return the ids evicted to make room."""

    @abstractmethod
    def get(self, scope: str, entry_id: str) -> Entry | None:
        """The entry with this id in ``scope``, or None (exact lookup; counts as an access)."""

    def search(self, scope: str, vectors: Mapping[str, np.ndarray],
               floors: Mapping[str, float], k: int = 1) -> list[Candidate]:
        """Up to ``k`` entries of ``scope`` with every modality of ``vectors`` at least
        ``floors[m]`` similar, best (largest smallest similarity) first.

        ``vectors`` are L2-normalised float32. Non-semantic tiers return nothing.
        """
        return []

    @abstractmethod
    def delete(self, entry_id: str) -> bool:
        """Remove an entry; False when it was not there."""

    @abstractmethod
    def evict(self) -> str | None:
        """Evict one entry chosen by the tier's policy; return its id (None when empty)."""

    @abstractmethod
    def scan(self) -> Iterator[Entry]:
        """Every entry held (for rebuilds, inspection and tests)."""

    @abstractmethod
    def __len__(self) -> int: ...

    def __contains__(self, entry_id: str) -> bool:
        return any(e.entry_id == entry_id for e in self.scan())

    def ids(self) -> Iterator[str]:
        """Every entry id held (tiers override this when a cheaper way exists)."""
        return (e.entry_id for e in self.scan())

    def dims(self) -> dict[str, int]:
        """Embedding dimension per modality of the vectors held (empty when none)."""
        return {}

    def close(self) -> None:
        """Release files, connections and memory; the default does nothing."""
