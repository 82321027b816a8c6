"""LRU-K replay kernel: keys with fewer than ``k`` accesses since admission in a FIFO list,
the others in a lazily-deleted heap ranked by their K-th most recent access."""

from __future__ import annotations

import numpy as np

from mmcache.sim.jit import array_loop
from mmcache.sim.kernels._heap import drop_stale, new_heap, pop, push
from mmcache.sim.kernels._lists import new_list, new_links, pop_tail, push_head, unlink


@array_loop
def _replay(ids, sizes, cache_size, k, history, count, live, obj_size, prev, nxt, young,
            pri, stamp, obj):
    # history[x]: x's last k access stamps, a ring indexed by count[x] (accesses since
    # admission, 0 when x is not resident); live[x]: x's K-th most recent access while x
    # is in the heap, -1 otherwise.
    used = 0
    miss_cnt = 0
    miss_byte = 0
    n = 0
    clock = 0
    for i in range(ids.shape[0]):
        x = ids[i]
        if count[x] == 0:
            s = sizes[i]
            miss_cnt += 1
            miss_byte += s
            if s > cache_size:
                continue
            while used + s > cache_size:
                if young[1] >= 0:
                    v = pop_tail(prev, nxt, young)
                else:
                    n = drop_stale(pri, stamp, obj, n, live)
                    v = obj[0]
                    n = pop(pri, stamp, obj, n)
                    live[v] = -1
                count[v] = 0
                used -= obj_size[v]
            obj_size[x] = s
            used += s
        history[x, count[x] % k] = clock
        count[x] += 1
        clock += 1
        if count[x] < k:
            if count[x] == 1:
                push_head(prev, nxt, young, x)
            continue
        if count[x] == k and k > 1:
            unlink(prev, nxt, young, x)
        kth = history[x, count[x] % k]
        live[x] = kth
        n = push(pri, stamp, obj, n, float(kth), kth, x)
    return miss_cnt, miss_byte


def replay(ids: np.ndarray, sizes: np.ndarray, next_access: np.ndarray, n_obj: int,
           cache_size: int, k: int = 2) -> tuple[int, int]:
    """(miss_cnt, miss_byte) of LRU-K on dense ids."""
    prev, nxt = new_links(n_obj)
    return _replay(ids, sizes, cache_size, k, np.zeros((n_obj, k), np.int64),
                   np.zeros(n_obj, np.int64), np.full(n_obj, -1, np.int64),
                   np.zeros(n_obj, np.int64), prev, nxt, new_list(), *new_heap(ids.shape[0]))
