"""Encoders for text, images and speech (offline), projection heads, embedding store."""

from __future__ import annotations

from .base import Encoder, HashingTestEncoder

__all__ = ["Encoder", "HashingTestEncoder"]
