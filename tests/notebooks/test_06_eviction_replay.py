"""Notebook 06 in smoke mode: libCacheSim-exact counts, size-aware bounds, sane CacheBench-MM."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.notebook

NAME = "06_eviction_replay"


@pytest.fixture(scope="module")
def metrics(smoke_metrics):
    return smoke_metrics(NAME)


def test_cloudphysics_counts_match_libcachesim(metrics):
    counts = metrics["cloudphysics_1GiB_miss_cnt"]
    assert counts["lru"] == 71704 and counts["fifo"] == 72140 and counts["belady"] == 48974


def test_lower_bound_is_below_every_policy_on_every_trace(metrics):
    """opt_bounds: a list of {trace, cache_size, lower, upper, belady, lower_method, upper_by}."""
    assert metrics["lower_bound_le_all_everywhere"] is True
    curves = _by_trace_and_size(metrics["curves"])
    bounds = {(b["trace"], b["cache_size"]): b for b in metrics["opt_bounds"]}
    assert {key for key in bounds if not key[0].endswith("oracle-semantic")} == set(curves)
    for key, rows in curves.items():
        b = bounds[key]
        exact = [r["miss_cnt"] for r in rows if not r["policy"].startswith("oracle")]
        assert b["lower"] <= b["upper"] <= min(exact), key
        assert b["lower"] <= b["belady"] == next(r["miss_cnt"] for r in rows
                                                 if r["policy"] == "belady")
        assert b["lower_method"] in ("foo-l", "lagrange", "min-bypass")
        oracle = [r["miss_cnt"] for r in rows if r["policy"].startswith("oracle")]
        if oracle:
            assert bounds[(f"{key[0]} oracle-semantic", key[1])]["lower"] <= min(oracle)
    assert bounds[("cloudPhysics", 1 << 30)]["lower"] == 48974  # compulsory misses only
    for trace, ratios in metrics["miss_ratio_at_size"].items():
        assert all(0.0 < r < 1.0 for r in ratios.values()), trace
        gaps = metrics["bound_gap_at_size"][trace]
        assert all(g >= 0 for g in gaps.values()) and max(gaps.values()) > 0.01


def test_oracle_semantic_cache_beats_exact_belady(metrics):
    mm = metrics["miss_ratio_at_size"]["multimodal"]
    assert mm["oracle-semantic lower bound"] <= mm["oracle-semantic belady"] \
        <= mm["oracle-semantic lru"]
    assert mm["oracle-semantic belady"] < mm["belady"] - 0.05


def test_replay_throughput_was_measured(metrics):
    speed = metrics["replay_req_per_s"]
    assert all(v > 0 for v in speed.values())
    assert speed["cloudPhysics/lru"] > 1e6  # compiled kernel, not a Python loop


def test_cachebench_latency_is_recomputed_at_half_and_twice_the_assumed_text_inference(metrics):
    sensitivity = metrics["text_inference_sensitivity"]
    assert set(sensitivity) == {"mean_ms", "p99_ms", "sla_violations"}
    assert all(set(v) == {"0.5x", "1x", "2x"} for v in sensitivity.values())
    # 1x replays one row of the CacheBench-MM table again: it reproduces it
    row = metrics["cachebench"][metrics["text_inference_sensitivity_row"]]
    assert sensitivity["mean_ms"]["1x"] == pytest.approx(row["latency_ms"]["mean"])
    assert sensitivity["sla_violations"]["1x"] == pytest.approx(row["sla_violation_rate"])
    assert sensitivity["mean_ms"]["0.5x"] < sensitivity["mean_ms"]["2x"]


def test_cachebench_report_is_consistent(metrics):
    reports, limits = metrics["cachebench"], metrics["cachebench_limits"]
    sweep = sorted((float(name.split("≥")[1]), r) for name, r in reports.items()
                   if name.startswith("3-tier"))
    assert len(sweep) >= 2
    (_, loose), (_, strict) = sweep[0], sweep[-1]
    assert loose["hit_rate"] >= strict["hit_rate"]
    assert loose["false_hit_rate"] >= strict["false_hit_rate"]
    for r in reports.values():
        assert sum(r["hit_rate_per_tier"].values()) == pytest.approx(r["hit_rate"])
        assert r["latency_ms"]["p50"] <= r["latency_ms"]["p95"] <= r["latency_ms"]["p99"]
        assert 0.0 <= r["sla_violation_rate"] <= 1.0
        true_hits = r["hit_rate"] - r["false_hit_rate"]
        assert true_hits <= 1 - limits["oracle_semantic_opt_lower_miss_ratio"]
    tiered = next(r for name, r in reports.items() if name.startswith("TieredCache"))
    assert tiered["tiers"] == ["l1", "l2", "l3"] and tiered["hit_rate"] > 0.05
    exact = next(r for name, r in reports.items() if name.startswith("exact"))
    assert exact["false_hit_rate"] == 0.0
    assert exact["hit_rate"] <= 1 - limits["opt_lower_miss_ratio"]
    assert limits["opt_lower_miss_ratio"] <= limits["belady_miss_ratio"]
    assert not any(k.startswith("cross_modal") for k in limits)  # the tiers match per modality


def test_real_text_replay_trades_hits_for_false_hits(metrics):
    sweep = sorted((float(th), r) for th, r in metrics["real_text"].items())
    limits = metrics["real_text_limits"]
    assert len(sweep) >= 3 and metrics["real_text_setup"]["n_texts"] > 100
    (_, loose), (_, strict) = sweep[0], sweep[-1]
    assert loose["hit_ratio"] >= strict["hit_ratio"] > 0.1
    for (_, lower), (_, higher) in zip(sweep, sweep[1:]):
        assert 0.0 <= higher["false_hit_share"] <= 1.0
        assert higher["false_hit_share"] <= lower["false_hit_share"] + 0.005
        assert higher["hit_ratio"] <= lower["hit_ratio"] + 0.005
    assert strict["false_hit_share"] < 0.05  # MiniLM keeps distinct prompts apart at cos >= 0.95
    for _, r in sweep:
        assert r["true_hit_ratio"] == pytest.approx(r["hit_ratio"] - r["false_hit_rate"])
        assert r["true_hit_ratio"] <= limits["oracle_semantic_max_hit_ratio"]
    assert limits["belady_hit_ratio"] <= limits["max_hit_ratio"]
    assert limits["oracle_semantic_belady_hit_ratio"] <= limits["oracle_semantic_max_hit_ratio"]
    assert "minilm:all-MiniLM-L6-v2/" in metrics["data"]["real_text_embeddings"]
    assert "ShareGPT" in metrics["data"]["real_text_embeddings"]


def test_real_text_through_the_real_tiered_cache(metrics):
    """The same MiniLM stream through mmcache.TieredCache: hits, bounded by the oracle."""
    real = metrics["real_text_tiered_cache"]
    limits = metrics["real_text_limits"]
    assert real["threshold"] == 0.85
    assert 0.1 < real["hit_ratio"] <= 1.0
    assert 0.0 <= real["false_hit_share"] < 0.05
    assert real["true_hit_ratio"] <= limits["oracle_semantic_max_hit_ratio"]
    assert {k for k in real if k.startswith("hit_")} >= {"hit_l1", "hit_l2", "hit_l3", "hit_ratio"}


def _by_trace_and_size(rows):
    groups: dict = {}
    for r in rows:
        groups.setdefault((r["trace"], r["cache_size"]), []).append(r)
    return groups


def test_latency_depends_on_the_backend_load(metrics):
    """load_sweep: over backend loads (the load that reaches the inference servers) from light to
    past saturation, queueing takes the tail; hits do not move."""
    sweep = sorted(metrics["load_sweep"], key=lambda r: r["backend_load"])
    assert len(sweep) >= 3
    assert sweep[0]["backend_load"] <= 0.3 and sweep[-1]["backend_load"] >= 1.0
    for r in sweep:
        assert set(r) >= {"backend_load", "offered_load", "arrival_per_s", "p50_ms", "p95_ms",
                          "p99_ms", "sla_violation_rate", "miss_rate", "utilisation"}
        assert r["p50_ms"] <= r["p95_ms"] <= r["p99_ms"]
        assert 0.0 <= r["sla_violation_rate"] <= 1.0
        assert r["queue_backend_load"] == pytest.approx(r["backend_load"])
        # only misses reach the servers: the offered load is the backend load ÷ the miss share
        assert r["offered_load"] > r["backend_load"]
        if r["backend_load"] < 1:
            assert r["utilisation"] == pytest.approx(r["backend_load"], rel=0.1)
    assert sweep[-1]["sla_violation_rate"] >= sweep[0]["sla_violation_rate"]
    assert sweep[-1]["p99_ms"] > 2 * sweep[0]["p99_ms"]  # queueing takes the tail
    assert all(r["mean_wait_ms"] < s["mean_wait_ms"] for r, s in zip(sweep, sweep[1:]))
    assert all(r["p99_ms"] <= s["p99_ms"] for r, s in zip(sweep, sweep[1:]))
    assert len({round(r["miss_rate"], 12) for r in sweep}) == 1
    assert any(abs(r["sla_violation_rate"] - r["miss_rate"]) > 1e-3 for r in sweep)
    assert "measured" in metrics["latency_setup"]["kind"]
    base = metrics["latency_setup"]
    assert 0.0 < base["base_backend_load"] < base["base_load"]  # misses are a share of requests
    assert metrics["latency_setup"]["profile_command"] == \
        "python -m mmcache.lab.bench.latency_profile"
    assert "measured for image, audio; a labelled assumption for text" in base["kind"]
    per_set = metrics["hit_rate_per_modality"]
    assert {"text", "image", "audio", "text+image"} <= set(per_set)
    assert all(0.0 < v < 1.0 for v in per_set.values())
    multi = [v for k, v in per_set.items() if "+" in k]
    assert min(multi) <= metrics["cross_modal_hit_rate"] <= max(multi)


def test_a_hierarchy_that_hits_more_runs_the_servers_lighter(metrics):
    """load_sweep_more_bytes: the same tiers with more bytes hit more, so at the same arrival
    rate their backend load is lower and their tail shorter."""
    main = sorted(metrics["load_sweep"], key=lambda r: r["backend_load"])
    more = sorted(metrics["load_sweep_more_bytes"], key=lambda r: r["backend_load"])
    setup = metrics["load_sweep_setup"]
    assert [r["backend_load"] for r in main] == [r["backend_load"] for r in more] \
        == setup["backend_loads"]
    assert more[0]["miss_rate"] < main[0]["miss_rate"]
    # the same backend load needs a higher arrival rate when fewer requests miss
    assert all(m["arrival_per_s"] > r["arrival_per_s"] for r, m in zip(main, more))
    # at the arrival rate that saturates the first hierarchy, the second is below saturation
    saturated = next(r for r in main if r["backend_load"] >= 1.0)
    ratio = more[0]["miss_rate"] / main[0]["miss_rate"]
    assert saturated["backend_load"] * ratio < 1.0
    light = [m for m in more if m["arrival_per_s"] <= saturated["arrival_per_s"]]
    assert light and max(m["p99_ms"] for m in light) < saturated["p99_ms"]


def test_degradation_trades_latency_for_false_hits(metrics):
    """Each level forced at one high load. The model guarantees less encoding per level and
    keyword keys that merge a topic's intents; the ordering of p99 and false hits is what the
    smoke stream measures, by wide margins (about 9x per level in p99)."""
    rows = metrics["degradation"]
    assert {"full-modal", "text-fallback", "keyword-proxy"} <= set(rows)
    full, text, keyword = (rows[k] for k in ("full-modal", "text-fallback", "keyword-proxy"))
    for name in ("full-modal", "text-fallback", "keyword-proxy"):
        assert rows[name]["shares"][name] == 1.0
        assert rows[name]["p99_ms"] > 0 and 0.0 <= rows[name]["false_hit_rate"] <= 1.0
    assert full["p99_ms"] > text["p99_ms"] > keyword["p99_ms"]
    assert full["false_hit_rate"] < text["false_hit_rate"] < keyword["false_hit_rate"]
    if "adaptive" in rows:
        assert sum(rows["adaptive"]["shares"].values()) == pytest.approx(1.0)
        assert rows["adaptive"]["p99_ms"] < full["p99_ms"]


def test_prefetch_and_warmup_metrics(metrics):
    pre = metrics["prefetch"]
    assert {"hit_ratio_on", "hit_ratio_off", "wasted_bytes"} <= set(pre)
    assert 0.0 <= pre["hit_ratio_off"] <= 1.0 and 0.0 <= pre["hit_ratio_on"] <= 1.0
    assert 0 <= pre["wasted_bytes"] <= pre["prefetched_bytes"]
    assert pre["n_prefetched"] > 0 and pre["train_end"] > 0
    assert metrics["warmup_p99_ms"] > 0
    assert metrics["warmup_p99_ms"] == pre["warmup_p99_ms_off"]


def test_seed_metrics_are_exported_through_prometheus(metrics):
    text = metrics["prometheus"]
    for name in ("mmcache_cross_modal_hit_rate{", "mmcache_cache_warmup_latency_seconds_bucket{",
                 "mmcache_cache_warmup_latency_p99_seconds{"):
        assert name in text
    assert 'model_type="cachebench-mm-synthetic"' in text and 'modality_set="text+image"' in text


def test_multimodal_vectors_are_named_with_their_provenance(metrics):
    """Smoke mode keeps synthetic vectors (fast); the run says so per modality."""
    data = metrics["data"]
    assert data["multimodal_vectors"] == "synthetic"
    assert set(data["multimodal_embeddings"]) == {"text", "image", "audio"}
    assert all("synthetic" in kind for kind in data["multimodal_embeddings"].values())
    assert data["multimodal_traps"] > 0
    assert data["multimodal_real_inputs"] == {}  # no encoder ran
    assert {"text+image", "image+audio", "text+audio"} <= set(data["multimodal_per_modality_set"])
    assert data["multimodal_build_s"]["wall_s"] > 0


def test_video_clips_keep_their_own_index_and_the_seeds_route(metrics):
    """video_route: clips, the other sets and all requests through the 3-tier hierarchy with
    every tier serving every set, and with seed 002 §3.1's route (clips in the last tier only)."""
    routes, setup = metrics["video_route"], metrics["video_route_setup"]
    assert set(routes) == {"all_tiers", "central_only"} and setup["clips"] > 0
    assert 0 < setup["clip_intents"] <= setup["clips"]
    assert "synthetic" in setup["video_embeddings"]
    for rows in routes.values():
        assert rows["video"]["requests"] == setup["clips"]
        assert rows["video"]["requests"] + rows["other_sets"]["requests"] == setup["n_queries"]
        for row in rows.values():
            assert 0.0 <= row["false_hit_rate"] <= row["hit_rate"] <= 1.0
            assert 0.0 < row["mean_ms"] <= row["p99_ms"]
            assert all(0.0 <= v <= 1.0 for k, v in row.items()
                       if k.startswith("share_of_") and not k.endswith("_ci95"))
        assert rows["video"]["other_set_hits"] == 0  # a clip never matches a still entry
        # the clips' rates carry their 95% interval (a bootstrap over the clips' intents)
        intervals = [k for k in rows["video"] if k.endswith("_ci95")]
        assert {"hit_rate_ci95", "false_hit_rate_ci95", "share_of_L1-gpu_hits_ci95"} <= \
            set(intervals)
        for k in intervals:
            low, high = rows["video"][k]
            assert 0.0 <= low <= high <= 1.0, k
        assert rows["video"]["hit_rate_ci95"][0] <= rows["video"]["hit_rate"] <= \
            rows["video"]["hit_rate_ci95"][1]
        assert rows["other_sets"]["other_set_hits"] == 0
    every, central = routes["all_tiers"]["video"], routes["central_only"]["video"]
    assert every["share_of_L1-gpu_hits"] > 0 and every["share_of_L2-cpu_hits"] > 0
    assert central["share_of_L1-gpu_hits"] == central["share_of_L2-cpu_hits"] == 0.0
    assert central["hit_L3-nvme"] == pytest.approx(central["hit_rate"])
    assert central["false_hit_rate"] == 0.0  # L3 matches exact keys, whose intent is the query's
    assert setup["routes"]["central_only"]["L3-nvme"] == "all"
    assert "video" not in setup["routes"]["central_only"]["L2-cpu"]


def test_other_intent_pair_shares_fall_as_the_threshold_rises(metrics):
    """Per modality, the share of other-intent pairs at cos >= each threshold: a share in [0, 1]
    that never rises with the threshold; synthetic unrelated vectors sit far below 0.75."""
    shares = metrics["other_intent_pairs_above"]
    assert set(shares) == {"text", "image", "audio"}
    for modality, by_threshold in shares.items():
        values = [by_threshold[k] for k in sorted(by_threshold, key=float)]
        assert all(0.0 <= v <= 1.0 for v in values), modality
        assert values == sorted(values, reverse=True), modality
        assert values[-1] < 0.05, modality
