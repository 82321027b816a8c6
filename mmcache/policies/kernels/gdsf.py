"""GDSF replay kernel: a min-heap of (priority, stamp) with lazy deletion; insert-first;
``cost`` per request (a hit ranks the object by the cost it came with)."""

from __future__ import annotations

import numpy as np
from numba import njit

from ..._jit import array_loop


@njit(cache=True, inline="always")
def _less(pri, stamp, a, b):
    return pri[a] < pri[b] or (pri[a] == pri[b] and stamp[a] < stamp[b])


@array_loop
def _push(pri, stamp, obj, n, p, st, x):
    j = n
    pri[j], stamp[j], obj[j] = p, st, x
    while j > 0:
        parent = (j - 1) >> 1
        if not _less(pri, stamp, j, parent):
            break
        pri[j], pri[parent] = pri[parent], pri[j]
        stamp[j], stamp[parent] = stamp[parent], stamp[j]
        obj[j], obj[parent] = obj[parent], obj[j]
        j = parent
    return n + 1


@array_loop
def _pop(pri, stamp, obj, n):
    n -= 1
    pri[0], stamp[0], obj[0] = pri[n], stamp[n], obj[n]
    j = 0
    while True:
        child = 2 * j + 1
        if child >= n:
            break
        if child + 1 < n and _less(pri, stamp, child + 1, child):
            child += 1
        if not _less(pri, stamp, child, j):
            break
        pri[j], pri[child] = pri[child], pri[j]
        stamp[j], stamp[child] = stamp[child], stamp[j]
        obj[j], obj[child] = obj[child], obj[j]
        j = child
    return n


@array_loop
def _replay(ids, sizes, cost, cache_size, freq, obj_size, live, pri, stamp, obj):
    # live[x]: stamp of x's valid heap entry, -1 when x is not resident.
    used = 0
    miss_cnt = 0
    miss_byte = 0
    n = 0
    clock = 0
    aging = 0.0
    for i in range(ids.shape[0]):
        x = ids[i]
        if live[x] >= 0:
            freq[x] += 1
            live[x] = clock
            n = _push(pri, stamp, obj, n, aging + freq[x] * cost[i] * 1.0e6 / obj_size[x],
                      clock, x)
            clock += 1
            continue
        s = sizes[i]
        miss_cnt += 1
        miss_byte += s
        if s > cache_size:
            continue
        incoming = aging + cost[i] * 1.0e6 / s
        rejected = False
        while used + s > cache_size:
            while live[obj[0]] != stamp[0]:
                n = _pop(pri, stamp, obj, n)
            if pri[0] > incoming:  # the incoming object ranks lowest: it goes
                aging = incoming
                rejected = True
                break
            v = obj[0]
            aging = pri[0]
            n = _pop(pri, stamp, obj, n)
            live[v] = -1
            used -= obj_size[v]
        if rejected:
            continue
        freq[x] = 1
        obj_size[x] = s
        live[x] = clock
        n = _push(pri, stamp, obj, n, incoming, clock, x)
        clock += 1
        used += s
    return miss_cnt, miss_byte


def replay(ids: np.ndarray, sizes: np.ndarray, next_access: np.ndarray, n_obj: int,
           cache_size: int, cost: np.ndarray | None = None) -> tuple[int, int]:
    """(miss_cnt, miss_byte) of GDSF on dense ids; ``cost`` per request (default 1)."""
    n_req = ids.shape[0]
    cost = np.ones(n_req) if cost is None else np.asarray(cost, np.float64)
    return _replay(ids, sizes, cost, cache_size, np.zeros(n_obj, np.int64),
                   np.zeros(n_obj, np.int64), np.full(n_obj, -1, np.int64), np.empty(n_req, np.float64),
                   np.empty(n_req, np.int64), np.empty(n_req, np.int32))
