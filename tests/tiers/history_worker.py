"""One client of a linearizability run (``test_linearizable.py``): a TieredCache on a shared
store doing random puts, gets and invalidations of a few keys, each appended to a history file
as it completes, with its start and end on the machine's monotonic clock.

Run as ``python history_worker.py <l3 config json> <history file> <name> <seed> <ops>``.
"""

from __future__ import annotations

import json
import sys
import time

import numpy as np

import mmcache

KEYS = 3


def query(key: int) -> mmcache.Query:
    vec = np.random.default_rng(key).standard_normal(16).astype(np.float32)
    return mmcache.Query(text=f"key {key}", embeddings={"text": vec}, scope="tenant")


def main(l3: str, history: str, name: str, seed: str, ops: str) -> None:
    rng = np.random.default_rng(int(seed))
    cache = mmcache.TieredCache({"l2": {"index": "flat"}, "l3": json.loads(l3)})
    with open(history, "a", buffering=1) as out:
        for n in range(int(ops)):
            key, draw = int(rng.integers(KEYS)), rng.random()
            op, value = ("put", f"{name}-{n}") if draw < 0.4 else \
                ("invalidate", None) if draw < 0.5 else ("get", None)
            # the attempt is recorded first: a client killed mid-call leaves a write whose
            # effect is unknown, which readers may still see
            start = time.monotonic()
            out.write(json.dumps({"op": op, "key": key, "value": value, "start": start,
                                  "end": None}) + "\n")
            try:
                if op == "put":
                    acked = cache.put(query(key), value) is not None
                elif op == "invalidate":
                    cache.invalidate(query(key))
                    acked = True
                else:
                    hit = cache.get(query(key))
                    value, acked = (None if hit is None else hit.value), True
            except mmcache.errors.MMCacheError:
                acked = False
            out.write(json.dumps({"op": op, "key": key, "value": value, "start": start,
                                  "end": time.monotonic() if acked else None}) + "\n")
    cache.close()


if __name__ == "__main__":
    main(*sys.argv[1:])
