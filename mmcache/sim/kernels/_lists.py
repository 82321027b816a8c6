"""Intrusive doubly-linked lists over dense object ids, for numba kernels.

Every list shares the ``prev``/``nxt`` arrays (an object sits in at most one list
at a time) and owns a 2-slot ``ht`` array: ``ht[0]`` is the head (newest),
``ht[1]`` the tail (oldest); -1 marks an empty slot.
"""

from __future__ import annotations

import numpy as np
from numba import njit


def new_links(n_obj: int) -> tuple[np.ndarray, np.ndarray]:
    """Fresh ``prev`` and ``nxt`` arrays for ``n_obj`` objects."""
    return np.full(n_obj, -1, np.int32), np.full(n_obj, -1, np.int32)


def new_list() -> np.ndarray:
    """An empty list's head/tail array."""
    return np.full(2, -1, np.int64)


@njit(cache=True, inline="always")
def push_head(prev, nxt, ht, x):
    """Insert ``x`` at the head (newest end)."""
    h = ht[0]
    prev[x] = -1
    nxt[x] = h
    if h >= 0:
        prev[h] = x
    else:
        ht[1] = x
    ht[0] = x


@njit(cache=True, inline="always")
def unlink(prev, nxt, ht, x):
    """Remove ``x`` from the list."""
    p = prev[x]
    n = nxt[x]
    if p >= 0:
        nxt[p] = n
    else:
        ht[0] = n
    if n >= 0:
        prev[n] = p
    else:
        ht[1] = p
    prev[x] = -1
    nxt[x] = -1


@njit(cache=True, inline="always")
def pop_tail(prev, nxt, ht):
    """Remove and return the tail (oldest) object; the list must not be empty."""
    x = ht[1]
    unlink(prev, nxt, ht, x)
    return x
