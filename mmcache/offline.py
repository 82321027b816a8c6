"""Offline by default: nothing downloads weights or data at run time.

:func:`enforce_offline` sets ``HF_HUB_OFFLINE`` / ``TRANSFORMERS_OFFLINE`` (and friends)
unless ``MMCACHE_ALLOW_DOWNLOADS=1``; the entry points (notebook runs, ``make`` targets, the
tests) and the model loaders call it, importing :mod:`mmcache` does not. Loaders call :func:`missing_asset`
to fail fast with the package that provides what is missing.
"""

from __future__ import annotations

import os

from mmcache.errors import OfflineAssetError

OFFLINE_VARS = ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_DATASETS_OFFLINE")


def downloads_allowed() -> bool:
    """True when the user opted out of offline mode with ``MMCACHE_ALLOW_DOWNLOADS=1``."""
    return os.environ.get("MMCACHE_ALLOW_DOWNLOADS", "") == "1"


def enforce_offline() -> None:
    """Set the hubs' offline switches unless the user opted out."""
    if downloads_allowed():
        return
    for var in OFFLINE_VARS:
        os.environ.setdefault(var, "1")


def missing_asset(asset: str, provider: str) -> OfflineAssetError:
    """The error for an asset that is not installed: names what provides it."""
    return OfflineAssetError(
        f"{asset} is not installed locally and mmcache never downloads at run time; "
        f"install it with {provider} (`make setup` does this)")
