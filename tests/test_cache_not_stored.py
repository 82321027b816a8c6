"""An entry that every tier's policy declines is reported as not stored, never as stored."""

from __future__ import annotations

import numpy as np
import pytest

import mmcache
from mmcache.lab.testing import unit
from mmcache.types import Query

DIM = 8
RNG = np.random.default_rng(5)
DECLINING = {  # policies that refuse an entry of a few hundred bytes in a 10 kB tier
    "lirs": {"policy": "lirs", "max_bytes": 10_000},       # > 1% of the tier's bytes
    "s3fifo": {"policy": "s3fifo", "max_bytes": 2_000},    # not smaller than its small queue
}


@pytest.mark.parametrize("name", sorted(DECLINING))
def test_an_entry_no_tier_admits_is_not_stored_and_counted(name):
    tier = DECLINING[name]
    cache = mmcache.TieredCache({"l1": tier, "l2": {**tier, "index": "flat"}})
    small = Query(text="small", embeddings={"text": unit(RNG, DIM)}, scope="s")
    big = Query(text="big", embeddings={"text": unit(RNG, DIM)}, scope="s")
    assert cache.put(small, "x") is not None
    assert cache.put(big, "y" * 400) is None
    assert cache.get(big) is None
    stored, declined = cache.put_many([small, big], ["x", "y" * 400])
    assert stored is not None and declined is None
    assert cache.metrics.not_stored == {"text": 2}
    assert "not_stored" in cache.metrics.to_prometheus()
    cache.close()
