"""Golden tests: simulate() reproduces libCacheSim's own expectations on cloudPhysicsIO."""

from __future__ import annotations

import json

import pytest

from mmcache.paths import DATA_DIR
from mmcache.sim.replay import read_oracle_general, simulate

EXPECTATIONS = json.loads((DATA_DIR / "libcachesim_expectations_cloudPhysicsIO.json").read_text())

#: libCacheSim algorithm name -> mmcache policy name.
REPRODUCED = {
    "LRU": "lru",
    "FIFO": "fifo",
    "Clock": "clock",
    "LFU": "lfu",
    "Sieve": "sieve",
    "Belady": "belady",
    "ARC": "arc",
    "LIRS": "lirs",
    "S3-FIFO": "s3fifo",
    "GDSF": "gdsf",
    "LFUDA": "lfuda",
}


@pytest.fixture(scope="module")
def trace():
    return read_oracle_general(DATA_DIR / "cloudPhysicsIO.oracleGeneral.bin")


def test_trace_matches_recorded_totals(trace):
    meta = EXPECTATIONS["trace"]
    assert (trace.n_req, trace.n_req_byte, trace.n_obj) == (
        meta["n_req"], meta["n_req_byte"], meta["n_obj"])


def test_every_reproduced_algorithm_is_covered():
    reproduced = {name for name, exp in EXPECTATIONS["expected"].items()
                  if exp["status"].startswith("reproduced")}
    assert reproduced == set(REPRODUCED)


@pytest.mark.parametrize("algo", sorted(REPRODUCED))
def test_simulate_reproduces_libcachesim(trace, algo):
    expected = EXPECTATIONS["expected"][algo]
    results = [simulate(trace, REPRODUCED[algo], size)
               for size in EXPECTATIONS["cache_sizes_bytes"]]
    assert [r.miss_cnt for r in results] == expected["miss_cnt"]
    assert [r.miss_byte for r in results] == expected["miss_byte"]
