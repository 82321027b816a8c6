"""A sweep point over a shared Redis L3, for ``test_shared_l3_sweep.py``.

It lives next to the tests (pytest puts this folder on ``sys.path`` while collecting,
before the sweep's worker server starts), so the workers import it as ``shared_l3_point``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

import mmcache
from mmcache.lab.testing import near, unit

#: The same questions (and vectors) in every scope, so only the scope tells entries apart.
QUESTIONS = 5
DIM = 32


def probe(url: str, prefix: str, cluster: bool, scope: str, write: bool) -> dict[str, Any]:
    """Open a TieredCache on the Redis L3 at ``url`` in ``scope``; with ``write``, put every
    question's answer ``"<scope>:<i>"``; then look each up by its exact text and by a
    paraphrase (a nearby vector). Counts the answers of this scope, of another, and misses."""
    config = {"l3": {"backend": "redis", "url": url,
                     "options": {"prefix": prefix, "cluster": cluster}}}
    answers = {"own": 0, "foreign": 0, "missing": 0}
    with mmcache.TieredCache(config) as cache:
        for i in range(QUESTIONS):
            vec = unit(np.random.default_rng(i), DIM)
            if write:
                cache.put(mmcache.Query(text=f"question {i}", embeddings={"text": vec},
                                        scope=scope), f"{scope}:{i}")
            paraphrase = near(np.random.default_rng(100 + i), vec, 0.98)
            for text, v in ((f"question {i}", vec), (f"put another way, {i}", paraphrase)):
                hit = cache.get(mmcache.Query(text=text, embeddings={"text": v}, scope=scope))
                kind = "missing" if hit is None else \
                    "own" if hit.value == f"{scope}:{i}" else "foreign"
                answers[kind] += 1
    return answers
