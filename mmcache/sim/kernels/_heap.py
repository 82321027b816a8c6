"""A binary min-heap of (priority, stamp) entries carrying an object id, for numba kernels.

The heap lives in three caller-owned arrays (``pri``, ``stamp``, ``obj``) sized for every
push the replay can make; ``n`` is its length, returned by each operation. Entries order
by priority, then stamp; kernels delete lazily (an entry whose stamp is not its object's
current one is stale and skipped when it reaches the top).
"""

from __future__ import annotations

import numpy as np
from numba import njit

from mmcache.sim.jit import array_loop


def new_heap(capacity: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Empty ``pri``, ``stamp`` and ``obj`` arrays for up to ``capacity`` entries."""
    return (np.empty(capacity, np.float64), np.empty(capacity, np.int64),
            np.empty(capacity, np.int32))


@njit(cache=True, inline="always")
def _less(pri, stamp, a, b):
    return pri[a] < pri[b] or (pri[a] == pri[b] and stamp[a] < stamp[b])


@array_loop
def push(pri, stamp, obj, n, p, st, x):
    """Add entry (``p``, ``st``) for object ``x``; returns the new length."""
    j = n
    pri[j], stamp[j], obj[j] = p, st, x
    while j > 0:
        parent = (j - 1) >> 1
        if not _less(pri, stamp, j, parent):
            break
        pri[j], pri[parent] = pri[parent], pri[j]
        stamp[j], stamp[parent] = stamp[parent], stamp[j]
        obj[j], obj[parent] = obj[parent], obj[j]
        j = parent
    return n + 1


@array_loop
def pop(pri, stamp, obj, n):
    """Remove the top (least) entry; returns the new length."""
    n -= 1
    pri[0], stamp[0], obj[0] = pri[n], stamp[n], obj[n]
    j = 0
    while True:
        child = 2 * j + 1
        if child >= n:
            break
        if child + 1 < n and _less(pri, stamp, child + 1, child):
            child += 1
        if not _less(pri, stamp, child, j):
            break
        pri[j], pri[child] = pri[child], pri[j]
        stamp[j], stamp[child] = stamp[child], stamp[j]
        obj[j], obj[child] = obj[child], obj[j]
        j = child
    return n


@array_loop
def drop_stale(pri, stamp, obj, n, live):
    """Pop stale tops (``live[obj] != stamp``) until the top is live or the heap is empty;
    returns the new length."""
    while n > 0 and live[obj[0]] != stamp[0]:
        n = pop(pri, stamp, obj, n)
    return n
