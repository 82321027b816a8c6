"""Serving features of CacheBench-MM: degradation, reference-graph prefetch, seed 001 §4.4 metrics."""

from __future__ import annotations

from dataclasses import replace

import networkx as nx
import numpy as np
import pytest

from mmcache.sim.latency import LatencyModel
from mmcache.sim.cachebench import (Replayer, TierSpec, degradation_replay, degradation_rows,
                                    report_prometheus, replay, three_tier)
from mmcache.sim.cachebench.degradation import LEVELS, Degrader
from mmcache.errors import ConfigError, InvalidInputError
from mmcache.sim.cachebench.prefetch import (pagerank, prefetch_plan, prefetch_replay,
                                             reference_graph)
from mmcache.sim.workload import generate

MIX = {"text+image": 0.3, "audio+image": 0.1, "text+audio": 0.1}


@pytest.fixture(scope="module")
def stream():
    return generate(n_queries=2_000, n_intents=200, multimodal_mix=MIX, seed=3)


def test_pagerank_matches_hand_values():
    """A <-> B, C -> A, damping 0.85: C = 0.15/3, A = 0.135 / 0.2775, B = 0.05 + 0.85 A."""
    g = nx.DiGraph([(0, 1), (1, 0), (2, 0)])
    pr = pagerank(g)
    a = 0.135 / 0.2775
    assert pr[2] == pytest.approx(0.05, abs=1e-6)
    assert pr[0] == pytest.approx(a, abs=1e-6) and pr[1] == pytest.approx(0.05 + 0.85 * a,
                                                                          abs=1e-6)
    with pytest.raises(ConfigError, match="damping"):
        pagerank(g, damping=1.0)


def test_prefetch_never_uses_requests_after_the_training_prefix(stream):
    train_end = 1_000
    future = replace(stream, intent=np.r_[stream.intent[:train_end],
                                          stream.intent[train_end:][::-1]],
                     time=np.r_[stream.time[:train_end], stream.time[train_end:] + 50.0])
    threshold = 1.0 / reference_graph(stream, train_end).number_of_nodes()
    plan = prefetch_plan(stream, train_end, threshold)
    assert plan and max(plan) < train_end
    assert prefetch_plan(future, train_end, threshold) == plan
    graph = reference_graph(stream, train_end)
    assert sum(w for _, _, w in graph.edges(data="weight")) == pytest.approx(
        np.exp(-np.diff(stream.time[:train_end]) / 300.0).sum())
    with pytest.raises(ConfigError, match="train_end"):
        reference_graph(stream, len(stream) + 1)


def test_prefetch_replay_warms_the_cache(stream):
    tiers = three_tier(int(stream.size.sum() // 8))
    latency = LatencyModel(servers=2)
    res = prefetch_replay(stream, tiers, latency, train_end=1_000, threshold=0.0,
                          warmup_n=200)
    assert res.n_prefetched > 0 and res.prefetched_bytes > 0
    assert res.hit_ratio_on > res.hit_ratio_off  # everything seen is prefetched at 0
    assert 0 <= res.wasted_bytes + res.unused_resident_bytes <= res.prefetched_bytes
    assert res.hits_on.shape == (1_000,) and res.warmup_ms_off.shape == (200,)
    off = prefetch_replay(stream, tiers, latency, train_end=1_000, threshold=1.0, warmup_n=200)
    assert off.n_prefetched == 0 and off.wasted_bytes == 0
    assert off.hit_ratio_on == off.hit_ratio_off == res.hit_ratio_off
    with pytest.raises(ConfigError, match="warmup_n"):
        prefetch_replay(stream, tiers, latency, train_end=1_000, threshold=0.0, warmup_n=0)


def test_degrader_switches_by_queue_length():
    d = Degrader(servers=2)  # text-fallback at 4 jobs in the system, keyword-proxy at 8
    assert d.level(0.0) == "full-modal"
    for finish in range(1, 9):
        d.observe(100.0 + finish)
    assert d.queue_length(0.0) == 8 and d.level(0.0) == "keyword-proxy"
    assert d.level(104.5) == "text-fallback"  # 4 left
    assert d.level(105.5) == "full-modal"  # 3 left
    for bad in ({"text-fallback": 3.0, "keyword-proxy": 1.0}, {"text-fallback": 1.0}):
        with pytest.raises(ConfigError, match="thresholds"):
            Degrader(servers=2, thresholds=bad)
    with pytest.raises(ConfigError, match="servers"):
        Degrader(servers=0)


def test_adaptive_degradation_under_a_constructed_overload():
    """Every request arrives within 0.1 s to one server: the queue builds, levels escalate."""
    w = generate(n_queries=300, n_intents=300, novel_share=0.99, multimodal_mix=MIX, seed=1)
    w = replace(w, time=np.linspace(0.0, 0.1, len(w)))
    tiers = [TierSpec("L2", 10**9, match="semantic", threshold=0.99)]
    degrader = Degrader(servers=1, thresholds={"text-fallback": 5, "keyword-proxy": 20})
    report, shares = degradation_replay(w, tiers, LatencyModel(servers=1), degrader)
    assert shares["keyword-proxy"] > 0.5 and shares["full-modal"] > 0
    assert sum(shares.values()) == pytest.approx(1.0)
    assert report.n_req == len(w)


def test_forced_levels_cut_encoding_and_add_false_hits(stream):
    tiers = three_tier(int(stream.size.sum()), threshold=0.8)
    latency = LatencyModel(servers=4)
    rows = degradation_rows(stream, tiers, latency)
    assert list(rows) == list(LEVELS)
    full, text, keyword = (rows[lv] for lv in LEVELS)
    # keywords (topics) merge sibling intents: more hits, more of them false
    assert keyword["false_hit_rate"] > text["false_hit_rate"] >= full["false_hit_rate"]
    keyword_replay = Replayer(stream, tiers, latency)
    for i in range(len(stream)):
        keyword_replay.serve(i, level="keyword-proxy")
    assert not (keyword_replay.hit_tier == 1).any()  # the semantic tier is never consulted
    with pytest.raises(ConfigError, match="degradation level"):
        keyword_replay.serve(0, level="text-only")


def test_text_fallback_looks_up_the_text_alone():
    w = generate(n_queries=40, n_intents=1, n_variants=1, novel_share=0.0,
                 modality_mix={"text": 1.0}, multimodal_mix={"text+image": 0.5}, seed=0)
    model = LatencyModel(encode_ms={"text": 5.0, "image": 15.0, "audio": 40.0},
                         inference_ms={"text": 100.0, "image": 300.0, "audio": 1.0})
    tiers = [TierSpec("L2", 10**9, match="semantic", lookup_us=10.0)]
    replayer = Replayer(w, tiers, model)
    first_multi = int(np.flatnonzero(w.modality_set == 3)[0])
    replayer.serve(first_multi, level="text-fallback")
    assert replayer.lat_ms[first_multi] == pytest.approx(0.01 + 5.0 + 100.0)
    text_only = int(np.flatnonzero(w.modality_set == 0)[-1])
    replayer.serve(text_only)  # the fallback stored a text-only answer: a plain text hit
    assert replayer.hit_tier[text_only] == 0


def test_report_prometheus_has_the_seed_names_and_labels(stream):
    report = replay(stream, three_tier(int(stream.size.sum() // 4)), LatencyModel(servers=2),
                    limits=False)
    text = report_prometheus(report, stream, model_type="synthetic", warmup_n=500)
    assert "mmcache_cross_modal_hit_rate{" in text
    assert "mmcache_cache_warmup_latency_seconds_bucket{" in text
    assert "mmcache_cache_warmup_latency_p99_seconds{" in text
    assert 'modality_set="text+image",model_type="synthetic"' in text
    line = next(x for x in text.splitlines()
                if x.startswith("mmcache_cross_modal_hit_rate{") and '"text+image"' in x)
    assert float(line.split()[-1]) == pytest.approx(report.hit_rate_per_modality["text+image"])
    with pytest.raises(ConfigError, match="warmup_n"):
        report_prometheus(report, stream, model_type="synthetic", warmup_n=0)
    with pytest.raises(InvalidInputError, match="model_type"):
        report_prometheus(report, stream, model_type="")


def test_tiered_cache_exports_cross_modal_hits():
    from mmcache import Query, TieredCache

    rng = np.random.default_rng(0)
    vecs = {m: (v / np.linalg.norm(v)).astype(np.float32)
            for m, v in (("text", rng.standard_normal(8)), ("image", rng.standard_normal(8)))}
    with TieredCache({"l2": {"enabled": False}}) as cache:
        q = Query(text="a red dress", embeddings=vecs, scope="t")
        cache.put(q, "answer")
        assert cache.get(q) is not None
        text = cache.metrics.to_prometheus(model_type="clip+minilm")
    assert 'mmcache_cross_modal_hits_total{modality_set="text+image",tier="l1"} 1.0' in text
    assert 'mmcache_cross_modal_hit_rate{modality_set="text+image",model_type="clip+minilm"} 1.0' \
        in text


def test_tiered_cache_text_fallback_drops_to_the_text_modality():
    from mmcache import Query, TieredCache

    rng = np.random.default_rng(1)
    text_vec, image_vec = ((v / np.linalg.norm(v)).astype(np.float32)
                           for v in rng.standard_normal((2, 8)))
    with TieredCache({"l2": {"enabled": False}}) as cache:
        cache.put(Query(text="a red dress", embeddings={"text": text_vec}, scope="t"), "answer")
        both = Query(text="a red dress", embeddings={"text": text_vec, "image": image_vec},
                     scope="t")
        assert cache.get(both) is None  # a hit needs the same modality set
        assert cache.get(both, degrade="text-fallback").value == "answer"
        with pytest.raises(ConfigError, match="keyword-proxy"):
            cache.get(both, degrade="keyword-proxy")
        with pytest.raises(InvalidInputError, match="text"):
            cache.get(Query(embeddings={"image": image_vec}, scope="t"), degrade="text-fallback")
