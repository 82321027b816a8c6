"""LRU replay kernel; with ``promote=False`` (hits leave the order alone) it is FIFO."""

from __future__ import annotations

import numpy as np

from mmcache.sim.jit import array_loop
from mmcache.sim.kernels._lists import new_list, new_links, pop_tail, push_head, unlink


@array_loop
def _replay(ids, sizes, cache_size, promote, prev, nxt, ht, resident, obj_size):
    used = 0
    miss_cnt = 0
    miss_byte = 0
    for i in range(ids.shape[0]):
        x = ids[i]
        if resident[x]:
            if promote and ht[0] != x:
                unlink(prev, nxt, ht, x)
                push_head(prev, nxt, ht, x)
            continue
        s = sizes[i]
        miss_cnt += 1
        miss_byte += s
        if s > cache_size:
            continue
        while used + s > cache_size:
            v = pop_tail(prev, nxt, ht)
            resident[v] = False
            used -= obj_size[v]
        push_head(prev, nxt, ht, x)
        resident[x] = True
        obj_size[x] = s
        used += s
    return miss_cnt, miss_byte


def replay(ids: np.ndarray, sizes: np.ndarray, next_access: np.ndarray, n_obj: int,
           cache_size: int, promote: bool = True) -> tuple[int, int]:
    """(miss_cnt, miss_byte) of LRU (FIFO when ``promote`` is False) on dense ids."""
    prev, nxt = new_links(n_obj)
    return _replay(ids, sizes, cache_size, promote, prev, nxt, new_list(),
                   np.zeros(n_obj, np.bool_), np.zeros(n_obj, np.int64))
