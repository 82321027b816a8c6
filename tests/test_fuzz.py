"""Fuzzing every Query field, put argument and config value: a call either works or raises an
MMCacheError, quickly, and a refused call changes nothing."""

from __future__ import annotations

import time
import tracemalloc

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import mmcache
from mmcache.config import CacheConfig
from mmcache.encoders.base import HashingTestEncoder
from mmcache.errors import MMCacheError
from mmcache.types import MODALITIES, Query, VideoClip

from cache_helpers import snapshot

#: A generous bound on one refused or accepted call: a hang or a runaway allocation, not speed.
CALL_BOUND_S = 2.0
#: A bound on what one call allocates (tracemalloc's peak; numpy's arrays are traced too): the
#: fuzzed inputs are small, so more means a size taken from the input (a rate, a length).
CALL_MEMORY_BOUND = 64 * 2**20

#: Text, with lone surrogates (which ``st.text`` never draws), combining marks and odd spaces.
TEXTS = st.one_of(st.text(max_size=50), st.lists(st.sampled_from(
    ["a", " ", "\u00b2", "\ud800", "\udfff", "\u0301", "\x00", "\u3000"]), max_size=20).map(
    "".join), st.integers(), st.none(), st.binary(max_size=8))
ARRAYS = hnp.arrays(st.sampled_from([np.float32, np.float64, np.uint8, np.int16, np.bool_]),
                    hnp.array_shapes(min_dims=0, max_dims=4, max_side=8))
NUMBERS = st.one_of(st.integers(-10**20, 10**20), st.floats(allow_nan=True, allow_infinity=True),
                    st.booleans(), st.none(), st.text(max_size=3))
MEDIA = st.one_of(st.none(), ARRAYS, st.binary(max_size=64), TEXTS, st.lists(ARRAYS, max_size=3))
EMBEDDINGS = st.one_of(st.dictionaries(st.sampled_from([*MODALITIES, "video", "smell"]),
                                       st.one_of(ARRAYS, NUMBERS), max_size=3), NUMBERS)
CONTEXTS = st.one_of(st.none(), TEXTS, st.lists(st.one_of(
    st.fixed_dictionaries({"role": TEXTS, "content": TEXTS}), TEXTS, NUMBERS), max_size=3))
JSON = st.recursive(st.one_of(st.none(), st.booleans(), st.floats(), st.integers(), st.text()),
                    lambda inner: st.one_of(st.lists(inner, max_size=3),
                                            st.dictionaries(st.text(max_size=5), inner,
                                                            max_size=3)), max_leaves=10)
VALUES = st.one_of(JSON, st.binary(max_size=32), st.builds(object), st.sets(st.integers()))


@st.composite
def queries(draw) -> Query:
    """A query whose fields are each left at their default three times in four, so that most
    examples reach past the first check."""
    def maybe(strategy, default=None):
        return draw(strategy) if draw(st.integers(0, 3)) == 0 else default

    return Query(text=maybe(TEXTS, "what is 10\u00b2?"), image=maybe(MEDIA),
                 audio=maybe(MEDIA), video=maybe(st.builds(VideoClip, frames=MEDIA, audio=MEDIA)),
                 embeddings=maybe(EMBEDDINGS, {}), scope=maybe(TEXTS, "tenant"),
                 audio_rate=maybe(st.one_of(NUMBERS, st.integers(1, 2**40)), 16_000),
                 ground_truth=maybe(VALUES), context=maybe(CONTEXTS, ()))


@pytest.fixture(scope="module")
def cache_for_fuzzing(tmp_path_factory):
    """One cache (L1, L2, a SQLite L3, a stand-in text encoder) every example goes through."""
    path = tmp_path_factory.mktemp("fuzz") / "l3.db"
    cache = mmcache.TieredCache({"l3": {"backend": "sqlite", "path": str(path)}},
                                encoders={"text": HashingTestEncoder("text", 16)})
    cache.put(Query(text="kept", scope="tenant"), "kept")
    yield cache
    cache.close()


def bounded(call, *args, **kwargs) -> bool:
    """Run ``call``: it may return or raise an MMCacheError, within :data:`CALL_BOUND_S` and
    :data:`CALL_MEMORY_BOUND`; whether it returned."""
    tracemalloc.start()
    started = time.monotonic()
    try:
        call(*args, **kwargs)
        returned = True
    except MMCacheError:
        returned = False
    finally:
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    assert time.monotonic() - started < CALL_BOUND_S, (call, args, kwargs)
    assert peak < CALL_MEMORY_BOUND, (peak, call, args, kwargs)
    return returned


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(query=queries(), value=VALUES, ttl=st.one_of(st.none(), NUMBERS))
def test_any_query_value_and_ttl_works_or_raises_a_typed_error_that_changes_nothing(
        cache_for_fuzzing, query, value, ttl):
    before = snapshot(cache_for_fuzzing)
    if not bounded(cache_for_fuzzing.put, query, value, ttl=ttl):
        assert snapshot(cache_for_fuzzing) == before
    bounded(cache_for_fuzzing.get, query)
    bounded(cache_for_fuzzing.put_many, [query, query], [value, value], ttl=ttl)


KEYS = st.sampled_from(["l1", "l2", "l3", "thresholds", "freshness", "guard", "limits", "dims",
                        "encoders", "route", "bogus"])
SUBKEYS = st.sampled_from(["max_entries", "max_bytes", "policy", "policy_options", "enabled",
                           "backend", "path", "url", "options", "on_error", "ttl", "delta",
                           "rule", "budget", "stale_if_error", "text_chars", "audio_rate",
                           "index", "ann_factory", "text", "bogus"])
CONFIG_VALUES = st.recursive(NUMBERS, lambda inner: st.one_of(
    st.lists(inner, max_size=2), st.dictionaries(SUBKEYS, inner, max_size=3)), max_leaves=6)


@settings(max_examples=300, deadline=None)
@given(data=st.one_of(st.dictionaries(KEYS, st.one_of(
    CONFIG_VALUES, st.dictionaries(SUBKEYS, CONFIG_VALUES, max_size=4)), max_size=4), NUMBERS))
def test_any_config_loads_or_raises_a_config_error(data):
    bounded(CacheConfig.load, data)
