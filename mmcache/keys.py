"""Exact keys: content hashes of normalised text, decoded pixels and decoded samples; scopes.

Two queries share an exact key when their scope is equal, they have the same set
of modalities and every modality has the same content: text after Unicode NFC and
trimming the whitespace around it (nothing that can change the meaning: no NFKC, which
makes "10²" "102", no case folding, which makes "Polish" "polish", no collapsing of
inner whitespace, which changes indented code); images by their decoded pixels with their
mode and size (a lossless re-encoding shares the key, one changed pixel or a JPEG
copy does not); audio by its samples after validation and resampling to 16 kHz
(:func:`mmcache.inputs.audio_16k`); a video clip by its frames' pixels in order and
its track's samples (another frame order, or another track, is another key);
channels given only as embeddings by the bytes of the normalised vector. An exact
key is served at similarity 1 without a threshold, so near-duplicates (a brighter
copy, another recording) are left to the semantic tiers, where they pass through the
threshold rule.
"""

from __future__ import annotations

import io
import unicodedata
from typing import Mapping, Sequence

import numpy as np
import xxhash
from PIL import Image, UnidentifiedImageError

from mmcache.errors import InvalidInputError, InvalidMediaError, MissingScopeError
from mmcache.types import Limits

KEY_VERSION = "k3"
#: The encoded image formats a query may carry (PIL reads some 40 more, EPS among them,
#: which no query needs).
IMAGE_FORMATS = ("PNG", "JPEG", "WEBP", "GIF", "BMP", "TIFF")


def check_scope(scope: object) -> str:
    """The scope if it is a non-empty string, else MissingScopeError."""
    if scope is None or (isinstance(scope, str) and not scope.strip()):
        raise MissingScopeError("every query needs a scope (tenant, model, prompt hash, ...); "
                                "got none")
    if not isinstance(scope, str):
        raise MissingScopeError(f"scope must be a string, got {type(scope).__name__}")
    return check_text(scope, "scope")


def check_text(text: object, what: str = "text") -> str:
    """``text`` if it is a str that UTF-8 can encode (no lone surrogate), else
    InvalidInputError naming ``what``."""
    if not isinstance(text, str):
        raise InvalidInputError(f"{what} must be a str, got {type(text).__name__}")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise InvalidInputError(
            f"{what} holds a lone surrogate {text[exc.start]!r} at index {exc.start}, which no "
            "store can encode: decode the text with errors='replace' or fix its source") from None
    return text


def normalise_text(text: object) -> str:
    """NFC text without the whitespace around it; InvalidInputError if empty, not a str or
    not encodable."""
    norm = unicodedata.normalize("NFC", check_text(text)).strip()
    if not norm:
        raise InvalidInputError("text is empty (after trimming whitespace)")
    return norm


def text_key(text: str) -> str:
    """Hash of the normalised text."""
    return xxhash.xxh3_128_hexdigest(normalise_text(text).encode("utf-8"))


def decode_image(image: object, max_pixels: int = Limits.image_pixels) -> Image.Image:
    """A PIL image from encoded bytes (one of :data:`IMAGE_FORMATS`) or an ``H×W[×C]`` uint8
    array of at most ``max_pixels`` pixels; InvalidMediaError otherwise."""
    if isinstance(image, (bytes, bytearray, memoryview)):
        if not len(image):
            raise InvalidMediaError("image bytes are empty")
        try:
            img = Image.open(io.BytesIO(bytes(image)), formats=IMAGE_FORMATS)
            check_pixels(img.size, max_pixels)  # from the header, before decoding
            img.load()
        except (UnidentifiedImageError, Image.DecompressionBombError, OSError, SyntaxError,
                ValueError) as exc:
            raise InvalidMediaError(f"image bytes cannot be decoded as one of {IMAGE_FORMATS}: "
                                    f"{exc}") from None
        return img
    if isinstance(image, np.ndarray):
        if image.dtype != np.uint8:
            raise InvalidMediaError(f"image array must be uint8, got {image.dtype}")
        if image.ndim not in (2, 3) or image.size == 0 or (
                image.ndim == 3 and image.shape[2] not in (1, 3, 4)):
            raise InvalidMediaError(f"image array must be H×W or H×W×{{1,3,4}}, got {image.shape}")
        check_pixels(image.shape[1::-1], max_pixels)
        return Image.fromarray(image[..., 0] if image.ndim == 3 and image.shape[2] == 1 else image)
    raise InvalidMediaError(f"image must be encoded bytes or a uint8 array, got "
                            f"{type(image).__name__}")


def check_pixels(size: Sequence[int], max_pixels: int = Limits.image_pixels) -> None:
    """InvalidMediaError when an image of ``size`` (width, height) has over ``max_pixels``
    pixels."""
    width, height = size
    if width * height > max_pixels:
        raise InvalidMediaError(f"image is {width}×{height} = {width * height:,} pixels; "
                                f"limits.image_pixels allows {max_pixels:,}: downscale it")


def image_key(image: object, max_pixels: int = Limits.image_pixels) -> str:
    """Hash of the decoded pixels with their mode and size (palette images as RGB/RGBA)."""
    img = decode_image(image, max_pixels)
    if img.mode == "P":  # palette indices are not pixels: the same picture may use another palette
        img = img.convert("RGBA" if "transparency" in img.info else "RGB")
    return _hash_parts(img.mode.encode(), np.asarray(img.size, "<u8").tobytes(), img.tobytes())


def video_key(frames: Sequence[object], max_pixels: int = Limits.image_pixels) -> str:
    """Hash of a clip's keyframes in order, each as :func:`image_key` hashes it;
    InvalidMediaError naming the first frame that does not decode."""
    parts = []
    for i, frame in enumerate(frames):
        try:
            parts.append(image_key(frame, max_pixels).encode())
        except InvalidMediaError as exc:
            raise InvalidMediaError(f"video frame {i}: {exc}") from None
    return _hash_parts(*parts)


def audio_key(audio16k: np.ndarray) -> str:
    """Hash of a validated 16 kHz float32 signal's samples."""
    samples = np.asarray(audio16k, np.float32) + np.float32(0.0)  # -0.0 becomes 0.0
    return _hash_parts(samples.astype("<f4", copy=False).tobytes())


def vector_key(unit_vector: np.ndarray) -> str:
    """Hash of a normalised float32 vector (for modalities given only as embeddings)."""
    return xxhash.xxh3_128_hexdigest(np.ascontiguousarray(unit_vector, np.float32).tobytes())


def exact_key(scope: str, hashes: Mapping[str, str]) -> str:
    """The exact key of a whole query: scope plus every modality's content hash."""
    return _hash_parts(*(part.encode("utf-8") for part in (
        KEY_VERSION, scope, *(f"{m}={hashes[m]}" for m in sorted(hashes)))))


def _hash_parts(*parts: bytes) -> str:
    """128-bit hash of ``parts``, each prefixed by its length so no two splits collide."""
    digest = xxhash.xxh3_128()
    for raw in parts:
        digest.update(len(raw).to_bytes(8, "little"))
        digest.update(raw)
    return digest.hexdigest()
