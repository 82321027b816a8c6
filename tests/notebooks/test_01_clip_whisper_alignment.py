"""Notebook 01 in smoke mode: the alignment ladder runs end to end on real encoders."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.notebook
NAME = "01_clip_whisper_alignment"


def test_results_name_real_weights(smoke_metrics) -> None:
    m = smoke_metrics(NAME)
    assert m["smoke"] is True
    assert m["weights"]["audio"].startswith("whisper:tiny.en/")
    assert m["weights"]["text"].startswith("minilm:")
    assert not any("stand-in" in w for w in m["weights"].values())


def test_real_speech_ladder(smoke_metrics) -> None:
    real = smoke_metrics(NAME)["real"]
    means = real["R@1_mean"]
    assert {"chance", "ridge", "procrustes", "linear", "mlp", "asr→minilm"} <= set(means)
    assert any(k.startswith("fused(") for k in means)
    assert means["asr→minilm"] >= 0.5 > means["chance"]  # Whisper reads real prompts well
    assert real["winner"] in means
    for method, row in real["first_split"].items():
        if method != "chance":
            lo, hi = row["R@1_ci"]
            assert lo <= row["R@1"] <= hi, method
            assert row["median_rank"] >= 1


def test_learned_heads_beat_chance_on_synthetic_speech(smoke_metrics) -> None:
    m = smoke_metrics(NAME)
    scenes = m["synthetic"]["synthetic scenes audio→text"]
    best_head = max(scenes[h]["R@1"] for h in ("ridge", "procrustes", "linear", "mlp"))
    assert best_head >= scenes["chance"]["R@1"] + 0.2
    assert scenes["linear"]["n_gallery"] == 48  # all captions of the kept scenes
    fashion = m["fashion"]["fashion audio→text"]
    assert fashion["linear"]["R@1"] >= fashion["chance"]["R@1"] + 0.3  # unseen voice, 10 classes


def test_sweeps_are_recorded(smoke_metrics) -> None:
    m = smoke_metrics(NAME)
    assert {r["train_pairs"] for r in m["recall_vs_pairs"]} >= {8}
    sweep = m["temperature_sweep"]
    assert sum(r["learnt"] for r in sweep) == 2  # one learnt temperature per task
    assert all(0 <= r["R@1"] <= 1 for r in sweep + m["recall_vs_pairs"])


def test_image_tasks_run_when_the_offline_clip_exists(smoke_metrics) -> None:
    m = smoke_metrics(NAME)
    image_tasks = {t for t in m["synthetic"] if "image" in t} | {
        t for t in m["fashion"] if "image" in t}
    if m["weights"]["image"] == "unavailable":
        assert not image_tasks  # skipped, never faked
        return
    assert m["weights"]["image"].startswith("clip:")
    assert image_tasks == {"synthetic scenes audio→image", "synthetic scenes text→image",
                           "fashion audio→image"}
    for task in image_tasks - {"fashion audio→image"}:
        for method, row in m["synthetic"][task].items():
            if method != "chance":
                lo, hi = row["R@1_ci"]
                assert lo <= row["R@1"] <= hi, (task, method)
    summary = m["image_summary"]  # the offline CLIP learnt the training scenes, not these
    assert summary["text→image_zero_shot"] >= summary["text→image_chance"] + 0.2
    assert summary["clip_card_scene_R@1"]["unseen_scenes"] > summary["clip_card_scene_R@1"]["chance"]


def test_only_held_out_prompts_are_transcribed(smoke_metrics) -> None:
    m = smoke_metrics(NAME)
    size = m["study_size"]
    assert size["split_seeds"] == m["split_seeds"]
    # training prompts' transcripts are never scored, so they are not made; the scored ones are
    assert 0 < size["real_prompts_transcribed"] < m["real"]["n_prompts"]
    assert m["real"]["first_split"]["asr→minilm"]["n_queries"] <= size["real_prompts_transcribed"]
