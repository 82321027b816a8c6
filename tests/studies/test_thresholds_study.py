"""Threshold study helpers on synthetic scores: counting, hindsight δ, replay, GPTCache."""

from __future__ import annotations

import numpy as np
import pytest

from mmcache.datasets.pairs import Pair
from mmcache.encoders import HashingTestEncoder
from mmcache.errors import InvalidInputError
from mmcache.studies.threshold_study import (PairScores, best_static, best_static_interval,
                                             cold_start_hit_rate, gptcache_decisions, run_rule, score_pairs, static_curve,
                                             static_decisions, summarise)
from mmcache.types import Query


def _scores(sims, same, verifier=None, entry=None, modality="text") -> PairScores:
    n = len(sims)
    return PairScores(modality=np.array([modality] * n), kind=np.array(["k"] * n),
                      same=np.array(same, bool),
                      entry=np.array(entry if entry is not None else [f"e{i}" for i in range(n)]),
                      similarities={modality: np.array(sims, float)},
                      verifier=np.array(verifier if verifier is not None else [1.0] * n),
                      encoder_ids={modality: "test"})


def test_summary_counts_errors_over_all_lookups() -> None:
    out = summarise(np.array([1, 1, 1, 0]), np.array([1, 0, 1, 1]))
    assert out["hit_rate"] == 0.75 and out["realised_error"] == 0.25
    assert out["precision"] == pytest.approx(2 / 3) and out["recall"] == pytest.approx(2 / 3)


def test_best_static_in_hindsight_respects_the_budget() -> None:
    sims = [0.99, 0.97, 0.96, 0.95, 0.90, 0.80, 0.70, 0.60]
    same = [1, 1, 0, 1, 1, 0, 1, 0]
    scores = _scores(sims, same)
    best = best_static(scores, budget=0.0)
    assert best["hit_rate"] == 0.25 and best["realised_error"] == 0.0
    assert best["delta"] == pytest.approx(0.03)
    loose = best_static(scores, budget=0.125)
    assert loose["hit_rate"] == 0.625 and loose["realised_error"] <= 0.125
    curve = static_curve(scores, [0.0, 0.05, 0.5])
    assert [row["hit_rate"] for row in curve] == sorted(row["hit_rate"] for row in curve)


@pytest.mark.parametrize("use_verifier", [False, True])
def test_best_static_is_the_best_row_of_the_static_curve(use_verifier: bool) -> None:
    rng = np.random.default_rng(3)
    sims = np.round(rng.uniform(0.5, 1.0, 300), 2)   # rounded: many ties
    scores = _scores(sims, rng.random(300) < sims, verifier=rng.random(300))
    for budget in (0.0, 0.01, 0.05, 0.2):
        ok = [row for row in static_curve(scores, use_verifier=use_verifier)
              if row["realised_error"] <= budget]
        expected = max(ok, key=lambda row: (row["hit_rate"], -row["delta"]))
        assert best_static(scores, budget, use_verifier) == pytest.approx(expected)


def test_best_static_interval_covers_the_choice_and_moves_with_a_knife_edge() -> None:
    # one wrong pair above every right one: the hindsight δ at 0 error serves nothing unless a
    # resample drops it, so the interval reaches from 0 to most of the pairs
    sims = [0.99] + list(np.linspace(0.98, 0.90, 59))
    same = [0] + [1] * 59
    scores = _scores(sims, same)
    low, high = best_static_interval(scores, budget=0.0, n_boot=400, seed=1)
    assert low == 0.0 <= best_static(scores, 0.0)["hit_rate"] <= high and high > 0.9
    assert best_static_interval(scores, 0.0, n_boot=400, seed=1) == [low, high]
    clean = _scores(sims[1:], same[1:])
    assert best_static_interval(clean, 0.0, n_boot=200) == [1.0, 1.0]


def test_verifier_vetoes_static_hits() -> None:
    scores = _scores([0.99, 0.99], [1, 0], verifier=[0.97, 0.03])
    assert static_decisions(scores, 0.1).tolist() == [True, True]
    assert static_decisions(scores, 0.1, use_verifier=True).tolist() == [True, False]


class _CountingRule:
    """Serves an entry once it has two labels; records the calls a replay makes."""

    def __init__(self) -> None:
        self.labels: dict[str, int] = {}
        self.calls: list[str] = []

    def observe_lookup(self, scope, modalities, nearest) -> None:
        self.calls.append("lookup")

    def explores(self, sims, entry_id, scope) -> bool:
        return False

    def accepts(self, sims, entry_id, scope, evidence) -> bool:
        return self.labels.get(entry_id, 0) >= 2 and (evidence or {}).get("verifier", 1) > 0.5

    def served(self, sims, entry_id, scope, evidence) -> float:
        self.calls.append("served")
        return 0.0

    def feedback(self, sims, entry_id, correct, scope, charged) -> None:
        self.labels[entry_id] = self.labels.get(entry_id, 0) + 1


def test_replay_feeds_every_label_back_and_counts_cold_lookups() -> None:
    scores = _scores([0.9] * 6, [1] * 6, entry=["a"] * 3 + ["b"] * 3)
    rule = _CountingRule()
    result = run_rule(scores, rule, seed=1)
    assert rule.labels == {"a": 3, "b": 3} and rule.calls.count("lookup") == 6
    assert result.served.sum() == 2 == rule.calls.count("served")
    assert sorted(result.observations.tolist()) == [0, 0, 1, 1, 2, 2]
    assert cold_start_hit_rate(result, max_observations=2) == 0.0
    assert cold_start_hit_rate(result, max_observations=6) == pytest.approx(1 / 3)
    again = run_rule(scores, _CountingRule(), seed=1)
    assert again.order.tolist() == result.order.tolist()


def test_gptcache_default_serves_from_cosine_point_six() -> None:
    pytest.importorskip("gptcache")
    scores = _scores([0.95, 0.61, 0.59, 0.1], [1, 1, 0, 0])
    assert gptcache_decisions(scores).tolist() == [True, True, False, False]


def test_score_pairs_embeds_both_sides_and_verifies_text() -> None:
    pairs = [Pair(Query(text="Is it safe?", scope="s"), Query(text="Is it safe?", scope="s"),
                  True, "paraphrase", "text", "p1", "test"),
             Pair(Query(text="Is it not safe?", scope="s"), Query(text="Is it safe?", scope="s"),
                  False, "negation", "text", "p1", "test")]
    scores = score_pairs(pairs, encoders={"text": HashingTestEncoder()})
    assert scores.similarities["text"][0] == pytest.approx(1.0)
    assert scores.similarities["text"][1] < 1.0
    assert scores.verifier[0] > 0.9 > 0.1 > scores.verifier[1]
    with pytest.raises(InvalidInputError):
        score_pairs([])


def test_speech_pairs_are_verified_on_their_transcripts() -> None:
    on, off = np.zeros(1600, np.float32), np.ones(1600, np.float32) * 0.1
    pair = Pair(Query(audio=off, scope="s"), Query(audio=on, scope="s"), False,
                "one-word-change", "audio", "s1", "test")
    said = {0.0: "please turn on the fan", 0.1: "please turn off the fan"}

    def transcribe(clips):
        return [said[round(float(c[0]), 1)] for c in clips]

    encoders = {"audio": HashingTestEncoder(modality="audio")}
    assert score_pairs([pair], encoders=encoders).verifier[0] == 1.0
    assert score_pairs([pair], encoders=encoders, transcribe=transcribe).verifier[0] < 0.5


def test_drifting_stream_makes_stale_entries_wrong_only_after_the_drift() -> None:
    from mmcache.studies.threshold_study import drifting_stream

    scores = _scores([0.9] * 8, [1] * 8, entry=list("aabbccdd"))
    order, same, drift_at = drifting_stream(scores, seed=0, epochs=2, stale_share=0.5)
    assert len(order) == 16 and drift_at == 8 and same[:8].all()
    stale = {scores.entry[i] for i, ok in zip(order[8:], same[8:]) if not ok}
    assert len(stale) == 2 and all(same[8:][~np.isin(scores.entry[order[8:]], list(stale))])


def test_retrack_counts_lookups_until_the_rolling_error_is_back() -> None:
    from mmcache.studies.threshold_study import RuleRun, retrack_lookups

    served = np.ones(30, bool)
    same = np.ones(30, bool)
    same[10:14] = False  # four wrong hits just after the drift
    result = RuleRun(np.arange(30), served, same, np.zeros(30, int), np.array(["text"] * 30))
    assert retrack_lookups(result, drift_at=10, budget=0.1, window=5) == 8.0  # 13 + 5 - 10
    assert retrack_lookups(result, drift_at=20, budget=0.1, window=5) == 0.0
    same[10:] = False
    assert retrack_lookups(result, drift_at=10, budget=0.1, window=5) == float("inf")


def test_delta_sweep_counts_pairs_above_each_threshold_and_their_drift() -> None:
    from mmcache.studies.threshold_study import SEED_THRESHOLDS, delta_sweep, false_hit_pairs

    assert len(SEED_THRESHOLDS) == 13 and SEED_THRESHOLDS[0] == 0.65 and SEED_THRESHOLDS[-1] == 0.95
    v = np.array([[1, 0], [0.99, 0.14], [0.8, 0.6], [0, 1]], float)
    rows = delta_sweep(v, np.array([0, 0, 1, 1]), thresholds=[0.5, 0.95])
    assert rows[0]["hit_rate"] == pytest.approx(4 / 6) and rows[0]["false_hit_share"] > 0
    assert rows[1]["hit_rate"] == pytest.approx(1 / 6) and rows[1]["drift"] == 0.0
    assert false_hit_pairs(v, np.array([0, 0, 1, 1]), 0.5).tolist() == [[0, 2], [1, 2]]
