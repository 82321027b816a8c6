"""Load-driven degradation full-modal → text-fallback → keyword-proxy (seed 001 §4.3).

A request's *level* says how it is looked up and answered:

* ``full-modal`` — every modality the query carries is encoded and must match (the default);
* ``text-fallback`` — the vision / audio encoders are off: a query that carries text is looked
  up by its text vector alone, among text-only entries, at a looser cosine threshold
  (``text_offset`` below the tier's), and a miss is answered by the text model; a query
  without text stays full-modal;
* ``keyword-proxy`` — no encoder runs and the semantic tiers are not consulted: the query is
  looked up by an exact *keyword key*. In the replay the keyword key is the intent's **topic**
  (the workload's intents come in topics of ``intents_per_topic`` siblings that share their
  content words, so the key cannot tell siblings apart: a labelled proxy of a keyword engine,
  not a real one); a miss is answered by the text model as text-fallback's is.

:class:`Degrader` chooses the level from the inference queue at the request's arrival: the
number of misses in the system (being served or waiting for one of the c FCFS servers),
compared with one documented threshold per level (:data:`DEFAULT_QUEUE_THRESHOLDS`, in
multiples of the server count).

In :class:`mmcache.TieredCache`, ``get(query, degrade="text-fallback")`` looks up
:func:`text_only` of the query (a hit needs the same modality set, so it matches text-only
entries); keyword-proxy has no key in the cache and is replay-only.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field
from typing import Mapping

from mmcache.errors import ConfigError

#: The levels, from the most faithful to the cheapest.
LEVELS: tuple[str, ...] = ("full-modal", "text-fallback", "keyword-proxy")

#: Jobs in the inference system (per server) at which each level starts (an assumption to vary:
#: text-fallback once every server has two misses in hand, keyword-proxy at four).
DEFAULT_QUEUE_THRESHOLDS: Mapping[str, float] = {"text-fallback": 2.0, "keyword-proxy": 4.0}


def check_level(level: str) -> str:
    """``level`` if it is one of :data:`LEVELS`; raises :class:`ConfigError` otherwise."""
    if level not in LEVELS:
        raise ConfigError(f"degradation level must be one of {LEVELS}, got {level!r}")
    return level


@dataclass
class Degrader:
    """Chooses a request's level from the queue length at its arrival.

    ``servers``: the inference pool's size; ``thresholds``: jobs in the system per server at
    which text-fallback and keyword-proxy start (non-decreasing). Feed it every miss's
    completion time with :meth:`observe`, ask :meth:`level` at each arrival (in time order).
    """

    servers: int
    thresholds: Mapping[str, float] = field(
        default_factory=lambda: dict(DEFAULT_QUEUE_THRESHOLDS))

    def __post_init__(self) -> None:
        self.thresholds = dict(self.thresholds)
        if isinstance(self.servers, bool) or not isinstance(self.servers, int) or \
                self.servers < 1:
            raise ConfigError(f"servers must be a positive integer, got {self.servers!r}")
        if set(self.thresholds) != set(LEVELS[1:]):
            raise ConfigError(f"thresholds needs exactly {LEVELS[1:]}, got {sorted(self.thresholds)}")
        low, high = (self.thresholds[k] for k in LEVELS[1:])
        if not 0 < low <= high:
            raise ConfigError(f"thresholds must satisfy 0 < text-fallback <= keyword-proxy, "
                              f"got {low} and {high}")
        self._finish: list[float] = []

    def observe(self, finish_ms: float) -> None:
        """A miss that leaves the inference system at ``finish_ms``."""
        heapq.heappush(self._finish, finish_ms)

    def queue_length(self, arrival_ms: float) -> int:
        """Misses still in the system (in service or waiting) at ``arrival_ms``."""
        while self._finish and self._finish[0] <= arrival_ms:
            heapq.heappop(self._finish)
        return len(self._finish)

    def level(self, arrival_ms: float) -> str:
        """The level of a request arriving at ``arrival_ms``."""
        per_server = self.queue_length(arrival_ms) / self.servers
        if per_server >= self.thresholds["keyword-proxy"]:
            return "keyword-proxy"
        if per_server >= self.thresholds["text-fallback"]:
            return "text-fallback"
        return "full-modal"
