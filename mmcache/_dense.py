"""Dense numbering of 64-bit keys, 0, 1, 2, ... in first-appearance order (numba).

An open-addressing hash table of (key, dense id) rows, doubled when half full: O(1) per
key, as a cache simulator's own id hash table. :func:`dense_ids` renumbers a trace's
object ids with it; kernels use :func:`intern` and :func:`lookup` directly (LFUDA numbers
its counts).
"""

from __future__ import annotations

import numpy as np
from numba import njit

_EMPTY = np.uint64(0xFFFFFFFFFFFFFFFF)
_GOLDEN = np.uint64(0x9E3779B97F4A7C15)


def new_table(bits: int = 16) -> np.ndarray:
    """An empty table of ``2**bits`` rows (pass ``bits`` along with it)."""
    return np.full((1 << bits, 2), _EMPTY, np.uint64)


@njit(cache=True, inline="always")
def _find(table, bits, key):
    """Row holding ``key``, or the empty row where it would go."""
    mask = (1 << bits) - 1
    s = np.int64((key * _GOLDEN) >> np.uint64(64 - bits)) & mask
    while table[s, 1] != _EMPTY and table[s, 0] != key:
        s = (s + 1) & mask
    return s


@njit(cache=True)
def _grow(table, bits):
    """The table rehashed into twice as many rows, and its new ``bits``."""
    bits += 1
    new = np.full((1 << bits, 2), _EMPTY, np.uint64)
    for j in range(table.shape[0]):
        if table[j, 1] != _EMPTY:
            s = _find(new, bits, table[j, 0])
            new[s, 0] = table[j, 0]
            new[s, 1] = table[j, 1]
    return new, bits


@njit(cache=True, inline="always")
def intern(table, bits, n, key):
    """(dense id of ``key``, table, bits, n): a new key gets id ``n`` and n grows by one;
    the table may be replaced by a larger one."""
    key = np.uint64(key)
    s = _find(table, bits, key)
    if table[s, 1] != _EMPTY:
        return np.int64(table[s, 1]), table, bits, n
    table[s, 0] = key
    table[s, 1] = n
    if 2 * (n + 1) > table.shape[0]:
        table, bits = _grow(table, bits)
    return n, table, bits, n + 1


@njit(cache=True, inline="always")
def lookup(table, bits, key):
    """Dense id of ``key``, or -1 if it has none."""
    s = _find(table, bits, np.uint64(key))
    return np.int64(table[s, 1]) if table[s, 1] != _EMPTY else np.int64(-1)


@njit(cache=True)
def _dense_ids(obj_id, table, bits):
    out = np.empty(obj_id.shape[0], np.int32)
    n_obj = 0
    for i in range(obj_id.shape[0]):
        out[i], table, bits, n_obj = intern(table, bits, n_obj, obj_id[i])
    return out, n_obj


def dense_ids(obj_id: np.ndarray) -> tuple[np.ndarray, int]:
    """(dense ids as int32, number of distinct ids) of ``obj_id`` (uint64)."""
    return _dense_ids(obj_id, new_table(), 16)
