"""Compiled (numba) replay kernels, one module per policy, keyed by registry name.

Each kernel replays a whole trace over dense object ids and returns
``(miss_cnt, miss_byte)``; it must count exactly like the policy's online object
driven by :func:`mmcache.sim.replay.simulate` (the property tests check that). Kernels are
compiled with :data:`mmcache.sim.jit.array_loop` (no reference counting), so their Python
wrapper allocates every array they use.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from mmcache.sim.trace import Trace

#: Registry name -> (kernel module, fixed keyword arguments); imported on first use.
KERNELS: dict[str, tuple[str, dict[str, Any]]] = {
    "lru": ("lru", {}),
    "fifo": ("lru", {"promote": False}),
    "clock": ("clock", {}),
    "sieve": ("sieve", {}),
    "lfu": ("lfu", {}),
    "gdsf": ("gdsf", {}),
    "lfuda": ("lfuda", {}),
    "arc": ("arc", {}),
    "arc-paper": ("arc", {"paper_step": True}),
    "s3fifo": ("s3fifo", {}),
    "lirs": ("lirs", {}),
    "belady": ("belady", {}),
    "belady-bypass": ("belady", {"bypass": True}),
    "lru-k": ("lruk", {}),
    "hotness-freshness": ("hotness_freshness", {}),
    "value-per-byte": ("value_per_byte", {}),
    "entropy-retention": ("entropy_retention", {}),
}

#: The per-request hints a kernel takes (the others' policies ignore every hint); ``now`` is
#: the trace's time column.
KERNEL_HINTS: dict[str, tuple[str, ...]] = {
    "gdsf": ("cost",), "value-per-byte": ("cost",), "entropy-retention": ("entropy",),
    "hotness-freshness": ("now",)}


def run_kernel(name: str, trace: "Trace", cache_size: int, params: dict[str, Any],
               hints: dict[str, np.ndarray] | None = None) -> tuple[int, int] | None:
    """Replay with the kernel for ``name``, given per-request ``hints``; None when that policy
    has no kernel (or its kernel cannot represent this replay, e.g. LFUDA counts beyond
    int64)."""
    if name not in KERNELS:
        return None
    module, fixed = KERNELS[name]
    ids, n_obj = trace.dense_ids()
    columns = {"now": trace.time, **(hints or {})}
    taken = {h: columns[h] for h in KERNEL_HINTS.get(name, ()) if h in columns}
    replay = import_module(f"{__name__}.{module}").replay
    counts = replay(ids, trace.obj_size, trace.next_access, n_obj, cache_size, **fixed, **params,
                    **taken)
    return None if counts is None else (int(counts[0]), int(counts[1]))
