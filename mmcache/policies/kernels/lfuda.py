"""LFUDA replay kernel (mirrors mmcache.policies.lfuda, i.e. libCacheSim's LFUDA).

Counts grow by the current age on every hit, so buckets are found through a typed
dict from count to a slot in ``heads`` (head/tail pairs, one per distinct count), and
the counts of non-empty buckets are kept sorted in ``ne[:ne_n[0]]`` for the
next-minimum lookup.
"""

from __future__ import annotations

import numpy as np
from numba import njit, types
from numba.typed import Dict

from ._lists import new_links, push_head, unlink

#: Largest count the kernel tracks; past it, simulate() falls back to the online object.
COUNT_LIMIT = 2**62


@njit(cache=True)
def _slot(slots, f):
    """Slot of the bucket for count ``f``, allocated on first use."""
    if f in slots:
        return slots[f]
    s = len(slots)
    slots[f] = s
    return s


@njit(cache=True)
def _add(prev, nxt, heads, slots, ne, ne_n, x, f):
    b = heads[_slot(slots, f)]
    if b[0] < 0:  # bucket becomes non-empty: insert f into the sorted counts
        j = ne_n[0]
        while j > 0 and ne[j - 1] > f:
            ne[j] = ne[j - 1]
            j -= 1
        ne[j] = f
        ne_n[0] += 1
    push_head(prev, nxt, b, x)


@njit(cache=True)
def _discard(prev, nxt, heads, slots, ne, ne_n, x, f):
    b = heads[slots[f]]
    unlink(prev, nxt, b, x)
    if b[0] < 0:  # bucket becomes empty: drop f from the sorted counts
        n = ne_n[0]
        j = np.searchsorted(ne[:n], f)
        for k in range(j, n - 1):
            ne[k] = ne[k + 1]
        ne_n[0] = n - 1


@njit(cache=True)
def _raise_min(ne, ne_n, min_freq):
    """Smallest non-empty count above ``min_freq`` (unchanged if none)."""
    n = ne_n[0]
    j = np.searchsorted(ne[:n], min_freq, side="right")
    return ne[j] if j < n else min_freq


@njit(cache=True)
def _replay(ids, sizes, cache_size, prev, nxt, heads, freq, obj_size, slots, ne, ne_n):
    used = 0
    miss_cnt = 0
    miss_byte = 0
    min_freq = 0
    for i in range(ids.shape[0]):
        x = ids[i]
        old = freq[x]
        if old > 0:
            new = old + min_freq
            if new > COUNT_LIMIT:  # counts can grow geometrically; beyond int64 give up
                return -1, -1
            freq[x] = new
            _discard(prev, nxt, heads, slots, ne, ne_n, x, old)
            if old == min_freq and heads[slots[old], 0] < 0:
                min_freq = _raise_min(ne, ne_n, min_freq)
            _add(prev, nxt, heads, slots, ne, ne_n, x, new)
            continue
        s = sizes[i]
        miss_cnt += 1
        miss_byte += s
        if s > cache_size:
            continue
        while used + s > cache_size:
            f = max(min_freq, 1)
            if f not in slots or heads[slots[f], 0] < 0:  # stale minimum
                f = ne[0]
            min_freq = f
            v = heads[slots[f], 1]
            _discard(prev, nxt, heads, slots, ne, ne_n, v, f)
            if heads[slots[f], 0] < 0:
                min_freq = _raise_min(ne, ne_n, min_freq)
            freq[v] = 0
            used -= obj_size[v]
        freq[x] = min_freq + 1
        _add(prev, nxt, heads, slots, ne, ne_n, x, min_freq + 1)
        obj_size[x] = s
        used += s
    return miss_cnt, miss_byte


def replay(ids: np.ndarray, sizes: np.ndarray, next_access: np.ndarray, n_obj: int,
           cache_size: int) -> tuple[int, int] | None:
    """(miss_cnt, miss_byte) of LFUDA on dense ids; None if counts outgrow int64."""
    prev, nxt = new_links(n_obj)
    slots = Dict.empty(key_type=types.int64, value_type=types.int64)
    heads = np.full((ids.shape[0] + 2, 2), -1, np.int64)
    counts = _replay(ids, sizes, cache_size, prev, nxt, heads, np.zeros(n_obj, np.int64),
                     np.zeros(n_obj, np.int64), slots, np.zeros(n_obj + 2, np.int64),
                     np.zeros(1, np.int64))
    return None if counts[0] < 0 else counts
