"""Several writer and reader processes on one shared SQLite L3 store.

Writers put their own keys and keep overwriting a few hot keys that every writer
shares; each put is acknowledged over a pipe after it returned. Readers look keys
up, exactly and by a nearby embedding, while the writers run. Checked: no process
raises; every value a reader sees is whole (its checksum matches, it belongs to
the key asked for, and a semantic hit's similarity is that of the stored vector
the value names); afterwards every acknowledged write is readable (own keys with
the acknowledged value, hot keys with one of the acknowledged values).
"""

from __future__ import annotations

import hashlib
import multiprocessing as mp
import random
import traceback
from pathlib import Path

import numpy as np

import mmcache

WRITERS, READERS = 3, 2
OWN_KEYS, HOT_KEYS, HOT_UPDATES = 100, 4, 100
#: Rounds of reads each reader makes at least, however late it starts.
MIN_READER_ROUNDS = 20
DIM = 32
SCOPE = "shared-tenant"


def config(path: str) -> dict:
    return {"l1": {"enabled": False}, "l2": {"enabled": False},
            "l3": {"backend": "sqlite", "path": path, "shared": True}}


def key_vector(key: str) -> np.ndarray:
    seed = int.from_bytes(hashlib.sha256(key.encode()).digest()[:8], "little")
    vec = np.random.default_rng(seed).standard_normal(DIM).astype(np.float32)
    return vec / np.linalg.norm(vec)


def key_query(key: str, vector: np.ndarray | None = None) -> mmcache.Query:
    return mmcache.Query(text=key, embeddings={"text": key_vector(key) if vector is None
                                               else vector}, scope=SCOPE)


def make_value(key: str, writer: int, version: int) -> dict:
    pad = "p" * ((writer * 31 + version * 7) % 200)
    return {"key": key, "writer": writer, "version": version, "pad": pad,
            "check": checksum(key, writer, version, pad)}


def checksum(key: str, writer: int, version: int, pad: str) -> str:
    return hashlib.sha256(f"{key}|{writer}|{version}|{pad}".encode()).hexdigest()


def whole(value: object, key: str | None) -> bool:
    """Whether a value read back is one that some writer wrote whole (for ``key``)."""
    return isinstance(value, dict) and (key is None or value.get("key") == key) and \
        value.get("check") == checksum(value["key"], value["writer"], value["version"],
                                       value["pad"])


def writer(path: str, w: int, conn) -> None:
    try:
        cache = mmcache.TieredCache(config(path))
        plan = [f"own-{w}-{i}" for i in range(OWN_KEYS)] + \
            [f"hot-{i % HOT_KEYS}" for i in range(HOT_UPDATES)]
        random.Random(w).shuffle(plan)
        for version, key in enumerate(plan):
            value = make_value(key, w, version)
            cache.put(key_query(key), value)
            conn.send(("ack", key, value))
        cache.close()
        conn.send(("done", None, None))
    except Exception:  # reported to the parent, which fails the test with it
        conn.send(("error", traceback.format_exc(), None))


def reader(path: str, r: int, stop, conn) -> None:
    try:
        cache = mmcache.TieredCache(config(path))
        rng = random.Random(100 + r)
        seen = bad = rounds = 0
        # a reader started late (a loaded machine) still reads once the writers are done
        while not stop.is_set() or rounds < MIN_READER_ROUNDS:
            rounds += 1
            key = rng.choice([f"own-{rng.randrange(WRITERS)}-{rng.randrange(OWN_KEYS)}",
                              f"hot-{rng.randrange(HOT_KEYS)}"])
            hit = cache.get(key_query(key))
            if hit is not None:
                seen += 1
                bad += not whole(hit.value, key)
            noisy = key_vector(key) + 0.05 * key_vector(f"noise-{rng.random()}")
            hit = cache.get(key_query(f"paraphrase of {key}", noisy))
            if hit is not None:
                seen += 1
                stored = key_vector(hit.value["key"]) if whole(hit.value, None) else None
                unit = noisy / np.linalg.norm(noisy)
                bad += stored is None or abs(float(stored @ unit) - hit.similarity) > 1e-4
        cache.close()
        conn.send(("read", seen, bad))
    except Exception:
        conn.send(("error", traceback.format_exc(), None))


def test_writers_and_readers_share_one_store(tmp_path: Path) -> None:
    ctx = mp.get_context("forkserver")
    ctx.set_forkserver_preload(["mmcache.cache", "mmcache.tiers.sqlite"])
    path = str(tmp_path / "shared.db")
    mmcache.TieredCache(config(path)).close()  # create the schema once
    stop = ctx.Event()
    pipes, procs = [], []
    for i in range(WRITERS + READERS):
        receiver, sender = ctx.Pipe(duplex=False)
        args = (path, i, sender) if i < WRITERS else (path, i, stop, sender)
        procs.append(ctx.Process(target=writer if i < WRITERS else reader, args=args))
        procs[-1].start()
        sender.close()
        pipes.append(receiver)

    acked: dict[str, list[dict]] = {}
    for receiver in pipes[:WRITERS]:
        kind, key, value = receiver.recv()
        while kind == "ack":
            acked.setdefault(key, []).append(value)
            kind, key, value = receiver.recv()
        assert kind == "done", f"a writer failed:\n{key}"
    stop.set()
    reads = [receiver.recv() for receiver in pipes[WRITERS:]]
    for proc in procs:
        proc.join(30)
        assert proc.exitcode == 0
    for kind, seen, bad in reads:
        assert kind == "read", f"a reader failed:\n{seen}"
        assert bad == 0, f"a reader saw {bad} torn or mismatched entries"
    assert sum(seen for _, seen, _ in reads) > 0, "readers never saw an entry"

    assert len(acked) == WRITERS * OWN_KEYS + HOT_KEYS
    cache = mmcache.TieredCache(config(path))
    try:
        for key, values in acked.items():
            hit = cache.get(key_query(key))
            assert hit is not None, f"acknowledged write of {key} was lost"
            if key.startswith("own-"):
                assert hit.value == values[-1]
            else:
                assert hit.value in values
        assert cache.tier("l3").integrity_check() == "ok"
    finally:
        cache.close()
