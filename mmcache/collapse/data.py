"""Rendered compositional scenes as tokens for the cold-start collapse experiment.

Each scene is one coloured shape in one quadrant of a noisy RGB canvas; its
caption names colour, shape and position ("red circle top left"). A scene
becomes image patch tokens (non-overlapping square patches, flattened) and
caption word ids. The renderer is this module's own small numpy one, written
before ``mmcache.datasets.scenes`` existed; every result names it through
:data:`DATA_ID`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..errors import InvalidInputError

COLOURS: dict[str, tuple[float, float, float]] = {
    "red": (0.9, 0.1, 0.1), "green": (0.1, 0.8, 0.2),
    "blue": (0.15, 0.25, 0.95), "yellow": (0.95, 0.9, 0.1),
}
SHAPES = ("square", "circle", "triangle")
VERTICAL = ("top", "bottom")
HORIZONTAL = ("left", "right")
VOCAB: tuple[str, ...] = (*COLOURS, *SHAPES, *VERTICAL, *HORIZONTAL)
CAPTION_LEN = 4
DATA_ID = "rendered-scenes/mmcache.collapse.data (numpy, 1 shape x 4 colours x 3 shapes x 4 quadrants)"


@dataclass(frozen=True)
class SceneBatch:
    """Patch tokens ``(n, n_patches, patch_dim)``, caption ids ``(n, 4)`` and captions."""

    patches: np.ndarray
    tokens: np.ndarray
    captions: list[str]


def render_scene(colour: str, shape: str, vertical: str, horizontal: str,
                 rng: np.random.Generator, size: int = 32) -> np.ndarray:
    """One ``(size, size, 3)`` float32 image: a jittered shape in the named quadrant on noise."""
    img = rng.uniform(0.0, 0.15, (size, size, 3)).astype(np.float32)
    half = size // 2
    radius = rng.uniform(0.25, 0.4) * half
    cy = (0 if vertical == "top" else half) + half / 2 + rng.uniform(-0.15, 0.15) * half
    cx = (0 if horizontal == "left" else half) + half / 2 + rng.uniform(-0.15, 0.15) * half
    yy, xx = np.mgrid[0:size, 0:size].astype(np.float32) + 0.5
    dy, dx = yy - cy, xx - cx
    if shape == "square":
        mask = (np.abs(dy) <= radius) & (np.abs(dx) <= radius)
    elif shape == "circle":
        mask = dy ** 2 + dx ** 2 <= radius ** 2
    else:  # triangle, apex up
        mask = (dy <= radius) & (dy >= -radius) & (np.abs(dx) <= (dy + radius) / 2)
    img[mask] = COLOURS[colour]
    return img


def patchify(images: np.ndarray, patch: int) -> np.ndarray:
    """``(n, H, W, C)`` images to ``(n, (H/patch)*(W/patch), patch*patch*C)`` tokens, row-major."""
    n, h, w, c = images.shape
    if h % patch or w % patch:
        raise InvalidInputError(f"image {h}x{w} is not divisible into {patch}px patches")
    grid = images.reshape(n, h // patch, patch, w // patch, patch, c).transpose(0, 1, 3, 2, 4, 5)
    return grid.reshape(n, (h // patch) * (w // patch), patch * patch * c)


def sample_scenes(n: int, rng: np.random.Generator, size: int = 32, patch: int = 8) -> SceneBatch:
    """``n`` random scenes (attributes uniform, independent) as patch tokens and caption ids."""
    if n <= 0:
        raise InvalidInputError(f"need a positive number of scenes, got {n}")
    images, tokens, captions = [], [], []
    for _ in range(n):
        words = (rng.choice(list(COLOURS)), rng.choice(SHAPES), rng.choice(VERTICAL),
                 rng.choice(HORIZONTAL))
        images.append(render_scene(*words, rng=rng, size=size))
        tokens.append([VOCAB.index(w) for w in words])
        captions.append(" ".join(words))
    return SceneBatch(patchify(np.stack(images), patch), np.asarray(tokens, dtype=np.int64),
                      captions)
