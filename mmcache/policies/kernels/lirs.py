"""LIRS replay kernel (byte-sized, as libCacheSim's LIRS; mirrors mmcache.policies.lirs).

An object may sit in stack S, queue Q and list NH at once, so each has its own links.
``st`` holds the counters: lirs_count, hirs_count, bytes in S.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from ._lists import new_links, pop_tail, push_head, unlink

LC, HC, SB = 0, 1, 2


@njit(cache=True, inline="always")
def _move_head(prev, nxt, ht, x):
    if ht[0] != x:
        unlink(prev, nxt, ht, x)
        push_head(prev, nxt, ht, x)


@njit(cache=True, inline="always")
def _evict_hir(q, hq, nh, hn, in_q, in_s, res, in_nh, size, st):
    k = pop_tail(q[0], q[1], hq)
    in_q[k] = False
    st[HC] -= size[k]
    if in_s[k]:
        res[k] = False
        push_head(nh[0], nh[1], hn, k)
        in_nh[k] = True


@njit(cache=True, inline="always")
def _prune(s, hs, nh, hn, in_s, lir, res, in_nh, size, st):
    while hs[1] != hs[0]:
        k = hs[1]
        if lir[k]:
            break
        if not res[k] and in_nh[k]:
            unlink(nh[0], nh[1], hn, k)
            in_nh[k] = False
        unlink(s[0], s[1], hs, k)
        in_s[k] = False
        st[SB] -= size[k]


@njit(cache=True, inline="always")
def _evict_lir(s, hs, q, hq, nh, hn, in_s, lir, res, in_q, in_nh, size, st, hirs_limit):
    """Prune, then demote S's bottom LIR object to Q; False when S holds no LIR object."""
    _prune(s, hs, nh, hn, in_s, lir, res, in_nh, size, st)
    if hs[1] < 0 or not lir[hs[1]]:
        return False
    k = pop_tail(s[0], s[1], hs)
    in_s[k] = False
    st[SB] -= size[k]
    st[LC] -= size[k]
    if size[k] <= hirs_limit:
        while st[HC] + size[k] > hirs_limit:
            _evict_hir(q, hq, nh, hn, in_q, in_s, res, in_nh, size, st)
        push_head(q[0], q[1], hq, k)
        in_q[k] = True
        st[HC] += size[k]
    _prune(s, hs, nh, hn, in_s, lir, res, in_nh, size, st)
    return True


@njit(cache=True, inline="always")
def _push_s(s, hs, in_s, lir, res, size, st, x, is_lir, resident):
    push_head(s[0], s[1], hs, x)
    in_s[x] = True
    lir[x] = is_lir
    res[x] = resident
    st[SB] += size[x]


@njit(cache=True, inline="always")
def _limit_stack(s, hs, nh, hn, in_s, in_nh, size, st, cache_size):
    while st[SB] > 2 * cache_size and hn[1] >= 0:
        k = pop_tail(nh[0], nh[1], hn)
        in_nh[k] = False
        unlink(s[0], s[1], hs, k)
        in_s[k] = False
        st[SB] -= size[k]


@njit(cache=True)
def _replay(ids, sizes, cache_size, hirs_limit, s, q, nh, in_s, lir, res, in_q, in_nh, size):
    lirs_limit = cache_size - hirs_limit
    hs = np.full(2, -1, np.int64)
    hq = np.full(2, -1, np.int64)
    hn = np.full(2, -1, np.int64)
    st = np.zeros(3, np.int64)
    miss_cnt = 0
    miss_byte = 0
    for i in range(ids.shape[0]):
        x = ids[i]
        if in_s[x]:
            _move_head(s[0], s[1], hs, x)
        if in_q[x]:
            _move_head(q[0], q[1], hq, x)
        if in_q[x] or (in_s[x] and lir[x]):  # hit
            if in_s[x] and lir[x]:
                _prune(s, hs, nh, hn, in_s, lir, res, in_nh, size, st)
            elif in_s[x]:  # resident HIR in S (and in Q)
                if in_q[x]:
                    unlink(q[0], q[1], hq, x)
                    in_q[x] = False
                    st[HC] -= size[x]
                while st[LC] + size[x] > lirs_limit and _evict_lir(
                        s, hs, q, hq, nh, hn, in_s, lir, res, in_q, in_nh, size, st, hirs_limit):
                    pass
                lir[x] = True
                st[LC] += size[x]
            else:  # resident HIR only in Q
                while st[LC] + size[x] > lirs_limit and _evict_lir(
                        s, hs, q, hq, nh, hn, in_s, lir, res, in_q, in_nh, size, st, hirs_limit):
                    pass
                if in_q[x]:
                    _push_s(s, hs, in_s, lir, res, size, st, x, False, True)
                else:  # pushed out of Q meanwhile: evicted
                    _push_s(s, hs, in_s, lir, res, size, st, x, False, False)
                    push_head(nh[0], nh[1], hn, x)
                    in_nh[x] = True
            _limit_stack(s, hs, nh, hn, in_s, in_nh, size, st, cache_size)
            continue
        sz = sizes[i]
        miss_cnt += 1
        miss_byte += sz
        admit = True
        if sz > cache_size:
            admit = False
        elif in_s[x]:  # non-resident HIR in S
            while st[LC] + size[x] > lirs_limit and _evict_lir(
                    s, hs, q, hq, nh, hn, in_s, lir, res, in_q, in_nh, size, st, hirs_limit):
                pass
            if in_nh[x]:
                unlink(nh[0], nh[1], hn, x)
                in_nh[x] = False
        elif sz > lirs_limit or sz > hirs_limit:
            admit = False
        elif st[LC] + sz > lirs_limit and st[HC] + sz > hirs_limit:
            size[x] = sz
            while st[HC] + sz > hirs_limit:
                _evict_hir(q, hq, nh, hn, in_q, in_s, res, in_nh, size, st)
        if admit:
            while st[LC] + st[HC] + sz > cache_size:
                if in_s[x]:
                    while st[HC] >= hirs_limit and hq[1] >= 0:
                        _evict_hir(q, hq, nh, hn, in_q, in_s, res, in_nh, size, st)
                    if not _evict_lir(s, hs, q, hq, nh, hn, in_s, lir, res, in_q, in_nh, size,
                                      st, hirs_limit) and hq[1] < 0:
                        raise RuntimeError("LIRS: nothing left to evict")
                else:
                    _evict_hir(q, hq, nh, hn, in_q, in_s, res, in_nh, size, st)
            if in_s[x]:
                lir[x] = True
                res[x] = True
                st[LC] += size[x]
            else:
                size[x] = sz
                is_lir = st[LC] + sz <= lirs_limit
                _push_s(s, hs, in_s, lir, res, size, st, x, is_lir, True)
                if is_lir:
                    st[LC] += sz
                else:
                    push_head(q[0], q[1], hq, x)
                    in_q[x] = True
                    st[HC] += sz
        _limit_stack(s, hs, nh, hn, in_s, in_nh, size, st, cache_size)
    return miss_cnt, miss_byte


def replay(ids: np.ndarray, sizes: np.ndarray, next_access: np.ndarray, n_obj: int,
           cache_size: int, hirs_ratio: float = 0.01) -> tuple[int, int]:
    """(miss_cnt, miss_byte) of LIRS on dense ids."""
    links = [np.stack(new_links(n_obj)) for _ in range(3)]
    flags = [np.zeros(n_obj, np.bool_) for _ in range(5)]
    return _replay(ids, sizes, cache_size, max(1, int(hirs_ratio * cache_size)), *links,
                   *flags, np.zeros(n_obj, np.int64))
