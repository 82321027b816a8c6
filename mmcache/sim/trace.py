"""The request-trace type and its readers and writers (libCacheSim ``oracleGeneral``; a CSV
of your own requests).

A :class:`Trace` holds plain per-request arrays (object id, size, time, next-access
index); replay kernels take those arrays, not the object.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from mmcache.errors import TraceFormatError

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
        """Object ids renumbered 0..n_obj-1 in order of first request (int32, computed once)
        and n_obj."""
        if "ids" not in self._dense:
            from mmcache.sim.dense import dense_ids  # numba: compiled on first use
            ids, n_obj = dense_ids(self.obj_id)
            self._dense["ids"], self._dense["n_obj"] = ids, int(n_obj)
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


def read_csv_trace(path: str | os.PathLike, *, obj_id: str = "obj_id",
                   obj_size: str | None = "obj_size", time: str | None = None,
                   default_size: int = 1) -> Trace:
    """A :class:`Trace` from a CSV file with a header: one request per row, in order.

    ``obj_id`` names the key column (integers are kept; any other keys, such as URLs or
    prompt hashes, are numbered in order of first request); ``obj_size`` the size column
    (None: every object ``default_size`` bytes); ``time`` an optional integer clock column.
    Raises :class:`TraceFormatError` for a missing file or column, or bad values.
    """
    import pandas as pd  # deferred: only CSV traces need it

    wanted = [c for c in (obj_id, obj_size, time) if c is not None]
    try:
        table = pd.read_csv(path, usecols=lambda c: c in wanted)
    except (OSError, ValueError, pd.errors.ParserError) as exc:
        raise TraceFormatError(f"cannot read CSV trace {os.fspath(path)!r}: {exc}") from None
    missing = [c for c in wanted if c not in table.columns]
    if missing:
        raise TraceFormatError(f"{os.fspath(path)!r} has no column {missing}; name the columns "
                               "with obj_id=, obj_size= and time=")
    ids = table[obj_id]
    if ids.dtype.kind not in "iu":
        ids = pd.factorize(ids.astype(str))[0]
    sizes = default_size if obj_size is None else table[obj_size].to_numpy()
    return make_trace(np.asarray(ids), sizes, None if time is None else table[time].to_numpy())


def write_oracle_general(trace: Trace, path: str | os.PathLike) -> None:
    """Write ``trace`` as an ``oracleGeneral`` file (readable by libCacheSim and by
    :func:`read_oracle_general`); times and sizes must fit in 32 bits."""
    if trace.obj_size.max() >= 2**32 or trace.time.min() < 0 or trace.time.max() >= 2**32:
        raise TraceFormatError("oracleGeneral stores times and sizes as 32-bit unsigned ints")
    rec = np.empty(trace.n_req, ORACLE_GENERAL_DTYPE)
    rec["time"], rec["obj_id"], rec["obj_size"] = trace.time, trace.obj_id, trace.obj_size
    rec["next_access_vtime"] = np.where(trace.next_access < 0, -1, trace.next_access + 1)
    rec.tofile(path)
