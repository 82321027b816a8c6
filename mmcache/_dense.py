"""Renumbering of object ids to dense ids 0..n_obj-1 in first-appearance order (numba).

An open-addressing hash table over the 64-bit ids, doubled when half full: one pass,
O(1) per request, as a cache simulator's own id hash table.
"""

from __future__ import annotations

import numpy as np
from numba import njit

_EMPTY = np.uint64(0xFFFFFFFFFFFFFFFF)
_GOLDEN = np.uint64(0x9E3779B97F4A7C15)


@njit(cache=True, inline="always")
def _slot(key, mask, shift):
    return np.int64((key * _GOLDEN) >> shift) & mask


@njit(cache=True)
def _grow(table, bits):
    """The table rehashed into twice as many slots."""
    bits += 1
    mask = (1 << bits) - 1
    shift = np.uint64(64 - bits)
    new = np.full((1 << bits, 2), _EMPTY, np.uint64)
    for j in range(table.shape[0]):
        if table[j, 1] != _EMPTY:
            s = _slot(table[j, 0], mask, shift)
            while new[s, 1] != _EMPTY:
                s = (s + 1) & mask
            new[s, 0] = table[j, 0]
            new[s, 1] = table[j, 1]
    return new, bits


@njit(cache=True)
def dense_ids(obj_id):
    """(dense ids as int32, number of distinct ids) of ``obj_id`` (uint64)."""
    bits = 16
    table = np.full((1 << bits, 2), _EMPTY, np.uint64)  # (id, dense id); empty: dense id ~0
    out = np.empty(obj_id.shape[0], np.int32)
    n_obj = 0
    mask = (1 << bits) - 1
    shift = np.uint64(64 - bits)
    for i in range(obj_id.shape[0]):
        key = obj_id[i]
        s = _slot(key, mask, shift)
        while table[s, 1] != _EMPTY and table[s, 0] != key:
            s = (s + 1) & mask
        if table[s, 1] == _EMPTY:
            table[s, 0] = key
            table[s, 1] = n_obj
            n_obj += 1
            if 2 * n_obj > table.shape[0]:
                table, bits = _grow(table, bits)
                mask = (1 << bits) - 1
                shift = np.uint64(64 - bits)
                s = _slot(key, mask, shift)
                while table[s, 0] != key:
                    s = (s + 1) & mask
        out[i] = table[s, 1]
    return out, n_obj
