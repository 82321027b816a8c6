"""The compiled CacheBench-MM replay (Replayer.serve_all, mmcache.sim.cachebench.kernel) and Replayer.serve
reading the neighbour table serve every request exactly as Replayer.serve does with the exact
search over all resident vectors: the same hit tier, hit key, false hits and latencies, on
generated workloads with evictions, multimodal queries, TTLs, ties between identical vectors,
δ offsets on both sides of the table's cutoff, admission, skipped tiers and degradation."""

from __future__ import annotations

import numpy as np
import pytest

import mmcache.sim.cachebench.engine as cachebench
from mmcache.sim.latency import LatencyModel
from mmcache.sim.cachebench import Replayer, TierSpec, replay, three_tier
from mmcache.sim.cachebench.degradation import LEVELS
from mmcache.errors import ConfigError
from mmcache.sim.cachebench.neighbours import neighbour_table
from mmcache.sim.workload import generate


def python_replay(workload, tiers, ttl_s=None, latency=None, exact_search=True):
    replayer = Replayer(workload, tiers, latency, ttl_s=ttl_s, exact_search=exact_search)
    for i in range(len(workload)):
        replayer.serve(i)
    return replayer


def compiled_replay(workload, tiers, ttl_s=None, latency=None):
    replayer = Replayer(workload, tiers, latency, ttl_s=ttl_s)
    replayer.serve_all()
    return replayer


def assert_same(a, b):
    assert (a.hit_tier >= 0).any() and (a.hit_tier < 0).any()
    np.testing.assert_array_equal(a.hit_tier, b.hit_tier)
    np.testing.assert_array_equal(a.hit_key, b.hit_key)
    np.testing.assert_array_equal(a.false_hit, b.false_hit)
    np.testing.assert_allclose(a.lat_ms, b.lat_ms, rtol=1e-12)


WORKLOADS = {
    "text-image-audio": dict(n_queries=3_000, n_intents=300, seed=1),
    "multimodal": dict(n_queries=3_000, n_intents=200, seed=2,
                       multimodal_mix={"text+image": 0.3, "text+audio": 0.1,
                                       "text+image+audio": 0.1}),
    "loose-siblings": dict(n_queries=3_000, n_intents=400, seed=3, sibling_cos=0.97,
                           paraphrase_cos=0.9, zipf_alpha=0.6),
}


@pytest.mark.parametrize("name", sorted(WORKLOADS))
@pytest.mark.parametrize("policy", ["lru", "fifo"])
def test_compiled_replay_matches_the_exact_search(name, policy):
    workload = generate(**WORKLOADS[name])
    size = int(workload.size.mean())
    tiers = three_tier(60 * size, policy=policy, threshold=0.8)
    latency = LatencyModel.measured(servers=2)
    a = python_replay(workload, tiers, latency=latency)
    b = compiled_replay(workload, tiers, latency=latency)
    assert_same(a, b)
    assert_same(a, python_replay(workload, tiers, latency=latency, exact_search=False))
    assert a.false_hit.any()  # the semantic tier's choice among candidates matters here


def test_compiled_replay_matches_with_a_ttl_and_two_semantic_tiers():
    workload = generate(n_queries=2_500, n_intents=150, seed=4,
                        multimodal_mix={"text+image": 0.3})
    size = int(workload.size.mean())
    tiers = (TierSpec("A", 20 * size, "lru", "semantic", 0.9),
             TierSpec("B", 80 * size, "fifo", "semantic", 0.82),
             TierSpec("C", 200 * size, "lru", "exact"))
    exact = python_replay(workload, tiers, ttl_s=3.0)
    assert_same(exact, compiled_replay(workload, tiers, ttl_s=3.0))
    assert_same(exact, python_replay(workload, tiers, ttl_s=3.0, exact_search=False))


def test_identical_vectors_tie_as_the_exact_search_breaks_ties():
    workload = generate(n_queries=2_000, n_intents=100, seed=5, modality_mix={"text": 1.0})
    for a, v in {(int(a), int(v)) for a, v in zip(workload.intent, workload.variant)}:
        twin = a - a % 2  # intents 2j and 2j+1 get the same text vectors: exact ties
        workload._vectors[(a, 0, v)] = workload._draw_embedding(0, twin, twin // 5, v)
    size = int(workload.size.mean())
    tiers = (TierSpec("L1", 10 * size, "lru", "exact"),
             TierSpec("L2", 60 * size, "lru", "semantic", 0.8))
    a, b = python_replay(workload, tiers), compiled_replay(workload, tiers)
    assert_same(a, b)
    assert_same(a, python_replay(workload, tiers, exact_search=False))
    assert a.false_hit.any()


def test_replay_uses_the_kernel_and_reports_like_serve():
    workload = generate(n_queries=1_500, n_intents=100, seed=6)
    tiers = three_tier(40 * int(workload.size.mean()), threshold=0.85)
    report = replay(workload, tiers, limits=False)
    reference = python_replay(workload, tiers).report(limits=False)
    assert report.hit_rate == reference.hit_rate
    assert report.false_hit_rate == reference.false_hit_rate
    assert report.latency_ms == pytest.approx(reference.latency_ms, rel=1e-12)


def test_serve_all_refuses_other_policies_and_a_started_replay():
    workload = generate(n_queries=200, n_intents=20, seed=7)
    with pytest.raises(ConfigError):
        Replayer(workload, three_tier(10**6, policy="lfu")).serve_all()
    replayer = Replayer(workload, three_tier(10**6))
    replayer.serve(0)
    with pytest.raises(ConfigError):
        replayer.serve_all()


def test_neighbour_table_holds_every_pair_at_the_cutoff():
    workload = generate(n_queries=800, n_intents=60, seed=8)
    table = neighbour_table(workload, 0.8)
    text = [i for i in range(len(workload)) if workload.modality_set[i] == 0]
    vecs = np.stack([workload.vectors(i)[0] for i in text])
    sims = vecs @ vecs.T
    vid = table.vid_of_key[table.key_of_request[text]]
    for a in range(0, len(text), 37):
        row = table.nb_vid[table.nb_ptr[vid[a]]:table.nb_ptr[vid[a] + 1]]
        assert set(vid[sims[a] >= 0.8 + 1e-5]) <= set(row.tolist())
        assert set(row.tolist()) <= set(vid[sims[a] >= 0.8 - 1e-5].tolist())
    with pytest.raises(ConfigError):
        neighbour_table(workload, 1.5)


def test_a_shared_table_gives_the_same_replay_and_a_too_high_cutoff_is_refused():
    workload = generate(n_queries=1_500, n_intents=100, seed=10)
    tiers = three_tier(40 * int(workload.size.mean()), threshold=0.85)
    shared = Replayer(workload, tiers)
    shared.serve_all(neighbour_table(workload, 0.8))
    assert_same(compiled_replay(workload, tiers), shared)
    with pytest.raises(ConfigError):
        Replayer(workload, tiers).serve_all(neighbour_table(workload, 0.9))


def test_small_cachebench_benchmark_prints_both_rates(capsys):
    from mmcache.lab.bench.cachebench_engine import main

    main(["--requests", "3000", "--intents", "200", "--prefix", "2500", "--sample", "50"])
    out = capsys.readouterr().out
    for threads in (1, 2):
        assert f"compiled (table on {threads} thread(s) + serve_all)" in out
        assert f"target >= 100,000 req/s with >= 100k resident vectors, table on {threads}" in out
    assert "exact search (serve, 1 thread)" in out
    assert "ratio compiled (1 thread) / exact search: " in out
    assert "vector pairs computed of the" in out


#: δ offsets per request, cycled: at, above and below the threshold; the last two take a floor
#: under the table's cutoff (0.85 - 0.05), where serve falls back to the exact search.
OFFSETS = ({}, {"text": -0.04, "image": 0.02}, {"text": 0.05, "audio": 0.05},
           {"image": 0.08}, {"text": 0.1, "image": 0.1, "audio": 0.1})


def served(workload, tiers, steps, exact_search, monkeypatch):
    """A Replayer after serving request i as ``steps(i)`` (offsets, admit, skip, level) says, and
    how many semantic lookups read the table (the others searched exactly)."""
    lookups = {"table": 0, "all": 0}
    best, best_resident = cachebench._VectorIndex.best, cachebench.best_resident

    def counted_best(self, *args):
        lookups["all"] += 1
        return best(self, *args)

    def counted_table(*args):
        lookups["table"] += 1
        return best_resident(*args)

    monkeypatch.setattr(cachebench._VectorIndex, "best", counted_best)
    monkeypatch.setattr(cachebench, "best_resident", counted_table)
    replayer = Replayer(workload, tiers, LatencyModel.measured(servers=2), cutoff=0.8,
                        exact_search=exact_search)
    for i in range(len(workload)):
        offsets, admit, skip, level = steps(i)
        replayer.serve(i, offsets, admit, skip, level)
    monkeypatch.undo()
    return replayer, lookups


def scheduler_steps(i):
    return OFFSETS[i % len(OFFSETS)], i % 7 != 3, {"L1-gpu"} if i % 11 == 5 else (), "full-modal"


def degraded_steps(i):
    return OFFSETS[i % 3], True, (), LEVELS[(i // 50) % len(LEVELS)]


@pytest.mark.parametrize("steps", [scheduler_steps, degraded_steps])
def test_serve_on_the_table_matches_the_exact_search_with_offsets(steps, monkeypatch):
    workload = generate(n_queries=3_000, n_intents=200, seed=11,
                        multimodal_mix={"text+image": 0.3, "image+audio": 0.1})
    tiers = three_tier(60 * int(workload.size.mean()), threshold=0.85)
    exact, none_read = served(workload, tiers, steps, True, monkeypatch)
    table, read = served(workload, tiers, steps, False, monkeypatch)
    assert_same(exact, table)
    np.testing.assert_array_equal(exact.level_served, table.level_served)
    assert exact.false_hit.any() and none_read["table"] == 0
    assert 0 < read["table"] < read["all"]  # both paths served lookups


#: δ offsets of consecutive ranges, per modality and of both signs; every floor (0.85 - offset)
#: at or above the tables' cutoff (0.77).
RANGE_OFFSETS = ({}, {"text": 0.08, "image": -0.03}, {"image": 0.05, "audio": 0.08},
                 {"text": -0.05, "audio": 0.02})


def test_compiled_ranges_with_offsets_serve_as_serve_does():
    workload = generate(n_queries=3_000, n_intents=200, seed=12,
                        multimodal_mix={"text+image": 0.3, "image+audio": 0.1,
                                        "text+audio": 0.1})
    tiers = three_tier(60 * int(workload.size.mean()), threshold=0.85)
    latency = LatencyModel.measured(servers=2)
    each, exact, ranges = (Replayer(workload, tiers, latency, cutoff=0.77, exact_search=search)
                           for search in (False, True, False))
    stops = [*range(170, len(workload), 170), len(workload)]
    for n, (start, stop) in enumerate(zip([0, *stops], stops)):
        offsets = RANGE_OFFSETS[n % len(RANGE_OFFSETS)]
        for i in range(start, stop):
            each.serve(i, offsets)
            exact.serve(i, offsets)
        ranges.serve_compiled(stop, offsets)
    assert_same(each, ranges)
    np.testing.assert_array_equal(each.lat_ms, ranges.lat_ms)  # the same sums, bit for bit
    assert_same(exact, ranges)
    assert each.false_hit.any()
    assert each.report(limits=False).queue == ranges.report(limits=False).queue


def test_serve_compiled_refuses_floors_under_the_cutoff_going_back_and_serve_after_it():
    workload = generate(n_queries=300, n_intents=30, seed=13)
    replayer = Replayer(workload, three_tier(40 * int(workload.size.mean()), threshold=0.85),
                        cutoff=0.79)
    with pytest.raises(ConfigError):
        replayer.serve_compiled(100, {"text": 0.1})  # a floor of 0.75, under the cutoff
    replayer.serve_compiled(100, {"text": 0.05})
    with pytest.raises(ConfigError):
        replayer.serve_compiled(50)
    for serve_python in (lambda: replayer.serve(100), lambda: replayer.prefill(100),
                         replayer.serve_all):
        with pytest.raises(ConfigError):
            serve_python()
    replayer.serve_compiled(len(workload))
    assert (replayer.lat_ms > 0).all()
