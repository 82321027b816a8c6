"""The CacheBench-MM engine: :class:`Replayer` replays a workload through a hierarchy of tiers,
request by request (lookups, promotion, write-through, TTLs, false hits, latency draws).
"""

from __future__ import annotations

from dataclasses import asdict
from functools import cached_property
from typing import Any, Collection, Iterable, Mapping, Sequence

import numpy as np

from mmcache.errors import ConfigError, InvalidInputError
from mmcache.policies import make_policy
from mmcache.policies.admission import admit_miss
from mmcache.sim.cachebench.degradation import LEVELS, check_level
from mmcache.sim.cachebench.neighbours import (
    NeighbourTable,
    best_resident,
    neighbour_table,
)
from mmcache.sim.cachebench.kernel import KERNEL_POLICIES, TierReplay
from mmcache.sim.cachebench.report import Report, build_report
from mmcache.sim.cachebench.spec import TierSpec
from mmcache.sim.latency import Cost, LatencyModel, LogNormal, ServerPool, _dist
from mmcache.datasets.variants import KEYFRAMES
from mmcache.sim.workload import MODALITY_SETS, VIDEO_SET, Workload
from mmcache.types import MODALITIES

_TEXT = MODALITIES.index("text")


#: Keyword-proxy keys live above every exact key (exact keys are intent × sets × variants).
KEYWORD_KEY_BASE = 1 << 62


#: Encoder calls per modality (columns: MODALITIES) of each modality set: one per modality it
#: carries, a video clip's image encoder once per keyframe.
_ENCODES = np.array([[ms.count(m) * (KEYFRAMES if k == VIDEO_SET and m == "image" else 1)
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
        """Queueing of the misses: waits, share that waited, the servers' utilisation (busy
        time ÷ servers × the time from the first arrival to the last arrival or completion)
        and the loads of :mod:`mmcache.sim.cachebench.load`: ``arrival_per_s`` (requests after
        the first ÷ the arrivals' span), ``offered_load`` (arrival rate × every request's mean
        inference time ÷ servers, as if nothing hit) and ``backend_load`` (arrival rate × miss
        rate × the misses' mean inference time ÷ servers: the utilisation a queue that keeps up
        would have; above 1 the queue grows for as long as the stream lasts, and the
        utilisation stays below it, its span running on to the last completion)."""
        n = len(workload)
        waits = self.wait_ms[missed]
        end = max(self.pool.last_finish_ms, float(self.arrival_ms[-1])) if n else 0
        span_ms = max(1e-9, end - float(self.arrival_ms[0])) if n else 1e-9
        arrivals_ms = max(1e-9, float(self.arrival_ms[-1] - self.arrival_ms[0])) if n else 1e-9
        busy = float(self.service_ms[missed].sum())
        servers = self.pool.servers
        return {"servers": servers,
                "mean_wait_ms": float(waits.mean()) if waits.size else 0.0,
                "p99_wait_ms": float(np.percentile(waits, 99)) if waits.size else 0.0,
                "queued_share_of_misses": float((waits > 0).mean()) if waits.size else 0.0,
                "utilisation": busy / (servers * span_ms) if servers else None,
                "arrival_per_s": 1e3 * (n - 1) / arrivals_ms,
                "offered_load": self.load(np.ones(n, bool)) if servers else None,
                "backend_load": self.load(missed) if servers else None}

    def load(self, reaching: np.ndarray, start: int = 0, stop: int | None = None) -> float:
        """Arrival rate × the share of requests ``reaching`` the servers × their mean inference
        time ÷ servers, over requests ``start`` to ``stop`` - 1 (the arrival rate: requests after
        the first ÷ their arrivals' span; every request: the offered load; the misses: the
        backend load)."""
        arrival = self.arrival_ms[start:stop]
        n = arrival.shape[0]
        span_ms = max(1e-9, float(arrival[-1] - arrival[0])) if n else 1e-9
        busy = float(self.service_ms[start:stop][reaching[start:stop]].sum())
        return (n - 1) / span_ms * busy / max(1, n) / self.pool.servers if n else 0.0


def _per_modality(table: Mapping[str, Cost], n: int, rng: np.random.Generator) -> np.ndarray:
    """``(n, modalities)`` draws: per request, one from each modality's cost in ``table``."""
    return np.stack([_dist(table[m]).sample(rng, n) for m in MODALITIES], axis=1)


class _TableRows:
    """A :class:`mmcache.sim.cachebench.neighbours.NeighbourTable` as a replay's lookups read it: the dense key
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
    level of :mod:`mmcache.sim.cachebench.degradation` (text-fallback looks up at ``text_offset`` below the
    semantic tiers' text threshold); :meth:`prefill` stores an answer without serving it.
    ``hit_key`` and ``level_served`` record, per served request, the key it hit (-1: none)
    and the index of its level in :data:`mmcache.sim.cachebench.degradation.LEVELS`.

    Semantic lookups read the workload's neighbour table (``table``, or :func:`mmcache.sim.cachebench.neighbours.
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
        """Serve request ``i`` at degradation ``level`` (:mod:`mmcache.sim.cachebench.degradation`): record its hit
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
        ``table``: this workload's :func:`mmcache.sim.cachebench.neighbours.neighbour_table` at or below every
        semantic tier's threshold, to share one across replays (default: :attr:`table`)."""
        if self._kernel is not None:
            raise ConfigError("serve_all needs a replayer that has served nothing")
        self._table = self._table if table is None else table
        self.serve_compiled(len(self.workload))

    def serve_compiled(self, stop: int, offsets: Mapping[str, float] | None = None) -> None:
        """Serve the requests from the first not yet served to ``stop`` - 1 at full modality with
        δ ``offsets``, every miss admitted, as ``serve(i, offsets)`` for each in order would,
        through the compiled kernel (:class:`mmcache.sim.cachebench.kernel.TierReplay`: every tier's policy
        in :data:`mmcache.sim.cachebench.kernel.KERNEL_POLICIES`, no request served by :meth:`serve`, every
        lookup's floor, threshold - offset, positive and at or above :attr:`table`'s cutoff)."""

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
        return build_report(self.workload, [t.name for t in self.specs], self.latency,
                       self.hit_tier, self.false_hit, self.lat_ms, self.costs, capacity,
                       self.specs[0].policy,
                       {"tiers": [asdict(t) for t in self.specs], "ttl_s": self.ttl_s})


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

    return served(workload, tiers, latency, ttl_s=ttl_s).report(limits=limits)


def served(workload: Workload, tiers: Sequence[TierSpec], latency: LatencyModel | None = None,
           *, ttl_s: float | None = None) -> Replayer:
    """A :class:`Replayer` that has served every request of ``workload`` as :func:`replay` does
    (through the compiled kernel where every tier's policy is one of its own)."""
    replayer = Replayer(workload, tiers, latency, ttl_s=ttl_s)
    if all(t.policy in KERNEL_POLICIES for t in replayer.specs):
        replayer.serve_all()
    else:
        for i in range(len(workload)):
            replayer.serve(i)
    return replayer


def served_summary(replayer: Replayer, select: np.ndarray | None = None,
                   clusters: np.ndarray | None = None, n_boot: int = 1000,
                   seed: int = 0) -> dict[str, Any]:
    """What a served ``replayer`` recorded for the requests ``select`` (a boolean mask; None:
    all): ``requests``, ``hit_rate``, ``false_hit_rate``, ``mean_ms`` and ``p99_ms`` of their
    latencies, per tier ``hit_<tier>`` (their hit rate there) and ``share_of_<tier>_hits`` (the
    share of all that tier's hits they took), and ``other_set_hits``: how many hit an entry of
    another modality set than their own (0 when every set keeps its own index).

    ``clusters`` (one label per request of the workload, e.g. the intent of each query) adds
    95% intervals ``hit_rate_ci95``, ``false_hit_rate_ci95`` and ``share_of_<tier>_hits_ci95``
    as ``[low, high]``: a percentile bootstrap of ``n_boot`` resamples (seeded by ``seed``) that
    draws the distinct clusters of the selected requests with replacement, since requests of
    one cluster (repeats of one clip, say) are not independent. The requests outside ``select``
    are held as they are (they only enter the shares' denominators). Raises
    :class:`InvalidInputError` for clusters that are not one label per request, or an
    ``n_boot`` below 1."""
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
    if clusters is not None:
        out.update(_cluster_intervals(replayer, select, clusters, n_boot, seed))
    return out


def _cluster_intervals(replayer: Replayer, select: np.ndarray, clusters: np.ndarray,
                       n_boot: int, seed: int, level: float = 0.95) -> dict[str, list[float]]:
    """The ``*_ci95`` entries of :func:`served_summary`: per-cluster sums (bincount) of the
    selected requests, resampled by cluster, the ratios' percentile interval."""
    clusters = np.asarray(clusters)
    n = len(replayer.workload)
    if clusters.ndim != 1 or clusters.shape[0] != n:
        raise InvalidInputError(f"clusters needs one label per request ({n:,}), got shape "
                                f"{clusters.shape}")
    if isinstance(n_boot, bool) or not isinstance(n_boot, (int, np.integer)) or n_boot < 1:
        raise InvalidInputError(f"n_boot must be an int >= 1, got {n_boot!r}")
    names = [spec.name for spec in replayer.specs]
    keys = ["hit_rate", "false_hit_rate", *(f"share_of_{t}_hits" for t in names)]
    if not select.any():
        return {f"{key}_ci95": [0.0, 0.0] for key in keys}
    ids = np.unique(clusters[select], return_inverse=True)[1].ravel()
    n_c = int(ids.max()) + 1
    hit_tier = replayer.hit_tier[select]
    columns = [np.ones(ids.size), hit_tier >= 0, replayer.false_hit[select],
               *(hit_tier == k for k in range(len(names)))]
    sums = np.stack([np.bincount(ids, weights=c, minlength=n_c) for c in columns], axis=1)
    rng = np.random.default_rng(seed)
    chunk = max(1, (1 << 20) // n_c)   # resamples per step: at most ~1M draws at once
    draws = []
    for start in range(0, n_boot, chunk):
        idx = rng.integers(0, n_c, size=(min(chunk, n_boot - start), n_c))
        draws.append(sums[idx].sum(axis=1))
    total = np.concatenate(draws)                    # (n_boot, columns)
    requests = np.maximum(1.0, total[:, 0])
    others = np.array([((replayer.hit_tier == k) & ~select).sum() for k in range(len(names))])
    stats = np.column_stack([total[:, 1] / requests, total[:, 2] / requests,
                             total[:, 3:] / np.maximum(1.0, total[:, 3:] + others)])
    low, high = np.quantile(stats, [(1 - level) / 2, (1 + level) / 2], axis=0)
    return {f"{key}_ci95": [float(lo), float(hi)] for key, lo, hi in zip(keys, low, high)}
