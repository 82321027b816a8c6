"""Belady (MIN) replay kernel: a max-heap of next-access priorities with lazy deletion."""

from __future__ import annotations

import numpy as np
from numba import njit

from mmcache.sim.jit import array_loop
from mmcache.policies.belady import NEVER


@njit(cache=True, inline="always")
def _heap_push(keys, vals, n, key, val):
    j = n
    while j > 0:
        parent = (j - 1) >> 1
        if keys[parent] >= key:
            break
        keys[j] = keys[parent]
        vals[j] = vals[parent]
        j = parent
    keys[j] = key
    vals[j] = val
    return n + 1


@njit(cache=True, inline="always")
def _heap_pop(keys, vals, n):
    """Drop the root; returns the new size."""
    n -= 1
    key = keys[n]
    val = vals[n]
    j = 0
    while True:
        child = 2 * j + 1
        if child >= n:
            break
        if child + 1 < n and keys[child + 1] > keys[child]:
            child += 1
        if keys[child] <= key:
            break
        keys[j] = keys[child]
        vals[j] = vals[child]
        j = child
    keys[j] = key
    vals[j] = val
    return n


@array_loop
def _replay(ids, sizes, next_access, cache_size, bypass, resident, pri, obj_size, keys, vals):
    used = 0
    miss_cnt = 0
    miss_byte = 0
    n = 0
    for i in range(ids.shape[0]):
        x = ids[i]
        na = next_access[i]
        p = NEVER - i if na < 0 else na
        if resident[x]:
            pri[x] = p
            n = _heap_push(keys, vals, n, p, x)
            continue
        s = sizes[i]
        miss_cnt += 1
        miss_byte += s
        if bypass:
            while n > 0 and not (resident[vals[0]] and pri[vals[0]] == keys[0]):
                n = _heap_pop(keys, vals, n)
            if na < 0 or (s > cache_size - used and n > 0 and na > keys[0]):
                continue
        if s > cache_size:
            continue
        while used + s > cache_size:
            while not (resident[vals[0]] and pri[vals[0]] == keys[0]):
                n = _heap_pop(keys, vals, n)
            v = vals[0]
            n = _heap_pop(keys, vals, n)
            resident[v] = False
            used -= obj_size[v]
        resident[x] = True
        pri[x] = p
        obj_size[x] = s
        used += s
        n = _heap_push(keys, vals, n, p, x)
    return miss_cnt, miss_byte


def replay(ids: np.ndarray, sizes: np.ndarray, next_access: np.ndarray, n_obj: int,
           cache_size: int, bypass: bool = False) -> tuple[int, int]:
    """(miss_cnt, miss_byte) of Belady (``bypass``: Belady-bypass) on dense ids."""
    n_req = ids.shape[0]
    return _replay(ids, sizes, next_access, cache_size, bypass, np.zeros(n_obj, np.bool_),
                   np.zeros(n_obj, np.int64), np.zeros(n_obj, np.int64),
                   np.empty(n_req, np.int64), np.empty(n_req, np.int32))
