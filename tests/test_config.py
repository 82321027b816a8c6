"""CacheConfig: dict and YAML loading, unknown keys and bad values named in the error."""

from __future__ import annotations

import pytest

from mmcache.config import CacheConfig
from mmcache.errors import ConfigError, UnknownPolicyError


def test_defaults_and_round_trip():
    cfg = CacheConfig.load(None)
    assert cfg.l2.index == "auto" and cfg.l3.backend is None
    assert CacheConfig.from_dict(cfg.to_dict()) == cfg


def test_yaml(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("l1: {max_entries: 5, policy: LRU}\n"
                    "l3: {backend: sqlite, path: x.db, synchronous: full}\n"
                    "thresholds: {rule: percentile, percentile: 90}\n"
                    "freshness: {ttl: 300, stale_while_revalidate: 60}\n")
    cfg = CacheConfig.load(path)
    assert (cfg.l1.max_entries, cfg.l3.synchronous, cfg.thresholds.percentile,
            cfg.freshness.ttl) == (5, "full", 90, 300)


def test_unreadable_yaml_is_a_config_error(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text("l1: [unclosed\n")
    with pytest.raises(ConfigError, match="cannot read config"):
        CacheConfig.load(path)
    with pytest.raises(ConfigError, match="cannot read config"):
        CacheConfig.load(tmp_path / "missing.yaml")
    with pytest.raises(ConfigError, match="cannot read config"):
        CacheConfig.load("bad\x00path.yaml")          # found by tests/test_fuzz.py


@pytest.mark.parametrize("data, key", [
    ({"l4": {}}, "'l4'"),
    ({"l2": {"ef": 3}}, "'l2.ef'"),
    ({"freshness": {"ttl_s": 3}}, "'freshness.ttl_s'"),
    ({"l1": {"max_entries": 0}}, "l1.max_entries"),
    ({"l1": {"max_entries": -3}}, "l1.max_entries"),
    ({"l1": {"max_entries": 2.5}}, "l1.max_entries"),
    ({"l2": {"max_bytes": True}}, "l2.max_bytes"),
    ({"l2": {"max_bytes": 1 << 62}}, "l2.max_bytes"),
    ({"dims": {"text": 512}, "l2": {"max_bytes": 1000}}, "l2.max_bytes"),
    ({"l2": {"index": "ivf"}}, "l2.index"),
    ({"l2": {"ef_search": 0}}, "l2.ef_search"),
    ({"l3": {"backend": "mongo"}}, "l3.backend"),
    ({"l3": {"backend": "sqlite"}}, "l3.path"),
    ({"l3": {"backend": "redis"}}, "l3.url"),
    ({"l3": {"synchronous": "sometimes"}}, "l3.synchronous"),
    ({"thresholds": {"rule": "magic"}}, "thresholds.rule"),
    ({"thresholds": {"delta": {"text": -0.1}}}, "thresholds.delta.text"),
    ({"thresholds": {"delta": {"text": 2.5}}}, "thresholds.delta.text"),
    ({"thresholds": {"budget": 0}}, "thresholds.budget"),
    ({"thresholds": {"budget": 1.5}}, "thresholds.budget"),
    ({"thresholds": {"tail": 1.5}}, "thresholds.tail"),
    ({"thresholds": {"level": 0}}, "thresholds.level"),
    ({"thresholds": {"calibration": "spline"}}, "thresholds.calibration"),
    ({"thresholds": {"verifier": "oracle"}}, "thresholds.verifier"),
    ({"thresholds": {"verifier_band": -1}}, "thresholds.verifier_band"),
    ({"thresholds": {"context_delta": 3}}, "thresholds.context_delta"),
    ({"thresholds": {"seed": -1}}, "thresholds.seed"),
    ({"thresholds": {"seed": 1.5}}, "thresholds.seed"),
    ({"thresholds": {"min_observations": 6}}, "thresholds.min_observations"),
    ({"thresholds": {"bugdet": 0.02}}, "thresholds.bugdet"),
    ({"thresholds": {"delta": {"smell": 0.1}}}, "thresholds.delta.smell"),
    ({"thresholds": {"percentile": 101}}, "thresholds.percentile"),
    ({"thresholds": {"delta_min": 0.3, "delta_max": 0.2}}, "thresholds.delta_max"),
    ({"freshness": {"ttl": -1}}, "freshness.ttl"),
    ({"freshness": {"stale_if_error": -1}}, "freshness.stale_if_error"),
    ({"freshness": {"stale_if_error": float("inf")}}, "freshness.stale_if_error"),
    ({"freshness": {"stale_while_revalidate": float("nan")}}, "freshness.stale_while_revalidate"),
    ({"freshness": {"ttl": 1e17}}, "freshness.ttl"),
    ({"l3": {"backend": "sqlite", "path": "x.db", "options": {"prefix": "p"}}},
     "'l3.options.prefix'"),
    ({"l3": {"backend": "sqlite", "path": "x.db", "options": {"name": "l1"}}},
     "'l3.options.name'"),
    ({"l3": {"backend": "redis", "url": "redis://h", "options": {"capacity": 3}}},
     "'l3.options.capacity'"),
    ({"l3": {"backend": "redis", "url": "redis://h", "options": {"socket_timeout": 1e9}}},
     "l3.options.socket_timeout"),
    ({"l3": {"backend": "redis", "url": "redis://h", "options": {"cluster": "yes"}}},
     "l3.options.cluster"),
    ({"l3": {"backend": "sqlite", "path": "x.db", "options": {"max_staleness": -1}}},
     "l3.options.max_staleness"),
    ({"freshness": {"bypass_tokens": "freshness:strict"}}, "freshness.bypass_tokens"),
    ({"guard": {"error_rate": 1.5}}, "guard.error_rate"),
    ({"dims": {"text": -4}}, "dims.text"),
    ({"encoders": {"video": "clip"}}, "encoders.video"),
    ({"encoders": {"text": "no-such-encoder"}}, "encoders.text"),
    ({"l2": 5}, "l2"),
    ({"l2": {"ann_factory": "Bogus"}}, "l2.ann_factory"),
    ({"l2": {"ann_factory": "HNSW32,Bogus"}}, "l2.ann_factory"),
    ({"dims": {"text": 512}, "l2": {"ann_factory": "PQ48"}}, "l2.ann_factory"),
    ({"l1": {"policy": "arc", "max_bytes": None}}, "l1.max_bytes"),
    ({"thresholds": {"max_scopes": 0}}, "thresholds.max_scopes"),
])
def test_bad_config_names_the_key(data, key):
    with pytest.raises(ConfigError) as err:
        CacheConfig.load(data)
    assert key in str(err.value)


def test_ann_factory_is_checked_at_the_dims_it_will_index():
    CacheConfig.load({"dims": {"text": 384}, "l2": {"ann_factory": "PQ48"}})  # 384 = 8 x 48
    CacheConfig.load({"l2": {"ann_factory": "PQ48"}})    # some usual dimension fits it
    CacheConfig.load({"l2": {"index": "flat", "ann_factory": "Bogus"}})  # never built
    with pytest.raises(ConfigError, match="could not parse"):
        CacheConfig.load({"l2": {"ann_factory": "Bogus"}})


def test_unknown_policy_is_a_config_error():
    with pytest.raises(ConfigError, match="l2.policy"):
        CacheConfig.load({"l2": {"policy": "random-guess"}})
    assert issubclass(UnknownPolicyError, ConfigError)


def test_not_a_config():
    with pytest.raises(ConfigError, match="CacheConfig, dict or YAML path"):
        CacheConfig.load(42)


def test_the_store_password_reaches_neither_provenance_nor_display():
    cfg = CacheConfig.load({"l3": {"backend": "redis", "url": "redis://u:s3cret@10.0.0.1:6379/0"}})
    assert cfg.l3.url == "redis://u:s3cret@10.0.0.1:6379/0"          # still connects with it
    assert cfg.to_dict()["l3"]["url"] == "redis://u:***@10.0.0.1:6379/0"
    assert "s3cret" not in repr(cfg) and "s3cret" not in str(cfg.to_dict())
