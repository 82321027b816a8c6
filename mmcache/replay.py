"""Trace replay: read libCacheSim ``oracleGeneral`` traces and simulate eviction policies.

``simulate`` follows libCacheSim's counting exactly (``cache_size`` in bytes, no
per-object metadata): a hit changes nothing but the policy's state; a miss is
counted with its bytes; an object larger than the cache, or one the policy does not
admit (S3-FIFO: not smaller than its small queue; LIRS: larger than its HIR share;
Belady-bypass), is not inserted; otherwise the policy evicts until
``used + size <= cache_size`` and then inserts (GDSF ranks the incoming object among
the victims, as libCacheSim inserts it first). On the shipped cloudPhysicsIO trace
this reproduces libCacheSim's own test expectations, counts and bytes, for LRU,
FIFO, CLOCK, LFU, SIEVE, Belady, ARC, LIRS, S3-FIFO, GDSF and LFUDA.

Policies with a compiled kernel (numba, over dense object ids; see
:mod:`mmcache.policies.kernels`) replay at millions of requests per second; the
others replay through their online object, one Python call per request.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .errors import ConfigError, TraceFormatError, UnknownPolicyError
from .policies import POLICIES, make_policy
from .policies.kernels import run_kernel

#: One ``oracleGeneral`` record: clock time, object id, object size, next access vtime.
ORACLE_GENERAL_DTYPE = np.dtype(
    [("time", "<u4"), ("obj_id", "<u8"), ("obj_size", "<u4"), ("next_access_vtime", "<i8")])


@dataclass(frozen=True, eq=False)
class Trace:
    """A request trace: per-request object id, size, time and next-access index.

    ``next_access`` is the 0-based index of the next request for the same object,
    -1 when there is none (libCacheSim's ``next_access_vtime`` is that index + 1).
    """

    obj_id: np.ndarray
    obj_size: np.ndarray
    time: np.ndarray
    next_access: np.ndarray
    _dense: dict = field(default_factory=dict, repr=False)

    @property
    def n_req(self) -> int:
        """Number of requests."""
        return int(self.obj_id.shape[0])

    @property
    def n_req_byte(self) -> int:
        """Total bytes requested."""
        return int(self.obj_size.sum())

    @property
    def n_obj(self) -> int:
        """Number of distinct objects."""
        return int(self.dense_ids()[1])

    def dense_ids(self) -> tuple[np.ndarray, int]:
        """Object ids renumbered 0..n_obj-1 (int32, computed once) and n_obj."""
        if "ids" not in self._dense:
            uniq, inverse = np.unique(self.obj_id, return_inverse=True)
            self._dense["ids"] = inverse.astype(np.int32).reshape(-1)
            self._dense["n_obj"] = int(uniq.shape[0])
        return self._dense["ids"], self._dense["n_obj"]


def make_trace(obj_id: Any, obj_size: Any, time: Any = None) -> Trace:
    """Build a :class:`Trace` from per-request ids and sizes; computes next accesses.

    ``obj_size`` may be a scalar (every object the same size). Ids must be integers
    in [0, 2**64), sizes integers >= 1; anything else raises :class:`TraceFormatError`.
    """
    ids, sizes = _integers(obj_id, np.uint64, "obj_id"), _integers(obj_size, np.int64, "obj_size")
    try:
        sizes = np.broadcast_to(sizes, ids.shape).copy()
    except ValueError:
        raise TraceFormatError(f"obj_size has {sizes.size} entries for {ids.size} requests") \
            from None
    if ids.shape[0] == 0:
        raise TraceFormatError("a trace needs at least one request")
    if sizes.min() < 1:
        raise TraceFormatError("object sizes must be >= 1 byte")
    times = (np.arange(ids.shape[0], dtype=np.int64) if time is None
             else np.asarray(time, dtype=np.int64).reshape(-1))
    if times.shape != ids.shape:
        raise TraceFormatError(f"time has {times.shape[0]} entries for {ids.shape[0]} requests")
    return Trace(ids, sizes, times, _next_access(ids))


def _integers(values: Any, dtype: type, what: str) -> np.ndarray:
    """``values`` as a flat array of ``dtype`` if they are all integers in its range."""
    arr = np.asarray(values)
    if arr.ndim > 1 or not (arr.dtype.kind in "iu" or (arr.size == 0 and arr.dtype.kind == "f")):
        raise TraceFormatError(f"{what} must be a 1-D sequence of integers, got dtype "
                               f"{arr.dtype} and shape {arr.shape}")
    info = np.iinfo(dtype)
    if arr.size and (int(arr.min()) < info.min or int(arr.max()) > info.max):
        raise TraceFormatError(f"{what} values must lie in [{info.min}, {info.max}]")
    return np.ascontiguousarray(arr, dtype=dtype).reshape(-1)


def _next_access(ids: np.ndarray) -> np.ndarray:
    """0-based index of each request's next request for the same object, -1 if none."""
    order = np.argsort(ids, kind="stable")
    nxt = np.full(ids.shape[0], -1, dtype=np.int64)
    same = ids[order[1:]] == ids[order[:-1]]
    nxt[order[:-1][same]] = order[1:][same]
    return nxt


def read_oracle_general(path: str | os.PathLike) -> Trace:
    """Read a libCacheSim ``oracleGeneral`` trace (uncompressed 24-byte ``<IQIq`` records).

    Raises :class:`TraceFormatError` for a missing, empty, truncated or inconsistent file.
    """
    try:
        raw = np.fromfile(path, dtype=np.uint8)
    except OSError as exc:
        raise TraceFormatError(f"cannot read trace {os.fspath(path)!r}: {exc}") from exc
    size = ORACLE_GENERAL_DTYPE.itemsize
    if raw.shape[0] == 0 or raw.shape[0] % size:
        raise TraceFormatError(
            f"{os.fspath(path)!r} holds {raw.shape[0]} bytes, not a positive multiple of "
            f"the {size}-byte oracleGeneral record")
    rec = raw.view(ORACLE_GENERAL_DTYPE)
    trace = make_trace(rec["obj_id"], rec["obj_size"].astype(np.int64), rec["time"])
    vtime = rec["next_access_vtime"]
    if not np.array_equal(np.where(vtime <= 0, -1, vtime - 1), trace.next_access):
        raise TraceFormatError(
            f"{os.fspath(path)!r}: next_access_vtime does not match the object ids "
            "(not an oracleGeneral trace, or a corrupt one)")
    return trace


def write_oracle_general(trace: Trace, path: str | os.PathLike) -> None:
    """Write ``trace`` as an ``oracleGeneral`` file (readable by libCacheSim and by
    :func:`read_oracle_general`); times and sizes must fit in 32 bits."""
    if trace.obj_size.max() >= 2**32 or trace.time.min() < 0 or trace.time.max() >= 2**32:
        raise TraceFormatError("oracleGeneral stores times and sizes as 32-bit unsigned ints")
    rec = np.empty(trace.n_req, ORACLE_GENERAL_DTYPE)
    rec["time"], rec["obj_id"], rec["obj_size"] = trace.time, trace.obj_id, trace.obj_size
    rec["next_access_vtime"] = np.where(trace.next_access < 0, -1, trace.next_access + 1)
    rec.tofile(path)


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
             *, use_kernel: bool = True, **params: Any) -> SimResult:
    """Replay ``trace`` through ``policy`` with a cache of ``cache_size`` bytes.

    ``params`` go to the policy (e.g. ``k=2`` for LRU-K). ``use_kernel=False``
    forces the online object even where a compiled kernel exists.
    Raises :class:`UnknownPolicyError` or :class:`ConfigError` for bad arguments.
    """
    if not isinstance(trace, Trace):
        raise TraceFormatError(f"simulate() needs a Trace (see make_trace), got "
                               f"{type(trace).__name__}")
    name = _policy_name(policy)
    if isinstance(cache_size, bool) or not isinstance(cache_size, (int, np.integer)) \
            or cache_size <= 0:
        raise ConfigError(f"cache_size must be a positive number of bytes, got {cache_size!r}")
    cache_size = int(cache_size)
    policy_obj = make_policy(name, cache_size, **params)  # validates params
    counts = run_kernel(name, trace, cache_size, params) if use_kernel else None
    if counts is None:
        counts = _replay_online(trace, policy_obj, cache_size)
    return SimResult(name, cache_size, trace.n_req, trace.n_req_byte, *counts)


def _policy_name(policy: str) -> str:
    """Canonical (lower-case) registry name; UnknownPolicyError for anything else."""
    if not isinstance(policy, str) or policy.lower() not in POLICIES:
        raise UnknownPolicyError(
            f"unknown eviction policy {policy!r}; choose one of {sorted(POLICIES)}")
    return policy.lower()


def _replay_online(trace: Trace, pol: Any, cache_size: int) -> tuple[int, int]:
    """Replay through an online policy object; returns (miss_cnt, miss_byte)."""
    ids, _ = trace.dense_ids()
    sizes = trace.obj_size.tolist()
    nxt = trace.next_access.tolist()
    resident: dict[int, int] = {}
    used = miss_cnt = miss_byte = 0
    for i, key in enumerate(ids.tolist()):
        size = sizes[i]
        if key in resident:
            pol.access(key, next_access=nxt[i], now=i)
        else:
            miss_cnt += 1
            miss_byte += size
            admit = pol.on_miss(key, size, next_access=nxt[i], now=i, free=cache_size - used) \
                and size <= cache_size
            for victim in pol.take_dropped():
                used -= resident.pop(victim)
            if not admit:
                continue
            while used + size > cache_size:
                victim = pol.evict()
                if victim is None:  # the incoming key itself lost (GDSF)
                    break
                used -= resident.pop(victim)
                for victim in pol.take_dropped():
                    used -= resident.pop(victim)
            else:
                pol.insert(key, size, next_access=nxt[i], now=i)
                resident[key] = size
                used += size
        for victim in pol.take_dropped():
            used -= resident.pop(victim)
    return miss_cnt, miss_byte
