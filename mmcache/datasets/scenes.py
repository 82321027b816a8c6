"""Rendered compositional scenes: one shape × colour × position, with paraphrased captions.

5 shapes × 6 colours × 5 positions = 150 scenes. Every scene has
:data:`N_PARAPHRASES` captions that say the same thing in different words (600
distinct captions), so each caption belongs to a known paraphrase class: its
scene. Retrieval is hard because captions of different scenes share most of
their words ("a red circle on the left" vs "a red square on the left").

Images are drawn with small seeded jitter in position, size and background, so
two renderings of one scene differ while the caption stays true.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import product

import numpy as np
from skimage.draw import disk, polygon

from mmcache.errors import InvalidInputError
from mmcache.datasets.images import CaptionedImages

SHAPES: tuple[str, ...] = ("circle", "square", "triangle", "diamond", "star")
COLOURS: dict[str, tuple[int, int, int]] = {
    "red": (220, 30, 30), "green": (40, 180, 60), "blue": (40, 80, 230),
    "yellow": (240, 220, 40), "purple": (150, 50, 190), "orange": (250, 140, 20)}
#: Where the shape's centre sits, as (x, y) fractions of the image.
POSITIONS: dict[str, tuple[float, float]] = {
    "left": (0.27, 0.5), "right": (0.73, 0.5), "top": (0.5, 0.27), "bottom": (0.5, 0.73),
    "centre": (0.5, 0.5)}
SHAPE_WORDS: dict[str, tuple[str, str]] = {
    "circle": ("circle", "round disc"), "square": ("square", "box"),
    "triangle": ("triangle", "three-sided shape"), "diamond": ("diamond", "rhombus"),
    "star": ("star", "five-pointed star")}
POSITION_PHRASES: dict[str, tuple[str, str, str, str]] = {
    "left": ("on the left", "at the left side", "in the left part of the picture", "on the left"),
    "right": ("on the right", "at the right side", "in the right part of the picture",
              "on the right"),
    "top": ("at the top", "near the upper edge", "in the top part of the picture", "up top"),
    "bottom": ("at the bottom", "near the lower edge", "in the bottom part of the picture",
               "down below"),
    "centre": ("in the centre", "in the middle", "in the central part of the picture",
               "right in the middle")}
N_PARAPHRASES = 4
SCENES_SOURCE = "mmcache rendered compositional scenes (synthetic, generated in code)"


@dataclass(frozen=True)
class Scene:
    """One composition: a ``colour`` ``shape`` at ``position``."""

    shape: str
    colour: str
    position: str

    @property
    def scene_id(self) -> str:
        """A stable id such as ``"red-circle-left"``."""
        return f"{self.colour}-{self.shape}-{self.position}"

    def captions(self) -> list[str]:
        """The scene's :data:`N_PARAPHRASES` paraphrased captions; the first is canonical."""
        plain, other = SHAPE_WORDS[self.shape]
        pos = POSITION_PHRASES[self.position]
        c = self.colour
        return [f"a {c} {plain} {pos[0]}",
                f"a {other} coloured {c} {pos[1]}",
                f"there is a {c} {plain} {pos[2]}",
                f"{pos[3]}, a {c} {other}"]


def all_scenes() -> list[Scene]:
    """Every scene, in a fixed order (its index is the scene's class label)."""
    return [Scene(s, c, p) for s, c, p in product(SHAPES, COLOURS, POSITIONS)]


def scene_captions() -> tuple[list[str], np.ndarray, np.ndarray]:
    """All captions with their scene label (paraphrase class) and paraphrase index."""
    captions, labels, variants = [], [], []
    for label, scene in enumerate(all_scenes()):
        for variant, caption in enumerate(scene.captions()):
            captions.append(caption)
            labels.append(label)
            variants.append(variant)
    return captions, np.array(labels), np.array(variants)


def render_scene(scene: Scene, size: int = 64,
                 rng: np.random.Generator | None = None) -> np.ndarray:
    """Draw ``scene`` as a ``size``×``size``×3 uint8 image (jittered when ``rng`` is given)."""
    if scene.shape not in SHAPES or scene.colour not in COLOURS or scene.position not in POSITIONS:
        raise InvalidInputError(f"unknown scene {scene}")
    if size < 16:
        raise InvalidInputError(f"scenes need at least 16×16 pixels, got {size}")
    jitter = (lambda scale: rng.uniform(-scale, scale)) if rng is not None else (lambda _: 0.0)
    background = int(30 + jitter(20))
    image = np.full((size, size, 3), background, np.uint8)
    cx, cy = POSITIONS[scene.position]
    cx, cy = (cx + jitter(0.04)) * size, (cy + jitter(0.04)) * size
    radius = (0.17 + jitter(0.03)) * size
    rr, cc = _shape_pixels(scene.shape, cy, cx, radius, image.shape[:2])
    colour = np.clip(np.array(COLOURS[scene.colour]) + [jitter(15) for _ in range(3)], 0, 255)
    image[rr, cc] = colour.astype(np.uint8)
    return image


def make_scenes(images_per_scene: int = 1, size: int = 64, seed: int = 0) -> CaptionedImages:
    """Render every scene ``images_per_scene`` times with seeded jitter.

    ``labels`` are scene indices (see :func:`all_scenes`), ``captions`` the
    canonical caption, ``class_names`` the scene ids, and ``meta["paraphrases"]``
    the list of paraphrases per scene.
    """
    if images_per_scene < 1:
        raise InvalidInputError(f"images_per_scene must be positive, got {images_per_scene}")
    rng = np.random.default_rng(seed)
    scenes = all_scenes()
    images, labels, ids = [], [], []
    for label, scene in enumerate(scenes):
        for k in range(images_per_scene):
            images.append(render_scene(scene, size, rng))
            labels.append(label)
            ids.append(f"scene/{scene.scene_id}/{seed}/{k}")
    return CaptionedImages(
        images=np.stack(images), labels=np.array(labels),
        captions=[scenes[y].captions()[0] for y in labels],
        class_names=tuple(s.scene_id for s in scenes), ids=ids, source=SCENES_SOURCE,
        meta={"paraphrases": [s.captions() for s in scenes], "synthetic": True, "seed": seed})


def _shape_pixels(shape: str, cy: float, cx: float, r: float,
                  bounds: tuple[int, int]) -> tuple[np.ndarray, np.ndarray]:
    if shape == "circle":
        return disk((cy, cx), r, shape=bounds)
    if shape == "star":
        angles = -np.pi / 2 + np.arange(10) * np.pi / 5
        radii = np.where(np.arange(10) % 2 == 0, r * 1.15, r * 0.5)
        return polygon(cy + radii * np.sin(angles), cx + radii * np.cos(angles), shape=bounds)
    corners = {"square": [(-1, -1), (-1, 1), (1, 1), (1, -1)],
               "diamond": [(-1.3, 0), (0, 1.1), (1.3, 0), (0, -1.1)],
               "triangle": [(-1.1, 0), (0.9, 1.15), (0.9, -1.15)]}[shape]
    scale = r * (0.85 if shape == "square" else 1.0)
    dy, dx = np.array(corners, float).T * scale
    return polygon(cy + dy, cx + dx, shape=bounds)
