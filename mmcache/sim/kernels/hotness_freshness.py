"""Hotness-freshness replay kernel: young objects (freshness above the floor) in a list by
last access and a heap by their time-free score, aged-out objects in a second heap, as the
online policy keeps them; ``now`` per request is the trace's time."""

from __future__ import annotations

import numpy as np

from mmcache.sim.jit import array_loop
from mmcache.policies.hotness_freshness import FRESHNESS_FLOOR
from mmcache.sim.kernels._heap import drop_stale, new_heap, pop, push
from mmcache.sim.kernels._lists import new_list, new_links, pop_tail, push_head, unlink


@array_loop
def _replay(ids, sizes, now_at, cache_size, decay, boost, window, w_hot, w_fresh, floor,
            hot, last, old, live, obj_size, prev, nxt, young, ypri, ystamp, yobj,
            opri, ostamp, oobj):
    # live[x]: stamp of x's valid entry in either heap, -1 when x is not resident;
    # old[x]: x has aged out of the young list.
    used = 0
    miss_cnt = 0
    miss_byte = 0
    ny = 0
    no = 0
    clock = 0
    now = 0.0
    for i in range(ids.shape[0]):
        x = ids[i]
        now = max(now, now_at[i])
        if live[x] >= 0:
            hot[x] = hot[x] * decay + boost
            if old[x]:
                old[x] = False
            else:
                unlink(prev, nxt, young, x)
        else:
            s = sizes[i]
            miss_cnt += 1
            miss_byte += s
            if s > cache_size:
                continue
            while used + s > cache_size:
                limit = now - (1.0 - floor) * window
                while young[1] >= 0 and last[young[1]] <= limit:
                    v = pop_tail(prev, nxt, young)
                    old[v] = True
                    live[v] = clock
                    no = push(opri, ostamp, oobj, no, w_hot * hot[v] + w_fresh * floor, clock, v)
                    clock += 1
                ny = drop_stale(ypri, ystamp, yobj, ny, live)
                no = drop_stale(opri, ostamp, oobj, no, live)
                offset = w_fresh * (1.0 - now / window)
                if no == 0 or (ny > 0 and ypri[0] + offset < opri[0]):
                    v = yobj[0]
                    ny = pop(ypri, ystamp, yobj, ny)
                    unlink(prev, nxt, young, v)
                else:
                    v = oobj[0]
                    no = pop(opri, ostamp, oobj, no)
                    old[v] = False
                live[v] = -1
                used -= obj_size[v]
            hot[x] = boost
            obj_size[x] = s
            used += s
        push_head(prev, nxt, young, x)
        last[x] = now
        live[x] = clock
        ny = push(ypri, ystamp, yobj, ny, w_hot * hot[x] + w_fresh * now / window, clock, x)
        clock += 1
    return miss_cnt, miss_byte


def replay(ids: np.ndarray, sizes: np.ndarray, next_access: np.ndarray, n_obj: int,
           cache_size: int, now: np.ndarray, decay: float = 0.98, boost: float = 0.2,
           window: float = 10_000, w_hot: float = 0.6, w_fresh: float = 0.4) -> tuple[int, int]:
    """(miss_cnt, miss_byte) of hotness-freshness on dense ids; ``now`` per request."""
    n_req = ids.shape[0]
    prev, nxt = new_links(n_obj)
    return _replay(ids, sizes, np.asarray(now, np.float64), cache_size, float(decay),
                   float(boost), float(window), float(w_hot), float(w_fresh), FRESHNESS_FLOOR,
                   np.zeros(n_obj), np.zeros(n_obj), np.zeros(n_obj, np.bool_),
                   np.full(n_obj, -1, np.int64), np.zeros(n_obj, np.int64), prev, nxt,
                   new_list(), *new_heap(n_req), *new_heap(n_req))
