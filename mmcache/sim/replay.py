"""Trace replay: simulate eviction policies over a :class:`mmcache.sim.trace.Trace`.

The trace type and its ``oracleGeneral`` reader and writer live in :mod:`mmcache.sim.trace`
and are re-exported here.

``simulate`` follows libCacheSim's counting exactly (``cache_size`` in bytes, no
per-object metadata): a hit changes nothing but the policy's state; a miss is
counted with its bytes; an object larger than the cache, or one the policy does not
admit (S3-FIFO: not smaller than its small queue; LIRS: larger than its HIR share;
Belady-bypass), is not inserted; otherwise the policy evicts until
``used + size <= cache_size`` and then inserts (GDSF ranks the incoming object among
the victims, as libCacheSim inserts it first). On the shipped cloudPhysicsIO trace
this reproduces libCacheSim's own test expectations, counts and bytes, for LRU,
FIFO, CLOCK, LFU, SIEVE, Belady, ARC, LIRS, S3-FIFO, GDSF and LFUDA.

:func:`opt_bounds` brackets the misses of the optimal offline policy (variable sizes:
Belady is then a heuristic, not the optimum) between a lower bound from
:mod:`mmcache.sim.bounds` and the best feasible schedule it finds.

Every registered policy has a compiled kernel (numba, over dense object ids; see
:mod:`mmcache.sim.kernels`) that replays at millions of requests per second and
counts exactly like its online object; a policy without one (or ``use_kernel=False``)
replays through the online object, one Python call per request.

Progress: an online replay shows a progress bar (:func:`mmcache.metrics.progress_bar`, after
two seconds; ``progress=False`` or ``MMCACHE_PROGRESS=0`` silences it) updated once per
:data:`PROGRESS_CHUNK` requests. A compiled-kernel replay shows none: it is one call into the
kernel (millions of requests per second), which a bar could only follow by splitting it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Iterable, Mapping

import numpy as np

from mmcache.errors import ConfigError, TraceFormatError
from mmcache.metrics import progress_bar, progress_enabled
from mmcache.policies import POLICIES, make_policy
from mmcache.policies.admission import admit_miss
from mmcache.sim.kernels import run_kernel
from mmcache.sim.trace import (ORACLE_GENERAL_DTYPE, Trace, make_trace, read_oracle_general,
                               write_oracle_general)


__all__ = ["ORACLE_GENERAL_DTYPE", "SimResult", "Trace", "attention_entropy_proxy",
           "make_trace", "read_oracle_general", "simulate", "write_oracle_general"]


#: The per-request hints simulate() passes on.
REQUEST_HINTS = ("cost", "entropy")
#: Requests an online replay serves between two updates of its progress bar.
PROGRESS_CHUNK = 65_536


@dataclass(frozen=True)
class SimResult:
    """Counts of one replay, as libCacheSim reports them."""

    policy: str
    cache_size: int
    n_req: int
    n_req_byte: int
    miss_cnt: int
    miss_byte: int

    @property
    def miss_ratio(self) -> float:
        """Fraction of requests that missed."""
        return self.miss_cnt / self.n_req

    @property
    def byte_miss_ratio(self) -> float:
        """Fraction of requested bytes that missed."""
        return self.miss_byte / self.n_req_byte

    @property
    def hit_ratio(self) -> float:
        """Fraction of requests that hit."""
        return 1.0 - self.miss_ratio


def simulate(trace: Trace, policy: str = "lru", cache_size: int = 134217728,
             *, use_kernel: bool = True, hints: Mapping[str, Any] | None = None,
             progress: bool | None = None, **params: Any) -> SimResult:
    """Replay ``trace`` through ``policy`` with a cache of ``cache_size`` bytes.

    ``params`` go to the policy (e.g. ``k=2`` for LRU-K). ``hints`` are per-request
    policy hints, one value per request: ``cost`` (miss cost; GDSF, value-per-byte) and
    ``entropy`` (attention entropy; entropy-retention, which gets
    :func:`attention_entropy_proxy` when none is given). Every policy call also carries
    ``now``, the request's time from the trace's ``time`` column (hotness-freshness ages
    by it), and ``next_access``. ``use_kernel=False`` forces the online object even where
    a compiled kernel exists. ``progress=False`` silences the online replay's progress bar
    (see the module; a kernel replay has none).
    Raises :class:`UnknownPolicyError` or :class:`ConfigError` for bad arguments.
    """
    check_trace(trace, "simulate()")
    name = policy_name(policy)
    cache_size = check_cache_size(cache_size)
    policy_obj = make_policy(name, cache_size, **params)  # validates params
    progress_enabled(progress)  # a bad progress argument fails before any replay
    hints = _request_hints(trace, name, hints)
    counts = run_kernel(name, trace, cache_size, params, hints) if use_kernel else None
    if counts is None:
        with progress_bar(trace.n_req, f"replay {name}", unit="req", progress=progress) as bar:
            counts = _replay_online(trace, policy_obj, cache_size, hints, bar.update)
    return SimResult(name, cache_size, trace.n_req, trace.n_req_byte, *counts)


def attention_entropy_proxy(trace: Trace, n_keys: int = 8, concentration: float = 0.1,
                            seed: int = 0) -> np.ndarray:
    """A documented stand-in for per-entry attention entropy, one value per request.

    Replay traces carry no queries, so there is no attention to measure: each object gets
    attention weights over ``n_keys`` keys drawn once from a symmetric
    Dirichlet(``concentration``) (seeded by ``seed``; the same object always gets the
    same weights) and every request for it the entropy ``-sum(a log a)`` (nats) of those
    weights. With the defaults about a fifth of the objects fall below entropy-retention's 0.35
    threshold (peaked, "collapsed" attention) and the rest spread up to log 8. It is
    synthetic; pass measured entropies (e.g. of :mod:`mmcache.studies.collapse`'s attention)
    as ``simulate(..., hints={"entropy": ...})`` where a study has them.
    """
    ids, n_obj = trace.dense_ids()
    alpha = np.random.default_rng(seed).dirichlet(np.full(n_keys, concentration), n_obj)
    logs = np.log(alpha, out=np.zeros_like(alpha), where=alpha > 0)
    return -(alpha * logs).sum(axis=1)[ids]


def check_trace(trace: Any, caller: str) -> None:
    """TraceFormatError unless ``trace`` is a non-empty Trace."""
    if not isinstance(trace, Trace):
        raise TraceFormatError(f"{caller} needs a Trace (see make_trace), got "
                               f"{type(trace).__name__}")
    if trace.n_req == 0:
        raise TraceFormatError(f"{caller} needs a trace with at least one request")


def check_cache_size(cache_size: Any) -> int:
    """``cache_size`` as an int; ConfigError unless it is a positive whole number of bytes."""
    if isinstance(cache_size, bool) or not isinstance(cache_size, (int, np.integer)) \
            or cache_size <= 0:
        raise ConfigError(f"cache_size must be a positive number of bytes, got {cache_size!r}")
    return int(cache_size)


def policy_name(policy: str) -> str:
    """Canonical (lower-case) registry name; UnknownPolicyError for anything else."""
    name = policy.lower() if isinstance(policy, str) else policy
    POLICIES.lookup(name)  # UnknownPolicyError naming the known policies
    return name


def _request_hints(trace: Trace, policy: str,
                   hints: Mapping[str, Any] | None) -> dict[str, np.ndarray]:
    """``hints`` as float arrays of one value per request (ConfigError otherwise), with the
    entropy proxy for entropy-retention when no entropy is given."""
    out = {}
    for name, values in (hints or {}).items():
        if name not in REQUEST_HINTS:
            raise ConfigError(f"unknown replay hint {name!r}; choose from {REQUEST_HINTS}")
        arr = np.asarray(values, dtype=np.float64).reshape(-1)
        if arr.shape[0] != trace.n_req or not np.all(np.isfinite(arr)):
            raise ConfigError(f"hint {name!r} needs one finite value per request "
                              f"({trace.n_req}), got {arr.shape[0]}")
        out[name] = arr
    if policy == "entropy-retention" and "entropy" not in out:
        out["entropy"] = attention_entropy_proxy(trace)
    return out


def _replay_online(trace: Trace, pol: Any, cache_size: int, hints: dict[str, np.ndarray],
                   advance: Callable[[int], Any] = lambda n: None) -> tuple[int, int]:
    """Replay through an online policy object; returns (miss_cnt, miss_byte). ``advance(n)``
    is called after every :data:`PROGRESS_CHUNK` requests (and the last ones) with their count."""
    ids, _ = trace.dense_ids()
    sizes = trace.obj_size.tolist()
    columns = {"next_access": trace.next_access.tolist(), "now": trace.time.tolist(),
               **{name: values.tolist() for name, values in hints.items()}}
    resident: dict[int, int] = {}
    used = miss_cnt = miss_byte = 0

    def overfull(size: int) -> bool:
        return used + size > cache_size

    def keep(key: int, size: int) -> None:
        nonlocal used
        resident[key] = size
        used += size

    def drop(keys: Iterable[int]) -> None:
        nonlocal used
        for victim in keys:
            used -= resident.pop(victim)

    keys = ids.tolist()
    for start in range(0, len(keys), PROGRESS_CHUNK):
        for i, key in enumerate(keys[start:start + PROGRESS_CHUNK], start):
            size = sizes[i]
            hint = {name: values[i] for name, values in columns.items()}
            if key in resident:
                pol.access(key, **hint)
                drop(pol.take_dropped())
                continue
            miss_cnt += 1
            miss_byte += size
            admit_miss(pol, key, size, overfull=overfull, keep=keep, drop=drop,
                       fits=size <= cache_size, free=cache_size - used, **hint)
        advance(min(PROGRESS_CHUNK, len(keys) - start))
    return miss_cnt, miss_byte
