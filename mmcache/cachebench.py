"""CacheBench-MM: replay a multimodal workload through cache tiers under a latency model.

The engine (seed 002 §4.3) replays a :class:`mmcache.workload.Workload` through a
hierarchy of tiers, each a bare eviction policy from :mod:`mmcache.policies` with a
byte capacity and a match rule (``"exact"`` key or ``"semantic"``: the query's vector
of every modality it carries at cosine ≥ the tier's threshold to the same resident
entry of the same modality set; exact search over the resident vectors, read from the
workload's neighbour table wherever its cutoff covers the lookup, :class:`Replayer`). A video
clip (keyframes + audio track) is a modality set of its own, kept in its own index. A tier may
serve only some modality sets (``TierSpec.modality_sets``; :func:`route_video_to_last` is seed
002 §3.1's route, video to the central tier only): a request of another set neither consults
it nor is stored there. A lookup walks the tiers top-down; a hit is copied up into the tiers
above it that serve its set (promote on hit); a miss runs the model and writes the answer
through to every tier that serves its set (as LMCache does).

Latency of one request = lookup cost of every tier consulted + the encoder cost
(once, when a semantic tier is consulted: every modality of the query, one after
another; a clip's keyframes are :data:`~mmcache.workload.KEYFRAMES` image encodes) + on a hit, ``size / bandwidth`` of the hit tier, or on a miss the wait for
one of the :class:`LatencyModel`'s ``servers`` inference servers (FCFS, at the
request's arrival time; :class:`mmcache.latency.ServerPool`) and the model-inference
time (the slowest of the query's modalities). Each cost is drawn per request from its
distribution, seeded. Write back is off the critical path. Load: :func:`offered_load`,
:func:`at_load`, :func:`load_sweep`.

Serving features: :func:`degradation_replay` / :func:`degradation_rows` serve requests at the
degradation levels of :mod:`mmcache.degrade` (forced, or switched by the inference queue at
each arrival); :mod:`mmcache.prefetch` warms a cold replay with a PageRank prefetch;
:func:`report_prometheus` exports seed 001 §4.4's CrossModalHitRate and CacheWarmupLatencyP99.
:func:`served_summary` splits a served replay by request (e.g. video clips against the rest).

Freshness: ``replay(..., ttl_s=τ)`` gives every answer a TTL of τ seconds of workload
time from the moment the model produced it (a copy promoted up a tier keeps that
moment). A lookup that matches an expired entry drops it from the tier and searches
on, so the request misses unless a fresh entry matches; the miss writes a fresh
answer through. ``ttl_s=None`` (the default) never expires anything.

Where costs come from: :meth:`LatencyModel.measured` takes encoder and tier-lookup
times from the profile the workbench measured on this machine
(``data/latency_profile.json``, ``make latency-profile``) and model inference from
:data:`ASSUMED_INFERENCE`, a labelled assumption (no model is served here).
``LatencyModel()``, :data:`BANDWIDTH_GBPS`, :data:`CACHE_TIER_COSTS` and
:func:`three_tier`'s ``lookup_us`` are **assumed nominal values** (spec-sheet order of
magnitude), parameters to vary, never measurements.

Every :class:`Report` also carries the limits on the same stream, at the
hierarchy's total capacity (:func:`replay_limits`): a lower bound on the misses of
any exact-key cache (Belady's miss ratio beside it, a heuristic when sizes vary),
and the *oracle semantic cache* (ground-truth equivalence within a modality, as
the tiers match: any paraphrase of an intent in the query's modality hits, zero
false hits), with its lower bound and its misses under the first tier's policy and
under Belady.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace
from functools import cached_property
from pathlib import Path
from typing import Any, Collection, Iterable, Mapping, Sequence

import numpy as np

from mmcache.errors import ConfigError
from mmcache.latency import LogNormal, ServerPool, load_profile
from mmcache.neighbours import NeighbourTable, best_resident, neighbour_table
from mmcache.policies import make_policy
from mmcache.policies.admission import admit_miss
from mmcache.types import MODALITIES
from mmcache.degrade import LEVELS, Degrader, check_level
from mmcache.workload import KEYFRAMES, MODALITY_SET_NAMES, MODALITY_SETS, VIDEO, Workload, \
    modality_set_index

#: Nominal link / device bandwidths in GB/s (assumptions, not measurements): HBM3 on-device,
#: NVLink 4 per link as seed 000 §2.3 states it, PCIe 4.0 x16 effective, NVMe SSD read,
#: SATA SSD read, 10 GbE.
BANDWIDTH_GBPS: Mapping[str, float] = {
    "hbm": 2000.0, "nvlink": 32.0, "pcie4_x16": 25.0, "nvme": 3.0, "sata_ssd": 0.5,
    "net_10g": 1.25}

_TEXT = MODALITIES.index("text")
#: Keyword-proxy keys live above every exact key (exact keys are intent × sets × variants).
KEYWORD_KEY_BASE = 1 << 62

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
    (:data:`~mmcache.workload.MODALITY_SET_NAMES`, any order of ``+`` parts) of the modality
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
        """Per :data:`~mmcache.workload.MODALITY_SETS` index, whether this tier serves it."""
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
        n for n in (t.modality_sets or MODALITY_SET_NAMES) if n != "video")) for t in upper) + (
        last,)


#: Per-modality model-inference time of a miss. **An assumption, not a measurement**: no model
#: (LLM or otherwise) is served on this machine, so there is nothing to time; these log-normals
#: (medians 400 / 700 / 1000 ms, σ 0.5) are a parameter to vary (``LatencyModel.measured(
#: inference_ms=...)``), kept in the order text < image < audio of v1's assumed table.
ASSUMED_INFERENCE: Mapping[str, LogNormal] = {
    m: LogNormal(median, 0.5, "assumption: no model is served here; a parameter, not measured")
    for m, median in (("text", 400.0), ("image", 700.0), ("audio", 1000.0))}

#: Which measured profile stage times each :func:`three_tier` tier's lookup.
THREE_TIER_STAGES: Mapping[str, str] = {"L1-gpu": "l1.exact", "L2-cpu": "l2.semantic",
                                        "L3-nvme": "l3.exact"}

Cost = float | LogNormal


@dataclass(frozen=True)
class LatencyModel:
    """Costs outside the tiers' transfers: per-modality encoder and model-inference time (ms,
    each a constant or a :class:`mmcache.latency.LogNormal`), tier lookups by tier name
    (``lookup_ms``, overriding a :class:`TierSpec`'s ``lookup_us``), a pool of ``servers``
    inference servers that misses queue for (None: unbounded, no queueing), the SLA bound, and
    the seed of the per-request draws.

    ``LatencyModel()`` is v1's table of **assumed constants** with no load;
    :meth:`measured` is the measured profile of this machine with a bounded server pool.
    """

    encode_ms: Mapping[str, Cost] = field(
        default_factory=lambda: {"text": 5.0, "image": 15.0, "audio": 40.0})
    inference_ms: Mapping[str, Cost] = field(
        default_factory=lambda: {"text": 400.0, "image": 700.0, "audio": 1000.0})
    sla_ms: float = 150.0
    servers: int | None = None
    lookup_ms: Mapping[str, LogNormal] = field(default_factory=dict)
    seed: int = 0
    kind: str = "assumed constants, not measured"

    def __post_init__(self) -> None:
        for name in ("encode_ms", "inference_ms"):
            table = getattr(self, name)
            missing = set(MODALITIES) - set(table)
            if missing or min(_dist(v).median_ms for v in table.values()) < 0:
                raise ConfigError(f"{name} needs a non-negative cost for each of {MODALITIES}")
        if self.sla_ms <= 0:
            raise ConfigError("sla_ms must be positive")
        ServerPool(self.servers)  # raises for a bad pool size

    @classmethod
    def measured(cls, *, servers: int = 4, inference_ms: Mapping[str, Cost] | None = None,
                 sla_ms: float = 150.0, seed: int = 0, profile: Mapping[str, LogNormal] | None
                 = None, tier_stages: Mapping[str, str] = THREE_TIER_STAGES) -> LatencyModel:
        """The model of this machine: encoders and tier lookups from ``profile`` (default: the
        committed :func:`mmcache.latency.load_profile`), tier names mapped to profile stages by
        ``tier_stages``, inference from ``inference_ms`` (default :data:`ASSUMED_INFERENCE`)
        on ``servers`` FCFS servers."""
        profile = load_profile() if profile is None else profile
        unknown = sorted({*(f"encode.{m}" for m in MODALITIES), *tier_stages.values()}
                         - set(profile))
        if unknown:
            raise ConfigError(f"the latency profile has no entries {unknown}")
        return cls(encode_ms={m: profile[f"encode.{m}"] for m in MODALITIES},
                   inference_ms=dict(inference_ms or ASSUMED_INFERENCE), sla_ms=sla_ms,
                   servers=servers, seed=seed,
                   lookup_ms={tier: profile[stage] for tier, stage in tier_stages.items()},
                   kind="measured encoders and tier lookups (data/latency_profile.json), "
                        "inference as given (default: a labelled assumption), "
                        f"{servers} FCFS inference servers")

    def mean_inference_ms(self, modality: str) -> float:
        """Mean model-inference time of a ``modality`` miss (the policies' cost hint)."""
        return _dist(self.inference_ms[modality]).mean_ms

    def describe(self) -> dict[str, Any]:
        """Every cost with its source, JSON-ready."""
        out = asdict(self)
        for name in ("encode_ms", "inference_ms", "lookup_ms"):
            out[name] = {k: asdict(_dist(v)) for k, v in getattr(self, name).items()}
        return out


def _dist(cost: Cost) -> LogNormal:
    return cost if isinstance(cost, LogNormal) else LogNormal(float(cost), 0.0)


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


@dataclass
class Report:
    """What one replay measured (rates are over all requests unless named otherwise).

    ``hit_rate_per_modality`` is keyed by modality set (``"text"``, ``"text+image"``, ...);
    ``cross_modal_hit_rate`` is seed 001 §4.4's CrossModalHitRate, the share of multimodal
    queries (video clips included: keyframes and track) where at least two modalities hit: a
    tier serves a hit only when every modality of the query matches one entry, so it is their
    hit rate (a triple with two matching modalities and a third that does not is not served,
    and is not counted; None without multimodal queries); ``queue`` summarises the misses'
    waits for an inference server and ``waits_ms`` holds them per request.
    """

    n_req: int
    tiers: tuple[str, ...]
    hit_rate: float
    hit_rate_per_tier: dict[str, float]
    hit_rate_per_modality: dict[str, float]
    cross_modal_hit_rate: float | None
    false_hit_rate: float
    hit_precision: float
    byte_hit_rate: float
    latency_ms: dict[str, float]
    sla_ms: float
    sla_violation_rate: float
    queue: dict[str, Any]
    limits: dict[str, Any]
    provenance: dict[str, Any]
    latencies_ms: np.ndarray = field(repr=False)
    waits_ms: np.ndarray = field(repr=False)

    def as_dict(self) -> dict[str, Any]:
        """Everything but the per-request latencies and waits, JSON-ready."""
        out = asdict(self)
        out.pop("latencies_ms")
        out.pop("waits_ms")
        out["tiers"] = list(self.tiers)
        return out


#: Encoder calls per modality (columns: MODALITIES) of each modality set: one per modality it
#: carries, a video clip's image encoder once per keyframe.
_ENCODES = np.array([[ms.count(m) * (KEYFRAMES if k == VIDEO and m == "image" else 1)
                      for m in MODALITIES] for k, ms in enumerate(MODALITY_SETS)], float)


class _RequestCosts:
    """A :class:`LatencyModel`'s seeded per-request draws on one workload (encoding: the sum of
    the request's encoder calls, one after another; inference: the slowest of its
    modalities' draws; each tier's lookup) and its inference queue."""

    def __init__(self, latency: LatencyModel, workload: Workload,
                 tier_lookups: Sequence[LogNormal]) -> None:
        rng = np.random.default_rng(latency.seed)
        member = np.array([[m in ms for m in MODALITIES] for ms in MODALITY_SETS])[
            workload.modality_set]
        encode = _per_modality(latency.encode_ms, len(workload), rng)
        service = _per_modality(latency.inference_ms, len(workload), rng)
        self.encode_ms = (_ENCODES[workload.modality_set] * encode).sum(axis=1)
        self.service_ms = np.where(member, service, 0.0).max(axis=1)
        self.text_encode_ms = encode[:, _TEXT]  # the same draws, text alone (degradation)
        self.text_service_ms = service[:, _TEXT]
        n = len(workload)
        self.lookup_ms = np.array([d.sample(rng, n) for d in tier_lookups]).reshape(-1, n)
        self.arrival_ms = 1e3 * workload.time
        self.pool = ServerPool(latency.servers)
        self.wait_ms = np.zeros(n)

    def miss_ms(self, i: int, before_ms: float, service_ms: float | None = None) -> float:
        """Latency of request ``i`` missing after ``before_ms`` of lookups and encoding: it
        queues for an inference server, then is served (for ``service_ms``, by default its
        own modalities' inference time)."""
        service = self.service_ms[i] if service_ms is None else service_ms
        wait = self.pool.wait_ms(self.arrival_ms[i] + before_ms, service)
        self.wait_ms[i] = wait
        return before_ms + wait + service

    def misses_ms(self, requests: np.ndarray, before_ms: np.ndarray) -> np.ndarray:
        """:meth:`miss_ms` of each of ``requests`` in turn, with their own inference times, at
        once."""
        service = self.service_ms[requests]
        wait = self.pool.waits_ms(self.arrival_ms[requests] + before_ms, service)
        self.wait_ms[requests] = wait
        return before_ms + wait + service

    def summary(self, missed: np.ndarray, workload: Workload) -> dict[str, Any]:
        """Queueing of the misses: waits, share that waited, and the servers' utilisation (busy
        time ÷ servers × the time from the first arrival to the last arrival or completion)."""
        waits = self.wait_ms[missed]
        end = max(self.pool.last_finish_ms, float(self.arrival_ms[-1])) if len(workload) else 0
        span_ms = max(1e-9, end - float(self.arrival_ms[0])) if len(workload) else 1e-9
        busy = float(self.service_ms[missed].sum())
        servers = self.pool.servers
        return {"servers": servers,
                "mean_wait_ms": float(waits.mean()) if waits.size else 0.0,
                "p99_wait_ms": float(np.percentile(waits, 99)) if waits.size else 0.0,
                "queued_share_of_misses": float((waits > 0).mean()) if waits.size else 0.0,
                "utilisation": busy / (servers * span_ms) if servers else None}


def _per_modality(table: Mapping[str, Cost], n: int, rng: np.random.Generator) -> np.ndarray:
    """``(n, modalities)`` draws: per request, one from each modality's cost in ``table``."""
    return np.stack([_dist(table[m]).sample(rng, n) for m in MODALITIES], axis=1)


class _TableRows:
    """A :class:`mmcache.neighbours.NeighbourTable` as a replay's lookups read it: the dense key
    of each exact key, its vector tuple's row, and the arrays :func:`best_resident` searches."""

    def __init__(self, table: NeighbourTable) -> None:
        self.table = table
        self.keys: list[int] = table.keys.tolist()
        self.dense = dict(zip(self.keys, range(len(self.keys))))
        self.vid: list[int] = table.vid_of_key.tolist()
        self.arrays = (table.nb_ptr, table.nb_vid, table.nb_cos, table.members_ptr, table.members)

    def row(self, key: int) -> int:
        """The table row of exact ``key``'s vectors (-1: not a key of the table's workload)."""
        d = self.dense.get(key, -1)
        return self.vid[d] if d >= 0 else -1

    def covers(self, floors: Sequence[float]) -> bool:
        """Whether every floor is at or above the table's cutoff (and positive, so an empty
        index slot, cosine 0, never matches: nor does it in the exact search)."""
        low = min(floors)
        return low >= self.table.cutoff and low > 0


class _VectorIndex:
    """Resident vectors of one modality set in a tier (one matrix per modality, of ``dims``,
    sharing slots), searched exactly, or through a neighbour table once :meth:`attach` ed: an
    entry matches a query only as well as its worst modality does."""

    def __init__(self, dims: Sequence[int]) -> None:
        self.vecs = [np.zeros((64, d), dtype=np.float32) for d in dims]
        self.keys: list[int | None] = [None] * 64
        self.slot: dict[int, int] = {}
        self.free: list[int] = list(range(63, -1, -1))
        self.rows: _TableRows | None = None
        self.table_slot = np.zeros(0, np.int32)  # slot per dense key (-1: not resident here)
        self.foreign = 0  # resident keys the table does not hold (their lookups search exactly)

    def attach(self, rows: _TableRows, table_slot: np.ndarray) -> None:
        """Keep ``table_slot`` (one per dense key of ``rows``, -1 where not resident; a tier's
        indexes share it) in step with this index, from its resident keys on."""
        self.rows, self.table_slot = rows, table_slot
        for key, s in self.slot.items():
            self._mark(key, s)

    def _mark(self, key: int, s: int) -> None:
        """Record ``key`` at slot ``s`` (-1: removed) in the table's slots."""
        d = self.rows.dense.get(key, -1)
        if d >= 0:
            self.table_slot[d] = s
        else:
            self.foreign += 1 if s >= 0 else -1

    def add(self, key: int, vecs: Sequence[np.ndarray]) -> None:
        if not self.free:
            n = self.vecs[0].shape[0]
            self.vecs = [np.vstack([v, np.zeros_like(v)]) for v in self.vecs]
            self.keys += [None] * n
            self.free = list(range(2 * n - 1, n - 1, -1))
        s = self.free.pop()
        for mat, vec in zip(self.vecs, vecs):
            mat[s] = vec
        self.keys[s], self.slot[key] = key, s
        if self.rows is not None:
            self._mark(key, s)

    def remove(self, key: int) -> None:
        s = self.slot.pop(key)
        for mat in self.vecs:
            mat[s] = 0.0
        self.keys[s] = None
        self.free.append(s)
        if self.rows is not None:
            self._mark(key, -1)

    def best(self, vecs: Sequence[np.ndarray], floors: Sequence[float],
             row: int = -1) -> tuple[int | None, float]:
        """The entry whose smallest margin (cosine - that modality's floor) is largest, and it.

        With the query's table ``row`` (>= 0), an attached table whose cutoff covers ``floors``
        and every resident key in the table, it is the table's answer (:func:`best_resident`:
        the exact search's up to the float32 rounding of one cosine), else the exact search's."""
        if row >= 0 and self.rows is not None and not self.foreign and self.rows.covers(floors):
            d, margin = best_resident(row, np.asarray(floors, np.float32), self.table_slot,
                                      *self.rows.arrays)
            return (self.rows.keys[d] if d >= 0 else None), float(margin)
        if not self.slot:
            return None, -np.inf
        margin = self.vecs[0] @ vecs[0] - floors[0]
        for mat, vec, floor in zip(self.vecs[1:], vecs[1:], floors[1:]):
            margin = np.minimum(margin, mat @ vec - floor)
        s = int(np.argmax(margin))
        return self.keys[s], float(margin[s])


class _Tier:
    """A tier's resident entries (key → (size, intent, modality set, vectors, produced-at
    seconds)) under one policy;
    a semantic tier keeps one vector index per modality set, of its modalities' ``dims``."""

    def __init__(self, spec: TierSpec, dims: Sequence[Sequence[int]]) -> None:
        self.spec = spec
        self.policy = make_policy(spec.policy, capacity=spec.capacity_bytes)
        self.entries: dict[int, tuple[int, int, int, np.ndarray | None]] = {}
        self.used = 0
        self.index = [_VectorIndex(d) for d in dims] if spec.match == "semantic" else None

    def attach(self, rows: _TableRows) -> None:
        """Let the semantic search read the neighbour table ``rows`` where it covers a lookup."""
        if self.index is not None:
            table_slot = np.full(len(rows.keys), -1, np.int32)
            for index in self.index:
                index.attach(rows, table_slot)

    def find(self, key: int, modality: int, vec: Sequence[np.ndarray] | None,
             offset: Sequence[float] = (0.0,), fresh_after: float = -np.inf,
             row: int = -1) -> int | None:
        """The resident key this request matches (exact, or semantic: an entry of the same
        modality set whose every modality is at cosine >= the tier's threshold - that modality's
        ``offset``; ``row``: the query's neighbour-table row, -1 for none), dropping expired
        matches (produced before ``fresh_after``) until a fresh one matches or none does."""
        found = self._match(key, modality, vec, offset, row)
        while found is not None and self.entries[found][4] < fresh_after:
            self.policy.remove(found)
            self._drop([found])
            found = self._match(key, modality, vec, offset, row)
        return found

    def _match(self, key: int, modality: int, vec: Sequence[np.ndarray] | None,
               offset: Sequence[float], row: int) -> int | None:
        if key in self.entries:
            return key
        if self.index is None:
            return None
        best, margin = self.index[modality].best(
            vec, [self.spec.threshold - o for o in offset], row)
        return best if margin >= 0 else None

    def admit(self, key: int, entry: tuple, **hints: Any) -> None:
        """Access a resident key, or admit it as the policy protocol says (bypass, self-drops,
        an insert-first policy rejecting the incoming key)."""
        if key in self.entries:
            self.policy.access(key, **hints)
            self._drop(self.policy.take_dropped())
            return
        capacity = self.spec.capacity_bytes
        admit_miss(self.policy, key, entry[0], overfull=lambda size: self.used + size > capacity,
                   keep=lambda k, _: self._keep(k, entry), drop=self._drop,
                   fits=entry[0] <= capacity, free=capacity - self.used, **hints)

    def _keep(self, key: int, entry: tuple) -> None:
        self.entries[key] = entry
        self.used += entry[0]
        if self.index is not None:
            self.index[entry[2]].add(key, entry[3])

    def _drop(self, victims: Iterable) -> None:
        for victim in victims:
            old = self.entries.pop(victim)
            self.used -= old[0]
            if self.index is not None:
                self.index[old[2]].remove(victim)


class _NextUse:
    """Index of the next request for an exact key after request ``i`` (-1 for none); the
    requests of each key are found on first use (the compiled replay never asks)."""

    def __init__(self, keys: np.ndarray) -> None:
        self.keys = keys

    @cached_property
    def positions(self) -> dict[int, np.ndarray]:
        """The requests of each key, in order."""
        order = np.argsort(self.keys, kind="stable")
        sorted_keys = self.keys[order]
        cuts = np.flatnonzero(np.r_[True, sorted_keys[1:] != sorted_keys[:-1], True])
        return {int(sorted_keys[a]): order[a:b] for a, b in zip(cuts[:-1], cuts[1:])}

    def after(self, key: int, i: int) -> int:
        pos = self.positions.get(key)
        if pos is None:  # a key no request carries (a keyword-proxy key)
            return -1
        j = int(np.searchsorted(pos, i, side="right"))
        return int(pos[j]) if j < pos.shape[0] else -1


class Replayer:
    """A replay in progress: tier state that persists while requests are served one at a time.

    :func:`replay` is one uninterrupted run of it; a caller that changes settings
    between requests (e.g. :mod:`mmcache.scheduler` between windows) serves them
    itself. ``serve(i, offsets, admit, skip)`` lowers semantic tiers' cosine threshold by
    ``offsets[modality]`` (a δ offset) for each modality of this request, does not consult
    the tiers named in ``skip`` (nor pay their lookup), and on a miss stores the answer (in
    every tier) only when ``admit``. Misses queue for the model's inference servers at the
    request's arrival time (``workload.time``). ``ttl_s``: every answer's TTL in workload
    seconds (None: no expiry). ``serve(..., level=...)`` serves the request at a degradation
    level of :mod:`mmcache.degrade` (text-fallback looks up at ``text_offset`` below the
    semantic tiers' text threshold); :meth:`prefill` stores an answer without serving it.
    ``hit_key`` and ``level_served`` record, per served request, the key it hit (-1: none)
    and the index of its level in :data:`mmcache.degrade.LEVELS`.

    Semantic lookups read the workload's neighbour table (``table``, or :func:`mmcache.neighbours.
    neighbour_table` at cosine ``cutoff``, default the lowest semantic threshold, built on first
    use) wherever every floor of the lookup (threshold - offset) is at or above its cutoff, and
    search every resident vector exactly otherwise, or always with ``exact_search``.
    :meth:`serve_compiled` (and :meth:`serve_all`) serve the next requests at once through the
    compiled kernel instead, as ``serve`` would.
    """

    def __init__(self, workload: Workload, tiers: Sequence[TierSpec],
                 latency: LatencyModel | None = None, *, ttl_s: float | None = None,
                 text_offset: float = 0.05, cutoff: float | None = None,
                 exact_search: bool = False, table: NeighbourTable | None = None) -> None:
        self.latency = latency or LatencyModel()
        self.specs = tuple(tiers)
        if not self.specs or len({t.name for t in self.specs}) != len(self.specs):
            raise ConfigError("tiers must be a non-empty sequence with distinct names")
        if ttl_s is not None and not ttl_s > 0:
            raise ConfigError(f"ttl_s must be a positive number of seconds or None, got {ttl_s!r}")
        self.ttl_s = ttl_s
        self._ttl = np.inf if ttl_s is None else float(ttl_s)
        self.now_s = workload.time.tolist()
        self.workload = workload
        dims = [workload.set_dims(k) for k in range(len(MODALITY_SETS))]
        self.state = [_Tier(spec, dims) for spec in self.specs]
        self.serves = np.array([spec.serves() for spec in self.specs])  # tier × modality set
        self.modality_set = workload.modality_set.tolist()
        self.keys = workload.exact_keys().astype(np.int64)
        self.text_keys = self.keys - workload.modality_set.astype(np.int64) * \
            workload.config.n_variants  # the exact key of the query's text alone
        self.next_use = _NextUse(self.keys)
        self.topic = workload.topic.tolist()
        self.text_offset = text_offset
        self.intent, self.modality, self.size = (workload.intent.tolist(),
                                                 workload.modality.tolist(),
                                                 workload.size.tolist())
        n = len(workload)
        self.hit_tier = np.full(n, -1, dtype=np.int16)
        self.false_hit = np.zeros(n, dtype=bool)
        self.hit_key = np.full(n, -1, dtype=np.int64)
        self.level_served = np.zeros(n, dtype=np.int8)
        self.lat_ms = np.zeros(n)
        self.costs = _RequestCosts(self.latency, workload, [
            self.latency.lookup_ms.get(t.name, LogNormal(t.lookup_us / 1e3, 0.0,
                                                         f"TierSpec {t.name}.lookup_us"))
            for t in self.specs])
        self._hint = [max(self.latency.mean_inference_ms(m) for m in ms) for ms in MODALITY_SETS]
        self.cutoff = cutoff if cutoff is not None else loosest_floor(self.specs, ())
        self.exact_search = exact_search
        self._table = table
        self._rows: _TableRows | None = None
        self._kernel: Any = None  # the compiled replay's tiers (serve_compiled)

    @property
    def table(self) -> NeighbourTable:
        """The workload's neighbour table: the one given, or at ``cutoff`` (built on first
        use)."""
        if self._table is None:
            self._table = neighbour_table(self.workload, self.cutoff)
        return self._table

    def _row(self, key: int) -> int:
        """The neighbour-table row a semantic lookup of exact ``key`` reads (-1: search
        exactly); the first call attaches the table to every semantic tier."""
        if self.exact_search:
            return -1
        if self._rows is None:
            self._rows = _TableRows(self.table)
            for tier in self.state:
                tier.attach(self._rows)
        return self._rows.row(key)

    def serve(self, i: int, offsets: Mapping[str, float] | None = None,
              admit: bool = True, skip: Collection[str] = (), level: str = "full-modal") -> None:
        """Serve request ``i`` at degradation ``level`` (:mod:`mmcache.degrade`): record its hit
        tier, false hit and latency."""
        if self._kernel is not None:
            raise ConfigError("serve cannot follow serve_compiled: the tiers are the kernel's")
        key, m, encode_ms, service_ms, offsets, skip = self._degraded(i, level, offsets, skip)
        offset = [(offsets or {}).get(mod, 0.0) for mod in MODALITY_SETS[m]]
        vec, row, cost_ms, found = None, -1, 0.0, None
        for k, tier in enumerate(self.state):
            if tier.spec.name in skip or not self.serves[k, m]:
                continue
            cost_ms += self.costs.lookup_ms[k, i]
            if tier.index is not None and vec is None:
                vec, row = self._vectors(i, m), self._row(key)
                cost_ms += encode_ms
            found = tier.find(key, m, vec, offset, self.now_s[i] - self._ttl, row)
            if found is not None:
                break
        infer = self._hint[m]
        if found is None:
            self.level_served[i] = LEVELS.index(level)
            if admit:
                self._store(i, key, m, vec, level != "keyword-proxy", infer)
            self.lat_ms[i] = self.costs.miss_ms(i, cost_ms, service_ms)
            return
        entry = self.state[k].entries[found]
        hints = {"next_access": self.next_use.after(found, i), "now": i, "cost": infer}
        for tier, serves in zip(self.state[:k + 1], self.serves[:k + 1, m]):
            if serves and (entry[3] is not None or tier.index is None):  # keyword answers
                tier.admit(found, entry, **hints)  # have no vectors
        self.hit_tier[i], self.hit_key[i] = k, found
        self.level_served[i] = LEVELS.index(level)
        self.false_hit[i] = entry[1] != self.intent[i]
        self.lat_ms[i] = cost_ms + entry[0] / (self.specs[k].bandwidth_gbps * 1e6)

    def serve_all(self, table: Any = None) -> None:
        """Serve every request at full modality with no offsets, as ``serve(i)`` for each ``i`` in
        order would, through the compiled kernel (:meth:`serve_compiled`, nothing served yet).
        ``table``: this workload's :func:`mmcache.neighbours.neighbour_table` at or below every
        semantic tier's threshold, to share one across replays (default: :attr:`table`)."""
        if self._kernel is not None:
            raise ConfigError("serve_all needs a replayer that has served nothing")
        self._table = self._table if table is None else table
        self.serve_compiled(len(self.workload))

    def serve_compiled(self, stop: int, offsets: Mapping[str, float] | None = None) -> None:
        """Serve the requests from the first not yet served to ``stop`` - 1 at full modality with
        δ ``offsets``, every miss admitted, as ``serve(i, offsets)`` for each in order would,
        through the compiled kernel (:class:`mmcache.tier_kernel.TierReplay`: every tier's policy
        in :data:`mmcache.tier_kernel.KERNEL_POLICIES`, no request served by :meth:`serve`, every
        lookup's floor, threshold - offset, positive and at or above :attr:`table`'s cutoff)."""
        from mmcache.tier_kernel import KERNEL_POLICIES, TierReplay

        if self._kernel is None:
            if any(t.policy not in KERNEL_POLICIES for t in self.specs):
                raise ConfigError(f"the compiled replay serves only {KERNEL_POLICIES} tiers")
            if any(t.entries for t in self.state) or self.lat_ms.any():
                raise ConfigError("the compiled replay needs a replayer that serve has not used")
            self._kernel = TierReplay(self.table, self.workload, self.specs, self.ttl_s)
        lowest, cutoff = loosest_floor(self.specs, [offsets or {}]), self._kernel.table.cutoff
        if lowest is not None and (cutoff is None or cutoff > lowest or lowest <= 0):
            raise ConfigError(f"the neighbour table's cutoff {cutoff} is above the lowest floor "
                              f"{lowest} (or that is not positive)")
        done = slice(self._kernel.served, stop)
        self.hit_tier[done], self.hit_key[done], self.false_hit[done], hit_bytes = \
            self._kernel.serve(stop, offsets)
        self._latencies(done, hit_bytes)

    def _latencies(self, done: slice, hit_bytes: np.ndarray) -> None:
        """The latencies of requests ``done`` from their hit tier and the bytes each was served,
        summed in ``serve``'s order."""
        hit_tier, sets = self.hit_tier[done], self.workload.modality_set[done]
        cost, encoded = np.zeros(hit_tier.shape[0]), np.zeros(hit_tier.shape[0], dtype=bool)
        for k, spec in enumerate(self.specs):
            consulted = ((hit_tier < 0) | (hit_tier >= k)) & self.serves[k][sets]
            cost = np.where(consulted, cost + self.costs.lookup_ms[k, done], cost)
            if spec.match == "semantic":
                first = consulted & ~encoded
                cost = np.where(first, cost + self.costs.encode_ms[done], cost)
                encoded |= first
        hit = hit_tier >= 0
        bandwidth = np.array([t.bandwidth_gbps for t in self.specs])[np.maximum(hit_tier, 0)]
        self.lat_ms[done] = np.where(hit, cost + hit_bytes / (bandwidth * 1e6), 0.0)
        missed = np.flatnonzero(~hit)
        self.lat_ms[done.start + missed] = self.costs.misses_ms(done.start + missed, cost[missed])

    def prefill(self, i: int) -> None:
        """Store request ``i``'s answer in every tier without serving it (a prefetch / warm-up:
        its cost is paid before the measured part, not counted in any request's latency)."""
        if self._kernel is not None:
            raise ConfigError("prefill cannot follow serve_compiled: the tiers are the kernel's")
        key, m = int(self.keys[i]), self.modality_set[i]
        vec = self._vectors(i, m) if any(t.index is not None for t in self.state) else None
        self._store(i, key, m, vec, True, self._hint[m])

    def _store(self, i: int, key: int, m: int, vec: Any, semantic: bool, infer: float) -> None:
        """Admit request ``i``'s answer under ``key`` into every tier (the semantic ones only
        when ``semantic``)."""
        if semantic and vec is None and any(t.index is not None for t in self.state):
            vec = self._vectors(i, m)  # a skipped semantic tier still stores them
        entry = (self.size[i], self.intent[i], m, vec, self.now_s[i])
        hints = {"next_access": self.next_use.after(key, i), "now": i, "cost": infer}
        for tier, serves in zip(self.state, self.serves[:, m]):
            if serves and (semantic or tier.index is None):
                tier.admit(key, entry, **hints)

    def _degraded(self, i: int, level: str, offsets: Mapping[str, float] | None,
                  skip: Collection[str]) -> tuple:
        """Request ``i``'s exact key, modality set, encode and inference cost, offsets and
        skipped tiers at ``level``."""
        m = self.modality_set[i]
        if check_level(level) == "full-modal" or (
                level == "text-fallback" and "text" not in MODALITY_SETS[m]):
            return int(self.keys[i]), m, self.costs.encode_ms[i], None, offsets, skip
        text_service = self.costs.text_service_ms[i]
        if level == "text-fallback":
            offsets = {**(offsets or {})}
            offsets["text"] = offsets.get("text", 0.0) + self.text_offset
            return (int(self.text_keys[i]), 0, self.costs.text_encode_ms[i], text_service,
                    offsets, skip)
        semantic = {t.spec.name for t in self.state if t.index is not None}
        return (KEYWORD_KEY_BASE + self.topic[i], 0, 0.0, text_service, offsets,
                {*skip, *semantic})

    def _vectors(self, i: int, m: int) -> tuple[np.ndarray, ...]:
        """Request ``i``'s vectors for modality set ``m`` (its own, or its text alone)."""
        vecs = self.workload.vectors(i)
        return vecs if m == self.modality_set[i] else (vecs[0],)

    def report(self, *, limits: bool = True) -> Report:
        """The :class:`Report` of every request (serve them all first)."""
        capacity = sum(t.capacity_bytes for t in self.specs) if limits else None
        return _report(self.workload, [t.name for t in self.specs], self.latency,
                       self.hit_tier, self.false_hit, self.lat_ms, self.costs, capacity,
                       self.specs[0].policy,
                       {"tiers": [asdict(t) for t in self.specs], "ttl_s": self.ttl_s})


def served_summary(replayer: Replayer, select: np.ndarray | None = None) -> dict[str, Any]:
    """What a served ``replayer`` recorded for the requests ``select`` (a boolean mask; None:
    all): ``requests``, ``hit_rate``, ``false_hit_rate``, ``mean_ms`` and ``p99_ms`` of their
    latencies, per tier ``hit_<tier>`` (their hit rate there) and ``share_of_<tier>_hits`` (the
    share of all that tier's hits they took), and ``other_set_hits``: how many hit an entry of
    another modality set than their own (0 when every set keeps its own index)."""
    w = replayer.workload
    select = np.ones(len(w), bool) if select is None else np.asarray(select, bool)
    hit_tier = replayer.hit_tier
    hit = select & (hit_tier >= 0)
    key_set = (replayer.hit_key // w.config.n_variants) % len(MODALITY_SETS)
    lat = replayer.lat_ms[select]
    out: dict[str, Any] = {
        "requests": int(select.sum()),
        "hit_rate": float(hit.sum() / max(1, select.sum())),
        "false_hit_rate": float((select & replayer.false_hit).sum() / max(1, select.sum())),
        "mean_ms": float(lat.mean()) if lat.size else 0.0,
        "p99_ms": float(np.percentile(lat, 99)) if lat.size else 0.0,
        "other_set_hits": int((hit & (key_set != w.modality_set)).sum())}
    for k, spec in enumerate(replayer.specs):
        at = hit_tier == k
        out[f"hit_{spec.name}"] = float((select & at).sum() / max(1, select.sum()))
        out[f"share_of_{spec.name}_hits"] = float((select & at).sum() / max(1, at.sum()))
    return out


def loosest_floor(tiers: Sequence[TierSpec], offsets: Iterable[Mapping[str, float]]
                  ) -> float | None:
    """The lowest cosine a semantic lookup of ``tiers`` asks for under any of ``offsets`` (δ
    offsets per modality, positive loosens): a :class:`Replayer` ``cutoff`` under which every
    such lookup reads the neighbour table. None without a semantic tier."""
    semantic = [t.threshold for t in tiers if t.match == "semantic"]
    if not semantic:
        return None
    return min(semantic) - max([0.0, *(o for given in offsets for o in given.values())])


def replay(workload: Workload, tiers: Sequence[TierSpec], latency: LatencyModel | None = None,
           *, limits: bool = True, ttl_s: float | None = None) -> Report:
    """Replay ``workload`` through ``tiers`` (top first); returns the :class:`Report`.

    ``limits=False`` skips the bound / Belady / oracle-semantic replays (used by sweeps
    that compute them once); ``ttl_s`` is every answer's TTL in workload seconds
    (None: no expiry; limits ignore it). Raises :class:`ConfigError` for an empty or
    duplicate-named hierarchy, or a TTL that is not positive.
    """
    from mmcache.tier_kernel import KERNEL_POLICIES

    replayer = Replayer(workload, tiers, latency, ttl_s=ttl_s)
    if all(t.policy in KERNEL_POLICIES for t in replayer.specs):
        replayer.serve_all()
    else:
        for i in range(len(workload)):
            replayer.serve(i)
    return replayer.report(limits=limits)


def degradation_replay(workload: Workload, tiers: Sequence[TierSpec], latency: LatencyModel,
                       level: str | Degrader, *, text_offset: float = 0.05,
                       ttl_s: float | None = None) -> tuple[Report, dict[str, float]]:
    """:func:`replay` (no limits) with every request at one degradation ``level``, or at the
    level a :class:`mmcache.degrade.Degrader` picks from the inference queue at its arrival;
    returns the report and the share of requests served at each level."""
    replayer = Replayer(workload, tiers, latency, ttl_s=ttl_s, text_offset=text_offset,
                        cutoff=loosest_floor(tiers, [{"text": text_offset}]))
    arrival = replayer.costs.arrival_ms
    for i in range(len(workload)):
        if isinstance(level, Degrader):
            replayer.serve(i, level=level.level(float(arrival[i])))
            if replayer.hit_tier[i] < 0:
                level.observe(float(arrival[i] + replayer.lat_ms[i]))
        else:
            replayer.serve(i, level=level)
    shares = np.bincount(replayer.level_served, minlength=len(LEVELS)) / max(1, len(workload))
    return replayer.report(limits=False), dict(zip(LEVELS, shares.tolist()))


def degradation_rows(workload: Workload, tiers: Sequence[TierSpec], latency: LatencyModel, *,
                     adaptive: Degrader | None = None, text_offset: float = 0.05
                     ) -> dict[str, dict[str, Any]]:
    """``{level: {"p99_ms", "false_hit_rate", "hit_rate", "mean_encode_ms", "shares"}}``: each
    level forced for the whole of ``workload``, plus ``"adaptive"`` when a degrader is given."""
    runs: dict[str, str | Degrader] = {lv: lv for lv in LEVELS}
    if adaptive is not None:
        runs["adaptive"] = adaptive
    rows = {}
    for name, level in runs.items():
        report, shares = degradation_replay(workload, tiers, latency, level,
                                            text_offset=text_offset)
        rows[name] = {"p99_ms": report.latency_ms["p99"], "p50_ms": report.latency_ms["p50"],
                      "false_hit_rate": report.false_hit_rate, "hit_rate": report.hit_rate,
                      "sla_violation_rate": report.sla_violation_rate, "shares": shares}
    return rows


def report_prometheus(report: Report, workload: Workload, *, model_type: str,
                      warmup_n: int | None = None, registry: Any = None) -> str:
    """Seed 001 §4.4's metrics of one replay (:func:`mmcache.metrics.register_serving`):
    CrossModalHitRate per multimodal modality set and, over the first ``warmup_n`` requests
    after its cold start, CacheWarmupLatencyP99 per modality set. Registers them on
    ``registry`` (a ``prometheus_client`` registry; default a fresh one) and returns the
    registry's exposition text."""
    from prometheus_client import CollectorRegistry, generate_latest

    from mmcache.metrics import register_serving

    registry = CollectorRegistry(auto_describe=False) if registry is None else registry
    sets = workload.modality_set[:report.n_req]
    warm = {}
    if warmup_n is not None:
        if not 1 <= warmup_n <= report.n_req:
            raise ConfigError(f"warmup_n must be in [1, {report.n_req}], got {warmup_n!r}")
        window = sets[:warmup_n]
        warm = {MODALITY_SET_NAMES[k]: report.latencies_ms[:warmup_n][window == k].tolist()
                for k in np.unique(window).tolist()}
    cross = {name: v for name, v in report.hit_rate_per_modality.items()
             if len(MODALITY_SETS[MODALITY_SET_NAMES.index(name)]) > 1}
    register_serving(registry, model_type=model_type, cross_modal=cross, warmup_ms=warm)
    return generate_latest(registry).decode()


def offered_load(workload: Workload, latency: LatencyModel) -> float:
    """Arrival rate ÷ the inference servers' capacity: the stream's mean requests per ms × the
    mean inference time of its requests (the model's seeded draws) ÷ servers (the servers'
    utilisation if nothing hit; the daily cycle and bursts push the peak above it)."""
    if not latency.servers:
        raise ConfigError("offered load needs a bounded pool (LatencyModel.servers)")
    span_ms = 1e3 * float(workload.time[-1] - workload.time[0])
    service = float(_RequestCosts(latency, workload, []).service_ms.mean())
    return (len(workload) - 1) / span_ms * service / latency.servers


def at_load(workload: Workload, latency: LatencyModel, load: float) -> Workload:
    """``workload`` with its arrival times scaled so its :func:`offered_load` is ``load``."""
    if not load > 0:
        raise ConfigError(f"load must be positive, got {load!r}")
    start = workload.time[0]
    scale = offered_load(workload, latency) / load
    return replace(workload, time=start + (workload.time - start) * scale)


def load_reports(workload: Workload, tiers: Sequence[TierSpec], latency: LatencyModel,
                 loads: Sequence[float], *, ttl_s: float | None = None) -> dict[float, Report]:
    """:func:`replay` (no limits) at each offered load, arrival times scaled by :func:`at_load`."""
    return {float(load): replay(at_load(workload, latency, load), tiers, latency, limits=False,
                                ttl_s=ttl_s) for load in loads}


def load_sweep(workload: Workload, tiers: Sequence[TierSpec], latency: LatencyModel,
               loads: Sequence[float], *, ttl_s: float | None = None) -> list[dict[str, Any]]:
    """One row per offered load of :func:`load_reports` (see :func:`load_row`)."""
    return [load_row(load, r) for load, r in
            load_reports(workload, tiers, latency, loads, ttl_s=ttl_s).items()]


def load_row(load: float, report: Report) -> dict[str, Any]:
    """``load, p50_ms, p95_ms, p99_ms, sla_violation_rate, miss_rate`` of one replay, with its
    queue's ``mean_wait_ms`` and ``utilisation``."""
    return {"load": float(load),
            **{f"{q}_ms": report.latency_ms[q] for q in ("p50", "p95", "p99")},
            "sla_violation_rate": report.sla_violation_rate, "miss_rate": 1 - report.hit_rate,
            "mean_wait_ms": report.queue["mean_wait_ms"],
            "utilisation": report.queue["utilisation"]}


def replay_cache(workload: Workload, cache: Any, latency: LatencyModel | None = None, *,
                 costs: Mapping[str, tuple[float, float]] | None = None,
                 scope: str = "cachebench", limits: bool = True) -> Report:
    """Replay ``workload`` through a :class:`mmcache.TieredCache` (every miss is ``put`` back).

    ``costs`` maps each tier name to ``(lookup_us, bandwidth_gbps)`` (default
    :func:`measured_cache_tier_costs`: lookups measured on this machine where
    ``data/latency_profile.json`` has them, nominal bandwidths). The stored value of an intent is a
    string of the workload's answer size that starts with the intent id, so a hit
    tells which answer it served. Latency: an exact hit (similarity 1 on every
    modality) pays the lookups of the tiers down to it; any other request pays
    every tier's lookup plus the encoder, then the hit tier's transfer or the
    model inference. Limits use the sum of the tiers' ``max_bytes`` when all are set.
    """
    latency = latency or LatencyModel()
    if costs is None:
        costs, cost_sources = measured_cache_tier_costs()
    else:
        costs, cost_sources = dict(costs), {n: "given by the caller" for n in costs}
    names = [t.name for t in cache.tiers]
    missing = [n for n in names if n not in costs]
    if missing:
        raise ConfigError(f"no (lookup_us, bandwidth_gbps) for tiers {missing}")
    lookups = np.cumsum([costs[n][0] for n in names])
    n = len(workload)
    hit_tier = np.full(n, -1, dtype=np.int16)
    false_hit = np.zeros(n, dtype=bool)
    lat_ms = np.zeros(n)
    draws = _RequestCosts(latency, workload, [])
    for i in range(n):
        intent, size = int(workload.intent[i]), int(workload.size[i])
        query = workload.query(i, scope=scope)
        hit = cache.get(query)
        if hit is None:
            lat_ms[i] = draws.miss_ms(i, lookups[-1] / 1000.0 + draws.encode_ms[i])
            cache.put(query, _answer(intent, size))
            continue
        k = names.index(hit.tier)
        exact = min(hit.similarities.values(), default=hit.similarity) >= 1.0
        lookup_ms = (lookups[k] if exact else lookups[-1]) / 1000.0
        lat_ms[i] = lookup_ms + (0.0 if exact else draws.encode_ms[i]) + \
            size / (costs[hit.tier][1] * 1e6)
        hit_tier[i] = k
        false_hit[i] = int(str(hit.value).split(":", 1)[0]) != intent
    budgets = [getattr(cache.config, n).max_bytes if hasattr(cache.config, n) else None
               for n in names]
    capacity = sum(budgets) if limits and None not in budgets else None
    policy = getattr(cache.config, names[0]).policy if hasattr(cache.config, names[0]) \
        else "lru"
    return _report(workload, names, latency, hit_tier, false_hit, lat_ms, draws, capacity, policy,
                   {"tiered_cache_config": cache.config.to_dict(), "tier_costs": costs,
                    "tier_cost_sources": cost_sources})


def measured_cache_tier_costs(profile: Mapping[str, LogNormal] | None = None
                              ) -> tuple[dict[str, tuple[float, float]], dict[str, str]]:
    """``(costs, sources)`` for :func:`replay_cache`: each TieredCache tier's lookup µs is the
    mean of its measured stage histograms (``<tier>.exact`` plus ``<tier>.semantic`` where the
    tier has one) from ``profile`` (default: :func:`mmcache.latency.load_profile`); a tier the
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


def _answer(intent: int, size: int) -> str:
    """A stand-in answer of ``size`` characters that names its intent (synthetic payload)."""
    head = f"{intent}:"
    return head + "x" * max(0, size - len(head))


def replay_limits(workload: Workload, capacity_bytes: int, policy: str = "lru", *,
                  cross_modal: bool = False) -> dict[str, Any]:
    """Limits on ``workload`` at ``capacity_bytes``, as miss ratios.

    Exact keys: ``opt_lower_miss_ratio``, a lower bound no cache can beat
    (:func:`mmcache.bounds.lower_bound`), and ``belady_miss_ratio``, Belady's, a
    heuristic when sizes vary (``sizes_vary``). The oracle semantic cache (ground-truth
    equivalence within a modality, zero false hits; keyed by intent and modality, as
    the tiers search one index per modality): ``oracle_semantic_opt_lower_miss_ratio``
    and its misses under ``policy`` and Belady (``oracle_semantic_miss_ratio``,
    ``oracle_semantic_belady_miss_ratio``). With ``cross_modal`` (for a cache that
    retrieves across modalities) the same three keyed by intent alone, prefixed
    ``cross_modal_``. ``lower_bound_method`` names the bound each lower ratio used.
    """
    from mmcache.bounds import lower_bound
    from mmcache.replay import simulate

    exact = workload.to_trace("exact")
    oracles = {"oracle_semantic_": workload.to_trace("intent-modality")}
    if cross_modal:
        oracles["cross_modal_oracle_semantic_"] = workload.to_trace("intent")
    low = lower_bound(exact, capacity_bytes)
    out: dict[str, Any] = {
        "opt_lower_miss_ratio": low.misses / exact.n_req,
        "belady_miss_ratio": simulate(exact, "belady", capacity_bytes).miss_ratio,
        "sizes_vary": bool(np.unique(exact.obj_size).shape[0] > 1),
        "lower_bound_method": {"exact": low.method}}
    for prefix, trace in oracles.items():
        low = lower_bound(trace, capacity_bytes)
        out[f"{prefix}opt_lower_miss_ratio"] = low.misses / trace.n_req
        out[f"{prefix}miss_ratio"] = simulate(trace, policy, capacity_bytes).miss_ratio
        out[f"{prefix}belady_miss_ratio"] = simulate(trace, "belady", capacity_bytes).miss_ratio
        out["lower_bound_method"][prefix.rstrip("_")] = low.method
    return out


def _report(workload: Workload, names: Sequence[str], latency: LatencyModel,
            hit_tier: np.ndarray, false_hit: np.ndarray, lat_ms: np.ndarray,
            costs: _RequestCosts, capacity: int | None, policy: str,
            setup: dict[str, Any]) -> Report:
    hit = hit_tier >= 0
    per_mod = {m: float(hit[workload.modality_set == k].mean())
               for k, m in enumerate(MODALITY_SET_NAMES) if (workload.modality_set == k).any()}
    multimodal = workload.modality_set >= len(MODALITIES)
    return Report(
        n_req=int(hit.shape[0]), tiers=tuple(names), hit_rate=float(hit.mean()),
        hit_rate_per_tier={t: float((hit_tier == k).mean()) for k, t in enumerate(names)},
        hit_rate_per_modality=per_mod,
        cross_modal_hit_rate=float(hit[multimodal].mean()) if multimodal.any() else None,
        false_hit_rate=float(false_hit.mean()),
        hit_precision=float(1.0 - false_hit.sum() / hit.sum()) if hit.any() else 1.0,
        byte_hit_rate=float(workload.size[hit].sum() / workload.size.sum()),
        latency_ms={f"p{q}": float(np.percentile(lat_ms, q)) for q in (50, 95, 99)}
        | {"mean": float(lat_ms.mean())},
        sla_ms=latency.sla_ms, sla_violation_rate=float((lat_ms > latency.sla_ms).mean()),
        queue=costs.summary(~hit, workload),
        limits={} if capacity is None else
        replay_limits(workload, capacity, policy) | {"capacity_bytes": capacity},
        provenance={"workload": workload.describe(), "embeddings": workload.embedding_kinds(),
                    **setup,
                    "latency_model": latency.describe()},
        latencies_ms=lat_ms, waits_ms=costs.wait_ms)


def miss_ratio_curves(trace: Any, policies: Sequence[str], sizes: Sequence[int]):
    """Miss ratio of every policy at every cache size on one trace, with replay timings.

    Returns a pandas DataFrame with columns ``policy, cache_size, miss_cnt,
    miss_ratio, byte_miss_ratio, seconds, req_per_s`` (``seconds`` is the wall
    time of that one :func:`mmcache.replay.simulate` call, measured here, after a
    warm-up run of each policy on a small trace so compilation is not counted).
    """
    import time

    import pandas as pd

    from mmcache.replay import simulate
    from mmcache.workload import zipf_trace

    warm = zipf_trace(2_000, 200, seed=0)
    trace.dense_ids()  # the one-off id renumbering every replay of this trace shares
    rows = []
    for policy in policies:
        simulate(warm, policy, 100 * 4096)
        for size in sizes:
            start = time.perf_counter()
            res = simulate(trace, policy, int(size))
            seconds = time.perf_counter() - start
            rows.append({"policy": policy, "cache_size": int(size), "miss_cnt": res.miss_cnt,
                         "miss_ratio": res.miss_ratio, "byte_miss_ratio": res.byte_miss_ratio,
                         "seconds": seconds, "req_per_s": trace.n_req / seconds})
    return pd.DataFrame(rows)


def lower_bound_curve(trace: Any, curves: Any):
    """:func:`mmcache.replay.opt_bounds` of ``trace`` at every size of ``curves`` (its
    :func:`miss_ratio_curves`), with Belady's misses.

    Returns a pandas DataFrame with columns ``cache_size, lower, upper, lower_method,
    upper_by, belady, miss_ratio`` (``miss_ratio``: the lower bound's); ``upper`` is at
    most every policy of ``curves``, whose misses are taken from it, not replayed again.
    """
    import pandas as pd

    from mmcache.replay import opt_bounds, simulate

    rows = []
    for size, at_size in curves.groupby("cache_size", sort=True):
        known = dict(zip(at_size.policy, at_size.miss_cnt))
        bounds = opt_bounds(trace, int(size), policies=list(known), known=known)
        belady = known["belady"] if "belady" in known else \
            simulate(trace, "belady", int(size)).miss_cnt
        rows.append({"cache_size": int(size), "lower": bounds.lower, "upper": bounds.upper,
                     "lower_method": bounds.lower_method, "upper_by": bounds.upper_by,
                     "belady": int(belady), "miss_ratio": bounds.lower / trace.n_req})
    return pd.DataFrame(rows)


def belady_gap(curves: Any, reference: str = "belady"):
    """Miss-ratio gap of each policy to ``reference`` per cache size (policy × size table)."""
    table = curves.pivot(index="policy", columns="cache_size", values="miss_ratio")
    return table.drop(index=reference) - table.loc[reference]
