"""The skew watch on its own: windows of requests, the 1.8x-the-mean rule, one warning."""

from __future__ import annotations

import logging

import pytest

from mmcache.errors import ConfigError
from mmcache.tiers.skew import SkewWatch

SHARDS = ["s1", "s2", "s3"]


def test_a_shard_over_factor_times_the_mean_is_skewed_when_the_window_closes() -> None:
    watch = SkewWatch(SHARDS, window=30)
    for shard, n in (("s1", 19), ("s2", 5)):  # mean 10: 19 > 1.8 x 10, judged at the 30th
        assert watch.record(shard, n) == []
    assert watch.record("s3", 5) == []       # 29 requests: the window is still open
    assert watch.record("s3") == ["s1"]
    assert watch.skewed == {"s1"}


def test_idle_shards_count_in_the_mean() -> None:
    watch = SkewWatch(SHARDS, window=10)
    assert watch.record("s1", 10) == ["s1"]  # 10 > 1.8 x 10/3, although no other shard spoke


def test_at_most_factor_times_the_mean_is_not_skewed_and_clears_the_flag() -> None:
    watch = SkewWatch(SHARDS, window=30)
    assert watch.record("s1", 30) == ["s1"]
    watch.record("s1", 18)
    watch.record("s2", 12)                   # 18 == 1.8 x 10: not over
    assert watch.skewed == frozenset()


def test_a_shard_is_warned_about_once_while_it_stays_skewed(caplog) -> None:
    watch = SkewWatch(SHARDS, window=10, where="redis://cluster")
    with caplog.at_level(logging.WARNING, "mmcache.skew"):
        for _ in range(3):
            assert watch.record("s2", 10) == ["s2"]
        watch.record("s1", 4), watch.record("s2", 3), watch.record("s3", 3)
        watch.record("s2", 10)
    messages = [r.getMessage() for r in caplog.records]
    assert len(messages) == 2 and all("shard s2 of redis://cluster is skewed" in m
                                      for m in messages)


@pytest.mark.parametrize("window, factor, field", [
    (0, 1.8, "skew_window"), (1.5, 1.8, "skew_window"), (True, 1.8, "skew_window"),
    (10, 0.5, "skew_factor"), (10, float("inf"), "skew_factor")])
def test_bad_settings_name_the_setting(window, factor, field) -> None:
    with pytest.raises(ConfigError, match=field):
        SkewWatch(SHARDS, factor=factor, window=window)
