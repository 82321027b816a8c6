"""What the scheduler sets per window (:class:`Levers`) and what it observes (:class:`WindowStats`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping

from mmcache.errors import ConfigError, check_number
from mmcache.types import MODALITIES


# -- levers and windows --------------------------------------------------------------------
@dataclass(frozen=True, eq=False)
class Levers:
    """One setting of the cache's levers: δ offsets per modality (added to the rule's δ,
    so positive loosens), the probability ``admit`` that a miss is stored, and the names
    of tiers not probed (``skip``; replay only)."""

    delta_offset: Mapping[str, float] = field(default_factory=dict)
    admit: float = 1.0
    skip: frozenset[str] = frozenset()

    def __post_init__(self) -> None:
        unknown = set(self.delta_offset) - set(MODALITIES)
        if unknown:
            raise ConfigError(f"delta_offset names unknown modalities {sorted(unknown)}; "
                              f"known: {list(MODALITIES)}")
        for modality, offset in self.delta_offset.items():
            if not -1.0 < check_number(offset, f"delta_offset[{modality!r}]") < 1.0:
                raise ConfigError(f"delta_offset[{modality!r}] must be in (-1, 1), got {offset}")
        if not 0.0 <= check_number(self.admit, "admit") <= 1.0:
            raise ConfigError(f"admit is a probability in [0, 1], got {self.admit}")
        if isinstance(self.skip, str) or not all(isinstance(t, str) for t in self.skip):
            raise ConfigError(f"skip is a collection of tier names, got {self.skip!r}")
        object.__setattr__(self, "delta_offset", dict(self.delta_offset))
        object.__setattr__(self, "skip", frozenset(self.skip))


@dataclass(frozen=True)
class WindowStats:
    """What one window of requests measured (rates are over its requests)."""

    requests: int
    hit_rate: float
    error_rate: float
    mean_latency_ms: float
    p99_latency_ms: float
