"""The online eviction-policy protocol shared by cache tiers and trace replay.

A policy tracks *which* resident key to evict; the caller (a tier, or the replay
loop) owns the bytes and the capacity check. The calling sequence is::

    if key in policy: policy.access(key)          # hit
    elif policy.on_miss(key, size):               # miss; False = bypass (not admitted)
        while used + size > capacity:
            victim = policy.evict(); used -= sizes.pop(victim)
        policy.insert(key, size); used += size
    policy.remove(key)                             # explicit delete / TTL expiry

Policies whose structure depends on the cache size (ARC, LIRS, S3-FIFO) set
``needs_capacity`` and take ``capacity`` (bytes) in their constructor. A policy that
drops resident keys by itself while handling an access, a miss or an insert (LIRS)
reports them through ``take_dropped()``; the caller frees their bytes. A policy that
ranks the incoming key among the residents (GDSF) may answer ``evict()`` with None:
the incoming key itself lost, and the caller does not insert it.

``hints`` carry optional per-request signals some policies use: ``next_access``
(the request index of the next access to this key, -1 for none; Belady), ``now``
(the request index in trace replay; seconds of the cache's clock in a
:class:`~mmcache.TieredCache` tier), ``cost`` (miss cost), ``entropy`` (attention
entropy). A TieredCache's tiers pass ``now`` on every call and the entry's ``cost`` and
``entropy`` when its put gave them (``TieredCache.put(hints=...)``).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any, Hashable


class EvictionPolicy(ABC):
    """Base class of every online eviction policy."""

    #: Registry name, e.g. ``"lru"``.
    name: str = ""
    #: Whether the constructor takes ``capacity`` (the cache size in bytes).
    needs_capacity: bool = False

    @abstractmethod
    def insert(self, key: Hashable, size: int, **hints: Any) -> None:
        """Record that ``key`` (not resident) was admitted with ``size`` bytes."""

    @abstractmethod
    def access(self, key: Hashable, **hints: Any) -> None:
        """Record a hit on resident ``key``."""

    @abstractmethod
    def evict(self) -> Hashable | None:
        """Choose a resident key, stop tracking it as resident and return it.

        None (only after ``on_miss`` said admit): the incoming key is the victim.
        """

    @abstractmethod
    def remove(self, key: Hashable) -> None:
        """Forget resident ``key`` (explicit deletion, not an eviction)."""

    def on_miss(self, key: Hashable, size: int, **hints: Any) -> bool:
        """Note a miss on ``key`` before any eviction for it; False means do not admit it.

        Ghost-list policies (ARC, S3-FIFO) adapt here; the default admits everything.
        """
        return True

    def take_dropped(self) -> list[Hashable]:
        """Keys dropped outside ``evict()`` since the last call (and forget them); default none."""
        return []

    @abstractmethod
    def __contains__(self, key: Hashable) -> bool: ...

    @abstractmethod
    def __len__(self) -> int: ...
