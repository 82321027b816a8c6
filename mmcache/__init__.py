"""mmcache: a research workbench for multimodal semantic caching."""

from __future__ import annotations

from mmcache.offline import enforce_offline

enforce_offline()

from mmcache import errors  # noqa: E402
from mmcache.types import Entry, Hit, Query, VideoClip  # noqa: E402

__all__ = ["CacheConfig", "Entry", "Hit", "Query", "TieredCache", "VideoClip", "errors"]

_LAZY = {"TieredCache": ".cache", "CacheConfig": ".config"}


def __getattr__(name: str):
    """Import the cache (faiss, PIL, ...) only when it is first used."""
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name], __name__), name)
    raise AttributeError(f"module 'mmcache' has no attribute {name!r}")
__version__ = "0.1.0"
