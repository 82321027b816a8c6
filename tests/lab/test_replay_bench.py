"""The replay benchmark's baseline counts like simulate(); a tiny run prints every ratio; and
the libcachesim binding (installed by the test set-up) counts the same misses as simulate()
on the golden trace and on variable-size traces."""

from __future__ import annotations

import numpy as np
import pytest

from mmcache.lab.bench.eviction_replay import LIBCACHESIM, libcachesim_runner, ordered_dict_lru
from mmcache.paths import DATA_DIR
from mmcache.sim.replay import make_trace, read_oracle_general, simulate
from mmcache.sim.trace import write_oracle_general
from mmcache.sim.workload import zipf_trace

GOLDEN = DATA_DIR / "cloudPhysicsIO.oracleGeneral.bin"


def test_ordered_dict_baseline_counts_like_simulate():
    rng = np.random.default_rng(3)
    ids = rng.zipf(1.2, 5000) % 500
    trace = make_trace(ids, (ids % 7 + 1) * 10)
    for cache_size in (50, 700, 5000):
        assert ordered_dict_lru(trace, cache_size) == simulate(trace, "lru", cache_size).miss_cnt


def test_small_benchmark_prints_matching_misses_and_targets(capsys):
    from mmcache.lab.bench.eviction_replay import main

    main(["--zipf-requests", "20000", "--zipf-objects", "2000", "--repeats", "1",
          "--policies", "lru", "s3fifo", "belady"])
    rows = [line for line in capsys.readouterr().out.splitlines()
            if line.startswith(("cloudPhysics ", "zipf1.0 "))]
    assert len(rows) == 8  # 2 traces x (OrderedDict baseline + 3 policies)
    assert all(" True " in row for row in rows if "OrderedDict" not in row)
    assert all("x: " in row or "req/s: " in row for row in rows if "OrderedDict" not in row)


def libcachesim_misses(trace, path, policy: str, cache_size: int) -> int:
    return libcachesim_runner(path, policy, cache_size, trace.n_obj)()


@pytest.mark.parametrize("policy", sorted(LIBCACHESIM))
def test_libcachesim_counts_like_simulate_on_the_golden_trace(policy):
    trace = read_oracle_general(GOLDEN)
    for size in (134217728, 671088640):
        assert simulate(trace, policy, size).miss_cnt == \
            libcachesim_misses(trace, GOLDEN, policy, size)


@pytest.fixture(scope="module", params=[1.0, 2.0], ids=["sigma1", "sigma2"])
def variable_size(request, tmp_path_factory):
    """A log-normal-size Zipf trace (sizes fixed per object) and its oracleGeneral file."""
    trace = zipf_trace(30_000, 3_000, 0.9, seed=1, obj_size=None, size_sigma=request.param)
    path = tmp_path_factory.mktemp("traces") / "zipf.oracleGeneral.bin"
    write_oracle_general(trace, path)
    wss = int(trace.obj_size[np.unique(trace.obj_id, return_index=True)[1]].sum())
    return request.param, trace, path, wss


@pytest.mark.parametrize("fraction", [0.01, 0.1])
@pytest.mark.parametrize("policy", sorted(LIBCACHESIM))
def test_libcachesim_counts_like_simulate_on_variable_sizes(variable_size, policy, fraction):
    if policy == "lfuda" and fraction == 0.01:
        # libCacheSim's LFUDA walks every count above the minimum to find the next one;
        # here counts outgrow int64-sized gaps and the binding does not finish.
        pytest.skip("the libcachesim binding's LFUDA does not finish on this trace")
    sigma, trace, path, wss = variable_size
    size = int(wss * fraction)
    ours, theirs = simulate(trace, policy, size).miss_cnt, libcachesim_misses(trace, path, policy,
                                                                               size)
    if policy == "lirs" and fraction == 0.01 and sigma == 2.0:
        # The documented LIRS departure (mmcache.policies.lirs): a resident HIR key pushed out
        # of Q while its own hit makes LIR room counts as evicted here; libCacheSim still
        # serves it as a hit later. Here that happens; when the two agree, drop this branch.
        assert ours < theirs
        return
    assert ours == theirs
