"""Video clips in TieredCache: keyframes + track, their own index, tier routes, metrics, bad input.

Stand-in encoders: the keyframes go through a small pixel encoder (a grey 8×8 thumbnail,
so a clip whose frames are shifted by a pixel stays close), the track through the hashing
stand-in (equal tracks, equal vectors).
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from PIL import Image

import mmcache
from mmcache.build import tier_routes
from mmcache.encoders import HashingTestEncoder
from mmcache.errors import ConfigError, InvalidInputError, InvalidMediaError
from mmcache.lab.testing import near, unit
from mmcache.types import SET_NAMES, Query, VideoClip

from cache_helpers import snapshot

DIM = 64
RNG = np.random.default_rng(17)
TRACK = (0.1 * RNG.standard_normal(8_000)).astype(np.float32)


class ThumbnailEncoder:
    """STAND-IN for tests: a grey 8×8 thumbnail, centred and normalised (near pictures, near
    vectors)."""

    modality, dim, encoder_id = "image", DIM, "stand-in:thumbnail/64"

    def encode(self, images):
        out = []
        for image in images:
            grey = np.asarray(Image.fromarray(image).convert("L").resize((8, 8)), np.float32)
            v = grey.ravel() - grey.mean()
            out.append(v / np.linalg.norm(v))
        return np.stack(out).astype(np.float32)


def scene(shift: int = 0) -> np.ndarray:
    """A 64×64 smooth colour picture, moved ``shift`` pixels to the right."""
    y, x = np.mgrid[0:64, 0:64].astype(np.float32)
    x = x - shift
    img = np.stack([128 + 100 * np.sin(x / 9), 128 + 100 * np.cos(y / 11),
                    128 + 60 * np.sin((x + y) / 15)], axis=-1)
    return img.astype(np.uint8)


def clip(shift: int = 0, track: np.ndarray = TRACK) -> VideoClip:
    """Three keyframes panning across the scene, and ``track``."""
    return VideoClip(frames=[scene(shift + 8 * k) for k in range(3)], audio=track)


def encoders() -> dict:
    return {"image": ThumbnailEncoder(), "audio": HashingTestEncoder("audio", DIM),
            "text": HashingTestEncoder("text", DIM)}


def sqlite(tmp_path: Path) -> dict:
    return {"backend": "sqlite", "path": str(tmp_path / "l3.db")}


def test_a_clip_hits_exactly_and_a_shifted_clip_hits_semantically():
    with mmcache.TieredCache({"l2": {"index": "flat"}}, encoders=encoders()) as cache:
        cache.put(Query(video=clip(), text="what happens here?", scope="s"), "a pan")
        hit = cache.get(Query(video=clip(), text="what happens here?", scope="s"))
        assert (hit.value, hit.tier, hit.similarity) == ("a pan", "l1", 1.0)
        assert set(hit.similarities) == {"text", "audio", "video"}
        moved = cache.get(Query(video=clip(shift=1), text="what happens here?", scope="s"))
        assert moved is not None and moved.value == "a pan" and moved.tier == "l2"
        assert 0.9 <= moved.similarities["video"] < 1.0
        assert moved.similarities["audio"] == pytest.approx(1.0)
        assert cache.get(Query(video=clip(shift=1), scope="s")) is None  # no text: other set


def test_the_clip_vector_is_the_keyframe_mean_of_the_image_encoder():
    cache = mmcache.TieredCache(encoders=encoders())
    cache.put(Query(video=clip(), scope="s"), "v")
    (entry,) = cache.tier("l2").scan()
    frames = ThumbnailEncoder().encode(clip().frames)
    mean = frames.mean(axis=0)
    assert np.allclose(entry.embeddings["video"], mean / np.linalg.norm(mean), atol=1e-6)
    assert np.allclose(entry.embeddings["audio"],
                       HashingTestEncoder("audio", DIM).encode([TRACK])[0], atol=1e-6)
    cache.close()


def test_exact_keys_hash_the_frames_in_order_and_the_track():
    """Without encoders a clip is exact-only: another frame order or track is another key."""
    other_track = TRACK.copy()
    other_track[10] += 1e-3
    base = clip()
    with mmcache.TieredCache() as cache:
        cache.put(Query(video=base, scope="s"), "clip")
        assert cache.get(Query(video=VideoClip(list(base.frames), TRACK.copy()),
                               scope="s")).similarity == 1.0
        as_stack = VideoClip(np.stack(base.frames), TRACK)     # N×H×W×C: the same clip
        assert cache.get(Query(video=as_stack, scope="s")).value == "clip"
        assert cache.get(Query(video=VideoClip(base.frames[::-1], TRACK), scope="s")) is None
        assert cache.get(Query(video=VideoClip(base.frames, other_track), scope="s")) is None
        assert cache.get(Query(video=VideoClip(base.frames[:2], TRACK), scope="s")) is None


def test_a_clip_and_a_still_image_with_audio_never_match_even_with_equal_vectors(tmp_path):
    frames, track = unit(RNG, DIM), unit(RNG, DIM)
    config = {"l2": {"index": "flat"}, "l3": sqlite(tmp_path)}
    still = {"image": frames, "audio": track}
    video = {"video": frames, "audio": track}
    with mmcache.TieredCache(config) as cache:
        cache.put(Query(embeddings=video, scope="s"), "clip")
        assert cache.get(Query(embeddings=still, scope="s")) is None
        assert cache.get(Query(image=scene(), audio=TRACK, embeddings=still, scope="s")) is None
        cache.put(Query(embeddings=still, scope="s"), "still")
        assert cache.get(Query(embeddings={"image": near(RNG, frames, 0.99), "audio": track},
                               scope="s")).value == "still"
        assert cache.get(Query(embeddings={"video": near(RNG, frames, 0.99), "audio": track},
                               scope="s")).value == "clip"
        index = cache.tier("l2").index
        assert index.index("s", "video", ("video", "audio")) is not None
        assert index.index("s", "image", ("image", "audio")) is not None
        assert cache.get(Query(embeddings={"audio": track}, scope="s")) is None  # track alone


def test_a_query_of_another_modality_set_misses_the_clip():
    frames, track, text = unit(RNG, DIM), unit(RNG, DIM), unit(RNG, DIM)
    with mmcache.TieredCache({"l2": {"index": "flat"}}) as cache:
        cache.put(Query(embeddings={"video": frames, "audio": track}, scope="s"), "clip")
        for other in ({"video": frames, "audio": track, "text": text}, {"image": frames},
                      {"audio": track}, {"text": text, "image": frames, "audio": track}):
            assert cache.get(Query(embeddings=other, scope="s")) is None, sorted(other)
        assert cache.get(Query(embeddings={"video": frames, "audio": track},
                               scope="t")) is None  # nor another scope


def test_a_clip_entry_round_trips_through_sqlite(tmp_path):
    config = {"l1": {"enabled": False}, "l2": {"enabled": False}, "l3": sqlite(tmp_path)}
    with mmcache.TieredCache(config, encoders=encoders()) as cache:
        cache.put(Query(video=clip(), scope="s"), {"answer": "a pan"})
    with mmcache.TieredCache(config, encoders=encoders()) as reopened:
        hit = reopened.get(Query(video=clip(), scope="s"))
        assert hit.tier == "l3" and hit.value == {"answer": "a pan"} and hit.similarity == 1.0
        moved = reopened.get(Query(video=clip(shift=1), scope="s"))
        assert moved is not None and moved.tier == "l3" and moved.similarity < 1.0
        (entry,) = reopened.tier("l3").scan()
        assert set(entry.embeddings) == {"video", "audio"}
        assert reopened.get(Query(image=scene(), audio=TRACK, scope="s")) is None


def test_precomputed_clip_embeddings_and_a_clip_with_its_keyframes_vector_given():
    given_frames = unit(RNG, DIM)
    with mmcache.TieredCache({"l2": {"index": "flat"}}, encoders=encoders()) as cache:
        cache.put(Query(video=clip(), embeddings={"video": given_frames}, scope="s"), "given")
        (entry,) = cache.tier("l2").scan()
        assert np.array_equal(entry.embeddings["video"], given_frames)
        hit = cache.get(Query(embeddings={"video": near(RNG, given_frames, 0.98),
                                          "audio": entry.embeddings["audio"]}, scope="s"))
        assert hit is not None and hit.value == "given"


def test_route_video_to_last_keeps_clips_in_the_last_tier_only(tmp_path):
    config = {"route": "video-to-last", "l2": {"index": "flat"}, "l3": sqlite(tmp_path)}
    with mmcache.TieredCache(config, encoders=encoders()) as cache:
        cache.put(Query(video=clip(), scope="s"), "clip")
        cache.put(Query(image=scene(), audio=TRACK, scope="s"), "still")
        assert [len(cache.tier(n)) for n in ("l1", "l2", "l3")] == [1, 1, 2]
        for query in (Query(video=clip(), scope="s"), Query(video=clip(shift=1), scope="s")):
            hit = cache.get(query)
            assert hit is not None and hit.value == "clip" and hit.tier == "l3"
        assert [len(cache.tier(n)) for n in ("l1", "l2")] == [1, 1]  # never promoted
        assert cache.get(Query(image=scene(), audio=TRACK, scope="s")).tier == "l1"


def test_tier_modality_sets_route_each_set_to_the_tiers_that_serve_it(tmp_path):
    vec = unit(RNG, DIM)
    config = {"l1": {"modality_sets": ["text"]}, "l2": {"modality_sets": ["image", "video"]},
              "l3": {**sqlite(tmp_path), "modality_sets": ["image"]}}
    with mmcache.TieredCache(config) as cache:
        cache.put(Query(embeddings={"text": vec}, scope="s"), "text")
        cache.put(Query(embeddings={"image": vec}, scope="s"), "image")
        cache.put(Query(embeddings={"video": vec, "audio": vec}, scope="s"), "clip")
        held = {n: sorted(e.value for e in cache.tier(n).scan()) for n in ("l1", "l2", "l3")}
        assert held == {"l1": ["text"], "l2": ["clip", "image"], "l3": ["image"]}
        assert cache.get(Query(embeddings={"video": vec, "audio": vec}, scope="s")).tier == "l2"
        cache.tier("l2").delete(cache.get(Query(embeddings={"image": vec}, scope="s")).entry_id)
        hit = cache.get(Query(embeddings={"image": vec}, scope="s"))
        assert hit.tier == "l3" and len(cache.tier("l1")) == 1  # promoted to L2, not to L1
        assert len(cache.tier("l2")) == 2
        with pytest.raises(InvalidInputError, match="no tier serves modality set 'audio'"):
            cache.put(Query(embeddings={"audio": vec}, scope="s"), "nowhere")


@st.composite
def requests(draw):
    """A short sequence of (put?, clip?, variant) requests."""
    return draw(st.lists(st.tuples(st.booleans(), st.booleans(), st.integers(0, 3)),
                         min_size=1, max_size=12))


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(requests())
def test_under_video_to_last_no_clip_is_ever_resident_above_the_last_tier(steps):
    vectors = np.linalg.qr(np.random.default_rng(1).standard_normal((DIM, DIM)))[0][:4]
    vectors = vectors.astype(np.float32)
    with tempfile.TemporaryDirectory() as folder:
        config = {"route": "video-to-last", "l1": {"max_entries": 2}, "l2": {"max_entries": 3},
                  "l3": {"backend": "sqlite", "path": f"{folder}/l3.db"}}
        with mmcache.TieredCache(config) as cache:
            for put, is_clip, k in steps:
                first = "video" if is_clip else "image"
                query = Query(embeddings={first: vectors[k], "audio": vectors[(k + 1) % 4]},
                              scope="s")
                if put:
                    cache.put(query, f"{first}-{k}")
                else:
                    hit = cache.get(query)
                    assert hit is None or hit.value == f"{first}-{k}"
                for name in ("l1", "l2"):
                    assert all("video" not in e.embeddings for e in cache.tier(name).scan())
            stored = {f"video-{k}" for put, is_clip, k in steps if put and is_clip}
            assert {e.value for e in cache.tier("l3").scan() if "video" in e.embeddings} == stored


def test_defaults_route_every_set_to_every_tier(tmp_path):
    config = mmcache.CacheConfig.from_dict({"l3": sqlite(tmp_path)})
    assert config.route == "all" and config.l1.modality_sets is None
    assert tier_routes(config) == [frozenset(SET_NAMES)] * 3
    routed = tier_routes(mmcache.CacheConfig.from_dict({"l3": sqlite(tmp_path),
                                                        "route": "video-to-last"}))
    assert routed[2] == frozenset(SET_NAMES)
    assert routed[0] == routed[1] == frozenset(SET_NAMES) - {"video", "text+video"}


@pytest.mark.parametrize("config, match", [
    ({"route": "clips-first"}, "route must be one of"),
    ({"l1": {"modality_sets": []}}, "l1.modality_sets must name at least one"),
    ({"l2": {"modality_sets": ["image+video"]}}, "l2.modality_sets: 'image\\+video' names no"),
    ({"l1": {"modality_sets": ["smell"]}}, "names no modality set"),
    ({"l1": {"modality_sets": "video"}}, "l1.modality_sets must be"),
    ({"l1": {"routes": ["video"]}}, "unknown config key 'l1.routes'"),
])
def test_bad_routes_are_config_errors(config, match):
    with pytest.raises(ConfigError, match=match):
        mmcache.CacheConfig.from_dict(config)


def test_an_encoder_for_video_is_refused_the_image_encoder_embeds_keyframes():
    with pytest.raises(ConfigError, match="keyframes go through the image encoder"):
        mmcache.TieredCache(encoders={"video": ThumbnailEncoder()})
    with pytest.raises(ConfigError, match="encoders.video: unknown modality"):
        mmcache.CacheConfig.from_dict({"encoders": {"video": "clip"}})


def test_clip_metrics_are_labelled_video():
    with mmcache.TieredCache(encoders=encoders()) as cache:
        cache.put(Query(video=clip(), scope="s"), "clip")
        cache.get(Query(video=clip(), scope="s"))
        cache.get(Query(video=clip(), text="and now?", scope="s"))
        snap = cache.metrics.snapshot()
        assert snap.hits == {("l1", "video"): 1} and snap.misses == {"text+video": 1}
        assert snap.cross_modal_hits == {("l1", "video"): 1}
        text = cache.metrics.to_prometheus(model_type="stand-in")
        assert 'modality_set="video"' in text
        assert 'mmcache_cross_modal_hit_rate{modality_set="video",model_type="stand-in"} 1.0' \
            in text


GOOD_FRAMES = clip().frames
BAD_CLIPS = {
    "no frames": (Query(video=VideoClip([], TRACK), scope="s"), InvalidMediaError,
                  "no frames"),
    "corrupt frame": (Query(video=VideoClip([GOOD_FRAMES[0], b"\x89PNG junk"], TRACK), scope="s"),
                      InvalidMediaError, "video frame 1: image bytes cannot be decoded"),
    "float frame": (Query(video=VideoClip([np.zeros((8, 8), np.float32)], TRACK), scope="s"),
                    InvalidMediaError, "video frame 0: image array must be uint8"),
    "frames not a sequence": (Query(video=VideoClip(GOOD_FRAMES[0], TRACK), scope="s"),
                              InvalidMediaError, "list or tuple of images"),
    "empty track": (Query(video=VideoClip(GOOD_FRAMES, np.zeros(0, np.float32)), scope="s"),
                    InvalidMediaError, "video track: audio is empty"),
    "NaN track": (Query(video=VideoClip(GOOD_FRAMES, np.full(100, np.nan, np.float32)),
                        scope="s"), InvalidMediaError, "video track: audio contains NaN"),
    "not a VideoClip": (Query(video=GOOD_FRAMES, scope="s"), InvalidMediaError,
                        "must be an mmcache.VideoClip"),
    "clip and still image": (Query(video=clip(), image=GOOD_FRAMES[0], scope="s"),
                             InvalidInputError, "a video clip or a still image, not both"),
    "clip and image embedding": (Query(video=clip(), embeddings={"image": unit(RNG, DIM)},
                                       scope="s"), InvalidInputError, "not both"),
    "clip and Query.audio": (Query(video=clip(), audio=TRACK, scope="s"), InvalidInputError,
                             "track is VideoClip.audio"),
    "keyframes vector without a track": (Query(embeddings={"video": unit(RNG, DIM)}, scope="s"),
                                         InvalidInputError, "needs its audio track"),
}


@pytest.mark.parametrize("case", sorted(BAD_CLIPS))
def test_bad_clips_raise_their_typed_error_and_change_nothing(tmp_path, case):
    query, error, match = BAD_CLIPS[case]
    with mmcache.TieredCache({"l3": sqlite(tmp_path)}, encoders=encoders()) as cache:
        cache.put(Query(video=clip(), scope="s"), "kept")
        cache.put(Query(text="kept", embeddings={"text": unit(RNG, DIM)}, scope="s"), "text")
        before, files = snapshot(cache), (tmp_path / "l3.db").read_bytes()
        metrics = cache.metrics.snapshot()
        with pytest.raises(error, match=match):
            cache.put(query, "value")
        with pytest.raises(error, match=match):
            cache.get(query)
        with pytest.raises(error, match=match):
            cache.put_many([Query(text="fine", scope="s"), query], ["a", "b"])
        assert snapshot(cache) == before and (tmp_path / "l3.db").read_bytes() == files
        after = cache.metrics.snapshot()
        assert (after.hits, after.misses, after.puts) == (metrics.hits, metrics.misses,
                                                          metrics.puts)


def test_text_fallback_drops_the_clip():
    with mmcache.TieredCache(encoders=encoders()) as cache:
        cache.put(Query(text="what is this?", scope="s"), "text answer")
        hit = cache.get(Query(video=clip(), text="what is this?", scope="s"),
                        degrade="text-fallback")
        assert hit is not None and hit.value == "text answer"
