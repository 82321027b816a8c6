"""Exact fingerprints: normalised-text hash, image perceptual hash, audio fingerprint, scope key.

Two queries share an exact key when their scope is equal and every modality has
the same fingerprint: text after Unicode NFKC, case folding and whitespace
collapsing; images by a 256-bit perceptual hash (``imagehash.phash``: a losslessly
re-encoded copy shares the key, a JPEG copy differs in a few bits and is left to
the semantic tier); audio by a Haitsma–Kalker style
band-energy fingerprint of the 16 kHz signal; modalities given only as
embeddings by the bytes of the normalised vector.
"""

from __future__ import annotations

import io
import re
import unicodedata
from typing import Mapping

import imagehash
import numpy as np
import xxhash
from PIL import Image, UnidentifiedImageError

from .errors import InvalidInputError, InvalidMediaError, MissingScopeError

KEY_VERSION = "k1"
PHASH_SIZE = 16
_SPACE = re.compile(r"\s+")

# audio fingerprint: 128 ms frames every 32 ms at 16 kHz, 16 log-spaced bands in 300–3000 Hz
_FRAME, _HOP = 2048, 512
_BAND_EDGES = np.geomspace(300.0, 3000.0, 17)


def check_scope(scope: object) -> str:
    """The scope if it is a non-empty string, else MissingScopeError."""
    if scope is None or (isinstance(scope, str) and not scope.strip()):
        raise MissingScopeError("every query needs a scope (tenant, model, prompt hash, ...); "
                                "got none")
    if not isinstance(scope, str):
        raise MissingScopeError(f"scope must be a string, got {type(scope).__name__}")
    return scope


def normalise_text(text: object) -> str:
    """NFKC, case-folded, whitespace-collapsed text; InvalidInputError if empty or not a str."""
    if not isinstance(text, str):
        raise InvalidInputError(f"text must be a str, got {type(text).__name__}")
    norm = _SPACE.sub(" ", unicodedata.normalize("NFKC", text).casefold()).strip()
    if not norm:
        raise InvalidInputError("text is empty (after whitespace normalisation)")
    return norm


def text_key(text: str) -> str:
    """Hash of the normalised text."""
    return xxhash.xxh3_128_hexdigest(normalise_text(text).encode("utf-8", "surrogatepass"))


def decode_image(image: object) -> Image.Image:
    """A PIL image from encoded bytes or an ``H×W[×C]`` uint8 array; InvalidMediaError otherwise."""
    if isinstance(image, (bytes, bytearray, memoryview)):
        if not len(image):
            raise InvalidMediaError("image bytes are empty")
        try:
            img = Image.open(io.BytesIO(bytes(image)))
            img.load()
        except (UnidentifiedImageError, Image.DecompressionBombError, OSError, SyntaxError,
                ValueError) as exc:
            raise InvalidMediaError(f"image bytes cannot be decoded: {exc}") from None
        return img
    if isinstance(image, np.ndarray):
        if image.dtype != np.uint8:
            raise InvalidMediaError(f"image array must be uint8, got {image.dtype}")
        if image.ndim not in (2, 3) or image.size == 0 or (
                image.ndim == 3 and image.shape[2] not in (1, 3, 4)):
            raise InvalidMediaError(f"image array must be H×W or H×W×{{1,3,4}}, got {image.shape}")
        return Image.fromarray(image[..., 0] if image.ndim == 3 and image.shape[2] == 1 else image)
    raise InvalidMediaError(f"image must be encoded bytes or a uint8 array, got "
                            f"{type(image).__name__}")


def image_key(image: object) -> str:
    """Perceptual hash (256-bit pHash) of the image."""
    return str(imagehash.phash(decode_image(image), hash_size=PHASH_SIZE))


def audio_key(audio16k: np.ndarray) -> str:
    """Band-energy fingerprint hash of a validated 16 kHz float32 signal."""
    x = audio16k if len(audio16k) >= _FRAME else np.pad(audio16k, (0, _FRAME - len(audio16k)))
    frames = np.lib.stride_tricks.sliding_window_view(x, _FRAME)[::_HOP] * np.hanning(_FRAME)
    power = np.abs(np.fft.rfft(frames, axis=1)) ** 2
    freqs = np.fft.rfftfreq(_FRAME, 1.0 / 16_000)
    bands = np.stack([power[:, (freqs >= lo) & (freqs < hi)].sum(axis=1)
                      for lo, hi in zip(_BAND_EDGES[:-1], _BAND_EDGES[1:])], axis=1)
    energy = np.log(bands + 1e-10)
    spectral = np.diff(energy, axis=1) > 0                      # shape of each frame
    temporal = np.diff(np.diff(energy, axis=1), axis=0) > 0     # change between frames
    digest = xxhash.xxh3_128()
    digest.update(len(frames).to_bytes(8, "little"))
    digest.update(np.packbits(spectral).tobytes())
    digest.update(np.packbits(temporal).tobytes())
    return digest.hexdigest()


def vector_key(unit_vector: np.ndarray) -> str:
    """Hash of a normalised float32 vector (for modalities given only as embeddings)."""
    return xxhash.xxh3_128_hexdigest(np.ascontiguousarray(unit_vector, np.float32).tobytes())


def exact_key(scope: str, fingerprints: Mapping[str, str]) -> str:
    """The exact key of a whole query: scope plus every modality's fingerprint."""
    digest = xxhash.xxh3_128()
    for part in (KEY_VERSION, scope, *(f"{m}={fingerprints[m]}" for m in sorted(fingerprints))):
        raw = part.encode("utf-8", "surrogatepass")
        digest.update(len(raw).to_bytes(8, "little"))
        digest.update(raw)
    return digest.hexdigest()
