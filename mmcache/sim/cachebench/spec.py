"""CacheBench-MM's hierarchy: tiers as data (capacity, policy, match rule, latency constants) and the
standard three-tier layouts.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from mmcache.errors import ConfigError
from mmcache.policies import make_policy
from mmcache.sim.latency import LogNormal, load_profile
from mmcache.sim.workload import MODALITY_SET_NAMES, MODALITY_SETS, modality_set_index
from mmcache.types import MODALITIES, VIDEO

#: Nominal link / device bandwidths in GB/s (assumptions, not measurements): HBM3 on-device,
#: NVLink 4 per link as seed 000 §2.3 states it, PCIe 4.0 x16 effective, NVMe SSD read,
#: SATA SSD read, 10 GbE.
BANDWIDTH_GBPS: Mapping[str, float] = {
    "hbm": 2000.0, "nvlink": 32.0, "pcie4_x16": 25.0, "nvme": 3.0, "sata_ssd": 0.5,
    "net_10g": 1.25}


MATCH_RULES = ("exact", "semantic")


#: (lookup µs, bandwidth GB/s) of a TieredCache's tiers by name (assumed, as in three_tier);
#: :func:`measured_cache_tier_costs` replaces the lookups with measured ones.
CACHE_TIER_COSTS: Mapping[str, tuple[float, float]] = {
    "l1": (2.0, BANDWIDTH_GBPS["hbm"]), "l2": (50.0, BANDWIDTH_GBPS["pcie4_x16"]),
    "l3": (100.0, BANDWIDTH_GBPS["nvme"])}


@dataclass(frozen=True)
class TierSpec:
    """One tier: name, byte capacity, eviction policy, match rule and its latency constants.

    ``lookup_us`` is the cost of consulting the tier; ``bandwidth_gbps`` the rate
    at which a hit's value reaches the requester; ``threshold`` the cosine a
    semantic match needs (ignored by exact tiers); ``modality_sets`` the names
    (:data:`~mmcache.sim.workload.MODALITY_SET_NAMES`, any order of ``+`` parts) of the modality
    sets the tier serves, None for all.
    """

    name: str
    capacity_bytes: int
    policy: str = "lru"
    match: str = "exact"
    threshold: float = 0.85
    lookup_us: float = 1.0
    bandwidth_gbps: float = BANDWIDTH_GBPS["pcie4_x16"]
    modality_sets: tuple[str, ...] | None = None

    def __post_init__(self) -> None:
        if not self.name:
            raise ConfigError("a tier needs a name")
        if self.modality_sets is not None:
            if isinstance(self.modality_sets, str):
                raise ConfigError(f"tier {self.name}: modality_sets must be a sequence of "
                                  f"names, not the string {self.modality_sets!r}")
            unknown = [n for n in self.modality_sets if not isinstance(n, str)
                       or modality_set_index(n) < 0]
            if unknown or not self.modality_sets:
                raise ConfigError(f"tier {self.name}: unknown modality sets {unknown} (or none "
                                  f"given); known: {MODALITY_SET_NAMES}")
            object.__setattr__(self, "modality_sets", tuple(
                MODALITY_SET_NAMES[modality_set_index(n)] for n in self.modality_sets))
        if isinstance(self.capacity_bytes, bool) or int(self.capacity_bytes) != \
                self.capacity_bytes or self.capacity_bytes <= 0:
            raise ConfigError(f"tier {self.name}: capacity_bytes must be a positive integer")
        if self.match not in MATCH_RULES:
            raise ConfigError(f"tier {self.name}: match must be one of {MATCH_RULES}")
        if not 0.0 < self.threshold <= 1.0:
            raise ConfigError(f"tier {self.name}: threshold must be in (0, 1]")
        if self.lookup_us < 0 or self.bandwidth_gbps <= 0:
            raise ConfigError(f"tier {self.name}: lookup_us >= 0 and bandwidth_gbps > 0")
        make_policy(self.policy, capacity=int(self.capacity_bytes))  # raises early if unknown

    def serves(self) -> np.ndarray:
        """Per :data:`~mmcache.sim.workload.MODALITY_SETS` index, whether this tier serves it."""
        if self.modality_sets is None:
            return np.ones(len(MODALITY_SETS), bool)
        return np.isin(np.arange(len(MODALITY_SETS)),
                       [modality_set_index(n) for n in self.modality_sets])


def route_video_to_last(tiers: Sequence[TierSpec]) -> tuple[TierSpec, ...]:
    """``tiers`` routed as seed 002 §3.1's ``routeByModality`` does video: clips only in the
    last (central) tier, every other modality set as before in every tier."""
    if not tiers:
        raise ConfigError("tiers must be a non-empty sequence")
    *upper, last = tiers
    return tuple(replace(t, modality_sets=tuple(
        n for n in (t.modality_sets or MODALITY_SET_NAMES) if n != VIDEO)) for t in upper) + (
        last,)


def three_tier(capacity_bytes: int, *, policy: str = "lru", threshold: float = 0.85,
               l1_share: float = 1 / 16, l2_share: float = 1 / 4) -> tuple[TierSpec, ...]:
    """The seeds' GPU → CPU → NVMe hierarchy with L3 = ``capacity_bytes`` (assumed constants).

    L1: exact match in GPU memory (2 µs lookup, HBM bandwidth); L2: semantic match
    in CPU memory over PCIe (50 µs ANN lookup); L3: exact match on NVMe (100 µs).
    """
    return (TierSpec("L1-gpu", max(1, int(capacity_bytes * l1_share)), policy, "exact",
                     lookup_us=2.0, bandwidth_gbps=BANDWIDTH_GBPS["hbm"]),
            TierSpec("L2-cpu", max(1, int(capacity_bytes * l2_share)), policy, "semantic",
                     threshold, lookup_us=50.0, bandwidth_gbps=BANDWIDTH_GBPS["pcie4_x16"]),
            TierSpec("L3-nvme", int(capacity_bytes), policy, "exact",
                     lookup_us=100.0, bandwidth_gbps=BANDWIDTH_GBPS["nvme"]))


def three_tier_cache_config(capacity_bytes: int, l3_path: str | Path, *,
                            threshold: float = 0.85, l1_share: float = 1 / 16,
                            l2_share: float = 1 / 4) -> dict[str, Any]:
    """A :class:`mmcache.TieredCache` config with :func:`three_tier`'s byte budgets: memory
    L1, exact flat FAISS L2, SQLite L3 at ``l3_path``, hit when cos >= ``threshold`` on
    every modality."""
    l1, l2, l3 = (t.capacity_bytes for t in three_tier(capacity_bytes, threshold=threshold,
                                                        l1_share=l1_share, l2_share=l2_share))
    return {"l1": {"max_entries": None, "max_bytes": l1},
            "l2": {"max_entries": None, "max_bytes": l2, "index": "flat"},
            "l3": {"backend": "sqlite", "path": str(l3_path), "max_bytes": l3},
            "thresholds": {"rule": "static", "delta": {m: 1 - threshold for m in MODALITIES}}}


def measured_cache_tier_costs(profile: Mapping[str, LogNormal] | None = None
                              ) -> tuple[dict[str, tuple[float, float]], dict[str, str]]:
    """``(costs, sources)`` for :func:`drive_cache`: each TieredCache tier's lookup µs is the
    mean of its measured stage histograms (``<tier>.exact`` plus ``<tier>.semantic`` where the
    tier has one) from ``profile`` (default: :func:`mmcache.sim.latency.load_profile`); a tier the
    profile lacks keeps :data:`CACHE_TIER_COSTS`. Bandwidths stay the nominal assumptions.
    ``sources`` says where each tier's numbers came from."""
    profile = load_profile() if profile is None else profile
    costs, sources = {}, {}
    for tier, (assumed_us, gbps) in CACHE_TIER_COSTS.items():
        stages = [s for s in (f"{tier}.exact", f"{tier}.semantic") if s in profile]
        if stages:
            costs[tier] = (1000.0 * sum(profile[s].mean_ms for s in stages), gbps)
            sources[tier] = (f"lookup: mean of measured {' + '.join(stages)} "
                             f"({profile[stages[0]].source}); bandwidth: assumed nominal")
        else:
            costs[tier] = (assumed_us, gbps)
            sources[tier] = "lookup and bandwidth: assumed nominal (not in the profile)"
    return costs, sources
