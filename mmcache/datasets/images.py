"""Real images with captions: Fashion-MNIST and scikit-image's sample photos.

* :func:`load_fashion_mnist` — Zalando's Fashion-MNIST (70,000 real 28×28
  greyscale product photos, 10 classes, MIT licence) from the Debian package
  ``dataset-fashion-mnist``. ``train``/``val`` are a fixed seeded 55,000/5,000
  cut of the official training set; ``test`` is the official 10,000-image test set.
  Each class has spoken-friendly caption templates (:func:`fashion_captions`).
* :func:`load_skimage_photos` — the real photographs that ship inside
  scikit-image (``skimage.data``), each with a hand-written caption.
"""

from __future__ import annotations

import gzip
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

import numpy as np

from mmcache.errors import InvalidInputError
from mmcache.offline import missing_asset

FASHION_DIR = Path("/usr/share/datasets/fashion-mnist")
FASHION_SOURCE = "Fashion-MNIST (Zalando Research, MIT) via Debian dataset-fashion-mnist"
#: Class names in label order, worded so they read (and are spoken) naturally.
FASHION_CLASSES: tuple[str, ...] = ("t-shirt", "pair of trousers", "pullover", "dress", "coat",
                                    "sandal", "shirt", "sneaker", "bag", "ankle boot")
#: Caption templates; ``{}`` is "a"/"an" + class name. Template 0 is the canonical caption.
FASHION_TEMPLATES: tuple[str, ...] = (
    "a photo of {}", "a picture of {}", "a black and white photo of {}",
    "a product photo of {}", "an image showing {}", "a small photo of {}",
    "a grey picture of {}", "a catalogue photo of {}")
FASHION_VAL_SIZE = 5_000


@dataclass(frozen=True)
class CaptionedImages:
    """Images with one caption each and an integer class label.

    ``images`` is ``(n, H, W)`` or ``(n, H, W, 3)`` uint8; ``labels[i]`` indexes
    ``class_names``; ``captions[i]`` describes image ``i``; ``ids`` are stable item ids.
    """

    images: np.ndarray
    labels: np.ndarray
    captions: list[str]
    class_names: tuple[str, ...]
    ids: list[str]
    source: str
    meta: dict = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.labels)


def fashion_captions(label: int, templates: tuple[str, ...] = FASHION_TEMPLATES) -> list[str]:
    """Every caption of Fashion-MNIST class ``label`` under ``templates``."""
    if not 0 <= int(label) < len(FASHION_CLASSES):
        raise InvalidInputError(f"Fashion-MNIST label must be in 0..9, got {label}")
    return [t.format(_with_article(FASHION_CLASSES[int(label)])) for t in templates]


def load_fashion_mnist(split: str = "train", limit: int | None = None,
                       seed: int = 0) -> CaptionedImages:
    """Fashion-MNIST images of ``split`` ("train", "val", "test") with canonical captions.

    ``limit`` keeps a seeded random subset of that many images (the same subset
    for the same seed). Raises :class:`~mmcache.errors.OfflineAssetError` when
    the Debian package is not installed.
    """
    if split not in ("train", "val", "test"):
        raise InvalidInputError(f"unknown split {split!r}; use train, val or test")
    images, labels = _fashion_arrays("t10k" if split == "test" else "train")
    index = np.arange(len(labels))
    if split != "test":
        order = np.random.default_rng(12345).permutation(len(labels))  # fixed train/val cut
        index = np.sort(order[:FASHION_VAL_SIZE] if split == "val" else order[FASHION_VAL_SIZE:])
    if limit is not None:
        if limit < 1:
            raise InvalidInputError(f"limit must be positive, got {limit}")
        index = np.sort(np.random.default_rng(seed).permutation(index)[:limit])
    prefix = "t10k" if split == "test" else "train"
    return CaptionedImages(
        images=images[index], labels=labels[index].astype(np.int64),
        captions=[fashion_captions(y)[0] for y in labels[index]],
        class_names=FASHION_CLASSES, ids=[f"fashion-mnist/{prefix}/{i}" for i in index],
        source=FASHION_SOURCE, meta={"split": split, "licence": "MIT"})


def _with_article(noun: str) -> str:
    return f"{'an' if noun[0] in 'aeiou' else 'a'} {noun}"


@lru_cache(maxsize=2)
def _fashion_arrays(prefix: str) -> tuple[np.ndarray, np.ndarray]:
    image_file = FASHION_DIR / f"{prefix}-images-idx3-ubyte.gz"
    label_file = FASHION_DIR / f"{prefix}-labels-idx1-ubyte.gz"
    if not image_file.exists() or not label_file.exists():
        raise missing_asset("Fashion-MNIST", "`apt-get install dataset-fashion-mnist`")
    with gzip.open(label_file) as f:
        labels = np.frombuffer(f.read(), np.uint8, offset=8)
    with gzip.open(image_file) as f:
        images = np.frombuffer(f.read(), np.uint8, offset=16).reshape(-1, 28, 28)
    images.setflags(write=False)
    labels.setflags(write=False)
    return images, labels


#: scikit-image sample photos that ship with the wheel, with hand-written captions.
SKIMAGE_CAPTIONS: dict[str, str] = {
    "astronaut": "a portrait of an astronaut in a white spacesuit in front of a flag",
    "camera": "a black and white photo of a man with a camera on a tripod",
    "cat": "a close-up photo of a tabby cat",
    "chelsea": "a ginger cat looking to the side",
    "coffee": "a cup of coffee on a saucer seen from above",
    "coins": "a black and white photo of old coins on a table",
    "horse": "a silhouette of a horse",
    "moon": "a grey photo of the surface of the moon",
    "rocket": "a rocket on a launch pad under a blue sky",
    "hubble_deep_field": "a telescope picture of many distant galaxies",
    "immunohistochemistry": "a stained tissue sample under a microscope",
    "retina": "a photo of the retina of a human eye",
    "brick": "a close-up of a brick wall",
    "grass": "a close-up of green grass",
    "gravel": "a close-up of grey gravel",
    "clock": "a black and white photo of a wall clock",
    "page": "a scanned page of printed text",
    "text": "a photo of painted letters on a sign",
    "colorwheel": "a colour wheel showing all hues",
    "logo": "the scikit-image logo",
    "microaneurysms": "a grey image of blood vessels in a retina",
}
SKIMAGE_SOURCE = "scikit-image sample data (skimage.data; licences in skimage/data/README.txt)"


def load_skimage_photos(size: int = 64) -> CaptionedImages:
    """scikit-image's bundled sample photos, resized to ``size``×``size`` RGB, with captions.

    Every photo is its own class (``labels`` = 0..n-1).
    """
    # deferred: scikit-image only for the image data
    from skimage import data
    from skimage.color import gray2rgb, rgba2rgb
    from skimage.transform import resize
    from skimage.util import img_as_float, img_as_ubyte

    names, images = [], []
    for name in SKIMAGE_CAPTIONS:
        try:
            image = getattr(data, name)()
        except (ModuleNotFoundError, OSError, ValueError):  # files that need a download
            continue
        image = img_as_float(image)
        if image.ndim == 2:
            image = gray2rgb(image)
        elif image.shape[-1] == 4:
            image = rgba2rgb(image)
        images.append(img_as_ubyte(resize(image, (size, size), anti_aliasing=True)))
        names.append(name)
    if not names:
        raise missing_asset("scikit-image sample data", "`pip install scikit-image`")
    return CaptionedImages(
        images=np.stack(images), labels=np.arange(len(names)),
        captions=[SKIMAGE_CAPTIONS[n] for n in names], class_names=tuple(names),
        ids=[f"skimage/{n}" for n in names], source=SKIMAGE_SOURCE)
