"""Snapshot of a cache's stored state, to check that failed calls change nothing."""

from __future__ import annotations

from typing import Any

from mmcache.cache import TieredCache


def snapshot(cache: TieredCache) -> Any:
    """Everything observable about a cache's stored state."""
    tiers = {t.name: sorted((e.entry_id, e.scope, repr(e.value), e.expires_at,
                             tuple(sorted((m, v.tobytes()) for m, v in e.embeddings.items())))
                            for e in t.scan()) for t in cache.tiers}
    return tiers, cache.usage(), dict(cache._dims)
