"""SIEVE replay kernel."""

from __future__ import annotations

import numpy as np

from mmcache.sim.jit import array_loop
from mmcache.sim.kernels._lists import new_list, new_links, push_head, unlink


@array_loop
def _replay(ids, sizes, cache_size, prev, nxt, ht, resident, visited, obj_size):
    used = 0
    miss_cnt = 0
    miss_byte = 0
    hand = -1
    for i in range(ids.shape[0]):
        x = ids[i]
        if resident[x]:
            visited[x] = True
            continue
        s = sizes[i]
        miss_cnt += 1
        miss_byte += s
        if s > cache_size:
            continue
        while used + s > cache_size:
            v = ht[1] if hand < 0 else hand
            while visited[v]:
                visited[v] = False
                v = prev[v]  # one step newer
                if v < 0:
                    v = ht[1]
            hand = prev[v]
            unlink(prev, nxt, ht, v)
            resident[v] = False
            used -= obj_size[v]
        push_head(prev, nxt, ht, x)
        resident[x] = True
        visited[x] = False
        obj_size[x] = s
        used += s
    return miss_cnt, miss_byte


def replay(ids: np.ndarray, sizes: np.ndarray, next_access: np.ndarray, n_obj: int,
           cache_size: int) -> tuple[int, int]:
    """(miss_cnt, miss_byte) of SIEVE on dense ids."""
    prev, nxt = new_links(n_obj)
    return _replay(ids, sizes, cache_size, prev, nxt, new_list(), np.zeros(n_obj, np.bool_),
                   np.zeros(n_obj, np.bool_), np.zeros(n_obj, np.int64))
