"""CLOCK replay kernel (FIFO with reinsertion, n-bit counters)."""

from __future__ import annotations

import numpy as np

from mmcache.sim.jit import array_loop
from mmcache.sim.kernels._lists import new_list, new_links, pop_tail, push_head


@array_loop
def _replay(ids, sizes, cache_size, max_freq, prev, nxt, ht, resident, freq, obj_size):
    used = 0
    miss_cnt = 0
    miss_byte = 0
    for i in range(ids.shape[0]):
        x = ids[i]
        if resident[x]:
            if freq[x] < max_freq:
                freq[x] += 1
            continue
        s = sizes[i]
        miss_cnt += 1
        miss_byte += s
        if s > cache_size:
            continue
        while used + s > cache_size:
            v = pop_tail(prev, nxt, ht)
            while freq[v] >= 1:
                freq[v] -= 1
                push_head(prev, nxt, ht, v)
                v = pop_tail(prev, nxt, ht)
            resident[v] = False
            used -= obj_size[v]
        push_head(prev, nxt, ht, x)
        resident[x] = True
        freq[x] = 0
        obj_size[x] = s
        used += s
    return miss_cnt, miss_byte


def replay(ids: np.ndarray, sizes: np.ndarray, next_access: np.ndarray, n_obj: int,
           cache_size: int, n_bit_counter: int = 1) -> tuple[int, int]:
    """(miss_cnt, miss_byte) of CLOCK on dense ids."""
    prev, nxt = new_links(n_obj)
    return _replay(ids, sizes, cache_size, (1 << n_bit_counter) - 1, prev, nxt, new_list(),
                   np.zeros(n_obj, np.bool_), np.zeros(n_obj, np.int64),
                   np.zeros(n_obj, np.int64))
