"""Entropy-retention replay kernel: two LRU lists, low-entropy first; ``entropy`` per
request re-classes the object on every admission and hit."""

from __future__ import annotations

import numpy as np

from mmcache.sim.jit import array_loop
from mmcache.sim.kernels._lists import new_list, new_links, pop_tail, push_head, unlink


@array_loop
def _replay(ids, sizes, entropy, cache_size, threshold, prev, nxt, low_list, normal_list,
            resident, low, obj_size):
    # low[x]: whether resident x sits in the low-entropy list.
    used = 0
    miss_cnt = 0
    miss_byte = 0
    for i in range(ids.shape[0]):
        x = ids[i]
        if resident[x]:
            unlink(prev, nxt, low_list if low[x] else normal_list, x)
        else:
            s = sizes[i]
            miss_cnt += 1
            miss_byte += s
            if s > cache_size:
                continue
            while used + s > cache_size:
                v = pop_tail(prev, nxt, low_list if low_list[1] >= 0 else normal_list)
                resident[v] = False
                used -= obj_size[v]
            resident[x] = True
            obj_size[x] = s
            used += s
        low[x] = entropy[i] < threshold
        push_head(prev, nxt, low_list if low[x] else normal_list, x)
    return miss_cnt, miss_byte


def replay(ids: np.ndarray, sizes: np.ndarray, next_access: np.ndarray, n_obj: int,
           cache_size: int, entropy: np.ndarray, threshold: float = 0.35) -> tuple[int, int]:
    """(miss_cnt, miss_byte) of entropy-retention on dense ids; ``entropy`` per request."""
    prev, nxt = new_links(n_obj)
    return _replay(ids, sizes, np.asarray(entropy, np.float64), cache_size, float(threshold),
                   prev, nxt, new_list(), new_list(), np.zeros(n_obj, np.bool_),
                   np.zeros(n_obj, np.bool_), np.zeros(n_obj, np.int64))
