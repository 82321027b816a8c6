"""CLIP via open_clip: the offline Fashion-MNIST + scenes model, the weights switch, errors."""

from __future__ import annotations

import contextlib
import io
import json
from dataclasses import replace

import numpy as np
import pytest

from mmcache.encoders import clip as C
from mmcache.lab import clip_training as T
from mmcache.encoders import get_encoder
from mmcache.errors import (InvalidInputError, InvalidMediaError, OfflineAssetError,
                            UnknownModalityError)

#: A few seconds of training: enough to beat chance clearly, not a result.
TINY = replace(T.TrainConfig(), steps=60, batch_size=128, train_limit=4000, warmup=10, lr=3e-3)


#: What the tiny training wrote to stderr (its progress bar, shown at once).
TRAINING_STDERR: list[str] = []


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory):
    import mmcache.metrics

    stderr = io.StringIO()
    with pytest.MonkeyPatch.context() as mp, contextlib.redirect_stderr(stderr):
        mp.setattr(mmcache.metrics, "PROGRESS_DELAY_S", 0.0)
        mp.delenv("MMCACHE_PROGRESS", raising=False)
        out = T.train(TINY, root=tmp_path_factory.mktemp("models"), log_every=0)
    TRAINING_STDERR.append(stderr.getvalue())
    return out


@pytest.fixture(scope="module")
def image_encoder(tiny_dir):
    return C.load_clip_encoder(modality="image", model_dir=tiny_dir)


@pytest.fixture(scope="module")
def text_encoder(tiny_dir):
    return C.load_clip_encoder(modality="text", model_dir=tiny_dir)


@pytest.fixture(scope="module")
def fashion():
    from mmcache.datasets.images import load_fashion_mnist

    return load_fashion_mnist("test", limit=200, seed=1)


def test_training_writes_weights_config_and_card(tiny_dir):
    card = json.loads((tiny_dir / "model_card.json").read_text())
    assert {p.name for p in tiny_dir.iterdir()} >= {
        "visual.safetensors", "open_clip_config.json", "model_card.json", "model_card.md"}
    assert card["steps"] == 60 and card["train_wall_seconds"] > 0
    assert card["config_digest"] in tiny_dir.name
    assert card["test_text_prompted_accuracy"] > 0.3  # chance is 0.1
    assert f"{card['test_text_prompted_accuracy']:.1%}" in (tiny_dir / "model_card.md").read_text()
    scene = card["scene_text_to_image_R@1"]
    assert scene["chance"] == pytest.approx(1 / 150, abs=1e-4)
    assert scene["train_scenes_heldout_renderings"] > 3 * scene["chance"]
    assert f"{scene['unseen_scenes']:.1%}" in (tiny_dir / "model_card.md").read_text()


def test_training_shows_progress_per_step_chunk_with_the_loss(tiny_dir):
    (err,) = TRAINING_STDERR
    assert "CLIP training" in err and f"{T.PROGRESS_STEPS}/60" in err and "60/60" in err
    assert "loss=" in err and "Loading weights" in err  # transformers' own bar, not silenced


def test_silenced_training_progress_and_a_bad_switch(monkeypatch, tmp_path):
    monkeypatch.setenv("MMCACHE_PROGRESS", "0")
    stderr = io.StringIO()
    with contextlib.redirect_stderr(stderr):
        bar = T.progress_bar(60, "CLIP training", unit="step")
        assert bar.disable
        from mmcache.encoders.text import MiniLMEncoder
        MiniLMEncoder()  # MMCACHE_PROGRESS=0 silences transformers' loading bar too
    assert stderr.getvalue() == ""
    with pytest.raises(InvalidInputError, match="progress"):
        T.train(TINY, root=tmp_path, progress="quiet")
    assert not any(tmp_path.iterdir())


def test_scene_training_uses_only_the_train_split():
    from mmcache.datasets import all_scenes, split_of

    train = T.train_scenes(0)
    splits = {split_of(all_scenes()[i].scene_id, seed=0) for i in train}
    assert splits == {"train"} and 0 < len(train) < 150


def test_changing_the_scene_mix_changes_the_model_folder():
    assert T.model_dir(replace(T.TrainConfig(), scene_batch=0)) != T.model_dir()


def test_encoder_id_carries_the_weights_hash(image_encoder, tiny_dir):
    card = json.loads((tiny_dir / "model_card.json").read_text())
    assert image_encoder.encoder_id == (
        f"clip:{T.MODEL_NAME}/{card['weights_sha256'][:12]}/image")


def test_inference_preprocessing_equals_training(image_encoder, fashion):
    import torch

    with torch.inference_mode():
        direct = torch.nn.functional.normalize(
            image_encoder.model.visual(T.pixels_to_tensor(fashion.images[:8])), dim=-1).numpy()
    np.testing.assert_allclose(image_encoder.encode(list(fashion.images[:8])), direct, atol=1e-5)


def test_scene_preprocessing_equals_training(image_encoder):
    import torch

    from mmcache.datasets import make_scenes

    scenes = make_scenes(images_per_scene=1, seed=3)
    labels = scenes.labels[:6]
    trained_on = T.render_scene_pixels(labels, seed=3)  # same rng stream: same renderings
    with torch.inference_mode():
        direct = torch.nn.functional.normalize(
            image_encoder.model.visual(T.pixels_to_tensor(trained_on)), dim=-1).numpy()
    np.testing.assert_allclose(image_encoder.encode(list(scenes.images[:6])), direct, atol=1e-4)


def test_image_inputs_arrays_bytes_and_pil_agree(image_encoder, fashion):
    from PIL import Image

    img = fashion.images[0]
    png = io.BytesIO()
    Image.fromarray(img).save(png, format="PNG")
    rgb = np.repeat(img[:, :, None], 3, axis=2)
    out = image_encoder.encode([img, png.getvalue(), Image.fromarray(img), rgb])
    assert out.shape == (4, 384)
    np.testing.assert_allclose(out, np.repeat(out[:1], 4, axis=0), atol=1e-5)
    big = image_encoder.encode([np.zeros((64, 48, 3), np.uint8)])  # resized, not rejected
    np.testing.assert_allclose(np.linalg.norm(big), 1.0, atol=1e-5)


def test_text_side_is_the_frozen_minilm(text_encoder):
    captions = ["a photo of a sneaker", "a photo of an ankle boot"]
    np.testing.assert_allclose(text_encoder.encode(captions), get_encoder("minilm").encode(captions),
                               atol=1e-4)


def test_text_prompts_classify_above_chance(image_encoder, text_encoder, fashion):
    from mmcache.datasets.images import FASHION_CLASSES

    prompts = text_encoder.encode([f"a photo of a {c}" for c in FASHION_CLASSES])
    pred = (image_encoder.encode(list(fashion.images)) @ prompts.T).argmax(1)
    assert (pred == fashion.labels).mean() > 0.3


def test_missing_offline_model_says_make_models(tmp_path):
    with pytest.raises(OfflineAssetError, match="make models"):
        C.load_clip_encoder(model_dir=tmp_path / "nothing-here")


def test_uncached_pretrained_weights_raise_with_instructions(monkeypatch):
    monkeypatch.delenv("MMCACHE_ALLOW_DOWNLOADS", raising=False)
    monkeypatch.setenv("HF_HUB_CACHE", "/nonexistent-hf-cache")
    monkeypatch.setattr(C, "_cached_hf_file", lambda hub: None)
    with pytest.raises(OfflineAssetError, match="checkpoint="):
        C.load_clip_encoder("ViT-B-32/laion2b_s34b_b79k")
    with pytest.raises(OfflineAssetError, match="does not exist"):
        C.load_clip_encoder("ViT-B-32", checkpoint="/nonexistent/model.bin")


@pytest.mark.parametrize("bad", [np.zeros((4, 4), np.float32), np.zeros((0, 3), np.uint8),
                                 np.zeros((4, 4, 2), np.uint8), b"not an image", "text"])
def test_bad_images_raise(image_encoder, bad):
    with pytest.raises(InvalidMediaError):
        image_encoder.encode([bad])


def test_an_eps_image_is_refused_before_any_decoder_runs(image_encoder, monkeypatch):
    """PIL reads EPS through Ghostscript; the encoder, like a cache's queries, takes only the
    formats a query may carry, so a Ghostscript on the machine (simulated here) never runs."""
    from PIL import EpsImagePlugin, Image

    ran = []
    monkeypatch.setattr(EpsImagePlugin, "Ghostscript",
                        lambda tile, size, *a, **k: ran.append(size) or Image.new("RGB", size).im)
    eps = io.BytesIO()
    Image.new("RGB", (8, 8)).save(eps, format="EPS")
    with pytest.raises(InvalidMediaError, match="image #0"):
        image_encoder.encode([eps.getvalue()])
    assert ran == []


def test_an_image_over_the_pixel_limit_is_refused_from_its_header(image_encoder):
    """An image PIL would decode (below its own bomb guard, 89 Mpx) but over the pixel limit
    of a query is refused from its header, as bytes, as an array and as a PIL image."""
    from PIL import Image

    side = 7_000  # 49 Mpx: over limits.image_pixels (40 Mpx)
    png = io.BytesIO()
    Image.new("1", (side, side)).save(png, format="PNG")
    for big in (png.getvalue(), np.zeros((side, side), np.uint8), Image.new("1", (side, side))):
        with pytest.raises(InvalidMediaError, match="image_pixels"):
            image_encoder.encode([big])


def test_the_pixel_limit_is_an_option(tiny_dir):
    small = C.load_clip_encoder(modality="image", model_dir=tiny_dir, max_pixels=100)
    assert small.encode([np.zeros((10, 10), np.uint8)]).shape == (1, 384)
    with pytest.raises(InvalidMediaError, match="image_pixels allows 100"):
        small.encode([np.zeros((10, 11), np.uint8)])


def test_unknown_modality(tiny_dir):
    with pytest.raises(UnknownModalityError):
        C.load_clip_encoder(modality="audio", model_dir=tiny_dir)


def test_shipped_default_meets_its_bar():
    """The `make models` CLIP: ≥ 75% text-prompted Fashion-MNIST test accuracy in ≤ 5 min on one
    core, and scene text→image retrieval far above chance (seen scenes and unseen ones)."""
    folder = T.model_dir()
    if not (folder / "model_card.json").is_file():
        pytest.skip("default offline CLIP not trained here; run `make models`")
    card = json.loads((folder / "model_card.json").read_text())
    assert card["test_text_prompted_accuracy"] >= 0.75
    assert card["train_cpu_seconds"] <= 300  # one thread: ≤ 5 min on one of the 2 cores
    scene = card["scene_text_to_image_R@1"]  # 150-image gallery, chance 0.7%
    assert scene["train_scenes_heldout_renderings"] >= 0.8
    assert scene["unseen_scenes"] >= 0.25
