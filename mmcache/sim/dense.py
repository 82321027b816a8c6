"""Dense numbering of 64-bit keys, 0, 1, 2, ... in first-appearance order (numba).

An open-addressing hash table of (key, dense id) rows, doubled when half full: O(1) per
key, as a cache simulator's own id hash table. :func:`dense_ids` renumbers a trace's
object ids with it; kernels use :func:`number`, :func:`grow` and :func:`lookup` directly
(LFUDA numbers its counts).
"""

from __future__ import annotations

import numpy as np
from numba import njit

from mmcache.sim.jit import array_loop

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
def grow(table, bits):
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
def number(table, bits, n, key):
    """(dense id of ``key``, n): a new key gets id ``n`` and n grows by one. The table must
    have room: a caller stops when it is half full (``2 * n > table.shape[0]``) and goes on
    with :func:`grow`'s table, outside its compiled loop (growing allocates)."""
    key = np.uint64(key)
    s = _find(table, bits, key)
    if table[s, 1] != _EMPTY:
        return np.int64(table[s, 1]), n
    table[s, 0] = key
    table[s, 1] = n
    return n, n + 1


@njit(cache=True, inline="always")
def lookup(table, bits, key):
    """Dense id of ``key``, or -1 if it has none."""
    s = _find(table, bits, np.uint64(key))
    return np.int64(table[s, 1]) if table[s, 1] != _EMPTY else np.int64(-1)


@array_loop
def _dense_ids(obj_id, out, start, table, bits, n):
    """Number ``obj_id[start:]`` into ``out`` until the table is half full; (the index
    reached, n)."""
    for i in range(start, obj_id.shape[0]):
        out[i], n = number(table, bits, n, obj_id[i])
        if 2 * n > table.shape[0]:
            return i + 1, n
    return obj_id.shape[0], n


def dense_ids(obj_id: np.ndarray) -> tuple[np.ndarray, int]:
    """(dense ids as int32, number of distinct ids) of ``obj_id`` (uint64)."""
    out = np.empty(obj_id.shape[0], np.int32)
    table, bits = new_table(), 16
    done, n_obj = _dense_ids(obj_id, out, 0, table, bits, 0)
    while done < obj_id.shape[0]:  # the table is half full: grow it outside the loop
        table, bits = grow(table, bits)
        done, n_obj = _dense_ids(obj_id, out, done, table, bits, n_obj)
    return out, n_obj
