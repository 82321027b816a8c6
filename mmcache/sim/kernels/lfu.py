"""LFU replay kernel (as libCacheSim's LFU: FIFO within a frequency, lazy minimum)."""

from __future__ import annotations

import numpy as np

from mmcache.sim.jit import array_loop
from mmcache.sim.kernels._lists import new_links, push_head, unlink


@array_loop
def _raise_min(buckets, min_freq, max_freq):
    """Next non-empty frequency above ``min_freq`` (unchanged if none)."""
    for f in range(min_freq + 1, max_freq + 1):
        if buckets[f, 0] >= 0:
            return f
    return min_freq


@array_loop
def _replay(ids, sizes, cache_size, prev, nxt, buckets, freq, obj_size):
    # buckets[f] is the head/tail pair of the list of objects with frequency f;
    # the head is the newest arrival, the tail the oldest (evicted first).
    used = 0
    miss_cnt = 0
    miss_byte = 0
    min_freq = 1
    max_freq = 1
    for i in range(ids.shape[0]):
        x = ids[i]
        f = freq[x]
        if f > 0:
            unlink(prev, nxt, buckets[f], x)
            freq[x] = f + 1
            max_freq = max(max_freq, f + 1)
            push_head(prev, nxt, buckets[f + 1], x)
            if f == min_freq and buckets[f, 0] < 0:
                min_freq = _raise_min(buckets, min_freq, max_freq)
            continue
        s = sizes[i]
        miss_cnt += 1
        miss_byte += s
        if s > cache_size:
            continue
        while used + s > cache_size:
            v = buckets[min_freq, 1]
            unlink(prev, nxt, buckets[min_freq], v)
            if buckets[min_freq, 0] < 0:
                min_freq = _raise_min(buckets, min_freq, max_freq)
            freq[v] = 0
            used -= obj_size[v]
        push_head(prev, nxt, buckets[1], x)
        freq[x] = 1
        min_freq = 1
        obj_size[x] = s
        used += s
    return miss_cnt, miss_byte


def replay(ids: np.ndarray, sizes: np.ndarray, next_access: np.ndarray, n_obj: int,
           cache_size: int) -> tuple[int, int]:
    """(miss_cnt, miss_byte) of LFU on dense ids."""
    prev, nxt = new_links(n_obj)
    buckets = np.full((ids.shape[0] + 2, 2), -1, np.int64)
    return _replay(ids, sizes, cache_size, prev, nxt, buckets, np.zeros(n_obj, np.int64),
                   np.zeros(n_obj, np.int64))
