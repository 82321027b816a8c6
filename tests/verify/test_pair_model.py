"""The learned pair verifier: symmetric features, a probability, its model file, and a veto
inside the cache a user runs."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest

import mmcache
from mmcache.errors import ConfigError
from mmcache.verify import VERIFIERS
from mmcache.verify.pair_model import (FEATURES, MODEL_PATH, SIGNS, PairModel, PairVerifier,
                                       load_model, pair_features, text_views)

PAIRS = [("How do I convert a string to an integer in Python?",
          "How do I convert an integer to a string in Python?"),
         ("Is it safe to eat raw eggs?", "Is it not safe to eat raw eggs?"),
         ("Plan a 3 day trip to Rome", "Plan a 5 day trip to Rome"),
         ("How do I reset my password?", "how can i reset my password")]


@pytest.fixture(scope="module")
def verifier() -> PairVerifier:
    return PairVerifier()


def test_the_shipped_model_loads_and_names_its_sources() -> None:
    model = load_model()
    assert len(model.coef) == len(FEATURES) == len(SIGNS)
    assert set(model.provenance["sources"]) == {"generated", "contradish"}
    assert "make verifier" in model.provenance["command"]
    assert all(c * s >= 0 for c, s in zip(model.coef, SIGNS))


@pytest.mark.parametrize("a, b", PAIRS)
def test_features_and_probability_are_symmetric(verifier, a, b) -> None:
    va, vb = text_views(verifier.encoder, verifier._idf, [a, b])
    assert pair_features(va, vb) == pytest.approx(pair_features(vb, va))
    p = verifier.probability(a, b)
    assert 0.0 <= p <= 1.0 and p == pytest.approx(verifier.probability(b, a))


@pytest.mark.parametrize("a, b", PAIRS)
def test_a_text_scores_at_least_as_well_against_itself(verifier, a, b) -> None:
    assert verifier.probability(a, a) >= verifier.probability(a, b)


def test_the_order_feature_sees_a_swap(verifier) -> None:
    a, b = PAIRS[0]
    va, vb, vc = text_views(verifier.encoder, verifier._idf, [a, b, a.lower()])
    order = FEATURES.index("token_order")
    assert pair_features(va, vb)[order] < pair_features(va, vc)[order]


def test_a_missing_or_foreign_model_is_a_config_error(tmp_path) -> None:
    with pytest.raises(ConfigError, match="make verifier"):
        load_model(tmp_path / "absent.json")
    raw = json.loads(MODEL_PATH.read_text())
    raw["features"] = raw["features"][:-1]
    (tmp_path / "old.json").write_text(json.dumps(raw))
    with pytest.raises(ConfigError, match="refit"):
        load_model(tmp_path / "old.json")


def test_no_text_is_no_evidence_against(verifier) -> None:
    entry = dataclasses.make_dataclass("E", ["question"])(None)
    assert verifier(mmcache.Query(text="hello"), entry) == 1.0


def test_the_config_name_builds_it_and_it_vetoes_a_hit(verifier) -> None:
    assert VERIFIERS.lookup("pairs") is PairVerifier
    rejecting = PairModel(verifier.model.mean, verifier.model.scale, verifier.model.coef, -50.0,
                          verifier.model.idf, {})
    config = {"thresholds": {"rule": "static", "delta": {"text": 0.5}, "verifier": "pairs",
                             "verifier_band": 2.0}, "encoders": {"text": "minilm"}}
    for model, served in ((verifier.model, True), (rejecting, False)):
        cache = mmcache.TieredCache(config, verifier=PairVerifier(model, verifier.encoder))
        cache.put(mmcache.Query(text="How do I reset my password?", scope="t"), "Settings > Reset")
        hit = cache.get(mmcache.Query(text="How can I reset my password?", scope="t"))
        assert (hit is not None) is served
        cache.close()
    named = mmcache.TieredCache(config)
    assert isinstance(named.verifier, PairVerifier)
    named.close()


def test_views_are_kept_for_repeated_texts(verifier) -> None:
    verifier.probability("What is a monad?", "Explain monads")
    before = len(verifier._views)
    verifier.probability("What is a monad?", "Explain monads")
    assert len(verifier._views) == before and "Explain monads" in verifier._views
    assert np.isfinite(verifier._views["Explain monads"].weights).all()
