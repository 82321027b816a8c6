"""Eviction policies as online objects, and the one registry of them.

``POLICIES`` (a :class:`mmcache.registry.Registry`) maps a policy name to its class;
``make_policy(name, capacity=..., **params)`` builds one and raises
:class:`mmcache.errors.UnknownPolicyError` for a name that is not registered (and
:class:`mmcache.errors.ConfigError` for bad parameters). Names are lower case (a lookup
lower-cases the name it is given); register your own with
``POLICIES.register("my-policy", MyPolicy)``, an :class:`EvictionPolicy` subclass, and tiers
and :func:`mmcache.sim.replay.simulate` accept its name.
"""

from __future__ import annotations

from typing import Any

from mmcache.errors import ConfigError, UnknownPolicyError
from mmcache.policies.arc import ARC, ARCPaper
from mmcache.policies.base import EvictionPolicy
from mmcache.policies.belady import Belady, BeladyBypass
from mmcache.policies.clock import Clock
from mmcache.policies.entropy_retention import EntropyRetention
from mmcache.policies.fifo import FIFO
from mmcache.policies.gdsf import GDSF
from mmcache.policies.hotness_freshness import HotnessFreshness
from mmcache.policies.lfu import LFU
from mmcache.policies.lfuda import LFUDA
from mmcache.policies.lirs import LIRS
from mmcache.policies.lru import LRU
from mmcache.policies.lruk import LRUK
from mmcache.policies.s3fifo import S3FIFO
from mmcache.policies.sieve import Sieve
from mmcache.policies.value_per_byte import ValuePerByte
from mmcache.registry import Registry

#: Policy name -> its class (a factory of the online object).
POLICIES: Registry[type[EvictionPolicy]] = Registry("eviction policy", {cls.name: cls for cls in (
    LRU, FIFO, Clock, LFU, LRUK, ARC, ARCPaper, LIRS, S3FIFO, Sieve, Belady, BeladyBypass, GDSF, LFUDA,
    HotnessFreshness, EntropyRetention, ValuePerByte)}, error=UnknownPolicyError)


def make_policy(name: str, capacity: int | None = None, **params: Any) -> EvictionPolicy:
    """Build the registered policy ``name`` (case-insensitive).

    ``capacity`` (cache size in bytes) is required by policies with ``needs_capacity``
    (ARC, ARC-paper, LIRS, S3-FIFO) and ignored by the others.
    """
    cls = POLICIES.lookup(name.lower() if isinstance(name, str) else name)
    if cls.needs_capacity:
        if capacity is None:
            raise ConfigError(f"policy {cls.name!r} needs capacity= (the cache size in bytes)")
        params["capacity"] = capacity
    try:
        return cls(**params)
    except TypeError as exc:
        raise ConfigError(f"bad parameters for policy {cls.name!r}: {exc}") from None


__all__ = ["POLICIES", "EvictionPolicy", "make_policy"]
