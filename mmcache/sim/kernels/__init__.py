"""Compiled (numba) replay kernels, one module per policy, keyed by registry name.

Each kernel replays a whole trace over dense object ids and returns
``(miss_cnt, miss_byte)``; it must count exactly like the policy's online object
driven by :func:`mmcache.sim.replay.simulate` (the property tests check that). Kernels are
compiled with :data:`mmcache.sim.jit.array_loop` (no reference counting), so their Python
wrapper allocates every array they use.

:data:`KERNELS` has the registry shape of every extension point
(:class:`mmcache.registry.Registry`): a name maps to a factory that imports the kernel module
on first use and returns its ``replay`` with the kernel's fixed keyword arguments (FIFO is
the LRU kernel without promotion).
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any, Callable

import numpy as np

from mmcache.errors import ConfigError
from mmcache.registry import Registry

if TYPE_CHECKING:
    from mmcache.sim.trace import Trace

def kernel(module: str, **fixed: Any) -> Callable[[], Callable[..., Any]]:
    """The factory of the kernel in ``module`` (of this package) called with ``fixed``: it
    imports the module when called and returns ``replay(*args, **kw)`` with ``fixed`` added."""
    def factory() -> Callable[..., Any]:
        replay = import_module(f"{__name__}.{module}").replay
        return lambda *args, **kw: replay(*args, **fixed, **kw)
    return factory


#: Policy registry name -> kernel factory (the module is imported on first use).
KERNELS: Registry[Callable[[], Callable[..., Any]]] = Registry("replay kernel", {
    "lru": kernel("lru"),
    "fifo": kernel("lru", promote=False),
    "clock": kernel("clock"),
    "sieve": kernel("sieve"),
    "lfu": kernel("lfu"),
    "gdsf": kernel("gdsf"),
    "lfuda": kernel("lfuda"),
    "arc": kernel("arc"),
    "arc-paper": kernel("arc", paper_step=True),
    "s3fifo": kernel("s3fifo"),
    "lirs": kernel("lirs"),
    "belady": kernel("belady"),
    "belady-bypass": kernel("belady", bypass=True),
    "lru-k": kernel("lruk"),
    "hotness-freshness": kernel("hotness_freshness"),
    "value-per-byte": kernel("value_per_byte"),
    "entropy-retention": kernel("entropy_retention"),
}, error=ConfigError)

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
    ids, n_obj = trace.dense_ids()
    columns = {"now": trace.time, **(hints or {})}
    taken = {h: columns[h] for h in KERNEL_HINTS.get(name, ()) if h in columns}
    replay = KERNELS[name]()
    counts = replay(ids, trace.obj_size, trace.next_access, n_obj, cache_size, **params, **taken)
    return None if counts is None else (int(counts[0]), int(counts[1]))
