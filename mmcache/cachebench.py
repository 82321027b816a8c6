"""CacheBench-MM: replay a multimodal workload through cache tiers under a latency model.

The engine (seed 002 §4.3) replays a :class:`mmcache.workload.Workload` through a
hierarchy of tiers, each a bare eviction policy from :mod:`mmcache.policies` with a
byte capacity and a match rule (``"exact"`` key or ``"semantic"``: cosine of the
query's vector to a resident entry of the same modality ≥ the tier's threshold;
exact search over the resident vectors). A lookup walks the tiers top-down; a hit
is copied up into the tiers above it (promote on hit); a miss runs the model and
writes the answer through to every tier (as LMCache does).

Latency of one request = lookup cost of every tier consulted + the encoder cost
(once, when a semantic tier is consulted) + on a hit, ``size / bandwidth`` of the
hit tier, or on a miss the model-inference cost of the query's modality. Write
back is off the critical path.

Freshness: ``replay(..., ttl_s=τ)`` gives every answer a TTL of τ seconds of workload
time from the moment the model produced it (a copy promoted up a tier keeps that
moment). A lookup that matches an expired entry drops it from the tier and searches
on, so the request misses unless a fresh entry matches; the miss writes a fresh
answer through. ``ttl_s=None`` (the default) never expires anything.

Every constant of :class:`LatencyModel`, :data:`BANDWIDTH_GBPS` and :func:`three_tier`
is an **assumed nominal value** (spec-sheet order of magnitude), a parameter to vary,
never a measurement.

Every :class:`Report` also carries the limits on the same stream, at the
hierarchy's total capacity (:func:`replay_limits`): a lower bound on the misses of
any exact-key cache (Belady's miss ratio beside it, a heuristic when sizes vary),
and the *oracle semantic cache* (ground-truth equivalence within a modality, as
the tiers match: any paraphrase of an intent in the query's modality hits, zero
false hits), with its lower bound and its misses under the first tier's policy and
under Belady.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Collection, Iterable, Mapping, Sequence

import numpy as np

from .errors import ConfigError
from .policies import make_policy
from .policies.admission import admit_miss
from .types import MODALITIES
from .workload import Workload

#: Nominal link / device bandwidths in GB/s (assumptions, not measurements): HBM3 on-device,
#: NVLink 4 per link as seed 000 §2.3 states it, PCIe 4.0 x16 effective, NVMe SSD read,
#: SATA SSD read, 10 GbE.
BANDWIDTH_GBPS: Mapping[str, float] = {
    "hbm": 2000.0, "nvlink": 32.0, "pcie4_x16": 25.0, "nvme": 3.0, "sata_ssd": 0.5,
    "net_10g": 1.25}

MATCH_RULES = ("exact", "semantic")

#: (lookup µs, bandwidth GB/s) of a TieredCache's tiers by name (assumed, as in three_tier).
CACHE_TIER_COSTS: Mapping[str, tuple[float, float]] = {
    "l1": (2.0, BANDWIDTH_GBPS["hbm"]), "l2": (50.0, BANDWIDTH_GBPS["pcie4_x16"]),
    "l3": (100.0, BANDWIDTH_GBPS["nvme"])}


@dataclass(frozen=True)
class TierSpec:
    """One tier: name, byte capacity, eviction policy, match rule and its latency constants.

    ``lookup_us`` is the cost of consulting the tier; ``bandwidth_gbps`` the rate
    at which a hit's value reaches the requester; ``threshold`` the cosine a
    semantic match needs (ignored by exact tiers).
    """

    name: str
    capacity_bytes: int
    policy: str = "lru"
    match: str = "exact"
    threshold: float = 0.85
    lookup_us: float = 1.0
    bandwidth_gbps: float = BANDWIDTH_GBPS["pcie4_x16"]

    def __post_init__(self) -> None:
        if not self.name:
            raise ConfigError("a tier needs a name")
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


@dataclass(frozen=True)
class LatencyModel:
    """Costs outside the tiers (assumed defaults, not measured): per-modality encoder
    and model-inference milliseconds, and the SLA bound a request's latency must meet."""

    encode_ms: Mapping[str, float] = field(
        default_factory=lambda: {"text": 5.0, "image": 15.0, "audio": 40.0})
    inference_ms: Mapping[str, float] = field(
        default_factory=lambda: {"text": 400.0, "image": 700.0, "audio": 1000.0})
    sla_ms: float = 150.0

    def __post_init__(self) -> None:
        for name in ("encode_ms", "inference_ms"):
            table = getattr(self, name)
            missing = set(MODALITIES) - set(table)
            if missing or min(table.values()) < 0:
                raise ConfigError(f"{name} needs a non-negative cost for each of {MODALITIES}")
        if self.sla_ms <= 0:
            raise ConfigError("sla_ms must be positive")


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
    """What one replay measured (rates are over all requests unless named otherwise)."""

    n_req: int
    tiers: tuple[str, ...]
    hit_rate: float
    hit_rate_per_tier: dict[str, float]
    hit_rate_per_modality: dict[str, float]
    false_hit_rate: float
    hit_precision: float
    byte_hit_rate: float
    latency_ms: dict[str, float]
    sla_ms: float
    sla_violation_rate: float
    limits: dict[str, Any]
    provenance: dict[str, Any]
    latencies_ms: np.ndarray = field(repr=False)

    def as_dict(self) -> dict[str, Any]:
        """Everything but the per-request latencies, JSON-ready."""
        out = asdict(self)
        out.pop("latencies_ms")
        out["tiers"] = list(self.tiers)
        return out


class _VectorIndex:
    """Resident vectors of one modality in a tier, searched exactly (max inner product)."""

    def __init__(self, dim: int) -> None:
        self.vecs = np.zeros((64, dim), dtype=np.float32)
        self.keys: list[int | None] = [None] * 64
        self.slot: dict[int, int] = {}
        self.free: list[int] = list(range(63, -1, -1))

    def add(self, key: int, vec: np.ndarray) -> None:
        if not self.free:
            n = self.vecs.shape[0]
            self.vecs = np.vstack([self.vecs, np.zeros_like(self.vecs)])
            self.keys += [None] * n
            self.free = list(range(2 * n - 1, n - 1, -1))
        s = self.free.pop()
        self.vecs[s], self.keys[s], self.slot[key] = vec, key, s

    def remove(self, key: int) -> None:
        s = self.slot.pop(key)
        self.vecs[s], self.keys[s] = 0.0, None
        self.free.append(s)

    def best(self, vec: np.ndarray) -> tuple[int | None, float]:
        if not self.slot:
            return None, -1.0
        sims = self.vecs @ vec
        s = int(np.argmax(sims))
        return self.keys[s], float(sims[s])


class _Tier:
    """A tier's resident entries (key → (size, intent, modality, vector, produced-at seconds))
    under one policy;
    a semantic tier keeps one vector index per modality, of that modality's ``dims``."""

    def __init__(self, spec: TierSpec, dims: Sequence[int]) -> None:
        self.spec = spec
        self.policy = make_policy(spec.policy, capacity=spec.capacity_bytes)
        self.entries: dict[int, tuple[int, int, int, np.ndarray | None]] = {}
        self.used = 0
        self.index = [_VectorIndex(d) for d in dims] if spec.match == "semantic" else None

    def find(self, key: int, modality: int, vec: np.ndarray | None,
             offset: float = 0.0, fresh_after: float = -np.inf) -> int | None:
        """The resident key this request matches (exact, or semantic at cosine >= the tier's
        threshold - ``offset``), dropping expired matches (produced before ``fresh_after``)
        until a fresh one matches or none does."""
        found = self._match(key, modality, vec, offset)
        while found is not None and self.entries[found][4] < fresh_after:
            self.policy.remove(found)
            self._drop([found])
            found = self._match(key, modality, vec, offset)
        return found

    def _match(self, key: int, modality: int, vec: np.ndarray | None,
               offset: float) -> int | None:
        if key in self.entries:
            return key
        if self.index is None:
            return None
        best, sim = self.index[modality].best(vec)
        return best if sim >= self.spec.threshold - offset else None

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
    """Index of the next request for an exact key after request ``i`` (-1 for none)."""

    def __init__(self, keys: np.ndarray) -> None:
        order = np.argsort(keys, kind="stable")
        sorted_keys = keys[order]
        cuts = np.flatnonzero(np.r_[True, sorted_keys[1:] != sorted_keys[:-1], True])
        self.positions = {int(sorted_keys[a]): order[a:b] for a, b in zip(cuts[:-1], cuts[1:])}

    def after(self, key: int, i: int) -> int:
        pos = self.positions[key]
        j = int(np.searchsorted(pos, i, side="right"))
        return int(pos[j]) if j < pos.shape[0] else -1


class Replayer:
    """A replay in progress: tier state that persists while requests are served one at a time.

    :func:`replay` is one uninterrupted run of it; a caller that changes settings
    between requests (e.g. :mod:`mmcache.scheduler` between windows) serves them
    itself. ``serve(i, offsets, admit, skip)`` lowers semantic tiers' cosine threshold by
    ``offsets[modality]`` (a δ offset) for this request, does not consult the tiers named
    in ``skip`` (nor pay their lookup), and on a miss stores the answer (in every tier)
    only when ``admit``. ``ttl_s``: every answer's TTL in workload seconds (None: no expiry).
    """

    def __init__(self, workload: Workload, tiers: Sequence[TierSpec],
                 latency: LatencyModel | None = None, *, ttl_s: float | None = None) -> None:
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
        self.state = [_Tier(spec, [workload.dim(m) for m in MODALITIES]) for spec in self.specs]
        self.keys = workload.exact_keys().astype(np.int64)
        self.next_use = _NextUse(self.keys)
        self.intent, self.modality, self.size = (workload.intent.tolist(),
                                                 workload.modality.tolist(),
                                                 workload.size.tolist())
        n = len(workload)
        self.hit_tier = np.full(n, -1, dtype=np.int16)
        self.false_hit = np.zeros(n, dtype=bool)
        self.lat_ms = np.zeros(n)
        self._encode = [self.latency.encode_ms[m] for m in MODALITIES]
        self._infer = [self.latency.inference_ms[m] for m in MODALITIES]

    def serve(self, i: int, offsets: Mapping[str, float] | None = None,
              admit: bool = True, skip: Collection[str] = ()) -> None:
        """Serve request ``i``: record its hit tier, false hit and latency."""
        key, m = int(self.keys[i]), self.modality[i]
        offset = (offsets or {}).get(MODALITIES[m], 0.0)
        vec, cost_us, found = None, 0.0, None
        for k, tier in enumerate(self.state):
            if tier.spec.name in skip:
                continue
            cost_us += tier.spec.lookup_us
            if tier.index is not None and vec is None:
                vec = self.workload.embedding(i)
                cost_us += 1000.0 * self._encode[m]
            found = tier.find(key, m, vec, offset, self.now_s[i] - self._ttl)
            if found is not None:
                break
        infer = self._infer[m]
        if found is None:
            if admit:
                if vec is None and any(t.index is not None for t in self.state):
                    vec = self.workload.embedding(i)  # a skipped semantic tier still stores it
                entry = (self.size[i], self.intent[i], m, vec, self.now_s[i])
                hints = {"next_access": self.next_use.after(key, i), "now": i, "cost": infer}
                for tier in self.state:
                    tier.admit(key, entry, **hints)
            self.lat_ms[i] = cost_us / 1000.0 + infer
            return
        entry = self.state[k].entries[found]
        hints = {"next_access": self.next_use.after(found, i), "now": i, "cost": infer}
        for tier in self.state[:k + 1]:
            tier.admit(found, entry, **hints)
        self.hit_tier[i] = k
        self.false_hit[i] = entry[1] != self.intent[i]
        self.lat_ms[i] = cost_us / 1000.0 + entry[0] / (self.specs[k].bandwidth_gbps * 1e6)

    def report(self, *, limits: bool = True) -> Report:
        """The :class:`Report` of every request (serve them all first)."""
        capacity = sum(t.capacity_bytes for t in self.specs) if limits else None
        return _report(self.workload, [t.name for t in self.specs], self.latency,
                       self.hit_tier, self.false_hit, self.lat_ms, capacity,
                       self.specs[0].policy,
                       {"tiers": [asdict(t) for t in self.specs], "ttl_s": self.ttl_s})


def replay(workload: Workload, tiers: Sequence[TierSpec], latency: LatencyModel | None = None,
           *, limits: bool = True, ttl_s: float | None = None) -> Report:
    """Replay ``workload`` through ``tiers`` (top first); returns the :class:`Report`.

    ``limits=False`` skips the bound / Belady / oracle-semantic replays (used by sweeps
    that compute them once); ``ttl_s`` is every answer's TTL in workload seconds
    (None: no expiry; limits ignore it). Raises :class:`ConfigError` for an empty or
    duplicate-named hierarchy, or a TTL that is not positive.
    """
    replayer = Replayer(workload, tiers, latency, ttl_s=ttl_s)
    for i in range(len(workload)):
        replayer.serve(i)
    return replayer.report(limits=limits)


def replay_cache(workload: Workload, cache: Any, latency: LatencyModel | None = None, *,
                 costs: Mapping[str, tuple[float, float]] | None = None,
                 scope: str = "cachebench", limits: bool = True) -> Report:
    """Replay ``workload`` through a :class:`mmcache.TieredCache` (every miss is ``put`` back).

    ``costs`` maps each tier name to ``(lookup_us, bandwidth_gbps)`` (default
    :data:`CACHE_TIER_COSTS`, assumed constants). The stored value of an intent is a
    string of the workload's answer size that starts with the intent id, so a hit
    tells which answer it served. Latency: an exact hit (similarity 1 on every
    modality) pays the lookups of the tiers down to it; any other request pays
    every tier's lookup plus the encoder, then the hit tier's transfer or the
    model inference. Limits use the sum of the tiers' ``max_bytes`` when all are set.
    """
    latency = latency or LatencyModel()
    costs = dict(CACHE_TIER_COSTS if costs is None else costs)
    names = [t.name for t in cache.tiers]
    missing = [n for n in names if n not in costs]
    if missing:
        raise ConfigError(f"no (lookup_us, bandwidth_gbps) for tiers {missing}")
    lookups = np.cumsum([costs[n][0] for n in names])
    n = len(workload)
    hit_tier = np.full(n, -1, dtype=np.int16)
    false_hit = np.zeros(n, dtype=bool)
    lat_ms = np.zeros(n)
    for i in range(n):
        m, intent, size = MODALITIES[int(workload.modality[i])], int(workload.intent[i]), \
            int(workload.size[i])
        query = workload.query(i, scope=scope)
        hit = cache.get(query)
        if hit is None:
            lat_ms[i] = lookups[-1] / 1000.0 + latency.encode_ms[m] + latency.inference_ms[m]
            cache.put(query, _answer(intent, size))
            continue
        k = names.index(hit.tier)
        exact = min(hit.similarities.values(), default=hit.similarity) >= 1.0
        lookup_ms = (lookups[k] if exact else lookups[-1]) / 1000.0
        lat_ms[i] = lookup_ms + (0.0 if exact else latency.encode_ms[m]) + \
            size / (costs[hit.tier][1] * 1e6)
        hit_tier[i] = k
        false_hit[i] = int(str(hit.value).split(":", 1)[0]) != intent
    budgets = [getattr(cache.config, n).max_bytes if hasattr(cache.config, n) else None
               for n in names]
    capacity = sum(budgets) if limits and None not in budgets else None
    policy = getattr(cache.config, names[0]).policy if hasattr(cache.config, names[0]) \
        else "lru"
    return _report(workload, names, latency, hit_tier, false_hit, lat_ms, capacity, policy,
                   {"tiered_cache_config": cache.config.to_dict(), "tier_costs": costs})


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
    from .bounds import lower_bound
    from .replay import simulate

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
            capacity: int | None, policy: str, setup: dict[str, Any]) -> Report:
    hit = hit_tier >= 0
    per_mod = {m: float(hit[workload.modality == k].mean())
               for k, m in enumerate(MODALITIES) if (workload.modality == k).any()}
    return Report(
        n_req=int(hit.shape[0]), tiers=tuple(names), hit_rate=float(hit.mean()),
        hit_rate_per_tier={t: float((hit_tier == k).mean()) for k, t in enumerate(names)},
        hit_rate_per_modality=per_mod, false_hit_rate=float(false_hit.mean()),
        hit_precision=float(1.0 - false_hit.sum() / hit.sum()) if hit.any() else 1.0,
        byte_hit_rate=float(workload.size[hit].sum() / workload.size.sum()),
        latency_ms={f"p{q}": float(np.percentile(lat_ms, q)) for q in (50, 95, 99)}
        | {"mean": float(lat_ms.mean())},
        sla_ms=latency.sla_ms, sla_violation_rate=float((lat_ms > latency.sla_ms).mean()),
        limits={} if capacity is None else
        replay_limits(workload, capacity, policy) | {"capacity_bytes": capacity},
        provenance={"workload": workload.describe(), "embeddings": workload.embedding_kinds(),
                    **setup,
                    "latency_model": {**asdict(latency),
                                      "kind": "assumed constants, not measured"}},
        latencies_ms=lat_ms)


def miss_ratio_curves(trace: Any, policies: Sequence[str], sizes: Sequence[int]):
    """Miss ratio of every policy at every cache size on one trace, with replay timings.

    Returns a pandas DataFrame with columns ``policy, cache_size, miss_cnt,
    miss_ratio, byte_miss_ratio, seconds, req_per_s`` (``seconds`` is the wall
    time of that one :func:`mmcache.replay.simulate` call, measured here, after a
    warm-up run of each policy on a small trace so compilation is not counted).
    """
    import time

    import pandas as pd

    from .replay import simulate
    from .workload import zipf_trace

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


def lower_bound_curve(trace: Any, sizes: Sequence[int], policies: Sequence[str]):
    """:func:`mmcache.replay.opt_bounds` of ``trace`` at every size, with Belady's misses.

    Returns a pandas DataFrame with columns ``cache_size, lower, upper, lower_method,
    upper_by, belady, miss_ratio`` (``miss_ratio``: the lower bound's); ``upper`` is at
    most every policy in ``policies``.
    """
    import pandas as pd

    from .replay import opt_bounds, simulate

    rows = []
    for size in sizes:
        bounds = opt_bounds(trace, int(size), policies=policies)
        rows.append({"cache_size": int(size), "lower": bounds.lower, "upper": bounds.upper,
                     "lower_method": bounds.lower_method, "upper_by": bounds.upper_by,
                     "belady": simulate(trace, "belady", int(size)).miss_cnt,
                     "miss_ratio": bounds.lower / trace.n_req})
    return pd.DataFrame(rows)


def belady_gap(curves: Any, reference: str = "belady"):
    """Miss-ratio gap of each policy to ``reference`` per cache size (policy × size table)."""
    table = curves.pivot(index="policy", columns="cache_size", values="miss_ratio")
    return table.drop(index=reference) - table.loc[reference]
