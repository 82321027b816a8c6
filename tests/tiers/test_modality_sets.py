"""A hit needs the same set of modalities on the query and the entry, in every semantic tier.

Each test runs through ``TieredCache`` with L1 + L2 in memory, with a SQLite L3 alone and
with a Redis L3 alone (the store-backed tiers also after a reopen, which rebuilds their
vector index from the store).
"""

from __future__ import annotations

import itertools
import time
from pathlib import Path
from typing import Any, Iterator

import numpy as np
import pytest

import mmcache
from mmcache.encoders import HashingTestEncoder
from mmcache.lab.testing import near, unit
from mmcache.types import Query

DIM = 16
PHOTO = np.arange(8 * 8 * 3, dtype=np.uint8).reshape(8, 8, 3)
_prefixes = itertools.count()


class Store:
    """Opens caches over one set of tiers; ``views`` checks the writer and a reopened cache."""

    def __init__(self, config: dict[str, Any], persistent: bool) -> None:
        self.config, self.persistent = config, persistent
        self.opened: list[mmcache.TieredCache] = []

    def open(self, **kw: Any) -> mmcache.TieredCache:
        self.opened.append(mmcache.TieredCache(self.config, **kw))
        return self.opened[-1]

    def views(self, writer: mmcache.TieredCache, **kw: Any) -> Iterator[mmcache.TieredCache]:
        """``writer``, then (for a persistent store) a cache reopened on it."""
        yield writer
        if self.persistent:
            writer.close()
            yield self.open(**kw)


@pytest.fixture(params=["l2", "sqlite-l3", "redis-l3"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    only_l3: dict[str, Any] = {"l1": {"enabled": False}, "l2": {"enabled": False}}
    if request.param == "l2":
        config: dict[str, Any] = {"l2": {"index": "flat"}}
    elif request.param == "sqlite-l3":
        config = {**only_l3, "l3": {"backend": "sqlite", "path": str(tmp_path / "l3.db")}}
    else:
        prefix = f"modsets{next(_prefixes)}-{time.monotonic_ns()}"
        config = {**only_l3, "l3": {"backend": "redis", "url": request.getfixturevalue("redis_url"),
                                    "options": {"prefix": prefix}}}
    opened = Store(config, persistent=request.param != "l2")
    yield opened
    for cache in opened.opened:
        cache.close()


@pytest.fixture
def rng() -> np.random.Generator:
    return np.random.default_rng(11)


def test_text_only_query_never_gets_a_text_and_image_answer(store, rng):
    text, image = unit(rng, DIM), unit(rng, DIM)
    writer = store.open()
    writer.put(Query(text="a red dress", image=PHOTO, embeddings={"text": text, "image": image},
                     scope="s"), "the dress in the photo")
    for cache in store.views(writer):
        assert cache.get(Query(text="a red dress", embeddings={"text": text}, scope="s")) is None
        assert cache.get(Query(embeddings={"text": near(rng, text, 0.99)}, scope="s")) is None


def test_text_and_image_query_never_gets_a_text_only_answer(store, rng):
    text, image = unit(rng, DIM), unit(rng, DIM)
    writer = store.open()
    writer.put(Query(text="a red dress", embeddings={"text": text}, scope="s"), "dresses")
    writer.put(Query(embeddings={"image": near(rng, image, 0.99)}, scope="s"), "a photo")
    for cache in store.views(writer):
        assert cache.get(Query(text="a red dress", image=PHOTO,
                               embeddings={"text": text, "image": image}, scope="s")) is None


def test_each_query_gets_the_entry_with_its_own_modality_set(store, rng):
    """Both entries are near the text query; the text+image one is nearer, yet only the
    text-only entry may answer it (and only the text+image entry the text+image query)."""
    text, image = unit(rng, DIM), unit(rng, DIM)
    writer = store.open()
    writer.put(Query(embeddings={"text": near(rng, text, 0.995), "image": image}, scope="s"),
               "with image")
    writer.put(Query(embeddings={"text": near(rng, text, 0.95)}, scope="s"), "text only")
    for cache in store.views(writer):
        hit = cache.get(Query(embeddings={"text": text}, scope="s"))
        assert hit is not None and hit.value == "text only" and set(hit.similarities) == {"text"}
        assert hit.similarity == pytest.approx(0.95, abs=1e-5)
        hit = cache.get(Query(embeddings={"text": text, "image": near(rng, image, 0.97)},
                              scope="s"))
        assert hit is not None and hit.value == "with image"
        assert set(hit.similarities) == {"text", "image"}
        assert hit.similarity == pytest.approx(0.97, abs=1e-5)


def test_an_entry_without_a_vector_for_every_modality_is_exact_only(store):
    """With a text encoder but none for images, a text+image entry has no image vector: it
    must not be indexed as a text-only entry."""
    encoders = {"text": HashingTestEncoder("text", DIM)}
    writer = store.open(encoders=encoders)
    both = Query(text="a red dress", image=PHOTO, scope="s")
    writer.put(both, "the dress in the photo")
    for cache in store.views(writer, encoders=encoders):
        assert cache.get(Query(text="a red dress", scope="s")) is None
        hit = cache.get(both)
        assert hit is not None and hit.value == "the dress in the photo" and hit.similarity == 1.0
