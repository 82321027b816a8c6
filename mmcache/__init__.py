"""mmcache: a research workbench for multimodal semantic caching.

``import mmcache`` is cheap and has no side effects: every name below is imported on first use
(the cache loads faiss; the Pareto bound loads cvxpy), and no environment variable is set.
"""

from __future__ import annotations

from importlib import import_module
from importlib.metadata import PackageNotFoundError, version
from typing import Any

try:
    __version__ = version("mmcache")
except PackageNotFoundError:  # a source tree that was never installed
    __version__ = "0+unknown"

#: Public name -> the module that defines it.
_PUBLIC = {
    # the cache and its types
    "TieredCache": "mmcache.cache", "CacheConfig": "mmcache.config", "Query": "mmcache.types",
    "Hit": "mmcache.types", "Entry": "mmcache.types", "VideoClip": "mmcache.types",
    # extension points and their registries
    "Registry": "mmcache.registry", "POLICIES": "mmcache.policies",
    "RULES": "mmcache.thresholds", "VERIFIERS": "mmcache.verify", "ENCODERS": "mmcache.encoders",
    "get_encoder": "mmcache.encoders",
    # control and the Pareto bound
    "Scheduler": "mmcache.scheduler", "ParetoBound": "mmcache.pareto",
    # errors
    "errors": "mmcache.errors", "MMCacheError": "mmcache.errors",
}

__all__ = sorted(_PUBLIC) + ["__version__"]


def __getattr__(name: str) -> Any:
    if name not in _PUBLIC:
        raise AttributeError(f"module 'mmcache' has no attribute {name!r}")
    module = import_module(_PUBLIC[name])
    return module if name == "errors" else getattr(module, name)


def __dir__() -> list[str]:
    return __all__
