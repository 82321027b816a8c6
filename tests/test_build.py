"""mmcache.build: the one place that turns a CacheConfig into tiers, policies and rules."""

from __future__ import annotations

import subprocess
import sys

from mmcache.build import build_tiers, index_spec, make_threshold, tier_policy
from mmcache.config import CacheConfig, SemanticTierConfig, ThresholdConfig
from mmcache.policies.lru import LRU
from mmcache.thresholds import PercentileThreshold
from mmcache.tiers import IndexSpec


def test_modules_below_config_do_not_import_it():
    code = ("import sys, mmcache.tiers, mmcache.tiers.redis, mmcache.thresholds, "
            "mmcache.policies; print('mmcache.config' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout
    assert out.strip() == "False"


def test_index_spec_defaults_are_the_configs():
    assert index_spec(SemanticTierConfig()) == IndexSpec()


def test_make_threshold_passes_the_settings_its_rule_takes():
    rule = make_threshold(ThresholdConfig(rule="percentile", percentile=70.0, window=7,
                                          min_samples=3, delta_min=0.05, delta_max=0.3))
    assert isinstance(rule, PercentileThreshold)
    assert (rule.percentile, rule._size, rule.min_samples, rule.delta_min, rule.delta_max) == \
        (70.0, 7, 3, 0.05, 0.3)


def test_build_tiers_follows_the_config():
    config = CacheConfig.from_dict({"l1": {"max_entries": 3}, "l2": {"enabled": False}})
    tiers = build_tiers(config)
    assert [t.name for t in tiers] == ["l1"]
    assert tiers[0].capacity.max_entries == 3


def test_tier_policy_gives_size_aware_policies_the_tiers_bytes():
    assert tier_policy("s3fifo", {}, 1000).main_size == 900
    assert isinstance(tier_policy("lru", {}, None), LRU)
