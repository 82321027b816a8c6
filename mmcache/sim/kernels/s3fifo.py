"""S3-FIFO replay kernel (as libCacheSim's S3FIFO)."""

from __future__ import annotations

import numpy as np

from mmcache.sim.jit import array_loop
from mmcache.sim.kernels._lists import new_list, new_links, pop_tail, push_head, unlink

# Where an object is: nowhere, small FIFO, main FIFO, ghost FIFO.
NONE, SMALL, MAIN, GHOST = 0, 1, 2, 3


@array_loop
def _replay(ids, sizes, cache_size, small_size, ghost_size, threshold,
            prev, nxt, lists, byte, where, freq, obj_size):
    main_size = cache_size - small_size
    has_evicted = False
    miss_cnt = 0
    miss_byte = 0
    for i in range(ids.shape[0]):
        x = ids[i]
        w = where[x]
        if w == SMALL or w == MAIN:
            freq[x] += 1
            continue
        s = sizes[i]
        miss_cnt += 1
        miss_byte += s
        ghost_hit = w == GHOST
        if ghost_hit:
            unlink(prev, nxt, lists[GHOST], x)
            byte[GHOST] -= obj_size[x]
            where[x] = NONE
        if s > cache_size or not (s < small_size or (ghost_hit and s <= small_size)):
            continue
        while byte[SMALL] + byte[MAIN] + s > cache_size:
            has_evicted = True
            from_main = byte[MAIN] > main_size or byte[SMALL] == 0
            while not from_main:  # evict from small
                v = pop_tail(prev, nxt, lists[SMALL])
                byte[SMALL] -= obj_size[v]
                if freq[v] >= threshold:
                    push_head(prev, nxt, lists[MAIN], v)
                    byte[MAIN] += obj_size[v]
                    where[v] = MAIN
                    freq[v] = 0
                    from_main = byte[SMALL] == 0
                    continue
                where[v] = NONE
                if obj_size[v] <= ghost_size:
                    while byte[GHOST] + obj_size[v] > ghost_size:
                        g = pop_tail(prev, nxt, lists[GHOST])
                        byte[GHOST] -= obj_size[g]
                        where[g] = NONE
                    push_head(prev, nxt, lists[GHOST], v)
                    byte[GHOST] += obj_size[v]
                    where[v] = GHOST
                break
            if from_main:
                while True:
                    v = pop_tail(prev, nxt, lists[MAIN])
                    if freq[v] >= 1:
                        push_head(prev, nxt, lists[MAIN], v)
                        freq[v] = min(freq[v], 3) - 1
                        continue
                    byte[MAIN] -= obj_size[v]
                    where[v] = NONE
                    break
        if ghost_hit or (not has_evicted and byte[SMALL] >= small_size):
            dst = MAIN
        else:
            dst = SMALL
        push_head(prev, nxt, lists[dst], x)
        byte[dst] += s
        where[x] = dst
        freq[x] = 0
        obj_size[x] = s
    return miss_cnt, miss_byte


def replay(ids: np.ndarray, sizes: np.ndarray, next_access: np.ndarray, n_obj: int,
           cache_size: int, small_size_ratio: float = 0.1, ghost_size_ratio: float = 0.9,
           move_to_main_threshold: int = 2) -> tuple[int, int]:
    """(miss_cnt, miss_byte) of S3-FIFO on dense ids."""
    prev, nxt = new_links(n_obj)
    lists = np.stack([new_list() for _ in range(4)])
    return _replay(ids, sizes, cache_size, int(cache_size * small_size_ratio),
                   int(cache_size * ghost_size_ratio), move_to_main_threshold, prev, nxt, lists,
                   np.zeros(4, np.int64), np.zeros(n_obj, np.int8), np.zeros(n_obj, np.int64),
                   np.zeros(n_obj, np.int64))
