"""ARC-paper follows Megiddo & Modha's adaptation rule; libCacheSim's ARC steps in bytes."""

from __future__ import annotations

from collections import OrderedDict

import numpy as np
import pytest

from mmcache.policies import make_policy
from mmcache.policies.admission import admit_miss
from mmcache.sim.replay import make_trace, simulate


def drive(policy, requests, size, capacity):
    """Replay ``requests`` (all of ``size`` bytes) through ``policy``; (hit?, p) per request."""
    resident: dict = {}
    out = []

    def drop(keys):
        for k in keys:
            resident.pop(k)

    for key in requests:
        hit = key in resident
        if hit:
            policy.access(key)
        else:
            admit_miss(policy, key, size, overfull=lambda s: sum(resident.values()) + s > capacity,
                       keep=resident.__setitem__, drop=drop)
        out.append((hit, policy.p))
    return out


def paper_arc(requests, c):
    """The paper's ARC(c) in pages (Fig. 4 of the FAST'03 paper); (hit?, p) per request."""
    t1, t2, b1, b2 = OrderedDict(), OrderedDict(), OrderedDict(), OrderedDict()
    p = 0.0
    out = []

    def replace(x):
        if t1 and ((x in b2 and len(t1) == p) or len(t1) > p):
            b1[t1.popitem(last=False)[0]] = None
        else:
            b2[t2.popitem(last=False)[0]] = None

    for x in requests:
        hit = x in t1 or x in t2
        if hit:
            (t1 if x in t1 else t2).pop(x)
            t2[x] = None
        elif x in b1:
            p = min(p + max(len(b2) / len(b1), 1), c)
            replace(x)
            del b1[x]
            t2[x] = None
        elif x in b2:
            p = max(p - max(len(b1) / len(b2), 1), 0)
            replace(x)
            del b2[x]
            t2[x] = None
        else:
            if len(t1) + len(b1) == c:
                if len(t1) < c:
                    b1.popitem(last=False)
                    replace(x)
                else:
                    t1.popitem(last=False)
            elif len(t1) + len(b1) + len(t2) + len(b2) >= c:
                if len(t1) + len(b1) + len(t2) + len(b2) == 2 * c:
                    b2.popitem(last=False)
                replace(x)
            t1[x] = None
        out.append((hit, p))
    return out


def test_hand_worked_ghost_hit_moves_p_by_one_object():
    # 1 reaches T2; 2,3,4 fill T1; 5 demotes 2 to B1; 2 is a B1 ghost hit with B2 empty:
    # the paper moves p by one page (one 100-byte object), libCacheSim's ARC by 1 byte.
    requests = [1, 1, 2, 3, 4, 5, 2]
    paper = drive(make_policy("arc-paper", 400), requests, 100, 400)
    lcs = drive(make_policy("arc", 400), requests, 100, 400)
    assert [p for _, p in paper] == [0, 0, 0, 0, 0, 0, 100]
    assert [p for _, p in lcs] == [0, 0, 0, 0, 0, 0, 1]
    assert [h for h, _ in paper] == [False, True, False, False, False, False, False]


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_arc_paper_follows_the_papers_rule_where_p_must_move(seed):
    # A loop slightly larger than the cache, interleaved with a hot set: ghost hits in both
    # B1 and B2, so p goes up and down.
    rng = np.random.default_rng(seed)
    c, size = 20, 4096
    loop = np.tile(np.arange(100, 125), 8)
    hot = rng.integers(0, 12, loop.size)
    requests = np.where(rng.random(loop.size) < 0.5, loop, hot).tolist()
    ours = drive(make_policy("arc-paper", c * size), requests, size, c * size)
    paper = paper_arc(requests, c)
    assert [h for h, _ in ours] == [h for h, _ in paper]
    assert [p for _, p in ours] == pytest.approx([size * p for _, p in paper], rel=1e-9)
    assert len({p for _, p in paper}) > 3  # p really moved, both ways
    assert any(b < a for (_, a), (_, b) in zip(paper, paper[1:]))


def test_arc_paper_kernel_counts_like_its_online_object():
    rng = np.random.default_rng(5)
    ids = rng.zipf(1.1, 4000) % 400
    trace = make_trace(ids, rng.integers(1, 5000, 400)[ids])
    for size in (20_000, 100_000, 400_000):
        kernel = simulate(trace, "arc-paper", size)
        online = simulate(trace, "arc-paper", size, use_kernel=False)
        assert (kernel.miss_cnt, kernel.miss_byte) == (online.miss_cnt, online.miss_byte)
