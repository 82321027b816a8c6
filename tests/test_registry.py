"""One registry shape for every extension point (mmcache.registry.Registry), and a registered
policy, rule, verifier and encoder usable by name from a TieredCache config."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import pytest

import mmcache
from mmcache import Query
from mmcache.encoders import ENCODERS, HashingTestEncoder, get_encoder
from mmcache.errors import ConfigError, UnknownPolicyError
from mmcache.policies import POLICIES, make_policy
from mmcache.policies.lru import LRU
from mmcache.registry import Registry
from mmcache.sim.kernels import KERNELS
from mmcache.thresholds import RULES, StaticThreshold
from mmcache.verify import VERIFIERS, make_verifier


def make_registry() -> Registry:
    return Registry("widget", {"b": int, "a": float}, error=UnknownPolicyError)


def test_register_lists_and_looks_up_in_order():
    reg = make_registry()
    assert reg.register("c", str) is str
    assert reg.names() == ("b", "a", "c") == tuple(reg)
    assert reg.lookup("c") is str and reg["a"] is float


def test_register_as_a_decorator():
    reg = make_registry()

    @reg.register("d")
    def build_d():
        return "d"

    assert reg["d"] is build_d and reg.names()[-1] == "d"


def test_duplicate_refused_unless_replace_which_keeps_the_place():
    reg = make_registry()
    with pytest.raises(ConfigError, match="already registered"):
        reg.register("b", str)
    assert reg["b"] is int
    reg.register("b", str, replace=True)
    assert reg["b"] is str and reg.names() == ("b", "a")


@pytest.mark.parametrize("name, factory", [("", int), (3, int), ("x", 3), ("x", None)])
def test_bad_names_and_factories_refused(name, factory):
    with pytest.raises(ConfigError):
        make_registry().register(name, factory)


def test_none_is_a_factory_only_where_allowed():
    reg = Registry("stage", {"none": None}, allow_none=True)
    assert reg["none"] is None and reg.lookup("none") is None


@pytest.mark.parametrize("name", ["nope", ["unhashable"], None])
def test_unknown_name_is_the_registry_typed_error_listing_names(name):
    with pytest.raises(UnknownPolicyError, match=r"unknown widget .*known: \['a', 'b'\]"):
        make_registry().lookup(name)


def test_read_only_mapping_behaviour():
    reg = make_registry()
    assert isinstance(reg, Mapping) and len(reg) == 2
    assert "a" in reg and "z" not in reg
    assert reg.get("z") is None and reg.get("a") is float
    assert sorted(reg) == ["a", "b"] and list(reg.items()) == [("b", int), ("a", float)]
    assert dict(reg) == {"b": int, "a": float} and reg == {"a": float, "b": int}
    with pytest.raises(KeyError):
        reg["z"]
    with pytest.raises(TypeError):
        reg["z"] = int  # type: ignore[index]
    with pytest.raises(TypeError):
        del reg["a"]  # type: ignore[attr-defined]


def test_every_extension_point_is_a_registry_in_its_order():
    for reg in (POLICIES, RULES, VERIFIERS, ENCODERS, KERNELS):
        assert isinstance(reg, Registry)
    assert list(POLICIES)[:3] == ["lru", "fifo", "clock"]
    assert RULES.names() == ("static", "percentile", "calibrated", "error-budget", "vcache")
    assert VERIFIERS.names() == ("none", "edits", "pairs", "judge") and VERIFIERS["none"] is None
    assert ENCODERS.names() == ("minilm", "text", "clip", "whisper", "audio", "asr-minilm",
                                "hashing-test")
    assert mmcache.encoders.ENCODER_NAMES == ENCODERS.names()
    assert mmcache.POLICIES is POLICIES and mmcache.ENCODERS is ENCODERS
    assert mmcache.Registry is Registry


def test_each_extension_point_raises_its_own_error():
    with pytest.raises(UnknownPolicyError, match="known: .*'lru'"):
        make_policy("nope")
    with pytest.raises(ConfigError, match="thresholds.verifier: unknown verifier 'nope'"):
        make_verifier("nope")
    with pytest.raises(ConfigError, match="unknown encoder 'nope'; known: .*'minilm'"):
        get_encoder("nope")


@pytest.fixture
def scratch(monkeypatch):
    """Registrations made in a test are undone after it."""
    for reg in (POLICIES, RULES, VERIFIERS, ENCODERS, KERNELS):
        monkeypatch.setattr(reg, "_entries", dict(reg._entries))


class CountingLRU(LRU):
    name = "counting-lru"
    made = 0

    def __init__(self, **kw) -> None:
        super().__init__(**kw)
        type(self).made += 1


class HalfRule(StaticThreshold):
    """Static δ = 0.5 for every modality, whatever the config says."""

    name = "half"

    def __init__(self) -> None:
        super().__init__({"text": 0.5})


class SmallTextEncoder(HashingTestEncoder):
    def __init__(self) -> None:
        super().__init__("text", 8)


def test_registered_names_are_usable_from_a_cache_config(scratch):
    judged = []

    def make_judge():
        def judge(query, entry):
            judged.append((query.text, entry.question))
            return 1.0
        return judge

    POLICIES.register("counting-lru", CountingLRU)
    RULES.register("half", HalfRule)
    VERIFIERS.register("my-judge", make_judge)
    ENCODERS.register("small-text", SmallTextEncoder)
    CountingLRU.made = 0
    cache = mmcache.TieredCache({
        "l1": {"policy": "counting-lru"}, "l2": {"policy": "counting-lru", "index": "flat"},
        "thresholds": {"rule": "half", "verifier": "my-judge", "verifier_band": 2.0},
        "encoders": {"text": "small-text"}})
    try:
        assert CountingLRU.made >= len(cache.tiers) == 2  # validation builds one too
        assert isinstance(cache.thresholds, HalfRule)
        cache.put(Query(text="stored question", scope="s"), "answer")
        assert cache.get(Query(text="stored question", scope="s")).tier == "l1"
        base = get_encoder("small-text").encode(["stored question"])[0]
        near = base + 0.2 * np.eye(8, dtype=np.float32)[0]
        hit = cache.get(Query(text="other words", embeddings={"text": near / np.linalg.norm(near)},
                              scope="s"))
        assert hit is not None and hit.tier == "l2"
        assert judged == [("other words", "stored question")]
    finally:
        cache.close()


@pytest.mark.parametrize("section, key", [
    ({"l1": {"policy": "counting-lru"}}, "l1.policy"),
    ({"thresholds": {"rule": "half"}}, "thresholds.rule"),
    ({"thresholds": {"verifier": "my-judge"}}, "thresholds.verifier"),
    ({"encoders": {"text": "small-text"}}, "encoders.text")])
def test_a_name_is_valid_only_once_registered(scratch, section, key):
    with pytest.raises(ConfigError, match=key):
        mmcache.CacheConfig.from_dict(section)
    POLICIES.register("counting-lru", CountingLRU)
    RULES.register("half", HalfRule)
    VERIFIERS.register("my-judge", lambda: (lambda query, entry: 1.0))
    ENCODERS.register("small-text", SmallTextEncoder)
    mmcache.CacheConfig.from_dict(section)


def test_a_registered_policy_replays_and_a_replaced_encoder_builds_anew(scratch):
    from mmcache.sim.replay import make_trace, simulate

    POLICIES.register("counting-lru", CountingLRU)
    trace = make_trace(np.array([1, 2, 1, 3, 1, 2]), np.ones(6, int))
    assert "counting-lru" not in KERNELS
    assert simulate(trace, "counting-lru", 2).miss_cnt == simulate(trace, "lru", 2,
                                                                     use_kernel=False).miss_cnt
    ENCODERS.register("small-text", SmallTextEncoder)
    first = get_encoder("small-text")
    assert get_encoder("small-text") is first
    ENCODERS.register("small-text", lambda: HashingTestEncoder("text", 4), replace=True)
    assert get_encoder("small-text").dim == 4


def test_kernels_are_lazy_factories_and_a_registered_one_is_used(scratch):
    from mmcache.sim.replay import make_trace, simulate

    replay = KERNELS["fifo"]()
    assert callable(replay)
    trace = make_trace(np.array([1, 2, 1, 3, 1, 2, 4, 1]), np.ones(8, int))
    calls = []

    def lru_kernel():
        run = KERNELS["lru"]()
        return lambda *args, **kw: calls.append(1) or run(*args, **kw)

    POLICIES.register("counting-lru", CountingLRU)
    KERNELS.register("counting-lru", lru_kernel)
    fast = simulate(trace, "counting-lru", 2)
    slow = simulate(trace, "counting-lru", 2, use_kernel=False)
    assert calls == [1] and (fast.miss_cnt, fast.miss_byte) == (slow.miss_cnt, slow.miss_byte)
