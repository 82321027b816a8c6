"""CacheBench-MM engine: counts agree with simulate(), latency model arithmetic, limits hold."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mmcache.sim.latency import LatencyModel
from mmcache.sim.cachebench import TierSpec, replay, replay_limits, three_tier
from mmcache.errors import ConfigError, UnknownPolicyError
from mmcache.policies import POLICIES
from mmcache.sim.replay import simulate
from mmcache.sim.workload import generate


@pytest.fixture(scope="module")
def stream():
    return generate(n_queries=3_000, n_intents=300, seed=11)


@pytest.mark.parametrize("policy", sorted(POLICIES))
def test_one_exact_tier_matches_simulate(stream, policy):
    """The engine's counts are simulate()'s (miss cost 1.0 = simulate's default cost hint)."""
    cap = int(stream.size.sum() // 20)
    unit_cost = LatencyModel(inference_ms={m: 1.0 for m in ("text", "image", "audio")})
    report = replay(stream, [TierSpec("L1", cap, policy)], unit_cost, limits=False)
    trace = stream.to_trace("exact")
    # The engine gives no entropy hints: every entry is of normal priority.
    hints = {"entropy": np.ones(trace.n_req)} if policy == "entropy-retention" else None
    expected = simulate(trace, policy, cap, hints=hints)
    assert report.hit_rate == pytest.approx(expected.hit_ratio, abs=1e-12)
    assert report.byte_hit_rate == pytest.approx(1 - expected.byte_miss_ratio, abs=1e-12)
    assert report.false_hit_rate == 0.0


def test_latency_model_arithmetic():
    w = generate(n_queries=50, n_intents=1, n_variants=1, novel_share=0.0,
                 modality_mix={"image": 1.0}, seed=0)
    tier = TierSpec("L1", 10**9, lookup_us=10.0, bandwidth_gbps=2.0)
    model = LatencyModel(inference_ms={"text": 1.0, "image": 300.0, "audio": 1.0}, sla_ms=100.0)
    report = replay(w, [tier], model, limits=False)
    size = int(w.size[0])
    assert report.hit_rate == pytest.approx(49 / 50)
    assert report.latencies_ms[0] == pytest.approx(0.01 + 300.0)
    assert np.allclose(report.latencies_ms[1:], 0.01 + size / 2e6)
    assert report.sla_violation_rate == pytest.approx(1 / 50)
    assert report.latency_ms["p50"] == pytest.approx(0.01 + size / 2e6)


def test_semantic_threshold_trades_hits_for_false_hits(stream):
    cap = int(stream.size.sum() // 10)
    loose, strict = (replay(stream, [TierSpec("L2", cap, match="semantic", threshold=t)],
                            limits=False) for t in (0.7, 0.95))
    exact = replay(stream, [TierSpec("L2", cap)], limits=False)
    assert loose.hit_rate > strict.hit_rate >= exact.hit_rate
    assert loose.false_hit_rate > 0.05 > strict.false_hit_rate
    assert exact.false_hit_rate == 0.0 and loose.hit_precision < 1.0


@settings(max_examples=15, deadline=None)
@given(st.integers(50, 400), st.floats(0.6, 1.0), st.integers(1, 6), st.integers(0, 999))
def test_report_invariants(n, threshold, cap_div, seed):
    w = generate(n_queries=n, n_intents=40, seed=seed)
    report = replay(w, three_tier(int(w.size.sum() // cap_div), threshold=threshold),
                    limits=False)
    assert sum(report.hit_rate_per_tier.values()) == pytest.approx(report.hit_rate)
    assert 0.0 <= report.false_hit_rate <= report.hit_rate <= 1.0
    assert 0.0 <= report.byte_hit_rate <= 1.0
    assert report.latency_ms["p50"] <= report.latency_ms["p95"] <= report.latency_ms["p99"]
    assert report.latencies_ms.shape == (n,) and (report.latencies_ms > 0).all()


def test_limits_bound_the_replay():
    w = generate(n_queries=3_000, n_intents=300, value_bytes_sigma=0.0, seed=4)
    cap = int(w.size[0]) * 150
    exact = replay(w, [TierSpec("L1", cap)])
    limits = exact.limits
    assert limits["opt_lower_miss_ratio"] <= limits["belady_miss_ratio"] <= 1 - exact.hit_rate
    semantic = replay(w, [TierSpec("L2", cap, match="semantic", threshold=0.8)])
    true_hits = semantic.hit_rate - semantic.false_hit_rate
    assert true_hits <= 1 - semantic.limits["oracle_semantic_opt_lower_miss_ratio"] + 1e-12
    assert limits["oracle_semantic_opt_lower_miss_ratio"] <= \
        limits["oracle_semantic_belady_miss_ratio"] <= limits["oracle_semantic_miss_ratio"]
    assert limits["oracle_semantic_miss_ratio"] < 1 - exact.hit_rate
    assert set(limits["lower_bound_method"]) == {"exact", "oracle_semantic"}
    assert not any(k.startswith("cross_modal") for k in limits)  # the tiers match per modality


def test_cross_modal_oracle_only_where_asked_and_above_the_per_modality_one():
    w = generate(n_queries=2_000, n_intents=150, seed=5)
    cap = int(w.size.sum() // 20)
    limits = replay_limits(w, cap, cross_modal=True)
    for kind in ("opt_lower_", "", "belady_"):
        assert limits[f"cross_modal_oracle_semantic_{kind}miss_ratio"] <= \
            limits[f"oracle_semantic_{kind}miss_ratio"]
    assert limits["cross_modal_oracle_semantic_opt_lower_miss_ratio"] < \
        limits["oracle_semantic_opt_lower_miss_ratio"]  # some hits only another modality makes
    assert limits["sizes_vary"] is True


@pytest.mark.parametrize("bad", [dict(match="fuzzy"), dict(threshold=0.0),
                                 dict(capacity_bytes=0), dict(bandwidth_gbps=0.0),
                                 dict(capacity_bytes=1.5)])
def test_bad_tier_is_a_config_error(bad):
    with pytest.raises(ConfigError):
        TierSpec(**{"name": "L1", "capacity_bytes": 100, **bad})


def test_bad_hierarchy_and_models_are_config_errors(stream):
    with pytest.raises(UnknownPolicyError):
        TierSpec("L1", 100, policy="nope")
    with pytest.raises(ConfigError):
        replay(stream, [])
    with pytest.raises(ConfigError):
        replay(stream, [TierSpec("A", 100), TierSpec("A", 200)])
    with pytest.raises(ConfigError):
        LatencyModel(inference_ms={"text": 1.0})


def _tiered(cap: int, delta: float | None):
    from mmcache import TieredCache

    l2 = {"enabled": False} if delta is None else \
        {"max_entries": None, "max_bytes": cap, "index": "flat"}
    deltas = {m: delta or 0.1 for m in ("text", "image", "audio")}
    return TieredCache({"l1": {"max_entries": None, "max_bytes": cap}, "l2": l2,
                        "thresholds": {"rule": "static", "delta": deltas}})


def test_replay_through_a_tiered_cache():
    from mmcache.sim.cachebench import drive_cache

    w = generate(n_queries=600, n_intents=60, seed=2)
    cap = int(w.size.sum() // 4)
    with _tiered(cap, None) as cache:
        exact = drive_cache(w, cache)
    with _tiered(cap, 0.3) as cache:
        loose = drive_cache(w, cache, limits=False)
    assert exact.tiers == ("l1",) and loose.tiers == ("l1", "l2")
    assert exact.false_hit_rate == 0.0 and 0 < exact.hit_rate <= 1 - exact.limits[
        "belady_miss_ratio"]
    assert loose.hit_rate > exact.hit_rate and loose.false_hit_rate > 0.0
    assert sum(loose.hit_rate_per_tier.values()) == pytest.approx(loose.hit_rate)
    with _tiered(cap, 0.1) as cache, pytest.raises(ConfigError, match="l2"):
        drive_cache(w, cache, costs={"l1": (1.0, 10.0)})


def test_replay_cache_takes_measured_tier_lookups_from_the_profile():
    from mmcache.sim.cachebench import CACHE_TIER_COSTS, measured_cache_tier_costs, drive_cache
    from mmcache.sim.latency import LogNormal, load_profile

    profile = load_profile()
    costs, sources = measured_cache_tier_costs(profile)
    assert costs["l1"][0] == pytest.approx(1000 * profile["l1.exact"].mean_ms)
    assert costs["l2"][0] == pytest.approx(
        1000 * (profile["l2.exact"].mean_ms + profile["l2.semantic"].mean_ms))
    assert "measured l3.exact + l3.semantic" in sources["l3"]
    only_l1 = {"l1.exact": LogNormal(0.5, 0.0, "test profile")}
    partial, partial_sources = measured_cache_tier_costs(only_l1)
    assert partial["l1"][0] == pytest.approx(500.0) and partial["l2"] == CACHE_TIER_COSTS["l2"]
    assert "assumed" in partial_sources["l2"] and "test profile" in partial_sources["l1"]
    w = generate(n_queries=200, n_intents=20, seed=2)
    with _tiered(int(w.size.sum() // 4), 0.3) as cache:
        report = drive_cache(w, cache, limits=False)
    assert report.provenance["tier_costs"]["l2"] == costs["l2"]
    assert report.provenance["tier_cost_sources"] == sources



def test_replay_with_real_text_vectors_of_another_dim():
    from mmcache.encoders import HashingTestEncoder

    stand_in = HashingTestEncoder("text", 40)  # test stand-in: equal texts, equal vectors
    mixed = generate(n_queries=1_000, n_intents=100, modality_mix={"text": 0.6, "image": 0.4},
                     seed=5)
    real = mixed.with_text_encoder(stand_in, [f"prompt {k}" for k in range(mixed.intent.max() + 1)])
    tiers = [TierSpec("L2", int(mixed.size.sum() // 5), match="semantic", threshold=0.9)]
    report = replay(real, tiers, limits=False)  # 40-d text index, 128-d image index
    assert report.provenance["embeddings"]["text"].startswith(stand_in.encoder_id)
    assert report.provenance["embeddings"]["image"].startswith("synthetic")
    assert report.hit_rate_per_modality["text"] > 0 and report.hit_rate_per_modality["image"] > 0


def test_real_text_false_hits_come_from_intents_sharing_a_text():
    from mmcache.encoders import HashingTestEncoder

    stand_in = HashingTestEncoder("text", 40)  # test stand-in: knows no meaning, only equality
    w = generate(n_queries=1_500, n_intents=120, modality_mix={"text": 1.0}, seed=5)
    tiers = [TierSpec("L2", int(w.size.sum() // 5), match="semantic", threshold=0.9)]
    own = replay(w.with_text_encoder(stand_in, [f"prompt {k}" for k in range(w.intent.max() + 1)]),
                 tiers, limits=False)
    shared = replay(w.with_text_encoder(stand_in, ["one prompt", "another prompt"]), tiers,
                    limits=False)
    assert own.false_hit_rate == 0.0 and own.hit_rate > 0.1
    assert shared.false_hit_rate > 0.1 and shared.hit_rate > own.hit_rate


def _shared_text_stream():
    """Text-only and text+image queries whose texts are all one sentence (1 variant), so text
    alone matches every entry; the image tells intents apart (test stand-in encoder)."""
    from mmcache.encoders import HashingTestEncoder

    w = generate(n_queries=1_500, n_intents=100, n_variants=1, novel_share=0.0,
                 modality_mix={"text": 1.0}, multimodal_mix={"text+image": 0.5}, seed=7)
    return w.with_text_encoder(HashingTestEncoder("text", 40), ["one prompt for all"])


def test_a_multimodal_query_hits_only_when_every_modality_matches():
    from mmcache.sim.cachebench import Replayer
    from mmcache.sim.workload import MODALITY_SET_NAMES

    w = _shared_text_stream()
    replayer = Replayer(w, [TierSpec("L2", int(w.size.sum()), match="semantic",
                                     threshold=0.9)])
    for i in range(len(w)):
        replayer.serve(i)
    multi = w.modality_set == MODALITY_SET_NAMES.index("text+image")
    text_only = w.modality_set == MODALITY_SET_NAMES.index("text")
    hit = replayer.hit_tier >= 0
    assert 0.4 < multi.mean() < 0.6
    assert replayer.false_hit[text_only].mean() > 0.5  # the text alone matches any intent
    assert hit[multi].mean() > 0.3 and replayer.false_hit[multi].sum() == 0  # image must too
    report = replayer.report(limits=False)
    assert report.cross_modal_hit_rate == pytest.approx(hit[multi].mean())
    assert set(report.hit_rate_per_modality) == {"text", "text+image"}


def test_a_multimodal_miss_encodes_every_modality_and_waits_for_the_slowest():
    w = generate(n_queries=20, n_intents=1, n_variants=1, novel_share=0.0,
                 modality_mix={"text": 1.0}, multimodal_mix={"text+image": 0.99}, seed=0)
    model = LatencyModel(encode_ms={"text": 5.0, "image": 15.0, "audio": 40.0},
                         inference_ms={"text": 100.0, "image": 300.0, "audio": 1.0})
    report = replay(w, [TierSpec("L2", 10**9, match="semantic", lookup_us=10.0)], model,
                    limits=False)
    first = int(np.flatnonzero(w.modality_set == 3)[0])
    assert report.latencies_ms[first] == pytest.approx(0.01 + 5.0 + 15.0 + 300.0)


# --- video clips: their own index, their own tier route ---

VIDEO_MIX = {"video": 0.3, "image+audio": 0.3}


@pytest.fixture(scope="module")
def video_stream():
    return generate(n_queries=2_500, n_intents=150, seed=21, multimodal_mix=VIDEO_MIX)


def _set_of_key(workload, keys):
    from mmcache.sim.workload import MODALITY_SETS

    return (keys // workload.config.n_variants) % len(MODALITY_SETS)


@pytest.mark.parametrize("kernel", [True, False])
def test_video_never_matches_a_still_image_and_audio_entry(video_stream, kernel):
    """At a threshold loose enough that keyframes would often pass for a photo, every hit is of
    the request's own modality set, in the compiled kernel and the serve path alike."""
    from mmcache.sim.cachebench import Replayer

    tiers = [TierSpec("L2", 10**12, "lru", "semantic", threshold=0.01)]
    r = Replayer(video_stream, tiers)
    if kernel:
        r.serve_all()
    else:
        for i in range(len(video_stream)):
            r.serve(i)
    hit = r.hit_tier >= 0
    assert hit.mean() > 0.5
    np.testing.assert_array_equal(_set_of_key(video_stream, r.hit_key[hit]),
                                  video_stream.modality_set[hit])


def test_a_route_keeps_video_out_of_the_upper_tiers_and_off_their_lookups(video_stream):
    from mmcache.sim.cachebench import Replayer, route_video_to_last
    from mmcache.sim.workload import VIDEO_SET

    tiers = route_video_to_last(three_tier(int(video_stream.size.sum() // 10)))
    assert [t.modality_sets is None for t in tiers] == [False, False, True]
    assert "video" not in tiers[0].modality_sets and "image+audio" in tiers[1].modality_sets
    served = Replayer(video_stream, tiers)
    for i in range(len(video_stream)):
        served.serve(i)
        if video_stream.modality_set[i] == VIDEO_SET:
            for tier in served.state[:2]:
                assert not any(e[2] == VIDEO_SET for e in tier.entries.values())
    video = video_stream.modality_set == VIDEO_SET
    assert set(served.hit_tier[video].tolist()) <= {-1, 2} and (served.hit_tier[video] == 2).any()
    # a video hit pays L3's lookup and transfer only: no L1 / L2 lookup, no encoding (L3 is exact)
    i = int(np.flatnonzero(video & (served.hit_tier == 2))[0])
    expected = served.costs.lookup_ms[2, i] + video_stream.size[i] / (tiers[2].bandwidth_gbps * 1e6)
    assert served.lat_ms[i] == pytest.approx(expected)
    kernel = Replayer(video_stream, tiers)
    kernel.serve_all()
    np.testing.assert_array_equal(kernel.hit_tier, served.hit_tier)
    np.testing.assert_allclose(kernel.lat_ms, served.lat_ms)


def test_tier_routes_name_known_sets_only():
    with pytest.raises(ConfigError, match="vidoe"):
        TierSpec("L1", 100, modality_sets=("text", "vidoe"))
    with pytest.raises(ConfigError, match="not the string"):
        TierSpec("L1", 100, modality_sets="video")
    with pytest.raises(ConfigError, match="none given"):
        TierSpec("L1", 100, modality_sets=())
    assert TierSpec("L1", 100, modality_sets=("audio+image",)).modality_sets == ("image+audio",)
    from mmcache.sim.cachebench import route_video_to_last
    with pytest.raises(ConfigError):
        route_video_to_last([])


def test_video_reports_count_as_multimodal_and_keyed_apart_in_the_oracle(video_stream):
    from mmcache.sim.cachebench import report_prometheus
    from mmcache.sim.workload import VIDEO_SET, modality_set_index

    report = replay(video_stream, three_tier(int(video_stream.size.sum() // 10)))
    assert set(report.hit_rate_per_modality) >= {"video", "image+audio"}
    multi = video_stream.modality_set >= 3
    assert report.hit_rate_per_modality["video"] > 0
    text = report_prometheus(report, video_stream, model_type="m", warmup_n=500)
    assert 'mmcache_cross_modal_hit_rate{modality_set="video",model_type="m"}' in text
    assert 'modality_set="video"' in text.split("warmup_latency_p99")[-1]
    assert report.cross_modal_hit_rate == pytest.approx(
        sum(report.hit_rate_per_modality[n] * (video_stream.modality_set == modality_set_index(n))
            .sum() for n in ("video", "image+audio")) / multi.sum())
    ids = video_stream.to_trace("intent-modality").obj_id
    video = video_stream.modality_set == VIDEO_SET
    assert not set(ids[video].tolist()) & set(ids[~video].tolist())


def test_a_video_miss_encodes_every_keyframe_and_its_track():
    from mmcache.datasets.variants import KEYFRAMES
    from mmcache.sim.workload import VIDEO_SET

    from mmcache.sim.cachebench import Replayer

    w = generate(n_queries=200, n_intents=20, seed=2, multimodal_mix={"video": 0.5})
    r = Replayer(w, [TierSpec("L2", 10**9, match="semantic", lookup_us=0.0)], LatencyModel())
    r.serve_all()
    miss = (r.hit_tier < 0) & (w.modality_set == VIDEO_SET)
    assert miss.any()  # assumed constants: image 15 ms, audio 40 ms to encode, 1 s inference
    np.testing.assert_allclose(r.lat_ms[miss], KEYFRAMES * 15.0 + 40.0 + 1000.0)


def test_served_summary_splits_a_replay_by_request_set(video_stream):
    from mmcache.sim.cachebench import Replayer, route_video_to_last, served_summary
    from mmcache.sim.workload import VIDEO_SET

    video = video_stream.modality_set == VIDEO_SET
    for tiers in (three_tier(int(video_stream.size.sum() // 10)),
                  route_video_to_last(three_tier(int(video_stream.size.sum() // 10)))):
        r = Replayer(video_stream, tiers)
        r.serve_all()
        report, clips, rest = r.report(limits=False), served_summary(r, video), \
            served_summary(r, ~video)
        whole = served_summary(r)
        assert whole["hit_rate"] == pytest.approx(report.hit_rate)
        assert whole["p99_ms"] == pytest.approx(report.latency_ms["p99"])
        assert clips["requests"] + rest["requests"] == len(video_stream)
        assert clips["hit_rate"] == pytest.approx(report.hit_rate_per_modality["video"])
        for t in tiers:
            assert clips[f"share_of_{t.name}_hits"] + rest[f"share_of_{t.name}_hits"] == \
                pytest.approx(1.0 if (r.hit_tier == tiers.index(t)).any() else 0.0)
        assert clips["other_set_hits"] == rest["other_set_hits"] == 0
    # the seed's route: clips take no L1 / L2 hit, every clip hit is L3's
    assert clips["share_of_L1-gpu_hits"] == clips["share_of_L2-cpu_hits"] == 0.0
    assert clips["hit_rate"] > 0 and clips["hit_L3-nvme"] == pytest.approx(clips["hit_rate"])


def test_served_summary_intervals_come_from_a_cluster_bootstrap(video_stream):
    """With ``clusters`` (here: each clip's intent), served_summary reports seeded 95% intervals
    that hold the point estimate; outcomes copied into fewer clusters widen them."""
    from mmcache.errors import InvalidInputError
    from mmcache.sim.cachebench import Replayer, served_summary
    from mmcache.sim.workload import VIDEO_SET

    video = video_stream.modality_set == VIDEO_SET
    r = Replayer(video_stream, three_tier(int(video_stream.size.sum() // 10), threshold=0.8))
    r.serve_all()   # cos 0.8: loose enough that some clip hits are false
    plain = served_summary(r, video)
    clips = served_summary(r, video, clusters=video_stream.intent, seed=3)
    assert {k: clips[k] for k in plain} == plain   # the point estimates do not move
    keys = ["hit_rate", "false_hit_rate", *(f"share_of_{t.name}_hits" for t in r.specs)]
    assert 0 < clips["false_hit_rate"] < clips["hit_rate"] < 1
    for key in keys:
        low, high = clips[f"{key}_ci95"]
        assert 0.0 <= low <= clips[key] <= high <= 1.0, key
    assert clips["hit_rate_ci95"][0] < clips["hit_rate_ci95"][1]
    assert served_summary(r, video, clusters=video_stream.intent, seed=3) == clips
    assert served_summary(r, video, clusters=video_stream.intent, seed=4) != clips
    # every request its own cluster, against the same outcomes ten to a cluster (sorted by
    # outcome, so each cluster is ten copies of one request's hit or miss): wider
    outcome = np.where(video, r.hit_tier >= 0, 0)
    order = np.empty(len(video_stream), int)
    order[np.lexsort((np.arange(len(video_stream)), outcome))] = np.arange(len(video_stream))
    alone = served_summary(r, video, clusters=np.arange(len(video_stream)))
    tens = served_summary(r, video, clusters=order // 10)
    width = {name: s["hit_rate_ci95"][1] - s["hit_rate_ci95"][0]
             for name, s in (("alone", alone), ("tens", tens))}
    assert width["tens"] > 2 * width["alone"] > 0
    with pytest.raises(InvalidInputError, match="one label per request"):
        served_summary(r, video, clusters=video_stream.intent[:-1])
    with pytest.raises(InvalidInputError, match="n_boot"):
        served_summary(r, video, clusters=video_stream.intent, n_boot=0)


def test_a_report_shows_its_tables_and_keeps_its_plain_data(stream):
    report = replay(stream, three_tier(int(stream.size.sum() // 4)), limits=True)
    text = repr(report)
    assert "\n" not in text and len(text) < 300 and "0x" not in text
    assert text.startswith(f"Report(n_req={report.n_req:,}, tiers={list(report.tiers)}")
    page = report._repr_html_()
    for field in ("CacheBench-MM Report", "Hit rate per tier", *report.tiers,
                  "Hit rate per modality set", *report.hit_rate_per_modality, "Latency (ms)", "p99",
                  "Queue (misses)", "Limits", "opt_lower_miss_ratio", "Provenance",
                  f"{report.hit_rate:.4g}"):
        assert field in page, field
    frame = report.to_dataframe()
    second = report.tiers[1]
    row = frame[(frame.metric == "hit_rate_per_tier") & (frame.key == second)]
    assert row.value.item() == report.hit_rate_per_tier[second]
    assert frame[frame.metric == "hit_rate"].value.item() == report.hit_rate


def test_a_report_display_escapes_what_its_provenance_holds(stream):
    report = replay(stream, three_tier(int(stream.size.sum() // 4)), limits=False)
    report.provenance["note"] = "<script>alert(1)</script>"
    page = report._repr_html_()
    assert "<script>" not in page and "&lt;script&gt;" in page
