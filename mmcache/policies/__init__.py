"""Eviction policies as online objects, and the one registry of them.

``POLICIES`` maps a policy name to its class; ``make_policy(name, **params)``
builds one and raises :class:`mmcache.errors.UnknownPolicyError` for a name that
is not registered.
"""

from __future__ import annotations

from typing import Any

from ..errors import UnknownPolicyError
from .base import EvictionPolicy
from .fifo import FIFO
from .lru import LRU

POLICIES: dict[str, type[EvictionPolicy]] = {cls.name: cls for cls in (
    LRU, FIFO)}


def make_policy(name: str, **params: Any) -> EvictionPolicy:
    """Build the registered policy ``name`` (case-insensitive)."""
    try:
        cls = POLICIES[name.lower()]
    except (KeyError, AttributeError):
        raise UnknownPolicyError(
            f"unknown eviction policy {name!r}; choose one of {sorted(POLICIES)}") from None
    return cls(**params)


__all__ = ["POLICIES", "EvictionPolicy", "make_policy"]
