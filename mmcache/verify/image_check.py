"""The built-in verifier's image side: is the query's picture the cached entry's picture?

An embedding puts another photo of the same class, or a bar chart with one bar changed,
next to the original; a semantic hit on it is a wrong answer. :func:`check_images`
compares pixels instead. The cached entry keeps a compact fingerprint of its image
(:func:`image_fingerprint`: a :data:`SIDE`×:data:`SIDE` grey thumbnail, ``SIDE²`` bytes,
counted in the entry's size and stored by every tier with its question). The query's
image is reduced the same way; both are standardised (zero mean, unit spread, so a
brightness or contrast change cancels), and the two are aligned by trying centre and
shifted crops of either side (:data:`CROPS`: a crop of one, resized back, matches the
other). The evidence is the smallest, over alignments, of the largest mean absolute
difference in any :data:`BLOCKS`×:data:`BLOCKS` block: a near-duplicate (crop,
brightness, resize) differs a little everywhere, a changed bar a lot in one block,
another photo a lot in many. Above :data:`MAX_BLOCK_DIFFERENCE` the pictures differ.
Its precision / recall on image traps vs near-duplicates is measured on the pairs'
held-out split (notebook 02); the limit is a round number read off the training split.
"""

from __future__ import annotations

import numpy as np
from PIL import Image

from mmcache.errors import InvalidMediaError
from mmcache.keys import decode_image
from mmcache.types import Limits

#: Side of the grey thumbnail a fingerprint keeps (``SIDE²`` bytes).
SIDE = 32
#: Blocks per side for the local difference (each ``SIDE / BLOCKS`` pixels square).
BLOCKS = 4
#: Kept share of each side for the crops tried when aligning.
CROPS = (1.0, 0.95, 0.9, 0.85, 0.8)
#: Largest block difference (standardised grey levels) of the same picture.
MAX_BLOCK_DIFFERENCE = 0.5


def image_fingerprint(image: object, max_pixels: int = Limits.image_pixels) -> bytes:
    """The :data:`SIDE`×:data:`SIDE` grey thumbnail of ``image`` (bytes or uint8 array)
    as ``SIDE²`` bytes; InvalidMediaError for what :func:`mmcache.keys.decode_image` refuses."""
    grey = decode_image(image, max_pixels).convert("L").resize((SIDE, SIDE), Image.Resampling.BOX)
    return np.asarray(grey, np.uint8).tobytes()


def block_difference(query_image: object, entry_fingerprint: bytes) -> float:
    """The aligned local difference between the query's image and an entry's fingerprint
    (see the module doc); InvalidMediaError for a fingerprint of the wrong length."""
    if not isinstance(entry_fingerprint, (bytes, bytearray)) or \
            len(entry_fingerprint) != SIDE * SIDE:
        raise InvalidMediaError(f"an image fingerprint is {SIDE * SIDE} bytes, got "
                                f"{entry_fingerprint!r:.40}")
    q = np.frombuffer(image_fingerprint(query_image), np.uint8).reshape(SIDE, SIDE)
    e = np.frombuffer(bytes(entry_fingerprint), np.uint8).reshape(SIDE, SIDE)
    pairs = [(q, c) for c in _crops(e)] + [(c, e) for c in _crops(q)]
    return float(min(_largest_block(a, b) for a, b in pairs))


def _crops(grey: np.ndarray) -> list[np.ndarray]:
    """Centre crops of :data:`CROPS` (and each shifted by its margin along both axes),
    resized back to :data:`SIDE`."""
    img = Image.fromarray(grey)
    out = []
    for keep in CROPS:
        m = SIDE * (1.0 - keep) / 2
        shifts = [(0, 0)] if m == 0 else [(dx, dy) for dx in (-1, 0, 1) for dy in (-1, 0, 1)]
        for dx, dy in shifts:
            box = (m + dx * m, m + dy * m, SIDE - m + dx * m, SIDE - m + dy * m)
            out.append(np.asarray(img.resize((SIDE, SIDE), Image.Resampling.BILINEAR, box=box)))
    return out


def _largest_block(a: np.ndarray, b: np.ndarray) -> float:
    d = np.abs(_standardised(a) - _standardised(b))
    step = SIDE // BLOCKS
    return float(d.reshape(BLOCKS, step, BLOCKS, step).mean(axis=(1, 3)).max())


def _standardised(grey: np.ndarray) -> np.ndarray:
    """Zero mean, unit spread (plus one grey level, so a flat image stays flat)."""
    x = grey.astype(np.float64)
    return (x - x.mean()) / (x.std() + 1.0)
