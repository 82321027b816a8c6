"""TieredCache: the public API contract, tiers, promotion, scopes, freshness, metrics."""

from __future__ import annotations

import io

import numpy as np
import pytest
from PIL import Image

import mmcache
from mmcache.encoders import HashingTestEncoder
from mmcache.errors import ConfigError, MMCacheError
from mmcache.types import Query

from mmcache.lab.testing import FakeClock, near, unit

DIM = 32


@pytest.fixture
def rng() -> np.random.Generator:
    return np.random.default_rng(7)


@pytest.fixture
def store(tmp_path):
    return {"backend": "sqlite", "path": str(tmp_path / "l3.db")}


def test_contract_from_design_doc(rng, store):
    vec = unit(rng, DIM)
    q = mmcache.Query(text="a red dress", image=None, audio=None, embeddings={"text": vec},
                      scope="tenant-a")
    cache = mmcache.TieredCache(mmcache.CacheConfig.from_dict({"l3": store}))
    cache.put(q, "answer")
    hit = cache.get(q)
    assert isinstance(hit, mmcache.Hit)
    assert (hit.value, hit.tier, hit.similarity) == ("answer", "l1", 1.0)
    assert cache.get(mmcache.Query(text="something else", embeddings={"text": unit(rng, DIM)},
                                   scope="tenant-a")) is None
    cache.close()
    with pytest.raises(MMCacheError):
        cache.get(q)


@pytest.mark.parametrize("value", ["text", b"\x00\xffbytes", {"a": [1, 2.5, None]}, [1, "x"], 3,
                                   None, True])
def test_values_round_trip_through_every_tier(value, store, rng, tmp_path):
    q = Query(embeddings={"text": unit(rng, DIM)}, scope="s")
    with mmcache.TieredCache({"l3": store}) as cache:
        cache.put(q, value)
        assert cache.get(q).value == value
    with mmcache.TieredCache({"l3": store}) as reopened:
        hit = reopened.get(q)
        assert hit.tier == "l3" and hit.value == value and type(hit.value) is type(value)


def test_config_from_yaml_path(tmp_path, rng):
    path = tmp_path / "cache.yaml"
    path.write_text("l1: {max_entries: 2}\nl2: {index: flat}\n")
    with mmcache.TieredCache(str(path)) as cache:
        assert cache.config.l1.max_entries == 2 and cache.config.l2.index == "flat"


def test_semantic_hit_needs_cosine_at_least_one_minus_delta(rng):
    cache = mmcache.TieredCache({"thresholds": {"delta": {"text": 0.1}}})
    v = unit(rng, DIM)
    cache.put(Query(embeddings={"text": v}, scope="s"), "v")
    hit = cache.get(Query(embeddings={"text": near(rng, v, 0.91)}, scope="s"))
    assert hit is not None and hit.tier == "l2" and hit.similarity == pytest.approx(0.91, abs=1e-5)
    assert cache.get(Query(embeddings={"text": near(rng, v, 0.89)}, scope="s")) is None


def test_multimodal_hit_needs_every_modality_close_to_the_same_entry(rng):
    cache = mmcache.TieredCache({"thresholds": {"delta": {"text": 0.1, "image": 0.1}}})
    t1, i1, t2, i2 = (unit(rng, DIM) for _ in range(4))
    cache.put(Query(embeddings={"text": t1, "image": i1}, scope="s"), "one")
    cache.put(Query(embeddings={"text": t2, "image": i2}, scope="s"), "two")
    # text close to entry one, image close to entry two: no single entry matches both
    crossed = Query(embeddings={"text": near(rng, t1, 0.95), "image": near(rng, i2, 0.95)},
                    scope="s")
    assert cache.get(crossed) is None
    both = cache.get(Query(embeddings={"text": near(rng, t2, 0.95), "image": near(rng, i2, 0.93)},
                           scope="s"))
    assert both.value == "two" and set(both.similarities) == {"text", "image"}
    assert both.similarity == pytest.approx(0.93, abs=1e-5)
    # one modality far off masks nothing: still a miss
    assert cache.get(Query(embeddings={"text": t2, "image": near(rng, i2, 0.5)}, scope="s")) is None


def test_scopes_never_match_each_other_in_any_tier(rng, store):
    v = unit(rng, DIM)
    with mmcache.TieredCache({"l3": store}) as cache:
        cache.put(Query(text="same", embeddings={"text": v}, scope="tenant-a"), "a")
        for q in (Query(text="same", embeddings={"text": v}, scope="tenant-b"),
                  Query(embeddings={"text": v}, scope="tenant-b")):
            assert cache.get(q) is None
    with mmcache.TieredCache({"l3": store, "l1": {"enabled": False},
                              "l2": {"enabled": False}}) as l3_only:
        assert l3_only.get(Query(embeddings={"text": v}, scope="tenant-b")) is None
        assert l3_only.get(Query(embeddings={"text": v}, scope="tenant-a")).value == "a"


def test_l3_hit_is_promoted_into_l1_and_l2(rng, store):
    v = unit(rng, DIM)
    q = Query(embeddings={"text": v}, scope="s")
    with mmcache.TieredCache({"l3": store}) as cache:
        cache.put(q, "x")
    with mmcache.TieredCache({"l3": store}) as cache:
        assert cache.usage()["l1"][0] == 0
        assert cache.get(Query(embeddings={"text": near(rng, v, 0.97)}, scope="s")).tier == "l3"
        assert cache.usage()["l1"][0] == 1 and cache.usage()["l2"][0] == 1
        assert cache.get(q).tier == "l1"
        assert cache.get(Query(embeddings={"text": near(rng, v, 0.97)}, scope="s")).tier == "l2"


def test_l3_search_runs_only_when_l3_holds_entries_l2_lacks(rng, store):
    cache = mmcache.TieredCache({"l2": {"max_entries": 2}, "l3": store})
    vs = [unit(rng, DIM) for _ in range(3)]
    cache.put(Query(embeddings={"text": vs[0]}, scope="s"), 0)
    cache.get(Query(embeddings={"text": unit(rng, DIM)}, scope="s"))
    assert cache.metrics.latency.get("l3.semantic") is None       # covered by L2: skipped
    for i in (1, 2):                                               # L2 evicts entry 0
        cache.put(Query(embeddings={"text": vs[i]}, scope="s"), i)
    hit = cache.get(Query(embeddings={"text": near(rng, vs[0], 0.95)}, scope="s"))
    assert hit.tier == "l3" and hit.value == 0


def test_capacity_per_tier_is_enforced_with_lru(rng):
    cache = mmcache.TieredCache({"l1": {"max_entries": 2}, "l2": {"max_entries": 3}})
    qs = [Query(embeddings={"text": unit(rng, DIM)}, scope="s") for _ in range(5)]
    for i, q in enumerate(qs):
        cache.put(q, i)
    assert cache.usage()["l1"][0] == 2 and cache.usage()["l2"][0] == 3
    assert cache.get(qs[0]) is None and cache.get(qs[1]) is None
    assert cache.get(qs[2]).tier == "l2"          # touched in L2, promoted into L1
    cache.put(Query(embeddings={"text": unit(rng, DIM)}, scope="s"), "new")
    # L2 evicted its least recently used entry (3, since 2 was just read); L1 evicted 4
    assert cache.get(qs[3]) is None
    assert cache.get(qs[2]).tier == "l1" and cache.get(qs[4]).tier == "l2"


def test_byte_capacity_and_entries_too_large_for_a_tier(rng):
    cache = mmcache.TieredCache({"l1": {"max_bytes": 1000}, "l2": {"max_bytes": 100_000}})
    big = Query(embeddings={"text": unit(rng, DIM)}, scope="s")
    cache.put(big, "x" * 5000)
    assert cache.usage()["l1"] == (0, 0)
    assert cache.get(big).tier == "l2"
    with pytest.raises(mmcache.errors.InvalidInputError, match="larger than every tier"):
        cache.put(Query(text="huge", scope="s"), "x" * 200_000)


def test_ttl_expiry_with_injected_clock(rng):
    clock = FakeClock()
    cache = mmcache.TieredCache({"freshness": {"ttl": 10}}, clock=clock)
    q = Query(embeddings={"text": unit(rng, DIM)}, scope="s")
    cache.put(q, "x")
    clock.advance(9.9)
    assert cache.get(q).freshness == "fresh"
    clock.advance(0.1)
    assert cache.get(q) is None
    assert cache.usage()["l1"][0] == 0          # purged once past every window
    cache.put(q, "y", ttl=100)
    clock.advance(50)
    assert cache.get(q).value == "y"


def test_stale_while_revalidate_and_stale_if_error(rng):
    clock = FakeClock()
    cache = mmcache.TieredCache({"freshness": {"ttl": 300, "stale_while_revalidate": 60,
                                               "stale_if_error": 86400}}, clock=clock)
    v = unit(rng, DIM)
    q = Query(embeddings={"text": v}, scope="s")
    cache.put(q, "x")
    clock.advance(330)
    assert cache.get(q).freshness == "stale-while-revalidate"
    assert cache.get(Query(embeddings={"text": near(rng, v, 0.95)}, scope="s")).freshness == \
        "stale-while-revalidate"
    clock.advance(60)
    assert cache.get(q) is None                         # past SWR, origin fine: a miss
    assert cache.get(q, origin_failed=True).freshness == "stale-if-error"
    clock.advance(86400)
    assert cache.get(q, origin_failed=True) is None     # past every window
    assert cache.usage()["l2"][0] == 0
    assert cache.metrics.stale_hits[("l1", "stale-while-revalidate")] == 1


def test_stale_answers_trigger_the_revalidation_hook_and_a_put_refreshes(rng):
    clock = FakeClock()
    refreshed = []
    cache = mmcache.TieredCache({"freshness": {"ttl": 10, "stale_while_revalidate": 5}},
                                clock=clock, on_stale=lambda q, hit: refreshed.append(hit.value))
    q = Query(text="weather in Paris", scope="s")
    cache.put(q, "sunny")
    clock.advance(12)
    assert cache.get(q).freshness == "stale-while-revalidate" and refreshed == ["sunny"]
    cache.put(q, "rain")
    assert cache.get(q).freshness == "fresh" and cache.get(q).value == "rain"
    assert refreshed == ["sunny"]


def test_freshness_from_the_seed_header():
    from mmcache.config import FreshnessConfig

    fr = FreshnessConfig.from_header("stale-while-revalidate; max-age=300; stale-if-error=86400")
    assert (fr.ttl, fr.stale_while_revalidate, fr.stale_if_error) == (300, 300, 86400)
    assert FreshnessConfig.from_header("max-age=60, stale-while-revalidate=30").stale_while_revalidate == 30
    with pytest.raises(ConfigError, match="no-store"):
        FreshnessConfig.from_header("no-store")
    with pytest.raises(ConfigError, match="max-age"):
        FreshnessConfig.from_header("max-age=soon")


def test_bypass_skips_the_cache(rng):
    cache = mmcache.TieredCache()
    q = Query(text="price of gold", scope="s")
    cache.put(q, "x")
    assert cache.get(q, bypass=True) is None
    assert cache.get(Query(text="price of gold freshness:strict", scope="s")) is None
    assert cache.get(q).value == "x"
    assert sum(cache.metrics.bypasses.values()) == 2


def test_exact_keys_use_normalised_text_and_encoders_fill_embeddings():
    enc = HashingTestEncoder("text", DIM)
    cache = mmcache.TieredCache(encoders={"text": enc})
    cache.put(Query(text=" A red dress\n", scope="s"), "x")
    assert cache.get(Query(text="A red dress", scope="s")).tier == "l1"
    assert cache.get(Query(text="a blue dress", scope="s")) is None   # stand-in: unrelated
    # the encoder's vector lets a query with only the embedding find the entry semantically
    vec = enc.encode([" A red dress\n"])[0].astype(np.float32)
    assert cache.get(Query(embeddings={"text": vec}, scope="s")).tier == "l2"


def chart(blue: int = 200) -> np.ndarray:
    """A white 64×64 bar chart whose second bar is drawn in ``blue``."""
    img = np.full((64, 64, 3), 255, np.uint8)
    img[34:, 10:22] = (30, 60, 200)
    img[32:, 36:48] = (30, 60, blue)
    return img


def encoded_png(pixels: np.ndarray, compress_level: int) -> bytes:
    out = io.BytesIO()
    Image.fromarray(pixels).save(out, format="PNG", compress_level=compress_level)
    return out.getvalue()


def test_exact_image_hits_need_the_same_pixels_and_near_copies_pass_the_threshold(rng, store):
    """Another chart (the second bar in another shade: one perceptual hash) is no exact hit:
    without a vector it misses, with one it is a δ-neighbour at its similarity."""
    vec = unit(rng, DIM)
    with mmcache.TieredCache({"l3": store}) as cache:
        cache.put(Query(image=encoded_png(chart(), 6), embeddings={"image": vec}, scope="s"), "a")
        same = cache.get(Query(image=encoded_png(chart(), 1), scope="s"))  # re-encoded PNG
        assert same is not None and (same.value, same.tier, same.similarity) == ("a", "l1", 1.0)
        other = chart(blue=190)
        assert cache.get(Query(image=other, scope="s")) is None
        one_pixel = chart()
        one_pixel[40, 40, 2] -= 1          # also one perceptual hash with the first
        assert cache.get(Query(image=one_pixel, scope="s")) is None
        near_copy = cache.get(Query(image=other, embeddings={"image": near(rng, vec, 0.95)},
                                    scope="s"))
        assert near_copy is not None and near_copy.tier == "l2"
        assert near_copy.similarity == pytest.approx(0.95, abs=1e-5)
        assert cache.get(Query(image=other, embeddings={"image": near(rng, vec, 0.5)},
                               scope="s")) is None


def test_exact_audio_hits_need_the_same_samples(rng):
    clip = (0.1 * rng.standard_normal(16_000)).astype(np.float32)
    nudged = clip.copy()
    nudged[100:110] += 1e-3
    with mmcache.TieredCache() as cache:
        cache.put(Query(audio=clip, scope="s"), "clip")
        assert cache.get(Query(audio=clip.copy(), scope="s")).similarity == 1.0
        assert cache.get(Query(audio=nudged, scope="s")) is None


def test_encoders_named_in_config_resolve_lazily(monkeypatch):
    import mmcache.encoders as encoders

    made = []

    def get_encoder(name):
        made.append(name)
        return HashingTestEncoder("text", DIM)

    monkeypatch.setattr(encoders, "get_encoder", get_encoder, raising=False)
    cache = mmcache.TieredCache({"encoders": {"text": "hashing-test"}})
    assert made == []
    cache.put(Query(text="hello", scope="s"), "x")
    assert made == ["hashing-test"]
    assert cache.usage()["l2"][0] == 1 and cache.tier("l2").dims() == {"text": DIM}


def test_encoder_dim_conflicting_with_config_is_rejected():
    with pytest.raises(ConfigError, match="dims.text"):
        mmcache.TieredCache({"dims": {"text": 16}}, encoders={"text": HashingTestEncoder("text", 32)})


def test_false_hits_are_counted_from_ground_truth(rng):
    cache = mmcache.TieredCache()
    v = unit(rng, DIM)
    cache.put(Query(embeddings={"text": v}, scope="s", ground_truth="intent-1"), "x")
    cache.get(Query(embeddings={"text": near(rng, v, 0.95)}, scope="s", ground_truth="intent-1"))
    cache.get(Query(embeddings={"text": near(rng, v, 0.95)}, scope="s", ground_truth="intent-2"))
    m = cache.metrics
    assert m.judged_hits[("l2", "text")] == 2 and m.false_hits[("l2", "text")] == 1
    frame = m.to_dataframe()
    assert frame.query("metric == 'false_hits'")["value"].sum() == 1
    text = m.to_prometheus()
    assert 'mmcache_false_hits_total{modalities="text",tier="l2"} 1.0' in text
    assert 'mmcache_latency_seconds_count{stage="get"} 2.0' in text


def test_guard_skips_lookups_for_guaranteed_misses(rng, store):
    cache = mmcache.TieredCache({"l3": store})
    # all stored vectors in one narrow cone; a query far outside it cannot be a hit
    centre = unit(rng, DIM)
    for _ in range(20):
        cache.put(Query(embeddings={"text": near(rng, centre, 0.99)}, scope="s"), "x")
    assert cache.get(Query(embeddings={"text": near(rng, centre, 0.2)}, scope="s")) is None
    skips = cache.metrics.guard_skips
    assert skips["l3:bloom"] == 1 and skips["l2:cap"] == 1
    assert skips["l3:cap"] == 0          # L2 holds all of L3: L3's search is not even run
    assert cache.get(Query(embeddings={"text": near(rng, centre, 0.995)}, scope="s")) is not None


def test_percentile_threshold_rule_is_selectable(rng):
    cache = mmcache.TieredCache({"thresholds": {"rule": "percentile", "min_samples": 2,
                                                "percentile": 50, "delta": {"text": 0.2}}})
    v = unit(rng, DIM)
    cache.put(Query(embeddings={"text": v}, scope="s"), "x")
    for cos in (0.99, 0.97):
        assert cache.get(Query(embeddings={"text": near(rng, v, cos)}, scope="s")) is not None
    # δ is now 1 - median(0.99, 0.97) = 0.02: 0.9 no longer counts
    assert cache.get(Query(embeddings={"text": near(rng, v, 0.9)}, scope="s")) is None


def test_invalidate_and_evict(rng, store):
    q = Query(embeddings={"text": unit(rng, DIM)}, scope="s")
    with mmcache.TieredCache({"l3": store}) as cache:
        cache.put(q, "x")
        assert cache.evict("l1") == cache.evict("l2") is not None
        assert cache.get(q).tier == "l3"
        assert cache.invalidate(q) and cache.get(q) is None
        with pytest.raises(ConfigError):
            cache.evict("l9")


def test_reopening_with_other_dims_is_a_config_error(rng, store):
    with mmcache.TieredCache({"l3": store}) as cache:
        cache.put(Query(embeddings={"text": unit(rng, DIM)}, scope="s"), "x")
    with pytest.raises(ConfigError, match="dim 32"):
        mmcache.TieredCache({"l3": store, "dims": {"text": 16}})
    with mmcache.TieredCache({"l3": store}) as again:      # the file was left intact
        assert again.usage()["l3"][0] == 1
