"""CacheBench-MM replay with a TTL (``replay(..., ttl_s=...)``): expiry only ever costs hits."""

from __future__ import annotations

import pytest

from mmcache.sim.cachebench import TierSpec, replay, three_tier
from mmcache.errors import ConfigError
from mmcache.sim.workload import generate

STREAM = generate(n_queries=1_500, n_intents=200, seed=3)
ROOMY = [TierSpec("cpu", 1 << 34, "lru")]  # holds everything: no evictions, only expiry


def test_no_ttl_and_a_ttl_beyond_the_stream_replay_the_same() -> None:
    base = replay(STREAM, three_tier(1 << 22), limits=False)
    long = replay(STREAM, three_tier(1 << 22), limits=False, ttl_s=10 * float(STREAM.time[-1]))
    assert long.hit_rate == base.hit_rate and long.latency_ms == base.latency_ms
    assert base.provenance["ttl_s"] is None


def test_ttl_shorter_than_any_gap_means_no_hits() -> None:
    report = replay(STREAM, ROOMY, limits=False, ttl_s=1e-9)
    assert report.hit_rate == 0.0


def test_shorter_ttl_never_hits_more_without_evictions() -> None:
    rates = [replay(STREAM, ROOMY, limits=False, ttl_s=t).hit_rate for t in (0.5, 2.0, 8.0, None)]
    assert rates == sorted(rates) and rates[0] < rates[-1]


def test_semantic_tier_drops_expired_matches() -> None:
    tiers = three_tier(1 << 24, threshold=0.8)
    short = replay(STREAM, tiers, limits=False, ttl_s=1.0)
    none = replay(STREAM, tiers, limits=False)
    assert short.hit_rate_per_tier["L2-cpu"] < none.hit_rate_per_tier["L2-cpu"]
    assert short.latency_ms["mean"] > none.latency_ms["mean"]


@pytest.mark.parametrize("ttl", [0, -1.0, float("nan")])
def test_ttl_must_be_positive(ttl) -> None:
    with pytest.raises(ConfigError, match="ttl_s"):
        replay(STREAM, ROOMY, limits=False, ttl_s=ttl)
