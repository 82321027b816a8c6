"""Property tests: random put/get/tick/evict/reopen sequences against a simple model.

Invariants: no hit ever crosses scopes; a hit carries the latest value put for its
entry; nothing is served after its TTL unless the stale rules allow it (and then
it says so); every tier stays within its capacity; L3 round-trips every entry it
holds across reopen; with exact flat search, a servable entry is always found.
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass

import numpy as np
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

import mmcache
from mmcache.lab.testing import FakeClock, near
from mmcache.types import Query

DIM = 16
SCOPES = ("tenant-a", "tenant-b")
# orthonormal base vectors: cos = 0 between any two, so a query at cos 0.97 to one
# is a δ-neighbour (δ = 0.1) of that one only
BASE = np.linalg.qr(np.random.default_rng(0).standard_normal((DIM, DIM)))[0][:3].astype(np.float32)
SWR, SIE = 2.0, 6.0
CAPS = {"l1": (3, 230), "l2": (4, None), "l3": (None, None)}


@dataclass
class Stored:
    entry_id: str
    value: int
    expires_at: float | None
    durable: bool = True      # still in L3 (never evicted from it)


class CacheModel(RuleBasedStateMachine):
    """Drives a real TieredCache (L1 + L2 + SQLite L3) and a dictionary model side by side."""

    index = "flat"

    def __init__(self) -> None:
        super().__init__()
        self.tmp = tempfile.TemporaryDirectory()
        self.clock = FakeClock()
        self.config = {
            "l1": {"max_entries": CAPS["l1"][0], "max_bytes": CAPS["l1"][1]},
            "l2": {"max_entries": CAPS["l2"][0], "index": self.index, "ann_min_size": 3},
            "l3": {"backend": "sqlite", "path": f"{self.tmp.name}/l3.db"},
            "thresholds": {"delta": {"text": 0.1}},
            "freshness": {"stale_while_revalidate": SWR, "stale_if_error": SIE}}
        self.cache = mmcache.TieredCache(self.config, clock=self.clock)
        self.model: dict[tuple[str, int], Stored] = {}   # (scope, base vector) -> entry

    def teardown(self) -> None:
        self.cache.close()
        self.tmp.cleanup()

    @rule(scope=st.sampled_from(SCOPES), base=st.integers(0, len(BASE) - 1),
          value=st.integers(-10**6, 10**6), ttl=st.sampled_from([None, 1.0, 4.0]))
    def put(self, scope, base, value, ttl):
        eid = self.cache.put(Query(embeddings={"text": BASE[base]}, scope=scope), value, ttl=ttl)
        self.model[(scope, base)] = Stored(eid, value, None if ttl is None else self.clock() + ttl)

    @rule(scope=st.sampled_from(SCOPES), base=st.integers(0, len(BASE) - 1),
          exact=st.booleans(), origin_failed=st.booleans(), seed=st.integers(0, 2**16))
    def get(self, scope, base, exact, origin_failed, seed):
        vec = BASE[base] if exact else near(np.random.default_rng(seed), BASE[base], 0.97)
        hit = self.cache.get(Query(embeddings={"text": vec}, scope=scope),
                             origin_failed=origin_failed)
        now = self.clock()
        stored = self.model.get((scope, base))
        if hit is not None:
            assert stored is not None and hit.entry_id == stored.entry_id, \
                "hit is not this scope's entry for this vector"
            assert hit.value == stored.value
            assert hit.freshness == self._freshness(stored, now, origin_failed)
        elif self.index == "flat" and stored is not None and stored.durable:
            assert self._freshness(stored, now, origin_failed) is None, \
                "a servable entry was not found"
        if stored is not None and stored.expires_at is not None and \
                now - stored.expires_at >= max(SWR, SIE):
            del self.model[(scope, base)]   # the cache purges entries past every window

    @rule(seconds=st.sampled_from([0.5, 2.0, 5.0]))
    def tick(self, seconds):
        self.clock.advance(seconds)

    @rule(tier=st.sampled_from(["l1", "l2", "l3"]))
    def evict(self, tier):
        victim = self.cache.evict(tier)
        for stored in self.model.values():
            if tier == "l3" and stored.entry_id == victim:
                stored.durable = False

    @precondition(lambda self: self.model)
    @rule()
    def reopen(self):
        self.cache.close()
        self.cache = mmcache.TieredCache(self.config, clock=self.clock)
        l3 = self.cache.tier("l3")
        now = self.clock()
        for key, stored in list(self.model.items()):   # L3 sweeps what is past every window
            if stored.expires_at is not None and now - stored.expires_at >= max(SWR, SIE):
                del self.model[key]
        for (scope, base), stored in self.model.items():
            got = l3.get(scope, stored.entry_id)
            if stored.durable:
                assert got is not None and got.value == stored.value
                assert got.expires_at == stored.expires_at
                assert np.array_equal(got.embeddings["text"], BASE[base])
            else:
                assert got is None
        assert l3.integrity_check() == "ok"

    @invariant()
    def within_capacity(self):
        for name, (max_entries, max_bytes) in CAPS.items():
            entries, nbytes = self.cache.usage()[name]
            assert max_entries is None or entries <= max_entries
            assert max_bytes is None or nbytes <= max_bytes

    @staticmethod
    def _freshness(stored: Stored, now: float, origin_failed: bool) -> str | None:
        if stored.expires_at is None or now < stored.expires_at:
            return "fresh"
        age = now - stored.expires_at
        if age < SWR:
            return "stale-while-revalidate"
        if origin_failed and age < SIE:
            return "stale-if-error"
        return None


class CacheModelWithANN(CacheModel):
    """The same safety properties with the default auto index switched to HNSW early."""

    index = "auto"


CacheModel.TestCase.settings = settings(max_examples=60, stateful_step_count=50, deadline=None)
CacheModelWithANN.TestCase.settings = settings(max_examples=20, stateful_step_count=50,
                                               deadline=None)
TestCacheModel = CacheModel.TestCase
TestCacheModelWithANN = CacheModelWithANN.TestCase
