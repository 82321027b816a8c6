"""One process of ``test_disk_faults.py``: puts into a TieredCache over a SQLite L3 while libfiu
fails the process's disk writes and syncs at random, then puts again once they answer.

Run under ``fiu-run -x`` as ``python disk_fault_worker.py <db path> <puts> <probability>
<result json>``. It enables the faults on itself through ``fiu-ctrl`` once the cache is open
(so opening is not what fails) and writes ``{"acked": [...], "refused": n, "untyped": [...],
"after": acked?}`` to the result file.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np

import mmcache

#: The POSIX calls SQLite writes and syncs its database and WAL through.
FAULTS = ("posix/io/rw/pwrite", "posix/io/sync/fsync", "posix/io/sync/fdatasync")


def query(i: int) -> mmcache.Query:
    vec = np.random.default_rng(i).standard_normal(16).astype(np.float32)
    return mmcache.Query(text=f"question {i}", embeddings={"text": vec}, scope="tenant")


def control(command: str) -> None:
    """Send a libfiu control command to this process (fiu-ctrl itself runs without faults)."""
    env = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}
    subprocess.run(["fiu-ctrl", "-c", command, str(os.getpid())], env=env, check=True)


def main(path: str, puts: str, probability: str, result: str) -> None:
    cache = mmcache.TieredCache({"l2": {"index": "flat"},
                                 "l3": {"backend": "sqlite", "path": path}})
    acked, refused, untyped = [], 0, []
    for name in FAULTS:
        control(f"enable_random name={name},probability={probability}")
    for i in range(int(puts)):
        try:
            if cache.put(query(i), f"answer {i}") is not None:
                acked.append(i)
            else:
                refused += 1
        except mmcache.errors.MMCacheError:
            refused += 1
        except Exception as exc:  # noqa: BLE001 - what the test counts as escaping untyped
            untyped.append(repr(exc))
    for name in FAULTS:
        control(f"disable name={name}")
    after = cache.put(query(int(puts)), f"answer {puts}") is not None
    cache.close()
    with open(result, "w") as out:
        json.dump({"acked": acked, "refused": refused, "untyped": untyped, "after": after}, out)


if __name__ == "__main__":
    main(*sys.argv[1:])
