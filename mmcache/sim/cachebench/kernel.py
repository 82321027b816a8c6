"""Compiled CacheBench-MM replay of LRU / FIFO tier hierarchies (numba).

Serves a workload's requests in order, a range at a time (:class:`TierReplay`), as
:meth:`mmcache.sim.cachebench.Replayer.serve` does at full modality with the range's δ offsets and
every miss admitted (top-down lookup, promote on hit, write-through on a miss, TTL, byte
capacities, each tier consulted and written only for the modality sets it serves), and records
the same hit tier, hit key and false hit for every request. A semantic tier's
search looks only at the resident entries among the query's neighbours in a
:class:`mmcache.sim.cachebench.neighbours.NeighbourTable` (every entry at cosine >= the tier's threshold is
one), takes the largest worst-modality margin and breaks ties by the slot the replay's vector
index would have given the entry (its free-slot stack is replayed too), so hits match the exact
search over all resident vectors up to the float32 rounding of one cosine.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Mapping, Sequence

import numpy as np
from numba import njit

from mmcache.errors import ConfigError
from mmcache.sim.cachebench.neighbours import NeighbourTable, best_resident
from mmcache.sim.kernels._lists import push_head, unlink
from mmcache.sim.workload import MODALITY_SETS

if TYPE_CHECKING:
    from mmcache.sim.cachebench.spec import TierSpec

#: Policies this kernel replays (FIFO is LRU whose hits leave the order alone).
KERNEL_POLICIES = ("lru", "fifo")
#: First slot count of a vector index (as ``cachebench._VectorIndex``).
FIRST_SLOTS = 64


@njit(cache=True, inline="always")
def _drop(t, k, st, sizes, key_set):
    """Evict / expire key ``k`` from tier ``t``: its bytes, list links and index slot."""
    res, prod, prev, nxt, heads, used, slot, free, top, caps, semantic = st
    res[t, k] = False
    used[t] -= sizes[k]
    unlink(prev[t], nxt[t], heads[t], k)
    if semantic[t]:
        m = key_set[k]
        free[t, m, top[t, m]] = slot[t, k]
        top[t, m] += 1
        slot[t, k] = -1


@njit(cache=True, inline="always")
def _admit(t, k, produced, st, sizes, key_set, capacity, promote):
    """Access resident ``k`` in tier ``t``, or insert it (evicting from the tail until it fits;
    a key larger than the tier is not stored)."""
    res, prod, prev, nxt, heads, used, slot, free, top, caps, semantic = st
    if res[t, k]:
        if promote[t] and heads[t, 0] != k:
            unlink(prev[t], nxt[t], heads[t], k)
            push_head(prev[t], nxt[t], heads[t], k)
        return
    if sizes[k] > capacity[t]:
        return
    while used[t] + sizes[k] > capacity[t]:
        _drop(t, heads[t, 1], st, sizes, key_set)
    push_head(prev[t], nxt[t], heads[t], k)
    res[t, k] = True
    prod[t, k] = produced
    used[t] += sizes[k]
    if semantic[t]:
        m = key_set[k]
        if top[t, m] == 0:  # the index doubles: new slots n..2n-1, lowest handed out first
            n = caps[t, m]
            caps[t, m] = 2 * n
            for j in range(n):
                free[t, m, j] = 2 * n - 1 - j
            top[t, m] = n
        top[t, m] -= 1
        slot[t, k] = free[t, m, top[t, m]]


@njit(cache=True, inline="always")
def _match(t, k, st, floors, vid_of_key, members_ptr, members, nb_ptr, nb_vid, nb_cos):
    """The resident key request key ``k`` matches in tier ``t`` (-1: none): the serve path's
    :func:`mmcache.sim.cachebench.neighbours.best_resident` over the tier's slots (-1: not resident)."""
    res, prod, prev, nxt, heads, used, slot, free, top, caps, semantic = st
    if res[t, k]:
        return k
    if not semantic[t]:
        return -1
    best, margin = best_resident(vid_of_key[k], floors[t], slot[t], nb_ptr, nb_vid, nb_cos,
                                 members_ptr, members)
    return best if margin >= np.float32(0.0) else -1


@njit(cache=True)
def _replay(start, stop, key_of_request, now, ttl, sizes, key_set, capacity, promote, serves,
            floors, st, vid_of_key, members_ptr, members, nb_ptr, nb_vid, nb_cos,
            hit_tier, hit_key):
    prod = st[1]
    n_tiers = capacity.shape[0]
    for i in range(start, stop):
        k = key_of_request[i]
        fresh_after = now[i] - ttl
        found, ft = -1, -1
        for t in range(n_tiers):
            if not serves[t, key_set[k]]:
                continue
            found = _match(t, k, st, floors[key_set[k]], vid_of_key, members_ptr, members,
                           nb_ptr, nb_vid, nb_cos)
            while found >= 0 and prod[t, found] < fresh_after:
                _drop(t, found, st, sizes, key_set)
                found = _match(t, k, st, floors[key_set[k]], vid_of_key, members_ptr,
                               members, nb_ptr, nb_vid, nb_cos)
            if found >= 0:
                ft = t
                break
        if found < 0:
            for t in range(n_tiers):
                if serves[t, key_set[k]]:
                    _admit(t, k, now[i], st, sizes, key_set, capacity, promote)
            continue
        produced = prod[ft, found]
        for t in range(ft + 1):
            if serves[t, key_set[found]]:
                _admit(t, found, produced, st, sizes, key_set, capacity, promote)
        hit_tier[i] = ft
        hit_key[i] = found


class TierReplay:
    """The compiled replay of ``workload`` through LRU / FIFO ``specs`` over its neighbour
    ``table`` (at or below every floor a lookup asks for), the tiers' state kept between calls
    of :meth:`serve`, which serves the next requests in order (full modality, every miss
    admitted)."""

    def __init__(self, table: NeighbourTable, workload, specs: Sequence["TierSpec"],
                 ttl_s: float | None) -> None:
        n_keys, n_tiers, n_sets = table.keys.shape[0], len(specs), table.set_size.shape[0]
        first = np.zeros(n_keys, np.int64)
        first[table.key_of_request[::-1]] = np.arange(len(workload))[::-1]
        self.table, self.workload, self.specs = table, workload, tuple(specs)
        self.sizes = workload.size[first].astype(np.int64)
        self.key_set = workload.modality_set[first].astype(np.int64)
        self.key_intent = workload.intent[first].astype(np.int64)
        slots_max = FIRST_SLOTS << max(0, int(np.ceil(np.log2(max(1, table.set_size.max())
                                                              / FIRST_SLOTS))))
        semantic = np.array([s.match == "semantic" for s in specs])
        free = np.zeros((n_tiers, n_sets, slots_max), np.int32)
        free[:, :, :FIRST_SLOTS] = np.arange(FIRST_SLOTS - 1, -1, -1, dtype=np.int32)
        self.state = (
            np.zeros((n_tiers, n_keys), np.bool_), np.zeros((n_tiers, n_keys)),
            np.full((n_tiers, n_keys), -1, np.int32), np.full((n_tiers, n_keys), -1, np.int32),
            np.full((n_tiers, 2), -1, np.int64), np.zeros(n_tiers, np.int64),
            np.full((n_tiers, n_keys), -1, np.int32), free,
            np.full((n_tiers, n_sets), FIRST_SLOTS, np.int64),
            np.full((n_tiers, n_sets), FIRST_SLOTS, np.int64), semantic)
        self.now = workload.time.astype(np.float64)
        self.ttl = np.inf if ttl_s is None else float(ttl_s)
        self.capacity = np.array([s.capacity_bytes for s in specs], np.int64)
        self.promote = np.array([s.policy == "lru" for s in specs])
        self.serves = np.array([s.serves() for s in specs]).reshape(n_tiers, -1)
        self.hit_tier = np.full(len(workload), -1, np.int16)
        self.hit_key = np.full(len(workload), -1, np.int64)
        self.served = 0

    def floors(self, offsets: Mapping[str, float] | None) -> np.ndarray:
        """(modality set, tier, column) floors of a lookup with δ ``offsets``: the tier's
        threshold - the offset of the set's modality in that column (float32, as
        :meth:`mmcache.sim.cachebench.Replayer.serve` computes them; padding columns at the
        threshold)."""
        offsets = offsets or {}
        columns = self.table.nb_cos.shape[1]
        shift = np.array([[offsets.get(ms[j], 0.0) if j < len(ms) else 0.0
                           for j in range(columns)] for ms in MODALITY_SETS])
        return np.array([[s.threshold - row for s in self.specs] for row in shift], np.float32)

    def serve(self, stop: int, offsets: Mapping[str, float] | None = None
              ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Serve the requests from the first not yet served to ``stop`` - 1 with δ ``offsets``
        per modality (lowering the semantic tiers' thresholds); (hit tier per request (-1:
        miss), hit exact key (-1: none), false hit, bytes of the answer served (0 on a miss))
        of those requests."""
        start, table = self.served, self.table
        if not start <= stop <= len(self.workload):
            raise ConfigError(f"requests up to {start} are served; cannot serve to {stop}")
        _replay(start, stop, table.key_of_request, self.now, self.ttl, self.sizes, self.key_set,
                self.capacity, self.promote, self.serves, self.floors(offsets), self.state,
                table.vid_of_key, table.members_ptr, table.members, table.nb_ptr, table.nb_vid,
                table.nb_cos, self.hit_tier, self.hit_key)
        self.served = stop
        hit_tier, dense = self.hit_tier[start:stop], self.hit_key[start:stop]
        hit = hit_tier >= 0
        false_hit = np.zeros(stop - start, bool)
        false_hit[hit] = self.key_intent[dense[hit]] != self.workload.intent[start:stop][hit]
        keys = np.where(hit, table.keys[np.maximum(dense, 0)].astype(np.int64), -1)
        return hit_tier, keys, false_hit, np.where(hit, self.sizes[np.maximum(dense, 0)], 0)
