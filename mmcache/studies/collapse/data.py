"""Rendered compositional scenes as tokens for the cold-start collapse experiment.

The scenes are :func:`mmcache.datasets.make_scenes` (5 shapes × 6 colours ×
5 positions, seeded jitter), rendered at 32 px. Each image becomes 16 patch
tokens (8 × 8 px, RGB in [0, 1], flattened, row-major); each canonical caption
("a red circle on the left", always six words) becomes word ids over the
captions' own small vocabulary.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from mmcache.datasets.scenes import SCENES_SOURCE, all_scenes, make_scenes
from mmcache.errors import InvalidInputError

IMAGE_SIZE = 32
PATCH = 8
N_PATCHES = (IMAGE_SIZE // PATCH) ** 2
PATCH_DIM = PATCH * PATCH * 3
CAPTIONS: tuple[str, ...] = tuple(s.captions()[0] for s in all_scenes())  # one per scene
VOCAB: tuple[str, ...] = tuple(sorted({w for c in CAPTIONS for w in c.split()}))
CAPTION_LEN = 6
DATA_ID = (f"{SCENES_SOURCE}: mmcache.datasets.make_scenes, 150 scenes, canonical captions, "
           f"{IMAGE_SIZE} px, {PATCH} px patches")


@dataclass(frozen=True)
class SceneBatch:
    """Patch tokens ``(n, N_PATCHES, PATCH_DIM)``, caption ids ``(n, CAPTION_LEN)``, captions."""

    patches: np.ndarray
    tokens: np.ndarray
    captions: list[str]


def patchify(images: np.ndarray, patch: int) -> np.ndarray:
    """``(n, H, W, C)`` images to ``(n, (H/patch)*(W/patch), patch*patch*C)`` tokens, row-major."""
    n, h, w, c = images.shape
    if h % patch or w % patch:
        raise InvalidInputError(f"image {h}x{w} is not divisible into {patch}px patches")
    grid = images.reshape(n, h // patch, patch, w // patch, patch, c).transpose(0, 1, 3, 2, 4, 5)
    return grid.reshape(n, (h // patch) * (w // patch), patch * patch * c)


def tokenize(caption: str) -> list[int]:
    """Word ids of a canonical scene caption."""
    words = caption.split()
    unknown = [w for w in words if w not in VOCAB]
    if unknown or len(words) != CAPTION_LEN:
        raise InvalidInputError(f"not a canonical {CAPTION_LEN}-word scene caption: {caption!r}")
    return [VOCAB.index(w) for w in words]


@lru_cache(maxsize=8)
def scene_tokens(images_per_scene: int, seed: int) -> SceneBatch:
    """Every scene rendered ``images_per_scene`` times (seeded) as patch and word tokens."""
    scenes = make_scenes(images_per_scene=images_per_scene, size=IMAGE_SIZE, seed=seed)
    patches = patchify(scenes.images.astype(np.float32) / 255.0, PATCH)
    tokens = np.asarray([tokenize(c) for c in scenes.captions], dtype=np.int64)
    return SceneBatch(patches, tokens, list(scenes.captions))
