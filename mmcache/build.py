"""Build a cache's parts from its :class:`~mmcache.config.CacheConfig`: tiers, eviction
policies, the δ-neighbour rule and encoders.

``config`` is the plain schema; this module is the one place that turns it into objects,
so nothing below it (``tiers/``, ``policies/``, ``thresholds``) imports ``config``.

:func:`build_tiers` returns the enabled tiers in lookup order; the L3 backend named by
``l3.backend`` is built by :func:`make_store_tier`, which imports ``mmcache.tiers.redis``
only when ``backend: redis`` is selected and calls
``RedisTier(url=..., capacity=..., policy=..., spec=..., precheck=..., **l3.options)``.
:func:`tier_routes` says, per tier in that order, which modality sets it serves.
"""

from __future__ import annotations

import dataclasses
import importlib
import inspect
from typing import Any, Mapping

from mmcache.config import CacheConfig, SemanticTierConfig, StoreTierConfig, ThresholdConfig
from mmcache import encoders
from mmcache.encoders import Encoder
from mmcache.policies import EvictionPolicy, make_policy
from mmcache.thresholds import RULES, ThresholdRule
from mmcache.tiers import Capacity, MemoryTier, SemanticTier, SQLiteTier, Tier
from mmcache.tiers.vectors import IndexSpec
from mmcache.types import SET_NAMES, is_clip_set, modality_set_channels, modality_set_name


def build_tiers(config: CacheConfig) -> list[Tier]:
    """The enabled tiers of ``config`` in lookup order (L1, L2, L3)."""
    spec = index_spec(config.l2)
    precheck = config.guard.enabled
    tiers: list[Tier] = []
    if config.l1.enabled:
        tiers.append(MemoryTier(Capacity(config.l1.max_entries, config.l1.max_bytes),
                                tier_policy(config.l1.policy, config.l1.policy_options,
                                            config.l1.max_bytes)))
    if config.l2.enabled:
        tiers.append(SemanticTier(Capacity(config.l2.max_entries, config.l2.max_bytes),
                                  tier_policy(config.l2.policy, config.l2.policy_options,
                                              config.l2.max_bytes),
                                  spec, precheck=precheck))
    store = make_store_tier(config.l3, spec, precheck)
    if store is not None:
        tiers.append(store)
    return tiers


def tier_routes(config: CacheConfig) -> list[frozenset[str]]:
    """Per enabled tier of ``config``, in :func:`build_tiers`' order, the names of the modality
    sets it serves: its ``modality_sets`` (every set when null), and under ``route:
    video-to-last`` no clip set in any tier but the last."""
    sections = [c for c in (config.l1, config.l2) if c.enabled] + \
        ([config.l3] if config.l3.backend is not None else [])
    routes = [frozenset(SET_NAMES) if c.modality_sets is None else frozenset(
        modality_set_name(modality_set_channels(n)) for n in c.modality_sets) for c in sections]
    if config.route == "video-to-last":
        routes[:-1] = [frozenset(n for n in r if not is_clip_set(n)) for r in routes[:-1]]
    return routes


def make_store_tier(l3: StoreTierConfig, spec: IndexSpec, precheck: bool = True) -> Tier | None:
    """The persistent/remote tier ``l3`` asks for (None when ``l3.backend`` is null)."""
    if l3.backend is None:
        return None
    capacity = Capacity(l3.max_entries, l3.max_bytes)
    policy = tier_policy(l3.policy, l3.policy_options, l3.max_bytes)
    if l3.backend == "sqlite":
        return SQLiteTier(l3.path, capacity, policy, spec, synchronous=l3.synchronous,
                          shared=l3.shared, precheck=precheck, **l3.options)
    module = importlib.import_module(f".tiers.{l3.backend}", __package__)
    return module.RedisTier(url=l3.url, capacity=capacity, policy=policy, spec=spec,
                            precheck=precheck, **l3.options)


def index_spec(l2: SemanticTierConfig) -> IndexSpec:
    """The vector-index settings of a semantic tier config."""
    return IndexSpec(index=l2.index, ann_factory=l2.ann_factory, ann_min_size=l2.ann_min_size,
                     ef_search=l2.ef_search, ef_construction=l2.ef_construction,
                     candidates=l2.candidates)


def tier_policy(name: str, options: Mapping[str, Any], max_bytes: int | None) -> EvictionPolicy:
    """A tier's eviction policy from its name and ``policy_options`` (time parameters in
    seconds of the cache's clock); size-aware policies get the tier's ``max_bytes`` unless
    the options give a ``capacity``."""
    return make_policy(name, **{"capacity": max_bytes, **options})


def make_threshold(section: ThresholdConfig,
                   encoders: Mapping[str, str] | None = None) -> ThresholdRule:
    """The rule named by ``section.rule``, given the section's settings that its constructor
    takes (a registered rule names its parameters as the ``thresholds`` keys they come from)
    and, if it names ``encoders``, the config's encoder name per modality (rules with
    priors pick the (modality, encoder) channel by it)."""
    return RULES.lookup(section.rule)(**rule_settings(section, encoders))


def rule_settings(section: ThresholdConfig,
                  encoders: Mapping[str, str] | None = None) -> dict[str, Any]:
    """The ``thresholds`` settings the rule named by ``section.rule`` takes, by name."""
    accepted = inspect.signature(RULES.lookup(section.rule)).parameters
    settings = {**dataclasses.asdict(section), "encoders": dict(encoders or {})}
    return {k: v for k, v in settings.items() if k in accepted and k != "rule"}


def make_encoder(name: str) -> Encoder:
    """The encoder registered as ``name`` in :mod:`mmcache.encoders` (built on first use)."""
    return encoders.get_encoder(name)
