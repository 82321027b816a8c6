"""Value-per-byte replay kernel: a lazily-deleted min-heap of ``L + n/(n+1)·cost/size``;
``cost`` per request (default ``default_cost``)."""

from __future__ import annotations

import numpy as np

from mmcache.sim.jit import array_loop
from mmcache.sim.kernels._heap import drop_stale, new_heap, pop, push


@array_loop
def _replay(ids, sizes, cost, cache_size, count, obj_size, live, pri, stamp, obj):
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
            count[x] += 1
        else:
            s = sizes[i]
            miss_cnt += 1
            miss_byte += s
            if s > cache_size:
                continue
            while used + s > cache_size:
                n = drop_stale(pri, stamp, obj, n, live)
                v = obj[0]
                aging = pri[0]
                n = pop(pri, stamp, obj, n)
                live[v] = -1
                used -= obj_size[v]
            count[x] = 1
            obj_size[x] = s
            used += s
        c = count[x]
        value = c / (c + 1.0) * cost[i] / max(obj_size[x], 1)  # a hit's cost replaces x's
        live[x] = clock
        n = push(pri, stamp, obj, n, aging + value, clock, x)
        clock += 1
    return miss_cnt, miss_byte


def replay(ids: np.ndarray, sizes: np.ndarray, next_access: np.ndarray, n_obj: int,
           cache_size: int, cost: np.ndarray | None = None,
           default_cost: float = 1.0) -> tuple[int, int] | None:
    """(miss_cnt, miss_byte) of value-per-byte on dense ids; ``cost`` per request. None when
    a cost is negative (the online object decides whether that request raises)."""
    n_req = ids.shape[0]
    cost = np.full(n_req, float(default_cost)) if cost is None else np.asarray(cost, np.float64)
    if np.any(cost < 0):
        return None
    return _replay(ids, sizes, cost, cache_size, np.zeros(n_obj, np.int64),
                   np.zeros(n_obj, np.int64),
                   np.full(n_obj, -1, np.int64), *new_heap(n_req))
