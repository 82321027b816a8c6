"""Scope-scaled TTLs (seed 000 §3.3): freshness.ttl_factors."""

import numpy as np
import pytest

from mmcache import Query, TieredCache
from mmcache.config import CacheConfig
from mmcache.errors import ConfigError
from mmcache.lab.testing import FakeClock


def _query(scope: str) -> Query:
    vec = np.zeros(8, np.float32)
    vec[0] = 1.0
    return Query(text="what is the refund policy?", embeddings={"text": vec}, scope=scope)


@pytest.fixture
def cache_and_clock():
    clock = FakeClock()
    cache = TieredCache({"freshness": {"ttl": 100, "ttl_factors": {"demo*": 0.3, "*admin": 0.6,
                                                                  "demo-admin": 0.9}}},
                        clock=clock)
    yield cache, clock
    cache.close()


@pytest.mark.parametrize("scope, lifetime", [("tenant-a", 100), ("demo-42", 30),
                                             ("ops-admin", 60), ("demo-admin", 30)])
def test_lifetime_scaled_by_the_smallest_matching_factor(cache_and_clock, scope, lifetime):
    cache, clock = cache_and_clock
    cache.put(_query(scope), "answer")
    clock.now += lifetime - 0.5
    assert cache.get(_query(scope)) is not None
    clock.now += 1.0
    assert cache.get(_query(scope)) is None


def test_explicit_ttl_is_scaled_too(cache_and_clock):
    cache, clock = cache_and_clock
    cache.put(_query("demo-1"), "answer", ttl=10)
    clock.now += 3.5
    assert cache.get(_query("demo-1")) is None


def test_put_many_scales_each_item_by_its_own_scope(cache_and_clock):
    cache, clock = cache_and_clock
    cache.put_many([_query("demo-1"), _query("tenant-b")], ["a", "b"])
    clock.now += 50
    assert cache.get(_query("demo-1")) is None
    assert cache.get(_query("tenant-b")).value == "b"


def test_entries_without_ttl_never_expire():
    clock = FakeClock()
    with TieredCache({"freshness": {"ttl_factors": {"*": 0.5}}}, clock=clock) as cache:
        cache.put(_query("demo-1"), "answer")
        clock.now += 1e9
        assert cache.get(_query("demo-1")).value == "answer"


@pytest.mark.parametrize("factors, message", [({"demo*": 0}, "ttl_factors['demo*']"),
                                              ({"demo*": -1.0}, "ttl_factors['demo*']"),
                                              ({"demo*": float("nan")}, "ttl_factors['demo*']"),
                                              ({"": 0.5}, "must not be empty"),
                                              ({"demo*": "short"}, "freshness.ttl_factors")])
def test_bad_factors_are_rejected_naming_the_key(factors, message):
    with pytest.raises(ConfigError, match=message.replace("[", r"\[").replace("*", r"\*")):
        CacheConfig.from_dict({"freshness": {"ttl_factors": factors}})
