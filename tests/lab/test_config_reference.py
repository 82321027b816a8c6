"""The configuration reference is generated from the schema and names every key."""

from __future__ import annotations

import dataclasses
import typing

import pytest
import yaml

from mmcache import config
from mmcache.config import CacheConfig
from mmcache.lab import config_reference


def _all_keys(cls: type = CacheConfig, prefix: str = "") -> list[str]:
    hints = typing.get_type_hints(cls)
    out = []
    for f in dataclasses.fields(cls):
        out.append(prefix + f.name)
        if dataclasses.is_dataclass(hints[f.name]):
            out += _all_keys(hints[f.name], f"{prefix}{f.name}.")
    return out


def test_every_config_key_appears_with_its_default() -> None:
    text = config_reference.markdown()
    keys = _all_keys()
    assert len(keys) > 50 and "thresholds.budget" in keys and "l3.options" in keys
    missing = [key for key in keys if f"| `{key}` |" not in text]
    assert missing == []
    assert "| `thresholds.budget` | float | `0.02` |" in text
    assert "| `l1.max_entries` | int or null | `10000` |" in text
    assert "| `freshness.bypass_tokens` | list of str | `[\"freshness:strict\"]` |" in text
    for section in ("l1", "l2", "l3", "thresholds", "freshness", "guard"):
        assert f"## `{section}`" in text


def test_a_key_without_help_or_help_without_a_key_is_an_error(monkeypatch) -> None:
    helps = dict(config.KEY_HELP[config.GuardConfig])
    del helps["error_rate"]
    monkeypatch.setitem(config.KEY_HELP, config.GuardConfig, helps)
    with pytest.raises(ValueError, match=r"'guard.error_rate' .* has no help"):
        config_reference.markdown()
    monkeypatch.setitem(config.KEY_HELP, config.GuardConfig,
                        {**config.KEY_HELP[config.GuardConfig], "error_rate": "x", "gone": "y"})
    with pytest.raises(ValueError, match=r"KEY_HELP\[GuardConfig\] names no such key: \['gone'\]"):
        config_reference.markdown()


def test_the_example_loads_and_the_command_writes_the_page(tmp_path) -> None:
    cfg = CacheConfig.from_dict(yaml.safe_load(config.EXAMPLE_YAML))
    assert cfg.l3.backend == "sqlite" and cfg.freshness.ttl_factor("demo-1") == 0.3
    out = tmp_path / "configuration.md"
    assert config_reference.main(["--out", str(out)]) == 0
    assert out.read_text() == config_reference.markdown()
    assert config.EXAMPLE_YAML.splitlines()[0] in out.read_text()
