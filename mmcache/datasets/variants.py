"""Paraphrase variants of one input: templated text rewrites, image crops / brightness / resizes
(and a video clip's keyframes as a pan across one photo), and speech voices and rates.

Variant 0 is the input as it is; every other variant is seeded by its number, so a variant
names the same edit everywhere (workload streams and labelled pairs).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable

import numpy as np

from mmcache.errors import ConfigError

if TYPE_CHECKING:
    pass


#: Keyframes per video clip.
KEYFRAMES = 3


_TEXT_REWRITES: tuple[Callable[[str], str], ...] = (
    lambda s: s,
    lambda s: s.lower(),
    lambda s: f"Please, {s[:1].lower()}{s[1:]}",
    lambda s: s.rstrip(".?! ") + "?",
    lambda s: f"Quick question: {s}",
    lambda s: " ".join(w.strip(",.;:!?") for w in s.split()),
    lambda s: f"{s} Thanks!",
    lambda s: f"Can you help me with this: {s}",
)


@dataclass(frozen=True)
class ImageVariant:
    """A photo variant: a crop keeping ``crop`` of each side, brightness, output scale; the crop
    is centred, or moved by ``pan`` (rows, columns; -1 / 1: to either edge)."""

    crop: float
    brightness: float
    scale: float
    pan: tuple[float, float] = (0.0, 0.0)


@dataclass(frozen=True)
class SpeechVariant:
    """A speech variant: an espeak-ng voice and a rate in words per minute
    (from :data:`mmcache.datasets.speech.VOICES` / ``RATES``)."""

    voice: str
    rate_wpm: int


def text_variant(prompt: str, variant: int) -> str:
    """Paraphrase ``variant`` of a prompt: a fixed templated rewrite (variant 0 = as written)."""
    return _TEXT_REWRITES[variant % len(_TEXT_REWRITES)](prompt)


def image_variant(variant: int) -> ImageVariant:
    """The crop / brightness / resize of image variant ``variant`` (0 = the photo itself)."""
    if variant == 0:
        return ImageVariant(1.0, 1.0, 1.0)
    rng = np.random.default_rng([7, variant])
    return ImageVariant(crop=float(rng.uniform(0.75, 0.95)),
                        brightness=float(rng.uniform(0.7, 1.3)),
                        scale=float(rng.choice([0.5, 0.75, 1.0, 1.5])))


def video_keyframes(variant: int) -> tuple[ImageVariant, ...]:
    """The :data:`KEYFRAMES` crops of video variant ``variant``: a short synthetic pan across
    the intent's photo at one crop size (variant 0: left to right at 80 %; others: their own
    direction, crop and brightness)."""
    rng = np.random.default_rng([8, variant])
    angle = 0.0 if variant == 0 else float(rng.uniform(0, 2 * np.pi))
    crop = 0.8 if variant == 0 else float(rng.uniform(0.7, 0.9))
    brightness = 1.0 if variant == 0 else float(rng.uniform(0.8, 1.2))
    return tuple(ImageVariant(crop, brightness, 1.0, (t * np.sin(angle), t * np.cos(angle)))
                 for t in np.linspace(-1.0, 1.0, KEYFRAMES).tolist())


def speech_variant(variant: int) -> SpeechVariant:
    """The voice and speaking rate of speech variant ``variant``."""
    from mmcache.datasets.speech import RATES, VOICES

    return SpeechVariant(VOICES[variant % len(VOICES)],
                         RATES[(variant // len(VOICES)) % len(RATES)])


def clip_keyframes(photo: np.ndarray, variant: int) -> np.ndarray:
    """The keyframes (:func:`video_keyframes`) of video variant ``variant`` of ``photo``,
    stacked (frames × H × W [× C])."""
    return np.stack([apply_image_variant(photo, spec) for spec in video_keyframes(variant)])


def apply_image_variant(pixels: np.ndarray, spec: ImageVariant) -> np.ndarray:
    """Apply a centre crop, brightness factor and nearest-neighbour resize to a uint8 image."""
    img = np.asarray(pixels)
    if img.ndim not in (2, 3) or min(img.shape[:2]) < 1:
        raise ConfigError("image must be H×W or H×W×C")
    h, w = img.shape[:2]
    ch, cw = max(1, round(h * spec.crop)), max(1, round(w * spec.crop))
    top = (h - ch) // 2 + round(spec.pan[0] * ((h - ch) // 2))
    left = (w - cw) // 2 + round(spec.pan[1] * ((w - cw) // 2))
    img = img[top:top + ch, left:left + cw].astype(np.float32) * spec.brightness
    oh, ow = max(1, round(ch * spec.scale)), max(1, round(cw * spec.scale))
    rows = np.minimum((np.arange(oh) + 0.5) * ch / oh, ch - 1).astype(int)
    cols = np.minimum((np.arange(ow) + 0.5) * cw / ow, cw - 1).astype(int)
    return np.clip(img[rows][:, cols], 0, 255).astype(np.uint8)
