"""One process of ``test_power_loss.py``: puts, overwrites and invalidations into a TieredCache
over a SQLite L3 while ``powerloss_shim.c`` traces every write and sync of its files.

Run under ``LD_PRELOAD=<shim>`` with ``POWERLOSS_DIR`` (the traced folder, holding the store) and
``POWERLOSS_TRACE`` (the trace file, outside it) as ``python power_loss_worker.py <db path>
<synchronous> <operations> <acks file>``. After each operation the cache acknowledged (a put
that returned an entry id, an invalidation that returned) it appends ``<operation index> <trace
size>`` to the acks file, which is outside the traced folder, and flushes it: the trace size
says which of the traced writes came before the acknowledgement.
"""

from __future__ import annotations

import os
import sys

import numpy as np

import mmcache

#: Every this many operations one overwrites an earlier key, and every INVALIDATE_EVERY one
#: invalidates one.
OVERWRITE_EVERY, INVALIDATE_EVERY = 5, 11
#: Characters a value is padded to, so that puts fill pages and the WAL reaches checkpoints.
VALUE_CHARS = 1200


def query(key: int) -> mmcache.Query:
    vec = np.random.default_rng(key).standard_normal(16).astype(np.float32)
    return mmcache.Query(text=f"question {key}", embeddings={"text": vec}, scope="tenant")


def operations(n: int) -> list[tuple[str, int, str | None]]:
    """The run's ``(kind, key, value)`` operations: ``put`` of a new key, of an earlier key
    (an overwrite), or ``invalidate`` of an earlier key (value None)."""
    ops: list[tuple[str, int, str | None]] = []
    for i in range(n):
        if i % INVALIDATE_EVERY == INVALIDATE_EVERY - 1:
            ops.append(("invalidate", i - 7, None))
        else:
            key = i - 3 if i % OVERWRITE_EVERY == OVERWRITE_EVERY - 1 else i
            ops.append(("put", key, f"answer {key} of operation {i} ".ljust(VALUE_CHARS, ".")))
    return ops


def main(path: str, synchronous: str, n: str, acks: str) -> None:
    cache = mmcache.TieredCache({"l2": {"index": "flat"},
                                 "l3": {"backend": "sqlite", "path": path,
                                        "synchronous": synchronous}})
    trace = os.environ["POWERLOSS_TRACE"]
    with open(acks, "w") as out:
        for i, (kind, key, value) in enumerate(operations(int(n))):
            if kind == "put":
                acknowledged = cache.put(query(key), value) is not None
            else:
                cache.invalidate(query(key))
                acknowledged = True
            if acknowledged:
                out.write(f"{i} {os.path.getsize(trace)}\n")
                out.flush()
    cache.close()


if __name__ == "__main__":
    main(*sys.argv[1:])
