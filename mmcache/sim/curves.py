"""Miss-ratio curves of a trace over cache sizes and policies, with the lower bound and Belady's gap.
"""

from __future__ import annotations

import time
from typing import Any, Sequence

from mmcache.metrics import progress_bar
from mmcache.sim.bounds import lower_bound, opt_bounds
from mmcache.sim.replay import simulate
from mmcache.sim.workload import zipf_trace


def miss_ratio_curves(trace: Any, policies: Sequence[str], sizes: Sequence[int], *,
                      progress: bool | None = None):
    """Miss ratio of every policy at every cache size on one trace, with replay timings; a
    progress bar over the replays (outside their timings; ``progress=False`` silences it).

    Returns a pandas DataFrame with columns ``policy, cache_size, miss_cnt,
    miss_ratio, byte_miss_ratio, seconds, req_per_s`` (``seconds`` is the wall
    time of that one :func:`mmcache.sim.replay.simulate` call, measured here, after a
    warm-up run of each policy on a small trace so compilation is not counted).
    """
    # deferred: pandas only for this export
    import pandas as pd

    warm = zipf_trace(2_000, 200, seed=0)
    trace.dense_ids()  # the one-off id renumbering every replay of this trace shares
    rows = []
    with progress_bar(len(policies) * len(sizes), "miss-ratio curves", unit="replay",
                      progress=progress) as bar:
        for policy in policies:
            simulate(warm, policy, 100 * 4096, progress=False)
            bar.set_postfix_str(policy, refresh=False)
            for size in sizes:
                start = time.perf_counter()
                res = simulate(trace, policy, int(size), progress=False)
                seconds = time.perf_counter() - start
                rows.append({"policy": policy, "cache_size": int(size),
                             "miss_cnt": res.miss_cnt, "miss_ratio": res.miss_ratio,
                             "byte_miss_ratio": res.byte_miss_ratio, "seconds": seconds,
                             "req_per_s": trace.n_req / seconds})
                bar.update()
    return pd.DataFrame(rows)


def lower_bound_curve(trace: Any, curves: Any, *, progress: bool | None = None):
    """:func:`mmcache.replay.opt_bounds` of ``trace`` at every size of ``curves`` (its
    :func:`miss_ratio_curves`), with Belady's misses; a progress bar over the sizes
    (``progress=False`` silences it).

    Returns a pandas DataFrame with columns ``cache_size, lower, upper, lower_method,
    upper_by, belady, pfoo_l, miss_ratio, n_req`` (``miss_ratio``: the lower bound's; ``pfoo_l``: the
    PFOO-L space-time relaxation's bound, weaker, beside it); ``upper`` is at
    most every policy of ``curves``, whose misses are taken from it, not replayed again.
    """
    # deferred: pandas only for this export
    import pandas as pd

    rows = []
    groups = curves.groupby("cache_size", sort=True)
    with progress_bar(groups.ngroups, "lower bounds", unit="size", progress=progress) as bar:
        for size, at_size in groups:
            known = dict(zip(at_size.policy, at_size.miss_cnt))
            bounds = opt_bounds(trace, int(size), policies=list(known), known=known,
                                progress=False)
            belady = known["belady"] if "belady" in known else \
                simulate(trace, "belady", int(size), progress=False).miss_cnt
            rows.append({"cache_size": int(size), "lower": bounds.lower, "upper": bounds.upper,
                         "lower_method": bounds.lower_method, "upper_by": bounds.upper_by,
                         "belady": int(belady),
                         "pfoo_l": lower_bound(trace, int(size), "pfoo-l").misses,
                         "miss_ratio": bounds.lower / trace.n_req, "n_req": int(trace.n_req)})
            bar.update()
    return pd.DataFrame(rows)


def belady_gap(curves: Any, reference: str = "belady"):
    """Miss-ratio gap of each policy to ``reference`` per cache size (policy × size table)."""
    table = curves.pivot(index="policy", columns="cache_size", values="miss_ratio")
    return table.drop(index=reference) - table.loc[reference]
