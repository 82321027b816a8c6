"""The online eviction-policy protocol shared by cache tiers and trace replay.

A policy tracks *which* resident key to evict; the caller (a tier, or the replay
loop) owns the bytes and the capacity check. The calling sequence is::

    if key in policy: policy.access(key)          # hit
    elif policy.on_miss(key, size):               # miss; False = bypass (not admitted)
        while used + size > capacity:
            victim = policy.evict(); used -= sizes.pop(victim)
        policy.insert(key, size); used += size
    policy.remove(key)                             # explicit delete / TTL expiry

``hints`` carry optional per-request signals some policies use: ``next_access``
(the request index of the next access to this key, -1 for none; Belady), ``now``
(a logical or wall clock), ``cost`` (miss cost), ``entropy`` (attention entropy).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any, Hashable


class EvictionPolicy(ABC):
    """Base class of every online eviction policy."""

    #: Registry name, e.g. ``"lru"``.
    name: str = ""

    @abstractmethod
    def insert(self, key: Hashable, size: int, **hints: Any) -> None:
        """Record that ``key`` (not resident) was admitted with ``size`` bytes."""

    @abstractmethod
    def access(self, key: Hashable, **hints: Any) -> None:
        """Record a hit on resident ``key``."""

    @abstractmethod
    def evict(self) -> Hashable:
        """Choose a resident key, stop tracking it as resident and return it."""

    @abstractmethod
    def remove(self, key: Hashable) -> None:
        """Forget resident ``key`` (explicit deletion, not an eviction)."""

    def on_miss(self, key: Hashable, size: int, **hints: Any) -> bool:
        """Note a miss on ``key`` before any eviction for it; False means do not admit it.

        Ghost-list policies (ARC, S3-FIFO) adapt here; the default admits everything.
        """
        return True

    @abstractmethod
    def __contains__(self, key: Hashable) -> bool: ...

    @abstractmethod
    def __len__(self) -> int: ...
