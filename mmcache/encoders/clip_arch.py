"""The offline CLIP's architecture as data: its training configuration, the open_clip model
config it maps to, its input normalisation, and where its trained weights are found.

Training lives in :mod:`mmcache.lab.clip_training` (``make models``), which writes each model
to ``data/models/<name>-<hash>/`` and records the default one in :data:`CURRENT_FILE`.
"""

from __future__ import annotations

import hashlib
import json
import logging
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from mmcache.encoders.text import minilm_path
from mmcache.errors import OfflineAssetError
from mmcache.paths import DATA_DIR

MODELS_DIR = DATA_DIR / "models"


MODEL_NAME = "clip-fmnist-lit"


#: Fashion-MNIST pixel statistics (training split), the tower's input normalisation.
PIXEL_MEAN, PIXEL_STD = 0.2860, 0.3530


#: Fashion-MNIST's 28×28 images are padded by 2 px: ModifiedResNet downsamples 32×.
IMAGE_SIZE, PAD = 32, 2
#: Names the folder (under :data:`MODELS_DIR`) of the default model, written by training.
CURRENT_FILE = MODELS_DIR / f"{MODEL_NAME}.current"


@dataclass(frozen=True)
class TrainConfig:
    """Everything that decides the trained weights (and so the cache folder's hash)."""

    layers: tuple[int, int, int, int] = (1, 1, 1, 1)  # open_clip ModifiedResNet (CLIP's RN)
    width: int = 8
    head_width: int = 16
    steps: int = 2000
    batch_size: int = 256
    lr: float = 2e-3
    weight_decay: float = 0.05
    warmup: int = 100
    init_temperature: float = 0.07
    max_shift: int = 2  # random translation in pixels (augmentation)
    seed: int = 0
    threads: int = 1  # one core: no OpenMP spin-waiting on a shared machine
    train_limit: int | None = None  # use a subset of the 55,000 training images
    scene_batch: int = 64  # scene renderings per batch, on top of batch_size Fashion images
    scene_renders: int = 24  # jittered renderings per training scene (a fixed pool)
    scene_split_seed: int = 0  # split_of(scene_id, seed): notebook 01's scene split (its SEED)

    def open_clip_config(self) -> dict[str, Any]:
        """The open_clip model config: this ViT tower + the local MiniLM as HF text tower."""
        path = str(minilm_path())
        return {
            "embed_dim": 384,
            "vision_cfg": {"image_size": IMAGE_SIZE, "layers": list(self.layers),
                           "width": self.width, "head_width": self.head_width},
            "text_cfg": {"hf_model_name": path, "hf_tokenizer_name": path,
                         "hf_proj_type": None, "hf_pooler_type": "mean_pooler",
                         "context_length": 64},
        }



def pixels_to_tensor(images: np.ndarray, pad: int = PAD):
    """``(n, 28, 28)`` greyscale or ``(n, 28, 28, 3)`` RGB uint8 → normalised
    ``(n, 3, 28 + 2·pad, 28 + 2·pad)`` tensor (greyscale is copied to 3 channels).

    Padding uses the normalised value of a black pixel (Fashion-MNIST's background).
    """
    # deferred: model libraries load only where a model runs
    import torch

    x = torch.from_numpy(np.ascontiguousarray(images)).float().div_(255.0)
    x = x.unsqueeze(1).expand(-1, 3, -1, -1) if x.ndim == 3 else x.permute(0, 3, 1, 2)
    x = (x - PIXEL_MEAN) / PIXEL_STD
    return torch.nn.functional.pad(x, (pad,) * 4, value=-PIXEL_MEAN / PIXEL_STD)


def build_image_tower(config: TrainConfig):
    """A fresh open_clip CLIP for ``config``: its image tower and temperature, untrained.

    The text tower's weights are not loaded: training uses precomputed MiniLM
    caption embeddings, and only ``visual`` and ``logit_scale`` are saved.
    """
    model = create_unloaded(register_architecture(config.open_clip_config()),
                            pretrained_text=False)
    return model.visual, model.logit_scale


def create_unloaded(name: str, **kw: Any):
    """``open_clip.create_model(name, pretrained=None)`` without its "initialized randomly"
    and unused-pooler warnings: the caller trains the weights or loads them next."""
    # deferred: model libraries load only where a model runs
    import open_clip
    import transformers

    verbosity = transformers.logging.get_verbosity()
    transformers.logging.set_verbosity_error()
    logging.disable(logging.WARNING)
    try:
        return open_clip.create_model(name, pretrained=None, **kw)
    finally:
        logging.disable(logging.NOTSET)
        transformers.logging.set_verbosity(verbosity)


def register_architecture(model_cfg: dict[str, Any]) -> str:
    """Register ``model_cfg`` with open_clip (``add_model_config``); its model name."""
    # deferred: model libraries load only where a model runs
    import open_clip

    name = "mmcache-" + hashlib.sha256(json.dumps(model_cfg, sort_keys=True).encode()).hexdigest()[:12]
    if name not in open_clip.list_models():
        path = Path(tempfile.mkdtemp(prefix="mmcache-open-clip-")) / f"{name}.json"
        path.write_text(json.dumps(model_cfg))
        open_clip.add_model_config(path)
    return name


def current_model_dir(root: str | Path = MODELS_DIR) -> Path:
    """The folder of the default offline model that ``make models`` trained last; raises
    :class:`~mmcache.errors.OfflineAssetError` when none was trained."""
    pointer = Path(root) / CURRENT_FILE.name
    if not pointer.is_file():
        raise OfflineAssetError(
            f"the offline CLIP is not trained yet ({pointer} is missing); run `make models` "
            "(`python -m mmcache.lab.clip_training`, a few minutes on CPU) — mmcache never "
            "substitutes random weights")
    return Path(root) / pointer.read_text().strip()
