"""LIRS replay kernel (byte-sized, as libCacheSim's LIRS; mirrors mmcache.policies.lirs).

An object may sit in stack S, queue Q and list NH at once, so each has its own links
(``sp``/``sn``, ``qp``/``qn``, ``nhp``/``nhn``: prev/next); they, its five flags (``fl``) and
its size are the columns of one int32 row per object (:func:`new_records`; the size in its own
int64 array where a size exceeds int32), so a request touches one cache line of its object.
``st`` holds the counters: lirs_count, hirs_count, bytes in S.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from mmcache.sim.jit import array_loop
from mmcache.sim.kernels._lists import new_list, pop_tail, push_head, unlink

LC, HC, SB = 0, 1, 2
#: Columns of an object's record after its links (0-5: prev / next in S, in Q and in NH).
FLAGS, SIZE = 6, 7
# Bits of an object's flags: in S, LIR (when in S), resident (when in S), in Q, in NH.
IN_S, LIR, RES, IN_Q, IN_NH = (np.uint8(1 << b) for b in range(5))


@njit(cache=True, inline="always")
def _move_head(prev, nxt, ht, x):
    if ht[0] != x:
        unlink(prev, nxt, ht, x)
        push_head(prev, nxt, ht, x)


@njit(cache=True, inline="always")
def _evict_hir(qp, qn, hq, nhp, nhn, hn, fl, size, st):
    k = pop_tail(qp, qn, hq)
    fl[k] &= ~IN_Q
    st[HC] -= size[k]
    if (fl[k] & IN_S):
        fl[k] &= ~RES
        push_head(nhp, nhn, hn, k)
        fl[k] |= IN_NH


@njit(cache=True, inline="always")
def _prune(sp, sn, hs, nhp, nhn, hn, fl, size, st):
    while hs[1] != hs[0]:
        k = hs[1]
        if (fl[k] & LIR):
            break
        if not (fl[k] & RES) and (fl[k] & IN_NH):
            unlink(nhp, nhn, hn, k)
            fl[k] &= ~IN_NH
        unlink(sp, sn, hs, k)
        fl[k] &= ~IN_S
        st[SB] -= size[k]


@njit(cache=True, inline="always")
def _evict_lir(sp, sn, hs, qp, qn, hq, nhp, nhn, hn, fl, size, st, hirs_limit):
    """Prune, then demote S's bottom LIR object to Q; False when S holds no LIR object."""
    _prune(sp, sn, hs, nhp, nhn, hn, fl, size, st)
    if hs[1] < 0 or not (fl[hs[1]] & LIR):
        return False
    k = pop_tail(sp, sn, hs)
    fl[k] &= ~IN_S
    st[SB] -= size[k]
    st[LC] -= size[k]
    if size[k] <= hirs_limit:
        while st[HC] + size[k] > hirs_limit:
            _evict_hir(qp, qn, hq, nhp, nhn, hn, fl, size, st)
        push_head(qp, qn, hq, k)
        fl[k] |= IN_Q
        st[HC] += size[k]
    _prune(sp, sn, hs, nhp, nhn, hn, fl, size, st)
    return True


@njit(cache=True, inline="always")
def _push_s(sp, sn, hs, fl, size, st, x, is_lir, resident):
    push_head(sp, sn, hs, x)
    fl[x] |= IN_S
    fl[x] = (fl[x] | LIR) if is_lir else (fl[x] & ~LIR)
    fl[x] = (fl[x] | RES) if resident else (fl[x] & ~RES)
    st[SB] += size[x]


@njit(cache=True, inline="always")
def _limit_stack(sp, sn, hs, nhp, nhn, hn, fl, size, st, cache_size):
    while st[SB] > 2 * cache_size and hn[1] >= 0:
        k = pop_tail(nhp, nhn, hn)
        fl[k] &= ~IN_NH
        unlink(sp, sn, hs, k)
        fl[k] &= ~IN_S
        st[SB] -= size[k]


@array_loop
def _replay(ids, sizes, cache_size, hirs_limit, sp, sn, qp, qn, nhp, nhn, fl, size, hs, hq, hn,
            st):
    lirs_limit = cache_size - hirs_limit
    miss_cnt = 0
    miss_byte = 0
    for i in range(ids.shape[0]):
        x = ids[i]
        if (fl[x] & IN_S):
            _move_head(sp, sn, hs, x)
        if (fl[x] & IN_Q):
            _move_head(qp, qn, hq, x)
        if (fl[x] & IN_Q) or ((fl[x] & IN_S) and (fl[x] & LIR)):  # hit
            if (fl[x] & IN_S) and (fl[x] & LIR):
                _prune(sp, sn, hs, nhp, nhn, hn, fl, size, st)
            elif (fl[x] & IN_S):  # resident HIR in S (and in Q)
                if (fl[x] & IN_Q):
                    unlink(qp, qn, hq, x)
                    fl[x] &= ~IN_Q
                    st[HC] -= size[x]
                while st[LC] + size[x] > lirs_limit and _evict_lir(
                        sp, sn, hs, qp, qn, hq, nhp, nhn, hn, fl, size, st, hirs_limit):
                    pass
                fl[x] |= LIR
                st[LC] += size[x]
            else:  # resident HIR only in Q
                while st[LC] + size[x] > lirs_limit and _evict_lir(
                        sp, sn, hs, qp, qn, hq, nhp, nhn, hn, fl, size, st, hirs_limit):
                    pass
                if (fl[x] & IN_Q):
                    _push_s(sp, sn, hs, fl, size, st, x, False, True)
                else:  # pushed out of Q meanwhile: evicted
                    _push_s(sp, sn, hs, fl, size, st, x, False, False)
                    push_head(nhp, nhn, hn, x)
                    fl[x] |= IN_NH
            _limit_stack(sp, sn, hs, nhp, nhn, hn, fl, size, st, cache_size)
            continue
        sz = sizes[i]
        miss_cnt += 1
        miss_byte += sz
        admit = True
        if sz > cache_size:
            admit = False
        elif (fl[x] & IN_S):  # non-resident HIR in S
            while st[LC] + size[x] > lirs_limit and _evict_lir(
                    sp, sn, hs, qp, qn, hq, nhp, nhn, hn, fl, size, st, hirs_limit):
                pass
            if (fl[x] & IN_NH):
                unlink(nhp, nhn, hn, x)
                fl[x] &= ~IN_NH
        elif sz > lirs_limit or sz > hirs_limit:
            admit = False
        elif st[LC] + sz > lirs_limit and st[HC] + sz > hirs_limit:
            size[x] = sz
            while st[HC] + sz > hirs_limit:
                _evict_hir(qp, qn, hq, nhp, nhn, hn, fl, size, st)
        if admit:
            while st[LC] + st[HC] + sz > cache_size:
                if (fl[x] & IN_S):
                    while st[HC] >= hirs_limit and hq[1] >= 0:
                        _evict_hir(qp, qn, hq, nhp, nhn, hn, fl, size, st)
                    if not _evict_lir(sp, sn, hs, qp, qn, hq, nhp, nhn, hn, fl, size, st,
                                      hirs_limit) and hq[1] < 0:
                        raise RuntimeError("LIRS: nothing left to evict")
                else:
                    _evict_hir(qp, qn, hq, nhp, nhn, hn, fl, size, st)
            if (fl[x] & IN_S):
                fl[x] |= LIR
                fl[x] |= RES
                st[LC] += size[x]
            else:
                size[x] = sz
                is_lir = st[LC] + sz <= lirs_limit
                _push_s(sp, sn, hs, fl, size, st, x, is_lir, True)
                if is_lir:
                    st[LC] += sz
                else:
                    push_head(qp, qn, hq, x)
                    fl[x] |= IN_Q
                    st[HC] += sz
        _limit_stack(sp, sn, hs, nhp, nhn, hn, fl, size, st, cache_size)
    return miss_cnt, miss_byte


def replay(ids: np.ndarray, sizes: np.ndarray, next_access: np.ndarray, n_obj: int,
           cache_size: int, hirs_ratio: float = 0.01) -> tuple[int, int]:
    """(miss_cnt, miss_byte) of LIRS on dense ids."""
    record = new_records(n_obj, int(sizes.max()) <= np.iinfo(np.int32).max)
    columns = [record[:, c] for c in range(record.shape[1])]
    size = columns[SIZE] if len(columns) > SIZE else np.zeros(n_obj, np.int64)
    return _replay(ids, sizes, cache_size, max(1, int(hirs_ratio * cache_size)),
                   *columns[:FLAGS + 1], size, new_list(), new_list(), new_list(),
                   np.zeros(3, np.int64))


def new_records(n_obj: int, with_size: bool) -> np.ndarray:
    """One int32 row per object: its six links (-1: none), its flags (0) and, ``with_size``,
    its size (0), so serving a request touches one cache line of the object, not eight arrays."""
    record = np.full((n_obj, SIZE + 1 if with_size else FLAGS + 1), -1, np.int32)
    record[:, FLAGS:] = 0
    return record
