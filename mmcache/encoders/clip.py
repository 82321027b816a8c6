"""CLIP image and text embeddings via open_clip, offline.

``weights`` switches between

* ``"offline"`` (default): the small CLIP this workbench trains itself on
  Fashion-MNIST and the training-split rendered scenes (``make models``; see
  :mod:`mmcache.lab.clip_training`), image tower
  open_clip's ModifiedResNet, text tower the frozen all-MiniLM-L6-v2;
* ``"ARCH/TAG"`` such as ``"ViT-B-32/laion2b_s34b_b79k"``: open_clip's pretrained
  weights, used only if the checkpoint is already on this machine (or downloads
  are enabled with ``MMCACHE_ALLOW_DOWNLOADS=1``);
* ``"ARCH"`` with ``checkpoint="/path/to/open_clip_pytorch_model.bin"``: a local file.

A missing weight raises :class:`~mmcache.errors.OfflineAssetError` saying how to
supply it; no randomly initialised model ever stands in. ``encoder_id`` names
the architecture and a hash of the weights.

Images are validated as a cache's queries are (:func:`mmcache.keys.decode_image`): encoded
bytes only in :data:`mmcache.keys.IMAGE_FORMATS` (no EPS), and no image over the encoder's
``max_pixels`` (default ``limits.image_pixels``), refused from the header before decoding;
either is an InvalidMediaError, also when the encoder is used on its own.
"""

from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

from mmcache.errors import ConfigError, InvalidMediaError, OfflineAssetError, UnknownModalityError
from mmcache.offline import downloads_allowed, enforce_offline
from mmcache.encoders import clip_arch
from mmcache.encoders.text import check_texts, file_sha256, minilm_path
from mmcache.types import Limits

DEFAULT_WEIGHTS = "offline"


class CLIPEncoder:
    """One side (``"image"`` or ``"text"``) of an open_clip model: L2-normalised float32 vectors."""

    def __init__(self, model, preprocess: Callable, tokenizer: Callable, modality: str,
                 encoder_id: str, card: dict[str, Any] | None = None, batch_size: int = 256,
                 max_pixels: int = Limits.image_pixels) -> None:
        if modality not in ("image", "text"):
            raise UnknownModalityError(f"CLIP encodes 'image' or 'text', not {modality!r}")
        self.model = model.eval()
        self.preprocess = preprocess
        self.tokenizer = tokenizer
        self.modality = modality
        self.dim = int(model.visual.output_dim)
        self.encoder_id = encoder_id
        self.card = card or {}
        self.batch_size = batch_size
        #: The largest image, in pixels, the image side decodes.
        self.max_pixels = max_pixels

    def encode(self, inputs: Sequence[Any]) -> np.ndarray:
        """``(n, dim)`` unit vectors for images (uint8 arrays, PIL images, encoded bytes of the
        formats a query may carry, each of at most :attr:`max_pixels` pixels) or texts;
        InvalidMediaError for an image :func:`to_pil` refuses."""
        # deferred: model libraries load only where a model runs
        import torch

        items = list(inputs) if self.modality == "image" else check_texts(inputs)
        out = [np.zeros((0, self.dim), np.float32)]
        with torch.inference_mode():
            for i in range(0, len(items), self.batch_size):
                chunk = items[i:i + self.batch_size]
                if self.modality == "image":
                    batch = torch.stack([self.preprocess(to_pil(x, i + j, self.max_pixels))
                                         for j, x in enumerate(chunk)])
                    feats = self.model.encode_image(batch)
                else:
                    feats = self.model.encode_text(self.tokenizer(chunk))
                out.append(torch.nn.functional.normalize(feats, dim=-1).numpy())
        return np.concatenate(out).astype(np.float32)


def to_pil(item: Any, index: int = 0, max_pixels: int = Limits.image_pixels) -> Any:
    """A PIL image from a PIL image, encoded bytes (one of :data:`mmcache.keys.IMAGE_FORMATS`)
    or an ``H×W[×1|3|4]`` uint8 array, of at most ``max_pixels`` pixels; InvalidMediaError
    naming image ``index`` otherwise (the validation a cache's queries get,
    :func:`mmcache.keys.decode_image`)."""
    # deferred: Pillow (which mmcache.keys imports) only where an image is decoded
    from PIL import Image

    from mmcache.keys import check_pixels, decode_image

    try:
        if isinstance(item, Image.Image):
            check_pixels(item.size, max_pixels)
            return item
        return decode_image(item, max_pixels)
    except InvalidMediaError as exc:
        raise InvalidMediaError(f"image #{index}: {exc}") from None


def offline_preprocess(image) -> Any:
    """The offline CLIP's input: RGB, resized to 28×28, normalised, padded to 32×32.

    For a 28×28 greyscale Fashion-MNIST image this equals what training fed the tower.
    """
    # deferred: model libraries load only where a model runs; Pillow only where an image is decoded
    import torch
    from PIL import Image

    rgb = image.convert("RGB")
    if rgb.size != (28, 28):
        rgb = rgb.resize((28, 28), Image.BILINEAR)
    x = torch.from_numpy(np.asarray(rgb).copy()).permute(2, 0, 1).float().div_(255.0)
    x = (x - clip_arch.PIXEL_MEAN) / clip_arch.PIXEL_STD
    pad = clip_arch.PAD
    return torch.nn.functional.pad(x, (pad,) * 4, value=-clip_arch.PIXEL_MEAN / clip_arch.PIXEL_STD)


def load_clip_encoder(weights: str = DEFAULT_WEIGHTS, modality: str = "image",
                      checkpoint: str | Path | None = None,
                      model_dir: str | Path | None = None,
                      max_pixels: int = Limits.image_pixels) -> CLIPEncoder:
    """A CLIP encoder for ``modality`` with the weights the config names (see module doc).

    ``model_dir`` points the ``"offline"`` weights at a folder written by
    :func:`mmcache.lab.clip_training.train` (default: the cached default model under ``data/models/``);
    ``max_pixels``: the largest image it decodes (a cache whose ``limits.image_pixels`` is
    raised above the default gives its encoder the same).
    """
    enforce_offline()
    if modality not in ("image", "text"):
        raise UnknownModalityError(f"CLIP encodes 'image' or 'text', not {modality!r}")
    encoder = _offline_encoder(modality, model_dir) if weights == DEFAULT_WEIGHTS else \
        _pretrained_encoder(weights, modality, checkpoint)
    encoder.max_pixels = max_pixels
    return encoder


def _offline_encoder(modality: str, model_dir: str | Path | None) -> CLIPEncoder:
    folder = Path(model_dir) if model_dir else clip_arch.current_model_dir()
    weights = folder / "visual.safetensors"
    if not weights.is_file():
        raise OfflineAssetError(
            f"the offline CLIP is not trained yet ({weights} is missing); run `make models` "
            "(`python -m mmcache.lab.clip_training`, a few minutes on CPU) — mmcache never "
            "substitutes random weights")
    model, tokenizer, digest = _offline_model(str(folder.resolve()))
    card = json.loads((folder / "model_card.json").read_text())
    return CLIPEncoder(model, offline_preprocess, tokenizer, modality,
                       f"clip:{clip_arch.MODEL_NAME}/{digest}/{modality}", card)


@lru_cache(maxsize=4)
def _offline_model(folder: str) -> tuple[Any, Callable, str]:
    """The trained open_clip model in ``folder`` (shared by its image and text encoders)."""
    # deferred: model libraries load only where a model runs
    import open_clip
    from safetensors.torch import load_file

    weights = Path(folder) / "visual.safetensors"
    model_cfg = json.loads((Path(folder) / "open_clip_config.json").read_text())["model_cfg"]
    model_cfg["text_cfg"]["hf_model_name"] = model_cfg["text_cfg"]["hf_tokenizer_name"] = str(
        minilm_path())  # the text tower where this machine installed it
    name = clip_arch.register_architecture(model_cfg)
    model = clip_arch.create_unloaded(name)
    result = model.load_state_dict(load_file(str(weights)), strict=False)
    if result.unexpected_keys or any(not k.startswith("text.") for k in result.missing_keys):
        raise OfflineAssetError(f"{weights} does not match its open_clip_config.json; "
                                "delete the folder and run `make models` again")
    return model.eval(), open_clip.get_tokenizer(name), file_sha256(weights)[:12]


def _pretrained_encoder(weights: str, modality: str,
                        checkpoint: str | Path | None) -> CLIPEncoder:
    # deferred: model libraries load only where a model runs
    import open_clip

    arch, _, tag = weights.partition("/")
    if arch not in open_clip.list_models():
        raise ConfigError(f"unknown open_clip architecture {arch!r}")
    if checkpoint is not None:
        path = Path(checkpoint)
        if not path.is_file():
            raise OfflineAssetError(f"CLIP checkpoint {path} does not exist")
        source, label = str(path), f"file-{file_sha256(path)[:12]}"
    elif tag:
        source, label = _local_pretrained(arch, tag), tag
    else:
        raise ConfigError(f"CLIP weights {weights!r}: give 'ARCH/TAG' or a checkpoint file")
    model, _, preprocess = open_clip.create_model_and_transforms(arch, pretrained=source)
    return CLIPEncoder(model, preprocess, open_clip.get_tokenizer(arch), modality,
                       f"clip:{arch}/{label}/{modality}")


def _local_pretrained(arch: str, tag: str) -> str:
    """The local file of open_clip's pretrained ``arch/tag`` (or the tag when downloads are on)."""
    # deferred: model libraries load only where a model runs
    import open_clip

    cfg = open_clip.get_pretrained_cfg(arch, tag)
    if not cfg:
        raise ConfigError(f"open_clip has no pretrained tag {tag!r} for {arch}; known: "
                          f"{', '.join(open_clip.list_pretrained_tags_by_model(arch))}")
    if downloads_allowed():
        return tag
    found = _cached_hf_file(cfg.get("hf_hub", ""))
    if found:
        return found
    raise OfflineAssetError(
        f"pretrained CLIP weights {arch}/{tag} are not on this machine and mmcache never "
        f"downloads at run time. Fetch the checkpoint on a connected machine (hf-hub "
        f"{cfg.get('hf_hub') or cfg.get('url')}), copy it here and pass "
        f"weights={arch!r}, checkpoint='/path/to/open_clip_pytorch_model.bin'; or allow "
        "downloads with MMCACHE_ALLOW_DOWNLOADS=1. The offline default is weights='offline' "
        "(`make models`).")


def _cached_hf_file(hub: str) -> str | None:
    if not hub:
        return None
    # deferred: model libraries load only where a model runs
    from huggingface_hub import try_to_load_from_cache

    parts = hub.rstrip("/").split("/")
    repo = "/".join(parts[:2])
    names = parts[2:] or ["open_clip_model.safetensors", "open_clip_pytorch_model.bin"]
    for name in names:
        hit = try_to_load_from_cache(repo, name)
        if isinstance(hit, str):
            return hit
    return None
