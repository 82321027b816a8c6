"""ARC replay kernel (byte-sized, as libCacheSim's ARC; ``paper_step`` for ARC-paper, whose
adaptation step is counted in objects of the requested size, see mmcache.policies.arc)."""

from __future__ import annotations

import numpy as np

from mmcache.sim.jit import array_loop
from mmcache.sim.kernels._lists import new_list, new_links, pop_tail, push_head, unlink

# Where an object is: nowhere, T1, T2, B1 (ghost of T1), B2 (ghost of T2).
NONE, T1, T2, B1, B2 = 0, 1, 2, 3, 4


@array_loop
def _replay(ids, sizes, cache_size, prev, nxt, lists, byte, where, obj_size, paper_step):
    # lists[k] is the head/tail pair of list k (1..4); byte[k] its size in bytes.
    p = 0.0
    miss_cnt = 0
    miss_byte = 0
    for i in range(ids.shape[0]):
        x = ids[i]
        w = where[x]
        if w == T1:
            unlink(prev, nxt, lists[T1], x)
            push_head(prev, nxt, lists[T2], x)
            byte[T1] -= obj_size[x]
            byte[T2] += obj_size[x]
            where[x] = T2
            continue
        if w == T2:
            if lists[T2][0] != x:
                unlink(prev, nxt, lists[T2], x)
                push_head(prev, nxt, lists[T2], x)
            continue
        s = sizes[i]
        miss_cnt += 1
        miss_byte += s
        ghost = 0
        unit = float(s) if paper_step else 1.0
        if w == B1:
            p = min(p + unit * max(byte[B2] / byte[B1], 1.0), float(cache_size))
            ghost = 1
        elif w == B2:
            p = max(p - unit * max(byte[B1] / byte[B2], 1.0), 0.0)
            ghost = 2
        if ghost:
            unlink(prev, nxt, lists[w], x)
            byte[w] -= obj_size[x]
            where[x] = NONE
        if s > cache_size:
            continue
        while byte[T1] + byte[T2] + s > cache_size:
            replace = True
            if not ghost:
                if byte[T1] + byte[B1] + s > cache_size:
                    if byte[B1] > 0:
                        g = pop_tail(prev, nxt, lists[B1])
                        byte[B1] -= obj_size[g]
                        where[g] = NONE
                    else:
                        v = pop_tail(prev, nxt, lists[T1])
                        byte[T1] -= obj_size[v]
                        where[v] = NONE
                        replace = False
                elif byte[T1] + byte[B1] + byte[T2] + byte[B2] >= 2 * cache_size \
                        and byte[B2] > 0:
                    g = pop_tail(prev, nxt, lists[B2])
                    byte[B2] -= obj_size[g]
                    where[g] = NONE
            if replace:
                t1 = byte[T1]
                if (t1 > 0 and (t1 > p or (t1 == p and ghost == 2))) or byte[T2] == 0:
                    src, dst = T1, B1
                else:
                    src, dst = T2, B2
                v = pop_tail(prev, nxt, lists[src])
                push_head(prev, nxt, lists[dst], v)
                byte[src] -= obj_size[v]
                byte[dst] += obj_size[v]
                where[v] = dst
        dst = T2 if ghost else T1
        push_head(prev, nxt, lists[dst], x)
        byte[dst] += s
        where[x] = dst
        obj_size[x] = s
    return miss_cnt, miss_byte


def replay(ids: np.ndarray, sizes: np.ndarray, next_access: np.ndarray, n_obj: int,
           cache_size: int, paper_step: bool = False) -> tuple[int, int]:
    """(miss_cnt, miss_byte) of ARC (``paper_step``: ARC-paper) on dense ids."""
    prev, nxt = new_links(n_obj)
    lists = np.stack([new_list() for _ in range(5)])
    return _replay(ids, sizes, cache_size, prev, nxt, lists, np.zeros(5, np.int64),
                   np.zeros(n_obj, np.int8), np.zeros(n_obj, np.int64), paper_step)
