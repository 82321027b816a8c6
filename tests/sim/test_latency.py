"""The latency model: the FCFS server pool against queueing theory, load, provenance."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest

from mmcache.sim.latency import LatencyModel
from mmcache.sim.cachebench import (Replayer, TierSpec, at_backend_load, at_load, backend_load,
                                    load_sweep, offered_load, replay, three_tier)
from mmcache.errors import ConfigError, InvalidInputError, StaleProfileError
from mmcache.sim.latency import (ASSUMED_TEXT_INFERENCE, LogNormal, ServerPool, fcfs_waits,
                                 fit_histogram, fit_samples, load_profile, read_profile)
from mmcache.metrics import Histogram
from mmcache.types import MODALITIES
from mmcache.sim.workload import generate


def erlang_c_wait(arrival_rate: float, service_rate: float, servers: int) -> float:
    """Mean waiting time of an M/M/c queue (Erlang C)."""
    a = arrival_rate / service_rate
    top = a ** servers / math.factorial(servers) * servers / (servers - a)
    p_wait = top / (sum(a ** k / math.factorial(k) for k in range(servers)) + top)
    return p_wait / (servers * service_rate - arrival_rate)


@pytest.mark.parametrize("servers, arrival_rate", [(1, 0.7), (3, 2.4)])
def test_pool_matches_the_mmc_closed_form(servers, arrival_rate):
    """Mean wait of a long seeded M/M/c run within 5% of Erlang C (M/M/1: ρ/(μ-λ))."""
    rng = np.random.default_rng(0)
    n = 200_000
    arrivals = np.cumsum(rng.exponential(1 / arrival_rate, n))
    waits = fcfs_waits(arrivals, rng.exponential(1.0, n), servers)
    expected = erlang_c_wait(arrival_rate, 1.0, servers)
    if servers == 1:
        assert expected == pytest.approx(0.7 / (1 - 0.7))
    assert waits[n // 10:].mean() == pytest.approx(expected, rel=0.05)


@pytest.mark.parametrize("servers", [None, 1, 3])
def test_queueing_jobs_at_once_is_queueing_them_one_by_one(servers):
    rng = np.random.default_rng(1)
    arrivals = np.sort(rng.integers(0, 400, 500)).astype(float)  # ties and equal free times
    services = rng.integers(1, 8, 500).astype(float)
    each, batched = ServerPool(servers), ServerPool(servers)
    waits = [each.wait_ms(a, s) for a, s in zip(arrivals.tolist(), services.tolist())]
    batch = [*batched.waits_ms(arrivals[:200], services[:200]),
             *(batched.wait_ms(a, s) for a, s in zip(arrivals[200:300].tolist(),
                                                     services[200:300].tolist())),
             *batched.waits_ms(arrivals[300:], services[300:])]
    assert batch == waits and any(waits) == (servers is not None)
    assert (batched.busy_ms, batched.last_finish_ms) == (each.busy_ms, each.last_finish_ms)
    assert sorted(batched._free) == sorted(each._free)


def test_an_unbounded_pool_never_queues_and_a_bad_one_is_refused():
    assert ServerPool(None).wait_ms(0.0, 5.0) == 0.0
    pool = ServerPool(1)
    assert (pool.wait_ms(0.0, 5.0), pool.wait_ms(1.0, 5.0), pool.wait_ms(20.0, 1.0)) == \
        (0.0, 4.0, 0.0)
    for bad in (0, -1, 1.5, True):
        with pytest.raises(ConfigError, match="servers"):
            ServerPool(bad)


@pytest.fixture(scope="module")
def stream():
    return generate(n_queries=6_000, n_intents=600, seed=3)


@pytest.fixture(scope="module")
def model():
    return LatencyModel.measured(servers=2)


def test_queueing_delay_grows_with_backend_load_and_hits_never_queue(stream, model):
    tiers = three_tier(int(stream.size.sum() // 10))
    rows = load_sweep(stream, tiers, model, [0.3, 0.8, 1.2])
    assert [r["backend_load"] for r in rows] == [0.3, 0.8, 1.2]
    waits = [r["mean_wait_ms"] for r in rows]
    assert waits[0] < waits[1] < waits[2]
    assert rows[2]["p99_ms"] > 2 * rows[0]["p99_ms"]  # queueing takes the tail
    assert rows[0]["sla_violation_rate"] < rows[2]["sla_violation_rate"]
    assert len({r["miss_rate"] for r in rows}) == 1  # no TTL: load changes latency, not hits
    for r in rows:
        assert r["p50_ms"] <= r["p95_ms"] <= r["p99_ms"]
        assert r["queue_backend_load"] == pytest.approx(r["backend_load"])
        # the offered load counts every request's inference: the backend load is its miss share
        assert r["offered_load"] > r["backend_load"]
    for r in rows[:2]:  # a queue that keeps up is busy for the load's share of the time
        assert r["utilisation"] == pytest.approx(r["backend_load"], rel=0.05)
    assert rows[2]["utilisation"] < 1.0 < rows[2]["backend_load"]  # past 1 the queue grows
    assert replay(at_backend_load(stream, tiers, model, 1.2), tiers, model,
                  limits=False).queue["queued_share_of_misses"] > 0.5


def test_backend_load_is_offered_load_times_miss_rate_for_equal_inference(stream):
    """One exact tier that holds everything misses once per distinct exact key, so the miss
    rate is known by hand; with every inference draw 10 ms on 5 servers the backend load is the
    offered load × that miss rate, and scaling the arrivals puts it where asked."""
    model = LatencyModel(inference_ms={m: 10.0 for m in MODALITIES}, servers=5)
    tiers = [TierSpec("all", int(stream.size.sum()) + 1, "lru")]
    miss_rate = np.unique(stream.exact_keys()).size / len(stream)
    assert 0.05 < miss_rate < 0.95
    assert backend_load(stream, tiers, model) == pytest.approx(
        offered_load(stream, model) * miss_rate)
    for load in (0.3, 0.9, 1.1):
        scaled = at_backend_load(stream, tiers, model, load)
        assert backend_load(scaled, tiers, model) == pytest.approx(load)
        assert offered_load(scaled, model) == pytest.approx(load / miss_rate)
        report = replay(scaled, tiers, model, limits=False)
        assert report.hit_rate == pytest.approx(1 - miss_rate)  # arrivals move no hit
        if load < 1:
            assert report.queue["utilisation"] == pytest.approx(load, rel=0.05)


def test_past_saturation_the_tail_grows_with_the_trace_length(model):
    """Above backend load 1 work arrives faster than the servers clear it, so the wait at a
    stream's end is about (load - 1) × its span: a twice-as-long stream at the same backend load
    has a longer tail; below 1 the length does not matter much."""
    short, long = (generate(n_queries=n, n_intents=300, seed=5, cycle_amplitude=0.0,
                            burst_speedup=1.0) for n in (2_000, 8_000))
    tiers = three_tier(int(long.size.sum() // 10))
    (s_low, s_high), (l_low, l_high) = (load_sweep(w, tiers, model, [0.5, 1.3])
                                        for w in (short, long))
    assert l_high["p99_wait_ms"] > 2 * s_high["p99_wait_ms"]
    assert l_low["p99_wait_ms"] < 2 * s_low["p99_wait_ms"] + 100.0
    over = at_backend_load(long, tiers, model, 1.3)
    waits = replay(over, tiers, model, limits=False).waits_ms
    span_ms = 1e3 * float(over.time[-1] - over.time[0])
    assert waits[np.flatnonzero(waits > 0)[-1]] == pytest.approx(0.3 * span_ms, rel=0.1)


def test_a_load_must_be_positive_and_reach_the_servers(stream, model):
    tiers = three_tier(int(stream.size.sum() // 10))
    for bad in (0.0, -0.5, float("nan"), True):
        with pytest.raises(ConfigError, match="load"):
            at_backend_load(stream, tiers, model, bad)
        with pytest.raises(ConfigError, match="load"):
            load_sweep(stream, tiers, model, [0.5, bad])
    with pytest.raises(ConfigError, match="bounded pool"):
        backend_load(stream, tiers, LatencyModel())


def test_a_hit_never_waits_for_an_inference_server(stream, model):
    w = at_load(stream, model, 2.0)  # overloaded: misses queue a long time
    replayer = Replayer(w, three_tier(int(w.size.sum() // 10)), model)
    for i in range(len(w)):
        replayer.serve(i)
    hit = replayer.hit_tier >= 0
    waits = replayer.costs.wait_ms
    assert hit.sum() > 100 and (waits[hit] == 0).all()
    assert waits[~hit].mean() > 1000.0
    # an image miss's measured CLIP call takes about a millisecond, so some misses beat hits;
    # nearly every hit beats the typical miss, which waits for a server
    assert (replayer.lat_ms[hit] < np.median(replayer.lat_ms[~hit])).mean() > 0.95


def test_offered_load_is_rate_times_service_over_servers(stream):
    model = LatencyModel(inference_ms={m: 10.0 for m in MODALITIES}, servers=5)
    rate_per_ms = (len(stream) - 1) / (1e3 * (stream.time[-1] - stream.time[0]))
    assert offered_load(stream, model) == pytest.approx(rate_per_ms * 10.0 / 5)
    assert offered_load(at_load(stream, model, 0.9), model) == pytest.approx(0.9)
    with pytest.raises(ConfigError, match="bounded pool"):
        offered_load(stream, LatencyModel())
    assert replay(stream, three_tier(int(stream.size.sum() // 10)), model,
                  limits=False).queue["offered_load"] == pytest.approx(offered_load(stream, model))
    with pytest.raises(ConfigError, match="load"):
        at_load(stream, model, 0.0)


def test_sla_violations_are_not_the_miss_rate_under_load(stream, model):
    rows = load_sweep(stream, three_tier(int(stream.size.sum() // 10)), model, [0.3, 1.1])
    assert any(abs(r["sla_violation_rate"] - r["miss_rate"]) > 1e-3 for r in rows)


def test_every_profile_entry_names_its_source_and_the_run_that_measured_it():
    doc = read_profile()
    assert doc["command"] == "python -m mmcache.lab.bench.latency_profile"
    assert doc["date"] and doc["machine"]["node"] and doc["machine"]["cpus"]
    assert {"encode.text", "encode.image", "encode.audio", "infer.image", "infer.audio",
            "l1.exact", "l2.semantic", "l3.exact"} <= set(doc["entries"])
    assert "transcription" in doc["entries"]["infer.audio"]["source"]
    assert "zero-shot classification" in doc["entries"]["infer.image"]["source"]
    for name, entry in doc["entries"].items():
        assert entry["source"].strip() and entry["median_ms"] > 0 and entry["sigma"] >= 0, name
    for name, dist in load_profile().items():
        assert doc["command"] in dist.source and doc["date"] in dist.source, name


def test_every_cost_of_the_measured_model_has_a_source(model):
    costs = model.describe()
    for table in ("encode_ms", "inference_ms", "lookup_ms"):
        for name, dist in costs[table].items():
            assert dist["source"].strip() and dist["source"] != "given constant", (table, name)
    assert set(costs["lookup_ms"]) == {t.name for t in three_tier(1 << 20)}


def test_the_measured_default_times_image_and_audio_misses_and_assumes_text(model):
    profile, inference = load_profile(), model.inference_ms
    assert inference["image"] == profile["infer.image"]
    assert inference["audio"] == profile["infer.audio"]
    assert inference["text"] == ASSUMED_TEXT_INFERENCE
    assert "a parameter, not measured" in inference["text"].source
    assert "whisper:tiny.en" in inference["audio"].source and "measured on" in \
        inference["audio"].source
    assert "clip:" in inference["image"].source and "measured on" in inference["image"].source
    assert "measured for image, audio; a labelled assumption for text" in model.kind


def test_a_profile_without_inference_entries_names_the_command_that_writes_them():
    stale = {k: v for k, v in load_profile().items() if not k.startswith("infer.")}
    with pytest.raises(StaleProfileError, match="make latency-profile") as raised:
        LatencyModel.measured(profile=stale)
    assert "infer.audio" in str(raised.value) and isinstance(raised.value, ConfigError)
    given = {m: 10.0 for m in MODALITIES}  # inference given outright needs no infer.* entry
    assert LatencyModel.measured(profile=stale, inference_ms=given).inference_ms == given


def test_scaling_the_text_assumption_moves_text_alone_and_says_so(model):
    doubled = model.with_text_inference_scaled(2.0)
    assert doubled.inference_ms["text"].median_ms == 2 * ASSUMED_TEXT_INFERENCE.median_ms
    assert doubled.inference_ms["text"].sigma == ASSUMED_TEXT_INFERENCE.sigma
    assert "median × 2" in doubled.inference_ms["text"].source and "× 2" in doubled.kind
    assert {m: doubled.inference_ms[m] for m in ("image", "audio")} == \
        {m: model.inference_ms[m] for m in ("image", "audio")}
    with pytest.raises(ConfigError, match="factor"):
        model.with_text_inference_scaled(0.0)


def test_measured_model_refuses_a_profile_without_its_stages():
    with pytest.raises(ConfigError, match="encode.audio"):
        LatencyModel.measured(profile={"encode.text": LogNormal(1.0, source="x")})


def test_log_normal_fits_recover_their_parameters():
    rng = np.random.default_rng(1)
    samples = rng.lognormal(math.log(20.0), 0.5, 20_000)
    fit = fit_samples(samples, "test draws")
    assert fit.median_ms == pytest.approx(20.0, rel=0.02) and fit.sigma == pytest.approx(0.5,
                                                                                        rel=0.03)
    hist = Histogram()
    for s in samples:
        hist.observe(s / 1e3)
    coarse = fit_histogram(hist, "test histogram")
    assert coarse.median_ms == pytest.approx(20.0, rel=0.25)  # 1-2.5-5 buckets: coarse
    assert coarse.mean_ms == pytest.approx(samples.mean(), rel=1e-6)  # the mean is exact
    assert LogNormal(10.0, 0.0).sample(rng, 3).tolist() == [10.0, 10.0, 10.0]
    assert LogNormal(10.0, 1.0).quantile_ms(0.5) == pytest.approx(10.0)


@pytest.mark.parametrize("bad", [dict(median_ms=-1.0), dict(median_ms=float("nan")),
                                 dict(sigma=-0.1), dict(source=" ")])
def test_bad_distributions_are_config_errors(bad):
    with pytest.raises(ConfigError):
        LogNormal(**{"median_ms": 1.0, **bad})


def test_fits_refuse_too_little_data():
    with pytest.raises(InvalidInputError):
        fit_samples([1.0], "one")
    with pytest.raises(InvalidInputError):
        fit_samples([1.0, -2.0], "negative")
    with pytest.raises(InvalidInputError):
        fit_histogram(Histogram(), "empty")


def test_the_backend_load_of_a_part_of_a_stream(stream, model):
    """A stream whose second half arrives twice as fast: that half's backend load is about
    twice the first's (the same kind of requests), and the whole run's lies between them."""
    tiers = three_tier(int(stream.size.sum() // 10))
    half = len(stream) // 2
    times = stream.time.copy()
    times[half:] = times[half] + (times[half:] - times[half]) / 2
    shifted = dataclasses.replace(stream, time=times)
    before = backend_load(shifted, tiers, model, stop=half)
    after = backend_load(shifted, tiers, model, start=half)
    whole = backend_load(shifted, tiers, model)
    assert before < whole < after
    assert after / before == pytest.approx(2.0, rel=0.25)
    assert backend_load(stream, tiers, model) == pytest.approx(
        replay(stream, tiers, model, limits=False).queue["backend_load"])
