"""mmcache: a research workbench for multimodal semantic caching."""

from __future__ import annotations

from .offline import enforce_offline

enforce_offline()

from . import errors  # noqa: E402
from .types import Entry, Hit, Query  # noqa: E402

__all__ = ["Entry", "Hit", "Query", "errors"]
__version__ = "0.1.0"
