"""Exact range search over a workload's distinct query vectors, computed once.

A CacheBench-MM stream repeats a finite set of vectors (one tuple per exact key: intent ×
modality set × variant, by :class:`mmcache.sim.workload.Workload`'s contract). The table holds, for
every distinct vector tuple, every tuple of the same modality set (a video clip's apart from a
still image + audio query's) whose cosine is at least ``cutoff`` on each modality, with those
cosines (float32), so a replay can find a query's semantic matches among the resident entries
without a search over all of them. Identical tuples share one row, so they tie exactly.

The search is exact but not quadratic in practice: the tuples are grouped by intent (any
grouping keeps it exact; one whose groups are tight prunes most), each group gets a centre and
an angular radius per modality (the largest angle of a member from the centre, computed), and
two groups are compared member by member only if, on every modality, the angle between their
centres is at most both radii plus ``arccos(cutoff)`` (the triangle inequality on the sphere),
widened by :func:`cos_slack` for float32 rounding so that no pair at the cutoff is pruned.
With many groups the centres' cosines come from a bfloat16 or float16 GEMM where that is faster
on the CPU (AMX / AVX-512 kernels), and the pruning widens by that format's error bound
(:func:`half_precision_error`), so the table stays exact; members are compared in float64.
"""

from __future__ import annotations

import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import nullcontext
from dataclasses import dataclass
from functools import lru_cache
from typing import Callable, NamedTuple

import numpy as np
from numba import njit

from mmcache.errors import ConfigError
from mmcache.sim.workload import MODALITY_SETS, Workload

#: Group centres compared per GEMM tile (rows, columns): a tile of cosines stays in cache.
TILE = (512, 4096)
#: Groups from which the centre cosines may use a half-precision GEMM (torch's, where it is
#: faster on this CPU: :func:`_tile_gemm`); below it the float32 GEMM is cheap anyway.
HALF_PRECISION_FROM = TILE[1]
#: Columns of a tile row tested at once, vectorised, before any is read again (:func:`_near_caps`).
SPAN = 128
_CALIBRATING = threading.Lock()


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


def neighbour_table(workload: Workload, cutoff: float | None, *, threads: int = 1
                    ) -> NeighbourTable:
    """The :class:`NeighbourTable` of ``workload`` at cosine ``cutoff`` on every modality (None:
    dense keys only, no neighbours). ``threads`` > 1 searches that many modality sets at once
    (in threads, beside the next set's preparation); the table does not depend on it."""
    if cutoff is not None and not -1.0 <= cutoff <= 1.0:
        raise ConfigError(f"cutoff must be a cosine in [-1, 1], got {cutoff!r}")
    if isinstance(threads, bool) or not isinstance(threads, int) or threads < 1:
        raise ConfigError(f"threads must be a positive integer, got {threads!r}")
    keys, first, key_of_request = np.unique(workload.exact_keys(), return_index=True,
                                            return_inverse=True)
    key_set = workload.modality_set[first]
    vid_of_key = np.zeros(keys.shape[0], np.int64)
    searches, offset = [], 0
    with ThreadPoolExecutor(threads) if threads > 1 else nullcontext() as pool:
        submit = pool.submit if pool else _run_now
        for m in range(len(MODALITY_SETS)):
            rows = np.flatnonzero(key_set == m)
            if not rows.size or cutoff is None:
                continue
            mats = workload.set_vectors(first[rows], m)
            distinct, vid = _distinct_rows(mats[0] if len(mats) == 1 else np.hstack(mats))
            vid_of_key[rows] = offset + vid
            group = np.zeros(distinct.shape[0], np.int64)
            group[vid] = workload.intent[first[rows]]
            cols = np.cumsum([0] + [mat.shape[1] for mat in mats])
            searches.append((offset, submit(range_search, distinct, cols, group, cutoff)))
            offset += distinct.shape[0]
        ptr, vids, cos, computed = [np.zeros(1, np.int64)], [], [], 0
        for set_offset, search in searches:
            set_ptr, set_vid, set_cos, set_computed = search.result()
            ptr.append(ptr[-1][-1] + set_ptr[1:])
            vids.append(set_offset + set_vid)
            cos.append(set_cos)
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


def _run_now(fn: Callable, *args: object) -> Future:
    """``fn(*args)``, called here, as a completed future (what one thread submits)."""
    done: Future = Future()
    done.set_result(fn(*args))
    return done


def _distinct_rows(mat: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The distinct rows of ``mat`` (equal byte for byte), in order of first appearance, and
    each row's index among them (rows are told apart by a 64-bit hash of their words, checked
    against the rows themselves; a collision falls back to comparing bytes)."""
    words = np.ascontiguousarray(mat).view(np.uint32).reshape(mat.shape[0], mat.shape[1])
    _, first, inverse = np.unique(_row_hashes(words), return_index=True, return_inverse=True)
    if not _equal_rows(words, first[inverse.reshape(-1)]):  # a collision: compare bytes
        return _distinct_rows_by_bytes(mat)
    order = np.argsort(first)  # hashes' order -> order of first appearance
    rank = np.empty_like(order)
    rank[order] = np.arange(order.shape[0])
    vid = rank[inverse.reshape(-1)].astype(np.int64)
    if first.shape[0] == mat.shape[0]:  # all distinct: no copy
        return mat, vid
    return mat[first[order]], vid


@njit(cache=True, nogil=True)
def _row_hashes(words):
    """A 64-bit FNV-1a hash of each row of 32-bit ``words``."""
    hashes = np.empty(words.shape[0], np.uint64)
    for r in range(words.shape[0]):
        h = np.uint64(14695981039346656037)
        for w in words[r]:
            h = (h ^ np.uint64(w)) * np.uint64(1099511628211)
        hashes[r] = h
    return hashes


@njit(cache=True, nogil=True)
def _equal_rows(words, like):
    """Whether every row of ``words`` equals row ``like[row]``."""
    for r in range(words.shape[0]):
        for d in range(words.shape[1]):
            if words[r, d] != words[like[r], d]:
                return False
    return True


def _distinct_rows_by_bytes(mat: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """:func:`_distinct_rows` by each row's bytes."""
    index: dict[bytes, int] = {}
    vid = np.array([index.setdefault(row.tobytes(), len(index)) for row in mat], np.int64)
    return mat[np.unique(vid, return_index=True)[1]], vid


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
    row, col, cos, computed = _match_groups(vecs, cols, order, gptr, pair_a, pair_b,
                                            np.float32(cutoff))
    by_row = np.lexsort((col, row))
    counts = np.bincount(row, minlength=vecs.shape[0])
    return np.concatenate([[0], np.cumsum(counts)]), col[by_row], cos[by_row], computed


def candidate_groups(vecs: np.ndarray, cols: np.ndarray, order: np.ndarray, gptr: np.ndarray,
                     cutoff: float, slack: float) -> tuple[np.ndarray, np.ndarray]:
    """Pairs a <= b of groups (members ``order[gptr[g]:gptr[g + 1]]``) that may hold a
    pair of rows at cosine >= ``cutoff`` on every modality: on each, the angle between the
    groups' centres is at most their reaches (radius + ``arccos(cutoff - slack) / 2``), with
    ``slack`` on the centres' cosine too. The first modality's centres are compared in GEMM
    tiles (upper triangle only), the others only on the pairs left."""
    n_groups = gptr.shape[0] - 1
    half = np.arccos(max(cutoff - slack, -1.0)) / 2
    caps = [_caps(vecs, cols[j], cols[j + 1], order, gptr, half)
            for j in range(cols.shape[0] - 1)]
    gemm, error = _tile_gemm(caps[0].centre)
    reach_cos, reach_sin, wide = caps[0][1:]
    sims = np.zeros(TILE[0] * TILE[1], np.float32)
    found = (np.zeros(sims.size, np.int64), np.zeros(sims.size, np.int64))
    pair_a, pair_b = [], []
    for start in range(0, n_groups, TILE[0]):
        rows = slice(start, min(start + TILE[0], n_groups))
        for first in range(start, n_groups, TILE[1]):
            shape = rows.stop - start, min(TILE[1], n_groups - first)
            tile = sims[:shape[0] * shape[1]].reshape(shape)
            gemm(rows, slice(first, first + shape[1]), tile)
            tile[:, wide[first:first + tile.shape[1]]] = np.inf  # every row's candidate
            n = _near_caps(tile, start, first, reach_cos, reach_sin, wide,
                           np.float32(slack + error), *found)
            a, b = found[0][:n], found[1][:n]
            for other in caps[1:]:
                a, b = _near_pairs(a, b, *other, np.float32(slack))
            pair_a.append(a.copy())
            pair_b.append(b.copy())
    return np.concatenate(pair_a), np.concatenate(pair_b)


def half_precision_error(unit_roundoff: float, dim: int) -> float:
    """A bound on the error of a cosine of two unit vectors of ``dim`` components whose inputs
    and result are rounded to a format of ``unit_roundoff`` (products summed in float32): the
    inputs' rounding errs by at most ``2u + u²`` relatively per product, so by that much in sum
    (Cauchy-Schwarz), the result's by ``u`` and float32 summation by ``dim`` float32 units; and
    components below the format's normal range by ``2·sqrt(dim)`` float32 units."""
    u, eps32 = unit_roundoff, float(np.finfo(np.float32).eps)
    return (2 * u + u * u) * (1 + u) + u + (dim + 2 * np.sqrt(dim)) * eps32


@lru_cache(maxsize=1)
def half_precision_format() -> tuple[object, float] | None:
    """The torch dtype (bfloat16 or float16) whose GEMM of a tile of centres is fastest on this
    CPU, with its unit roundoff, or None where neither beats numpy's float32 GEMM (timed once
    per process on a random tile, importing torch; the table does not depend on the choice,
    only its speed)."""
    # deferred: model libraries load only where a model runs
    import torch

    rng = np.random.default_rng(0)
    centre = rng.standard_normal((sum(TILE), 128)).astype(np.float32)
    rows, cols = slice(0, TILE[0]), slice(TILE[0], sum(TILE))
    out = np.zeros(TILE, np.float32)
    timed = {None: _best_time(lambda: np.matmul(centre[rows], centre[cols].T, out=out))}
    for dtype in (torch.bfloat16, torch.float16):
        gemm = _half_gemm(centre, dtype)
        timed[dtype] = _best_time(lambda: gemm(rows, cols, out))
    best = min(timed, key=timed.get)
    return None if best is None else (best, torch.finfo(best).eps / 2)


def _best_time(run: Callable[[], object], repeats: int = 3) -> float:
    """The fastest of ``repeats`` timed calls of ``run`` (after one untimed call)."""
    run()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        run()
        times.append(time.perf_counter() - start)
    return min(times)


def _half_gemm(centre: np.ndarray, dtype) -> Callable[[slice, slice, np.ndarray], None]:
    """``gemm(rows, cols, out)``: the cosines of ``centre[rows]`` and ``centre[cols]`` by torch
    in ``dtype`` (into one reused buffer), written into ``out`` as float32."""
    # deferred: model libraries load only where a model runs
    import torch

    low = torch.from_numpy(centre).to(dtype)
    buf = torch.empty(TILE[0] * TILE[1], dtype=dtype)

    def gemm(rows: slice, cols: slice, out: np.ndarray) -> None:
        part = buf[:out.size].view(out.shape)
        torch.matmul(low[rows], low[cols].T, out=part)
        torch.from_numpy(out).copy_(part)
    return gemm


def _tile_gemm(centre: np.ndarray) -> tuple[Callable[[slice, slice, np.ndarray], None], float]:
    """``gemm(rows, cols, out)`` writing the cosines of ``centre[rows]`` and ``centre[cols]``
    into ``out`` (float32), and a bound on its error beyond float32 rounding: numpy's float32
    GEMM (0), or for many groups a half-precision one where it is faster
    (:func:`half_precision_error`)."""
    if centre.shape[0] < HALF_PRECISION_FROM:
        half = None
    else:
        with _CALIBRATING:  # searches in threads calibrate once
            half = half_precision_format()
    if half is None:
        def gemm(rows: slice, cols: slice, out: np.ndarray) -> None:
            np.matmul(centre[rows], centre[cols].T, out=out)
        return gemm, 0.0
    dtype, roundoff = half
    return _half_gemm(centre, dtype), half_precision_error(roundoff, centre.shape[1])


class _Caps(NamedTuple):
    """Each group's unit centre (float32), cosine and sine of its reach (radius + half the
    cutoff's angle), and whether the reach is at least a right angle (such a group is every
    group's candidate)."""

    centre: np.ndarray
    reach_cos: np.ndarray
    reach_sin: np.ndarray
    wide: np.ndarray


def _caps(vecs: np.ndarray, lo: int, hi: int, order: np.ndarray, gptr: np.ndarray,
          half: float) -> _Caps:
    """The :class:`_Caps` of columns ``lo:hi`` of the groups of ``vecs`` (members
    ``order[gptr[g]:gptr[g + 1]]``), reaches radius + ``half``."""
    centre, closest, norm = _centres(vecs, lo, hi, order, gptr)
    reach = np.arccos(np.clip(closest, -1.0, 1.0)) + half
    wide = (reach >= np.pi / 2) | (norm == 0)
    return _Caps(centre.astype(np.float32), np.cos(reach).astype(np.float32),
                 np.sin(reach).astype(np.float32), wide)


@njit(cache=True, nogil=True)
def _centres(vecs, lo, hi, order, gptr):
    """Each group's unit centre (the normalised sum of its members' columns ``lo:hi``, each
    normalised, in float64), the smallest cosine of a member to it, and the sum's norm."""
    n_groups = gptr.shape[0] - 1
    centre, closest, norm = np.zeros((n_groups, hi - lo)), np.ones(n_groups), np.zeros(n_groups)
    inverse = np.zeros(order.shape[0])  # each member's 1 / length
    for g in range(n_groups):
        for p in range(gptr[g], gptr[g + 1]):
            i, length = order[p], 0.0
            for d in range(lo, hi):
                length += np.float64(vecs[i, d]) ** 2
            inverse[p] = 1.0 / np.sqrt(length)
            for d in range(lo, hi):
                centre[g, d - lo] += vecs[i, d] * inverse[p]
        for d in range(hi - lo):
            norm[g] += centre[g, d] ** 2
        norm[g] = np.sqrt(norm[g])
        if norm[g] > 0:
            centre[g] /= norm[g]
        for p in range(gptr[g], gptr[g + 1]):
            cos = 0.0
            for d in range(lo, hi):
                cos += vecs[order[p], d] * centre[g, d - lo]
            closest[g] = min(closest[g], cos * inverse[p])
    return centre, closest, norm


@njit(cache=True, nogil=True)
def _near_caps(sims, start, first, reach_cos, reach_sin, wide, slack, pair_a, pair_b):
    """Write into ``pair_a`` / ``pair_b`` the group pairs a <= b (a = start + row, b = first +
    column) of a tile of centre cosines ``sims`` whose caps' reaches overlap
    (:func:`candidate_groups`; a wide group's column holds +inf); returns how many. Each span of
    :data:`SPAN` columns is first tested in one vectorised count and read again only if it holds
    a pair."""
    rows, cols = sims.shape
    found = 0
    col_cos, col_sin = reach_cos[first:first + cols], reach_sin[first:first + cols]
    for r in range(rows):
        a = start + r
        lo = max(0, a - first)
        ca, sa = reach_cos[a], reach_sin[a]
        for c0 in range(lo, cols, SPAN):
            c1 = min(c0 + SPAN, cols)
            span, span_cos, span_sin = sims[r, c0:c1], col_cos[c0:c1], col_sin[c0:c1]
            near = 0
            for j in range(c1 - c0):
                near += span[j] + sa * span_sin[j] >= ca * span_cos[j] - slack
            if near == 0 and not wide[a]:
                continue
            for j in range(c1 - c0):
                if wide[a] or span[j] + sa * span_sin[j] >= ca * span_cos[j] - slack:
                    pair_a[found], pair_b[found] = a, first + c0 + j
                    found += 1
    return found


@njit(cache=True, nogil=True)
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


@njit(cache=True, nogil=True, fastmath=True)
def _match_groups(vecs, cols, order, gptr, pair_a, pair_b, cutoff):
    """(row, col, cosines, computed) of the row pairs (both orders) of the candidate group
    pairs a <= b at cosine >= ``cutoff`` on every modality; computed:
    the pairs counted in both orders, as a dense search would."""
    found, computed, n_mod = 0, 0, cols.shape[0] - 1
    row, col = np.zeros(1024, np.int64), np.zeros(1024, np.int64)
    cos = np.full((1024, 3), np.inf, np.float32)
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
                if found + 2 > row.shape[0]:
                    row, col = np.concatenate((row, row)), np.concatenate((col, col))
                    cos = np.concatenate((cos, cos))
                row[found], col[found] = i, j
                cos[found, :n_mod] = sims[:n_mod]
                found += 1
                if a != b:
                    row[found], col[found] = j, i
                    cos[found, :n_mod] = sims[:n_mod]
                    found += 1
    return row[:found], col[:found], cos[:found], computed


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
