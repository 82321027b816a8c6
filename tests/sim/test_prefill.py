"""Modality-weighted prefill (mmcache.sim.prefill): the weights, the budget, determinism, a
hand-checked stream and the typed errors."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from mmcache.errors import ConfigError
from mmcache.sim.cachebench import TierSpec, three_tier
from mmcache.sim.prefill import (METHODS, PrefillConfig, claim_verdict, compare_prefill,
                                 fit_weights, histories, mean_interval, session_preference,
                                 session_switches, switch_cycle)
from mmcache.sim.workload import MODALITY_SETS, generate

TEXT, IMAGE, PAD = 0, 1, len(MODALITY_SETS)
MIX = {"text+image": 0.15, "audio+image": 0.1, "text+audio": 0.1}


@pytest.fixture(scope="module")
def one_modality_sessions():
    """Sessions that keep to (almost always) one modality set each."""
    w = generate(n_queries=2_000, n_intents=100, session_continue=0.8, seed=3)
    return session_preference(w, concentration=0.01, seed=3)


def test_histories_stop_at_the_session_start():
    w = generate(n_queries=50, n_intents=10, session_continue=0.6, seed=1)
    hist = histories(w, 3)
    for t in range(50):
        assert hist[t, 0] == w.modality_set[t]
        for lag in (1, 2):
            same = t - lag >= 0 and w.session[t - lag] == w.session[t]
            assert hist[t, lag] == (w.modality_set[t - lag] if same else PAD)


def test_weights_sum_to_one_and_follow_a_one_modality_session(one_modality_sessions):
    model = fit_weights(one_modality_sessions, 1_000, PrefillConfig(epochs=150, seed=0))
    hist = np.array([[IMAGE, IMAGE, PAD, PAD], [TEXT, PAD, PAD, PAD], [TEXT, TEXT, TEXT, TEXT]])
    w = model.weights(hist)
    assert w.shape == (3, len(MODALITY_SETS))
    np.testing.assert_allclose(w.sum(axis=1), 1.0, atol=1e-6)
    assert (w >= 0).all() and (w[:, 3:] == 0).all()  # the stream has single modalities only
    assert w[0, IMAGE] > 0.8 and w[1, TEXT] > 0.8 and w[2, TEXT] > 0.8
    assert model.losses[-1] < model.losses[0]


def test_weights_of_an_independent_stream_stay_near_the_marginal():
    """The generator draws each query's set independently: history says nothing, so the
    weights learn the prefix's frequencies (whatever the history)."""
    w = generate(n_queries=20_000, n_intents=500, session_continue=0.8, seed=2)
    model = fit_weights(w, 10_000, PrefillConfig(epochs=150))
    freq = np.bincount(w.modality_set[:10_000], minlength=len(MODALITY_SETS)) / 10_000
    got = model.weights(np.array([[IMAGE, PAD, PAD, PAD], [TEXT, PAD, PAD, PAD],
                                  [TEXT, IMAGE, PAD, PAD]]))
    assert np.abs(got - freq).max() < 0.06  # sampling error: 180-700 examples a history


def test_prefill_never_exceeds_its_budget():
    w = generate(n_queries=1_500, n_intents=150, multimodal_mix=MIX, session_continue=0.7,
                 seed=4)
    got = compare_prefill(w, three_tier(40_000, threshold=0.85),
                          PrefillConfig(budget=2, epochs=30))
    measured = len(w) - got.train_end
    assert set(got.runs) == set(METHODS)
    assert got.runs["none"].prefilled == 0
    for name in METHODS[1:]:
        run = got.runs[name]
        assert 1 <= run.max_per_step <= 2 and run.prefilled <= 2 * measured, name
        assert 0 <= run.hit_ratio <= 1 and run.hits.shape == (measured,)


def test_same_seed_same_result():
    w = generate(n_queries=1_000, n_intents=100, multimodal_mix=MIX, session_continue=0.7,
                 seed=5)
    cfg = PrefillConfig(epochs=30, seed=7)
    a = compare_prefill(w, three_tier(30_000), cfg, methods=["modality-weighted"])
    b = compare_prefill(w, three_tier(30_000), cfg, methods=["modality-weighted"])
    assert a.hit_ratios() == b.hit_ratios()
    np.testing.assert_array_equal(a.runs["modality-weighted"].hits,
                                  b.runs["modality-weighted"].hits)
    for (k, x), (_, y) in zip(a.weights.model.state_dict().items(),
                              b.weights.model.state_dict().items()):
        assert bool((x == y).all()), k
    assert a.weights.losses == b.weights.losses


def _tiny_stream():
    """8 requests, variant 0, one second apart. Prefix (0-3): intent 0 text then image,
    intent 1 text then image. Measured (4-7): the same again, two fresh sessions."""
    w = generate(n_queries=8, n_intents=2, session_continue=0.5, novel_share=0.0, seed=0)
    sets = np.array([TEXT, IMAGE] * 4, np.int8)
    return replace(w, intent=np.array([0, 0, 1, 1, 0, 0, 1, 1], np.int64),
                   session=np.array([0, 0, 1, 1, 2, 2, 3, 3], np.int64),
                   variant=np.zeros(8, np.int32), topic=np.zeros(8, np.int64),
                   time=np.arange(8, dtype=float), size=np.full(8, 100, np.int64),
                   modality_set=sets, modality=sets.copy())


def test_a_hand_checked_prefill_hits():
    """Trained on text → image, the weights put image first after a text request: after
    request 4 (intent 0, text) the prefill stores (0, image) from request 1, so request 5 hits;
    after 5, (1, text) (next intent 1 has probability 1/2, the prior's text weight 1/2, before
    (1, image) by order), so 6 hits; after 6, (1, image): 7 hits. No prefetch: all four miss."""
    w = _tiny_stream()
    got = compare_prefill(w, [TierSpec("cpu", 10_000, "lru")],
                          PrefillConfig(budget=1, epochs=100, lr=0.1, candidates=2),
                          methods=["none", "modality-weighted"])
    assert got.train_end == 4
    assert got.runs["none"].hits.tolist() == [False] * 4
    weights = got.weights.weights(np.array([[TEXT, PAD, PAD, PAD]]))[0]
    assert weights[IMAGE] > 0.9
    run = got.runs["modality-weighted"]
    assert run.hits.tolist() == [False, True, True, True]
    # after 7 nothing: intent 1's only next intent in the prefix is 1, both its nodes resident
    assert run.hit_ratio == 0.75 and run.prefilled == 3


def test_interval_and_verdict():
    mean, low, high = mean_interval([0.1, 0.2, 0.3])
    assert mean == pytest.approx(0.2) and low < 0.2 < high
    assert high - mean == pytest.approx(4.302653 * 0.1 / np.sqrt(3), rel=1e-5)
    assert claim_verdict(0.21, 0.3) == "reproduced"
    assert claim_verdict(0.0, 0.1) == "not reproduced"
    assert claim_verdict(0.1, 0.3) == "inconclusive"


@pytest.mark.parametrize("bad", [dict(budget=0), dict(history=0), dict(lr=-1.0),
                                 dict(lr=float("nan")), dict(train_share=1.0),
                                 dict(candidates=1.5), dict(tau_s=0.0), dict(epochs=True)])
def test_bad_settings_raise_config_error(bad):
    with pytest.raises(ConfigError):
        PrefillConfig(**bad)


def test_bad_arguments_raise_config_error():
    w = _tiny_stream()
    tiers = [TierSpec("cpu", 10_000, "lru")]
    with pytest.raises(ConfigError):
        compare_prefill(w, tiers, methods=["lfu-prefetch"])
    with pytest.raises(ConfigError):
        compare_prefill(w, tiers, methods=[])
    with pytest.raises(ConfigError):
        session_preference(w, 0.0)
    with pytest.raises(ConfigError):
        fit_weights(w, 1)
    with pytest.raises(ConfigError):
        mean_interval([0.1])
    model = fit_weights(w, 4, PrefillConfig(epochs=5))
    with pytest.raises(ConfigError):
        model.weights(np.array([[TEXT, PAD]]))  # history is 4
    with pytest.raises(ConfigError):
        model.weights(np.array([[PAD, TEXT, PAD, PAD]]))  # slot 0 is the request itself


def test_switching_sessions_teach_the_switch_and_it_pays():
    """Sessions that move text → the cycle's next set: the weights after one request put most
    weight on that next set, and the fused prefill beats the prior weights' on the rest."""
    w = generate(n_queries=3_000, n_intents=150, multimodal_mix=MIX, session_continue=0.8,
                 seed=6)
    moved = session_switches(w, switch=0.9, seed=6)
    rule = switch_cycle(moved, seed=6)
    same = moved.session[1:] == moved.session[:-1]
    follows = np.array([rule[a] for a in moved.modality_set[:-1].tolist()])
    assert (moved.modality_set[1:][same] == follows[same]).mean() > 0.85
    got = compare_prefill(moved, three_tier(60_000), PrefillConfig(epochs=100),
                          methods=["graph-prior", "modality-weighted"])
    weights = got.weights.weights(np.array([[TEXT, PAD, PAD, PAD]]))[0]
    assert int(np.argmax(weights)) == rule[TEXT] and weights[rule[TEXT]] > 0.6
    assert got.runs["modality-weighted"].hit_ratio > got.runs["graph-prior"].hit_ratio
