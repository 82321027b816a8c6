"""Test helpers for caches: a snapshot of a cache's stored state, to check that failed calls
change nothing; unit vectors; eviction orders; a private redis-server for a fixture."""

from __future__ import annotations

import contextlib
import copy
from pathlib import Path
from typing import Any, Iterator

import numpy as np
import pytest

from mmcache.cache import TieredCache
from mmcache.errors import StorageError
from mmcache.lab.testing import LocalRedis
from mmcache.tiers.base import Budget


def unit(v: np.ndarray) -> np.ndarray:
    """``v`` scaled to unit length, as float32 (what the cache stores)."""
    return (v / np.linalg.norm(v)).astype(np.float32)


def snapshot(cache: TieredCache) -> Any:
    """Everything observable about a cache's stored state: each tier's entries (with their
    hints) and its policy's eviction order, the guard's Bloom filter, the threshold rule's
    state, the dims and which tiers are covered by a semantic tier above."""
    tiers = {t.name: sorted((e.entry_id, e.scope, repr(e.value), e.created_at, e.expires_at,
                             repr(e.ground_truth), sorted(e.hints.items()), e.question,
                             e.context, None if e.context_vector is None
                             else e.context_vector.tobytes(),
                             tuple(sorted((m, v.tobytes()) for m, v in e.embeddings.items())))
                            for e in t.scan()) for t in cache.tiers}
    orders = {t.name: eviction_order(t._budget) for t in cache.tiers if hasattr(t, "_budget")}
    guard = None if cache.guard is None else cache.guard._bloom.copy()
    return (tiers, orders, cache.usage(), guard, copy.deepcopy(vars(cache.thresholds)),
            dict(cache._dims), dict(cache._covered), list(cache._served.items()))


def eviction_order(budget: Budget) -> list[str | None]:
    """Every key the budget holds, in the order its policy would evict them (on a copy)."""
    budget = copy.deepcopy(budget)
    return [budget.pick_victim() for _ in range(len(budget.sizes))]


@contextlib.contextmanager
def private_redis(folder: Path, timeout_s: float = 10.0) -> Iterator[str]:
    """The URL of a real redis-server (no persistence) in ``folder`` for the block, stopped
    after it; the test asking for it is skipped, with the reason, when none can start."""
    try:
        server = LocalRedis(folder, timeout_s=timeout_s).start()
    except StorageError as exc:
        pytest.skip(f"no local redis-server: {exc}")
    try:
        yield server.url
    finally:
        server.stop()
