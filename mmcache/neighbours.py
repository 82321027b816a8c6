"""Exact range search over a workload's distinct query vectors, computed once.

A CacheBench-MM stream repeats a finite set of vectors (one tuple per exact key: intent ×
modality set × variant, by :class:`mmcache.workload.Workload`'s contract). The table holds, for
every distinct vector tuple, every tuple of the same modality set whose cosine is at least
``cutoff`` on each modality, with those cosines (float32), so a replay can find a query's
semantic matches among the resident entries without a search over all of them. Identical tuples
share one row, so they tie exactly.

The search is exact but not quadratic in practice: the tuples are grouped by intent (any
grouping keeps it exact; one whose groups are tight prunes most), each group gets a centre and
an angular radius per modality (the largest angle of a member from the centre, computed), and
two groups are compared member by member only if, on every modality, the angle between their
centres is at most both radii plus ``arccos(cutoff)`` (the triangle inequality on the sphere),
widened by :func:`cos_slack` for float32 rounding so that no pair at the cutoff is pruned.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numba import njit

from .errors import ConfigError
from .workload import MODALITY_SETS, Workload

#: Group centres compared per GEMM block.
BLOCK_ROWS = 1024


@dataclass(frozen=True)
class NeighbourTable:
    """Dense keys of a workload and the range-search table of their vectors.

    ``keys`` are the distinct exact keys (sorted) and ``key_of_request`` each request's index
    into them; ``vid_of_key`` the distinct vector tuple of each key and ``members_ptr`` /
    ``members`` the keys of each tuple (CSR); ``nb_ptr`` / ``nb_vid`` / ``nb_cos`` each tuple's
    neighbours at or above ``cutoff`` (CSR, by ascending tuple; ``nb_cos`` one column per
    modality of the set, padded with +inf); ``set_size`` the number of keys of each modality
    set; ``pairs_computed`` the tuple pairs whose cosines the search computed (a brute-force
    search computes the square of each modality set's tuple count).
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
    pairs_computed: int


def neighbour_table(workload: Workload, cutoff: float | None) -> NeighbourTable:
    """The :class:`NeighbourTable` of ``workload`` at cosine ``cutoff`` on every modality (None:
    dense keys only, no neighbours)."""
    if cutoff is not None and not -1.0 <= cutoff <= 1.0:
        raise ConfigError(f"cutoff must be a cosine in [-1, 1], got {cutoff!r}")
    keys, first, key_of_request = np.unique(workload.exact_keys(), return_index=True,
                                            return_inverse=True)
    key_set = workload.modality_set[first]
    vid_of_key = np.zeros(keys.shape[0], np.int64)
    ptr, vids, cos, offset, computed = [np.zeros(1, np.int64)], [], [], 0, 0
    for m in range(len(MODALITY_SETS)):
        rows = np.flatnonzero(key_set == m)
        if not rows.size or cutoff is None:
            continue
        mats = [np.stack(col) for col in zip(*(workload.vectors(int(i)) for i in first[rows]))]
        distinct, vid = np.unique(np.hstack(mats), axis=0, return_inverse=True)
        vid = vid.reshape(-1)
        vid_of_key[rows] = offset + vid
        group = np.zeros(distinct.shape[0], np.int64)
        group[vid] = workload.intent[first[rows]]
        cols = np.cumsum([0] + [mat.shape[1] for mat in mats])
        set_ptr, set_vid, set_cos, set_computed = range_search(distinct, cols, group, cutoff)
        ptr.append(ptr[-1][-1] + set_ptr[1:])
        vids.append(offset + set_vid)
        cos.append(set_cos)
        offset += distinct.shape[0]
        computed += set_computed
    order = np.argsort(vid_of_key, kind="stable")
    members_ptr = np.searchsorted(vid_of_key[order], np.arange(offset + 1))
    return NeighbourTable(
        keys=keys, key_of_request=key_of_request.reshape(-1).astype(np.int64),
        vid_of_key=vid_of_key, members_ptr=members_ptr.astype(np.int64),
        members=order.astype(np.int64), nb_ptr=np.concatenate(ptr),
        nb_vid=np.concatenate(vids) if vids else np.zeros(0, np.int64),
        nb_cos=np.concatenate(cos) if cos else np.zeros((0, 3), np.float32),
        set_size=np.bincount(key_set, minlength=len(MODALITY_SETS)), cutoff=cutoff,
        pairs_computed=computed)


def cos_slack(dim: int) -> float:
    """A bound on the float32 rounding of a cosine of two unit vectors of ``dim`` components
    (``dim`` products summed in any order err by at most ``dim`` units of roundoff, doubled
    here for the vectors' own rounding to unit length)."""
    return 2.0 * dim * float(np.finfo(np.float32).eps)


def range_search(vecs: np.ndarray, cols: np.ndarray, group: np.ndarray, cutoff: float
                 ) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
    """CSR (ptr, neighbour, cosines padded to 3 columns with +inf) of every row of ``vecs``
    (unit vectors per modality: columns ``cols[j]:cols[j + 1]``) against every row, cosine >=
    ``cutoff`` on each modality, and the number of row pairs computed; rows are compared only
    within candidate pairs of ``group`` labels (:func:`candidate_groups`)."""
    labels, of_row = np.unique(group, return_inverse=True)
    order = np.argsort(of_row, kind="stable")
    gptr = np.searchsorted(of_row[order], np.arange(labels.shape[0] + 1))
    slack = cos_slack(int(np.diff(cols).max()))
    pair_a, pair_b = candidate_groups(vecs, cols, order, gptr, cutoff, slack)
    args = (vecs, cols, order, gptr, pair_a, pair_b, np.float32(cutoff))
    n_found, computed = _match_groups(*args, np.zeros(0, np.int64), np.zeros(0, np.int64),
                                      np.zeros((0, 3), np.float32), False)
    row, col, cos = (np.zeros(n_found, np.int64), np.zeros(n_found, np.int64),
                     np.full((n_found, 3), np.inf, np.float32))
    _match_groups(*args, row, col, cos, True)
    by_row = np.lexsort((col, row))
    counts = np.bincount(row, minlength=vecs.shape[0])
    return np.concatenate([[0], np.cumsum(counts)]), col[by_row], cos[by_row], computed


def candidate_groups(vecs: np.ndarray, cols: np.ndarray, order: np.ndarray, gptr: np.ndarray,
                     cutoff: float, slack: float) -> tuple[np.ndarray, np.ndarray]:
    """Pairs a <= b of groups (members ``order[gptr[g]:gptr[g + 1]]``) that may hold a
    pair of rows at cosine >= ``cutoff`` on every modality: on each, the angle between the
    groups' centres is at most their reaches (radius + ``arccos(cutoff - slack) / 2``), with
    ``slack`` on the centres' cosine too. The first modality's centres are compared in GEMM
    blocks (upper triangle only), the others only on the pairs left."""
    n_groups = gptr.shape[0] - 1
    owner = np.repeat(np.arange(n_groups), np.diff(gptr))
    half = np.arccos(max(cutoff - slack, -1.0)) / 2
    caps = [_caps(vecs[order, cols[j]:cols[j + 1]], owner, n_groups, half)
            for j in range(cols.shape[0] - 1)]
    centre, reach_cos, reach_sin, wide = caps[0]
    pair_a, pair_b = [], []
    for start in range(0, n_groups, BLOCK_ROWS):
        sims = centre[start:start + BLOCK_ROWS] @ centre[start:].T
        a, b = _near_caps(sims, start, reach_cos, reach_sin, wide, np.float32(slack))
        for other in caps[1:]:
            a, b = _near_pairs(a, b, *other, np.float32(slack))
        pair_a.append(a)
        pair_b.append(b)
    return np.concatenate(pair_a), np.concatenate(pair_b)


def _caps(members: np.ndarray, owner: np.ndarray, n_groups: int, half: float
          ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Each group's unit centre (float32), cosine and sine of its reach (radius + ``half``),
    and whether the reach is at least a right angle (such a group is every group's candidate)."""
    unit = members.astype(np.float64)
    unit /= np.linalg.norm(unit, axis=1, keepdims=True)
    total = np.zeros((n_groups, unit.shape[1]))
    np.add.at(total, owner, unit)
    norm = np.linalg.norm(total, axis=1, keepdims=True)
    centre = total / np.where(norm > 0, norm, 1.0)
    closest = np.full(n_groups, 1.0)
    np.minimum.at(closest, owner, np.einsum("ij,ij->i", unit, centre[owner]))
    reach = np.arccos(np.clip(closest, -1.0, 1.0)) + half
    wide = (reach >= np.pi / 2) | (norm[:, 0] == 0)
    return (centre.astype(np.float32), np.cos(reach).astype(np.float32),
            np.sin(reach).astype(np.float32), wide)


@njit(cache=True)
def _near_caps(sims, start, reach_cos, reach_sin, wide, slack):
    """Group pairs a <= b (a = start + row, b = start + column) of a block of centre cosines
    ``sims`` whose caps' reaches overlap (:func:`candidate_groups`), as two arrays."""
    rows, n = sims.shape
    pair_a, pair_b = np.zeros(0, np.int64), np.zeros(0, np.int64)
    for fill in (False, True):
        found = 0
        for r in range(rows):
            a = start + r
            for c in range(r, n):
                b = start + c
                if wide[a] or wide[b] or (sims[r, c] + reach_sin[a] * reach_sin[b]
                                          >= reach_cos[a] * reach_cos[b] - slack):
                    if fill:
                        pair_a[found], pair_b[found] = a, b
                    found += 1
        if not fill:
            pair_a, pair_b = np.zeros(found, np.int64), np.zeros(found, np.int64)
    return pair_a, pair_b


@njit(cache=True)
def _near_pairs(pair_a, pair_b, centre, reach_cos, reach_sin, wide, slack):
    """The pairs of ``pair_a`` / ``pair_b`` whose caps' reaches overlap on one more modality."""
    keep = np.zeros(pair_a.shape[0], np.bool_)
    for p in range(pair_a.shape[0]):
        a, b = pair_a[p], pair_b[p]
        s = np.float32(0.0)
        for d in range(centre.shape[1]):
            s += centre[a, d] * centre[b, d]
        keep[p] = wide[a] or wide[b] or (
            s + reach_sin[a] * reach_sin[b] >= reach_cos[a] * reach_cos[b] - slack)
    return pair_a[keep], pair_b[keep]


@njit(cache=True, fastmath=True)
def _match_groups(vecs, cols, order, gptr, pair_a, pair_b, cutoff, row, col, cos, fill):
    """Count (``fill`` False) or write into ``row`` / ``col`` / ``cos`` the row pairs (both
    orders) of the candidate group pairs a <= b at cosine >= ``cutoff`` on every modality;
    returns (found, computed: pairs counted in both orders, as a dense search would)."""
    found, computed, n_mod = 0, 0, cols.shape[0] - 1
    sims = np.zeros(3, np.float32)
    for p in range(pair_a.shape[0]):
        a, b = pair_a[p], pair_b[p]
        for i in order[gptr[a]:gptr[a + 1]]:
            for j in order[gptr[b]:gptr[b + 1]]:
                computed += 1 if a == b else 2
                near = True
                for m in range(n_mod):
                    s = 0.0
                    for d in range(cols[m], cols[m + 1]):
                        s += np.float64(vecs[i, d]) * vecs[j, d]
                    sims[m] = np.float32(s)
                    if sims[m] < cutoff:
                        near = False
                        break
                if not near:
                    continue
                if fill:
                    row[found], col[found] = i, j
                    cos[found, :n_mod] = sims[:n_mod]
                found += 1
                if a != b:
                    if fill:
                        row[found], col[found] = j, i
                        cos[found, :n_mod] = sims[:n_mod]
                    found += 1
    return found, computed


@njit(cache=True)
def best_resident(row, floors, slot, nb_ptr, nb_vid, nb_cos, members_ptr, members):
    """(key, margin) of the resident neighbour of tuple ``row`` (a key whose ``slot`` is >= 0)
    whose smallest margin (cosine - that modality's ``floors``, float32) is largest, ties to
    the lowest slot, as an exact search over a vector index breaks them; (-1, -inf) when no
    neighbour is resident."""
    best, best_margin, best_slot = -1, np.float32(-np.inf), 0
    for p in range(nb_ptr[row], nb_ptr[row + 1]):
        margin = nb_cos[p, 0] - floors[0]
        for j in range(1, floors.shape[0]):
            margin = min(margin, nb_cos[p, j] - floors[j])
        r = nb_vid[p]
        for q in range(members_ptr[r], members_ptr[r + 1]):
            s = slot[members[q]]
            if s >= 0 and (margin > best_margin or (margin == best_margin and s < best_slot)):
                best, best_margin, best_slot = members[q], margin, s
    return best, best_margin
