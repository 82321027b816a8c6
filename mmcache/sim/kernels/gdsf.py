"""GDSF replay kernel: a min-heap of (priority, stamp) with lazy deletion; insert-first;
``cost`` per request (a hit ranks the object by the cost it came with)."""

from __future__ import annotations

import numpy as np

from mmcache.sim.jit import array_loop
from mmcache.sim.kernels._heap import drop_stale, new_heap, pop, push


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
            n = push(pri, stamp, obj, n, aging + freq[x] * cost[i] * 1.0e6 / obj_size[x],
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
            n = drop_stale(pri, stamp, obj, n, live)
            if pri[0] > incoming:  # the incoming object ranks lowest: it goes
                aging = incoming
                rejected = True
                break
            v = obj[0]
            aging = pri[0]
            n = pop(pri, stamp, obj, n)
            live[v] = -1
            used -= obj_size[v]
        if rejected:
            continue
        freq[x] = 1
        obj_size[x] = s
        live[x] = clock
        n = push(pri, stamp, obj, n, incoming, clock, x)
        clock += 1
        used += s
    return miss_cnt, miss_byte


def replay(ids: np.ndarray, sizes: np.ndarray, next_access: np.ndarray, n_obj: int,
           cache_size: int, cost: np.ndarray | None = None) -> tuple[int, int]:
    """(miss_cnt, miss_byte) of GDSF on dense ids; ``cost`` per request (default 1)."""
    n_req = ids.shape[0]
    cost = np.ones(n_req) if cost is None else np.asarray(cost, np.float64)
    return _replay(ids, sizes, cost, cache_size, np.zeros(n_obj, np.int64),
                   np.zeros(n_obj, np.int64), np.full(n_obj, -1, np.int64), *new_heap(n_req))
