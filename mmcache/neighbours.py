"""Exact range search over a workload's distinct query vectors, computed once.

A CacheBench-MM stream repeats a finite set of vectors (one tuple per exact key: intent ×
modality set × variant, by :class:`mmcache.workload.Workload`'s contract). The table holds, for
every distinct vector tuple, every tuple of the same modality set whose cosine is at least
``cutoff`` on each modality, with those cosines (float32, as the replay's exact search computes
them), so a replay can find a query's semantic matches among the resident entries without a
search over all of them. Identical tuples share one row, so they tie exactly. Built in blocks of
batched GEMM.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .errors import ConfigError
from .workload import MODALITY_SETS, Workload

#: Rows of the distinct-vector matrix multiplied per GEMM block.
BLOCK_ROWS = 2048


@dataclass(frozen=True)
class NeighbourTable:
    """Dense keys of a workload and the range-search table of their vectors.

    ``keys`` are the distinct exact keys (sorted) and ``key_of_request`` each request's index
    into them; ``vid_of_key`` the distinct vector tuple of each key and ``members_ptr`` /
    ``members`` the keys of each tuple (CSR); ``nb_ptr`` / ``nb_vid`` / ``nb_cos`` each tuple's
    neighbours at or above ``cutoff`` (CSR; ``nb_cos`` one column per modality of the set,
    padded with +inf); ``set_size`` the number of keys of each modality set.
    """

    keys: np.ndarray
    key_of_request: np.ndarray
    vid_of_key: np.ndarray
    members_ptr: np.ndarray
    members: np.ndarray
    nb_ptr: np.ndarray
    nb_vid: np.ndarray
    nb_cos: np.ndarray
    set_size: np.ndarray
    cutoff: float | None


def neighbour_table(workload: Workload, cutoff: float | None) -> NeighbourTable:
    """The :class:`NeighbourTable` of ``workload`` at cosine ``cutoff`` on every modality (None:
    dense keys only, no neighbours)."""
    if cutoff is not None and not -1.0 <= cutoff <= 1.0:
        raise ConfigError(f"cutoff must be a cosine in [-1, 1], got {cutoff!r}")
    keys, first, key_of_request = np.unique(workload.exact_keys(), return_index=True,
                                            return_inverse=True)
    key_set = workload.modality_set[first]
    vid_of_key = np.zeros(keys.shape[0], np.int64)
    ptr, vids, cos, offset = [np.zeros(1, np.int64)], [], [], 0
    for m in range(len(MODALITY_SETS)):
        rows = np.flatnonzero(key_set == m)
        if not rows.size or cutoff is None:
            continue
        mats = [np.stack(col) for col in zip(*(workload.vectors(int(i)) for i in first[rows]))]
        distinct, vid = np.unique(np.hstack(mats), axis=0, return_inverse=True)
        vid_of_key[rows] = offset + vid.reshape(-1)
        splits = np.cumsum([mat.shape[1] for mat in mats])[:-1]
        set_ptr, set_vid, set_cos = _range_search(np.split(distinct, splits, axis=1), cutoff)
        ptr.append(ptr[-1][-1] + set_ptr[1:])
        vids.append(offset + set_vid)
        cos.append(set_cos)
        offset += distinct.shape[0]
    order = np.argsort(vid_of_key, kind="stable")
    members_ptr = np.searchsorted(vid_of_key[order], np.arange(offset + 1))
    return NeighbourTable(
        keys=keys, key_of_request=key_of_request.reshape(-1).astype(np.int64),
        vid_of_key=vid_of_key, members_ptr=members_ptr.astype(np.int64),
        members=order.astype(np.int64), nb_ptr=np.concatenate(ptr),
        nb_vid=np.concatenate(vids) if vids else np.zeros(0, np.int64),
        nb_cos=np.concatenate(cos) if cos else np.zeros((0, 3), np.float32),
        set_size=np.bincount(key_set, minlength=len(MODALITY_SETS)), cutoff=cutoff)


def _range_search(mats: list[np.ndarray], cutoff: float
                  ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """CSR (ptr, neighbour, cosines padded to 3 columns with +inf) of every row of ``mats``
    (one matrix per modality, same rows) against every row, cosine >= ``cutoff`` on each."""
    n = mats[0].shape[0]
    counts, vids, cos = np.zeros(n, np.int64), [], []
    for start in range(0, n, BLOCK_ROWS):
        sims = [mat[start:start + BLOCK_ROWS] @ mat.T for mat in mats]
        near = np.logical_and.reduce([s >= np.float32(cutoff) for s in sims])
        rows, cols = np.nonzero(near)
        counts[start:start + near.shape[0]] = np.bincount(rows, minlength=near.shape[0])
        block = np.full((rows.shape[0], 3), np.inf, np.float32)
        for j, s in enumerate(sims):
            block[:, j] = s[rows, cols]
        vids.append(cols.astype(np.int64))
        cos.append(block)
    return np.concatenate([[0], np.cumsum(counts)]), np.concatenate(vids), np.concatenate(cos)
