"""LFUDA replay kernel (mirrors mmcache.policies.lfuda, i.e. libCacheSim's LFUDA).

Counts grow by the current age on every hit, so buckets (head/tail pairs in ``heads``,
one per distinct count, FIFO by the time a key reached the count) are numbered densely:
an open-addressing table (:mod:`mmcache.sim.dense`) maps a count to its slot, ``cnt`` maps
back, and each key remembers its slot. The slots of non-empty buckets sit in a min-heap
by count with lazy deletion; the next non-empty count above the age is found by setting
the (rare) counts below it aside and putting them back.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from mmcache.sim.dense import grow, lookup, new_table, number
from mmcache.sim.jit import array_loop
from mmcache.sim.kernels._lists import new_links, push_head, unlink

#: Rows of the count -> slot table to start with (log2; it doubles when half full).
TABLE_BITS = 10

#: Largest count the kernel tracks; past it, simulate() falls back to the online object.
COUNT_LIMIT = 2**62

#: The kernel's state between calls (it stops to let its count table grow): the next request,
#: bytes cached, misses, missed bytes, the age (lowest count), heap size, slots numbered.
NEXT, USED, MISS, MISS_BYTE, MIN_FREQ, HEAP_N, SLOTS = range(7)


@array_loop
def _heap_push(heap, cnt, n, f):
    j = n
    heap[j] = f
    while j > 0:
        parent = (j - 1) >> 1
        if cnt[heap[parent]] <= cnt[heap[j]]:
            break
        heap[j], heap[parent] = heap[parent], heap[j]
        j = parent
    return n + 1


@array_loop
def _heap_pop(heap, cnt, n):
    n -= 1
    heap[0] = heap[n]
    j = 0
    while True:
        child = 2 * j + 1
        if child >= n:
            break
        if child + 1 < n and cnt[heap[child + 1]] < cnt[heap[child]]:
            child += 1
        if cnt[heap[j]] <= cnt[heap[child]]:
            break
        heap[j], heap[child] = heap[child], heap[j]
        j = child
    return n


@array_loop
def _live_top(heap, cnt, n, heads, queued):
    """Drop heap tops whose bucket is empty; the new heap size."""
    while n > 0:
        s = heap[0]
        if heads[s, 0] >= 0:
            break
        queued[s] = False
        n = _heap_pop(heap, cnt, n)
    return n


@array_loop
def _successor(heap, cnt, n, heads, queued, aside, v):
    """(smallest non-empty count above ``v``, or ``v`` if none; heap size)."""
    k = 0
    n = _live_top(heap, cnt, n, heads, queued)
    while n > 0 and cnt[heap[0]] <= v:
        aside[k] = heap[0]
        k += 1
        n = _heap_pop(heap, cnt, n)
        n = _live_top(heap, cnt, n, heads, queued)
    out = cnt[heap[0]] if n > 0 else v
    for j in range(k):
        n = _heap_push(heap, cnt, n, aside[j])
    return out, n


@njit(cache=True, inline="always")
def _slot(table, bits, n_slots, cnt, f):
    """(slot of the bucket for count ``f``, allocated on first use; n_slots)."""
    s, n_slots = number(table, bits, n_slots, f)
    cnt[s] = f
    return s, n_slots


@array_loop
def _replay(ids, sizes, cache_size, prev, nxt, heads, freq, obj_size, obj_slot, table, bits,
            cnt, queued, heap, aside, st):
    """Replay from request ``st[NEXT]`` on; False when it stopped early because the count
    table is half full (grow it and call again), True at the end (``st[MISS]`` -1: counts
    outgrew int64)."""
    used, miss_cnt, miss_byte = st[USED], st[MISS], st[MISS_BYTE]
    min_freq, n, n_slots = st[MIN_FREQ], st[HEAP_N], st[SLOTS]
    for i in range(st[NEXT], ids.shape[0]):
        if 2 * n_slots > table.shape[0]:
            st[NEXT], st[USED], st[MISS], st[MISS_BYTE] = i, used, miss_cnt, miss_byte
            st[MIN_FREQ], st[HEAP_N], st[SLOTS] = min_freq, n, n_slots
            return False
        x = ids[i]
        old = freq[x]
        if old > 0:
            new = old + min_freq
            if new > COUNT_LIMIT:  # counts can grow geometrically; beyond int64 give up
                st[MISS] = -1
                return True
            freq[x] = new
            so = obj_slot[x]
            unlink(prev, nxt, heads[so], x)
            if old == min_freq and heads[so, 0] < 0:
                min_freq, n = _successor(heap, cnt, n, heads, queued, aside, min_freq)
            sn, n_slots = _slot(table, bits, n_slots, cnt, new)
            if not queued[sn]:
                queued[sn] = True
                n = _heap_push(heap, cnt, n, sn)
            push_head(prev, nxt, heads[sn], x)
            obj_slot[x] = sn
            continue
        s = sizes[i]
        miss_cnt += 1
        miss_byte += s
        if s > cache_size:
            continue
        while used + s > cache_size:
            f = max(min_freq, 1)
            sf = lookup(table, bits, f)
            if sf < 0 or heads[sf, 0] < 0:  # stale minimum: the lowest non-empty count
                n = _live_top(heap, cnt, n, heads, queued)
                sf = heap[0]
                f = cnt[sf]
            min_freq = f
            v = heads[sf, 1]
            unlink(prev, nxt, heads[sf], v)
            if heads[sf, 0] < 0:
                min_freq, n = _successor(heap, cnt, n, heads, queued, aside, min_freq)
            freq[v] = 0
            used -= obj_size[v]
        sn, n_slots = _slot(table, bits, n_slots, cnt, min_freq + 1)
        if not queued[sn]:
            queued[sn] = True
            n = _heap_push(heap, cnt, n, sn)
        freq[x] = min_freq + 1
        push_head(prev, nxt, heads[sn], x)
        obj_slot[x] = sn
        obj_size[x] = s
        used += s
    st[MISS], st[MISS_BYTE] = miss_cnt, miss_byte
    return True


def replay(ids: np.ndarray, sizes: np.ndarray, next_access: np.ndarray, n_obj: int,
           cache_size: int) -> tuple[int, int] | None:
    """(miss_cnt, miss_byte) of LFUDA on dense ids; None if counts outgrow int64."""
    prev, nxt = new_links(n_obj)
    n_slots = ids.shape[0] + 2
    heads = np.full((n_slots, 2), -1, np.int64)
    table, bits = new_table(TABLE_BITS), TABLE_BITS
    per_obj = (np.zeros(n_obj, np.int64), np.zeros(n_obj, np.int64), np.zeros(n_obj, np.int64))
    per_slot = (np.zeros(n_slots, np.int64), np.zeros(n_slots, np.bool_),
                np.zeros(n_slots, np.int64), np.zeros(n_slots, np.int64))
    st = np.zeros(SLOTS + 1, np.int64)
    while not _replay(ids, sizes, cache_size, prev, nxt, heads, *per_obj, table, bits,
                      *per_slot, st):
        table, bits = grow(table, bits)
    return None if st[MISS] < 0 else (int(st[MISS]), int(st[MISS_BYTE]))
