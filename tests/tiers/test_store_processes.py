"""Real processes on one shared L3 (a SQLite file with ``shared: true``, a Redis server and
a Redis Cluster).

A hypothesis state machine drives worker processes over pipes; each worker holds one
TieredCache per backend (private L1 and L2, the shared L3, the Bloom guard on) on a
fake clock whose time the test sends with every command. Any worker puts, overwrites,
invalidates, looks keys up exactly and searches for them by a nearby vector; the
answers of every backend must equal a model: a dict of key -> (value, expiry).
"""

from __future__ import annotations

import itertools
import multiprocessing as mp
import time
import traceback
from typing import Any, Iterator

import numpy as np
import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, rule, run_state_machine_as_test

import mmcache
from mmcache.lab.testing import FakeClock, near, started_together, unit

WORKERS = 2
KEYS = 5
DIM = 32
SCOPE = "tenant"
TTL = 100.0  # fake seconds; far below the real seconds a Redis EXPIRE would take to fire
_stores = itertools.count()


def key_vector(key: int) -> np.ndarray:
    return unit(np.random.default_rng(1000 + key), DIM)


def exact_query(key: int) -> mmcache.Query:
    return mmcache.Query(text=f"question {key}", embeddings={"text": key_vector(key)},
                         scope=SCOPE)


def paraphrase(key: int, nonce: int) -> mmcache.Query:
    vec = near(np.random.default_rng(nonce), key_vector(key), 0.98)
    return mmcache.Query(text=f"paraphrase {nonce} of {key}", embeddings={"text": vec},
                         scope=SCOPE)


def answer(hit: mmcache.Hit | None) -> Any:
    return None if hit is None else hit.value


def worker(conn) -> None:
    """Serve commands ``(name, now, args)`` until ``("stop", ...)``; reply ``(ok, result)``."""
    clock, caches = FakeClock(), {}
    while True:
        name, now, args = conn.recv()
        try:
            clock.now = now
            if name == "stop":
                break
            if name == "open":
                caches = {b: mmcache.TieredCache(cfg, clock=clock) for b, cfg in args[0].items()}
                result: Any = None
            elif name == "close":
                for cache in caches.values():
                    cache.close()
                caches, result = {}, None
            else:
                result = {b: run(cache, name, args) for b, cache in caches.items()}
            conn.send((True, result))
        except Exception:  # reported to the test, which fails with it
            conn.send((False, traceback.format_exc()))


def run(cache: mmcache.TieredCache, name: str, args: tuple) -> Any:
    if name == "put":
        key, value, ttl = args
        cache.put(exact_query(key), value, ttl=ttl)
        return None
    if name == "invalidate":
        cache.invalidate(exact_query(args[0]))
        return None
    if name == "get":
        return answer(cache.get(exact_query(args[0])))
    return answer(cache.get(paraphrase(*args)))  # "search"


@pytest.fixture(scope="module")
def workers() -> Iterator[list]:
    ctx = mp.get_context("forkserver")
    ctx.set_forkserver_preload(["mmcache.cache", "mmcache.tiers.sqlite", "mmcache.tiers.redis"])
    pipes, procs = [], []
    for _ in range(WORKERS):
        mine, theirs = ctx.Pipe()
        procs.append(ctx.Process(target=worker, args=(theirs,), daemon=True))
        procs[-1].start()
        theirs.close()
        pipes.append(mine)
    yield pipes
    for pipe in pipes:
        pipe.send(("stop", 0.0, None))
    for proc in procs:
        proc.join(10)
        if proc.exitcode is None:
            proc.kill()


BACKENDS = ("sqlite", "redis", "redis-cluster")


def test_processes_on_one_shared_store_behave_as_one_cache(workers, redis_url, redis_cluster_url,
                                                           tmp_path) -> None:
    class OneCache(RuleBasedStateMachine):
        """Every worker's answers equal the model's, on every backend."""

        def __init__(self) -> None:
            super().__init__()
            self.now = 1000.0
            self.model: dict[int, tuple[str, float | None]] = {}
            self.steps = itertools.count()

        def send(self, w: int, name: str, *args: Any) -> Any:
            workers[w].send((name, self.now, args))
            ok, result = workers[w].recv()
            assert ok, f"worker {w} failed:\n{result}"
            return result

        def expected(self, key: int) -> str | None:
            value, expires = self.model.get(key, (None, None))
            return value if expires is None or self.now < expires else None

        @initialize()
        def open_caches(self) -> None:
            n = next(_stores)
            guard = {"expected_items": 1000}
            configs = {
                "sqlite": {"guard": guard, "l3": {"backend": "sqlite", "shared": True,
                                                  "path": str(tmp_path / f"store{n}.db")}},
                "redis": {"guard": guard, "l3": {"backend": "redis", "url": redis_url,
                                                 "options": {"prefix": f"mp{n}-{time.time_ns()}"}}},
                "redis-cluster": {"guard": guard, "l3": {
                    "backend": "redis", "url": redis_cluster_url,
                    "options": {"prefix": f"mpc{n}-{time.time_ns()}", "cluster": True}}},
            }
            for w in range(WORKERS):
                self.send(w, "open", configs)

        @rule(w=st.integers(0, WORKERS - 1), key=st.integers(0, KEYS - 1),
              ttl=st.sampled_from([None, TTL]))
        def put(self, w: int, key: int, ttl: float | None) -> None:
            value = f"v{next(self.steps)} from {w}"
            self.send(w, "put", key, value, ttl)
            self.model[key] = (value, None if ttl is None else self.now + ttl)

        @rule(w=st.integers(0, WORKERS - 1), key=st.integers(0, KEYS - 1))
        def invalidate(self, w: int, key: int) -> None:
            self.send(w, "invalidate", key)
            self.model.pop(key, None)

        @rule(w=st.integers(0, WORKERS - 1), key=st.integers(0, KEYS - 1))
        def get(self, w: int, key: int) -> None:
            expected = self.expected(key)
            assert self.send(w, "get", key) == dict.fromkeys(BACKENDS, expected)

        @rule(w=st.integers(0, WORKERS - 1), key=st.integers(0, KEYS - 1))
        def search(self, w: int, key: int) -> None:
            expected = self.expected(key)
            got = self.send(w, "search", key, next(self.steps))
            assert got == dict.fromkeys(BACKENDS, expected)

        @rule(seconds=st.sampled_from([30.0, 60.0, 120.0]))
        def advance(self, seconds: float) -> None:
            self.now += seconds

        def teardown(self) -> None:
            for w in range(WORKERS):
                self.send(w, "close")

    run_state_machine_as_test(OneCache, settings=settings(
        max_examples=30, stateful_step_count=25, deadline=None,
        suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow]))


def opener(path: str, start, conn) -> None:
    """Open the shared store at ``path`` once ``start`` is set; report the error, if any."""
    start.wait()
    try:
        mmcache.TieredCache({"l3": {"backend": "sqlite", "path": path, "shared": True}}).close()
        conn.send(None)
    except Exception as exc:
        conn.send(repr(exc))


def test_processes_opening_one_new_shared_store_together_all_open(tmp_path) -> None:
    ctx = mp.get_context("forkserver")
    ctx.set_forkserver_preload(["mmcache.cache", "mmcache.tiers.sqlite"])
    for round_no in range(4):
        path = str(tmp_path / f"fresh{round_no}.db")
        errors = started_together(ctx, opener, [(path,)] * 4)
        assert errors == [None] * 4
