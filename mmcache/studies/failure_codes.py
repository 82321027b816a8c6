"""Failure codes across two processes: each mismatch the cache can detect,
injected into one of two processes that share one SQLite store, and the failure events mined by
code and cause.

Process A is the caller's (a notebook's kernel, a test); process B is one worker started with
``spawn`` that serves A's steps over a pipe. Each fault runs on a fresh store (``l3.shared:
true``): A opens it and puts an entry, B opens it, puts one and looks A's up, then A looks B's up
by a paraphrase (a semantic search, which replays B's write); for ``schema-version`` B creates
the store and A opens it after. B plays another deployment by patching, for its step only, what
another mmcache version or host would differ in:

* ``clean``: nothing, both processes agree (no event may be emitted);
* ``key-version``: B hashes exact keys under another ``mmcache.keys.KEY_VERSION`` and opens A's
  store: ``MM-KEY-VERSION`` in B, which opens all the same;
* ``encoder-identity``: B's text encoder has another ``encoder_id``: B's open is refused
  (ConfigError), ``MM-ENCODER-IDENTITY`` in B;
* ``schema-version``: B, a newer mmcache, created the store with the next SQLite schema version:
  A's open is refused (StorageError), ``MM-SCHEMA-VERSION`` in A;
* ``serializer``: B writes its entry's value under a type tag A's codec does not know: A
  quarantines it when it first reads that value (its lookup of B's entry; replaying B's write
  reads no value), ``MM-ENTRY-UNREADABLE`` in A;
* ``clock-skew``: B's clock runs :data:`SKEW_S` seconds ahead: A adopts B's entry,
  ``MM-CLOCK-SKEW`` in A.

:func:`inject` returns one :class:`Side` per fault and process (its events, what its metrics
counted and its Prometheus lines); :func:`events_frame` is one row per event and :func:`mine`
counts them by code and cause. A refused open leaves no cache behind, so its event is seen only
through ``on_event`` (and the error's ``code``), not in counters.
"""

from __future__ import annotations

import contextlib
import multiprocessing as mp
import tempfile
import time
import traceback
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterator, Sequence

import numpy as np

from mmcache import keys
from mmcache.cache import TieredCache
from mmcache.errors import InvalidInputError, MMCacheError
from mmcache.metrics import FAILURE_CODES, FailureEvent
from mmcache.tiers import sqlite as sqlite_store
from mmcache.types import Query

if TYPE_CHECKING:
    import pandas as pd

#: Fault -> the code it must raise (None: none) and the process that detects it.
FAULTS: dict[str, tuple[str | None, str]] = {
    "clean": (None, ""),
    "key-version": ("MM-KEY-VERSION", "B"),
    "encoder-identity": ("MM-ENCODER-IDENTITY", "B"),
    "schema-version": ("MM-SCHEMA-VERSION", "A"),
    "serializer": ("MM-ENTRY-UNREADABLE", "A"),
    "clock-skew": ("MM-CLOCK-SKEW", "A"),
}
#: Seconds process B's clock runs ahead in the ``clock-skew`` fault.
SKEW_S = 3600.0
#: The value type tag B's serializer writes in the ``serializer`` fault.
FOREIGN_TAG = "msgpack"
DIM = 16
SCOPE = "tenant"
ENCODER_ID = "study-encoder-a"
#: Seconds a step in process B may take (its start included) before A gives up.
STEP_TIMEOUT_S = 120.0


class NamedEncoder:
    """A stand-in text encoder known by its ``encoder_id`` (what a store records as the fact
    every client must agree on); its vectors are seeded by the text."""

    def __init__(self, encoder_id: str = ENCODER_ID, dim: int = DIM) -> None:
        self.encoder_id, self.dim = encoder_id, dim

    def encode(self, inputs: Sequence[str]) -> np.ndarray:
        return np.stack([_vector(str(text), self.dim) for text in inputs])


@dataclass
class Side:
    """What one process saw of one fault: its failure events (as plain data), the error code
    that refused its open (None: it opened), what its metrics counted per code and the
    ``failure_events`` lines of its Prometheus export (both empty when refused)."""

    fault: str
    process: str
    events: list[dict[str, Any]] = field(default_factory=list)
    refused: str | None = None
    counted: dict[str, int] = field(default_factory=dict)
    prometheus: list[str] = field(default_factory=list)


def inject(faults: Sequence[str] = tuple(FAULTS), workdir: str | Path | None = None) -> list[Side]:
    """Run each of ``faults`` (keys of :data:`FAULTS`) across this process (A) and one spawned
    worker (B), each on a fresh store under ``workdir`` (None: a temporary folder); return both
    processes' :class:`Side` of each fault, in order."""
    unknown = [f for f in faults if f not in FAULTS]
    if unknown:
        raise InvalidInputError(f"unknown faults {unknown}; known: {list(FAULTS)}")
    with contextlib.ExitStack() as stack:
        root = Path(workdir) if workdir is not None else Path(
            stack.enter_context(tempfile.TemporaryDirectory(prefix="failure-codes-")))
        worker = stack.enter_context(_Worker())
        sides = []
        for fault in faults:
            path = root / f"{fault}.sqlite"
            if path.exists():
                raise InvalidInputError(f"{path} exists: give inject a fresh workdir")
            sides += _scenario(fault, str(path), worker)
        return sides


def events_frame(sides: Sequence[Side]) -> "pd.DataFrame":
    """One row per failure event: fault, process, code, cause, tier, detail, and ``open``:
    whether the detecting process's open was ``"refused"`` or ``"opened"``."""
    # deferred: pandas only for the study's tables
    import pandas as pd

    rows = [{"fault": s.fault, "process": s.process, **{k: e[k] for k in (
        "code", "cause", "tier", "detail")}, "open": "refused" if s.refused else "opened"}
        for s in sides for e in s.events]
    return pd.DataFrame(rows, columns=["fault", "process", "code", "cause", "tier", "detail",
                                       "open"])


def mine(sides: Sequence[Side]) -> "pd.DataFrame":
    """Events counted by code and cause (with the faults and processes they came from), one row
    per code of :data:`FAILURE_CODES`, a code never seen counted 0."""
    # deferred: pandas only for the study's tables
    import pandas as pd

    events = events_frame(sides)
    rows = []
    for code, meaning in FAILURE_CODES.items():
        mine_ = events[events.code == code]
        rows.append({"code": code, "count": len(mine_), "cause": meaning.cause,
                     "fix": meaning.fix, "faults": sorted(set(mine_.fault)),
                     "processes": sorted(set(mine_.process))})
    return pd.DataFrame(rows).set_index("code")


def summary(sides: Sequence[Side]) -> dict[str, Any]:
    """The study's numbers as plain data: per code its count, cause, fix and the faults that
    raised it; per fault the code it must raise, the codes each process saw, what refused an
    open, what the metrics counted and the Prometheus lines."""
    mined = mine(sides)
    by_fault: dict[str, Any] = {}
    for fault in dict.fromkeys(s.fault for s in sides):
        mine_ = [s for s in sides if s.fault == fault]
        seen: dict[str, int] = {}
        for s in mine_:
            for e in s.events:
                seen[e["code"]] = seen.get(e["code"], 0) + 1
        expected, where = FAULTS[fault]
        by_fault[fault] = {
            "expected": expected, "detected_by": where or None, "seen": seen,
            "refused": {s.process: s.refused for s in mine_},
            "counted": {s.process: s.counted for s in mine_},
            "prometheus": {s.process: s.prometheus for s in mine_}}
    return {"codes": {code: {"count": int(r["count"]), "cause": r["cause"], "fix": r["fix"],
                             "faults": r["faults"]} for code, r in mined.iterrows()},
            "faults": by_fault,
            "events": int(mined["count"].sum())}


# -- the two processes --------------------------------------------------------------------------
def _scenario(fault: str, path: str, worker: "_Worker") -> list[Side]:
    """Process A's steps of ``fault`` around process B's (see the module docstring)."""
    a = Side(fault, "A")
    if fault == "schema-version":  # B, a newer version, made the store first
        b = worker.step(fault, path)
        with _opened(path, a) as cache:
            if cache is not None:
                _finish(cache, a)
        return [a, b]
    with _opened(path, a) as cache:
        if cache is None:
            raise MMCacheError(f"process A could not open a fresh store for fault {fault!r}: "
                               f"{a.refused}")
        cache.put(_query(0), "answer 0")
        b = worker.step(fault, path)
        cache.get(_query(1, paraphrase=True))  # B's write, by a semantic search
        cache.get(_query(0))
        _finish(cache, a)
    return [a, b]


def _b_step(fault: str, path: str) -> Side:
    """Process B's step of ``fault``: open the store as the other deployment, put an entry and
    look A's up (or be refused)."""
    b = Side(fault, "B")
    with _patched(fault):
        encoder = NamedEncoder("study-encoder-b") if fault == "encoder-identity" else None
        clock = (lambda: time.time() + SKEW_S) if fault == "clock-skew" else time.time
        with _opened(path, b, encoder, clock) as cache:
            if cache is not None:
                cache.put(_query(1), "answer 1")
                if fault != "schema-version":
                    cache.get(_query(0, paraphrase=True))
                    cache.get(_query(0))
                _finish(cache, b)
    return b


@contextlib.contextmanager
def _opened(path: str, side: Side, encoder: NamedEncoder | None = None,
            clock: Callable[[], float] = time.time) -> Iterator[TieredCache | None]:
    """A cache over the shared store at ``path`` whose events go to ``side`` (None, with
    ``side.refused`` set, when its open is refused with a coded error); closed after."""
    def keep(event: FailureEvent) -> None:
        side.events.append(event.as_dict())

    config = {"l3": {"backend": "sqlite", "path": path, "shared": True}}
    try:
        cache = TieredCache(config, {"text": encoder or NamedEncoder()}, clock=clock,
                            on_event=keep)
    except MMCacheError as exc:
        if exc.code is None:
            raise
        side.refused = exc.code
        yield None
        return
    try:
        yield cache
    finally:
        cache.close()


def _finish(cache: TieredCache, side: Side) -> None:
    """Record what ``cache``'s metrics counted and exported."""
    for (code, _tier), n in cache.metrics.snapshot().failure_events.items():
        side.counted[code] = side.counted.get(code, 0) + n
    side.prometheus = [line for line in cache.metrics.to_prometheus().splitlines()
                       if line.startswith("mmcache_failure_events_total{")]


@contextlib.contextmanager
def _patched(fault: str) -> Iterator[None]:
    """Make this process another deployment for ``fault``'s step: another key version, another
    SQLite schema version, or a serializer that writes a type tag others do not know."""
    saved = keys.KEY_VERSION, sqlite_store.SCHEMA_VERSION, sqlite_store.encode_value
    if fault == "key-version":
        keys.KEY_VERSION = f"{saved[0]}-other"
    elif fault == "schema-version":
        sqlite_store.SCHEMA_VERSION = str(int(saved[1]) + 1)
    elif fault == "serializer":
        encode = saved[2]
        sqlite_store.encode_value = lambda value: (FOREIGN_TAG, encode(value)[1])
    try:
        yield
    finally:
        keys.KEY_VERSION, sqlite_store.SCHEMA_VERSION, sqlite_store.encode_value = saved


class _Worker:
    """Process B: a spawned process serving :func:`_b_step` calls over a pipe."""

    def __enter__(self) -> "_Worker":
        ctx = mp.get_context("spawn")
        self._conn, theirs = ctx.Pipe()
        self._proc = ctx.Process(target=_serve, args=(theirs,), daemon=True)
        self._proc.start()
        theirs.close()
        return self

    def step(self, fault: str, path: str) -> Side:
        try:
            self._conn.send((fault, path))
            if not self._conn.poll(STEP_TIMEOUT_S):
                raise MMCacheError(f"process B did not finish fault {fault!r} in "
                                   f"{STEP_TIMEOUT_S:g} s")
            ok, result = self._conn.recv()
        except (EOFError, OSError) as exc:
            raise MMCacheError(f"process B exited during fault {fault!r} (exit code "
                               f"{self._proc.exitcode}): {exc!r}") from None
        if not ok:
            raise MMCacheError(f"process B failed on fault {fault!r}:\n{result}")
        return result

    def __exit__(self, *exc: object) -> None:
        try:
            self._conn.send(None)
        except OSError:
            pass
        self._proc.join(10)
        if self._proc.is_alive():
            self._proc.kill()
            self._proc.join()
        self._conn.close()


def _serve(conn: Any) -> None:
    """Process B's loop: run each ``(fault, path)`` step, reply ``(ok, Side or traceback)``."""
    while True:
        message = conn.recv()
        if message is None:
            break
        try:
            conn.send((True, _b_step(*message)))
        except Exception:  # reported to process A, which raises it
            conn.send((False, traceback.format_exc()))


def _vector(text: str, dim: int = DIM) -> np.ndarray:
    v = np.random.default_rng(zlib.crc32(text.encode())).standard_normal(dim).astype(np.float32)
    return v / np.linalg.norm(v)


def _query(i: int, paraphrase: bool = False) -> Query:
    """Question ``i`` (its paraphrase: another text with the same vector, so only a semantic
    search finds it)."""
    text = f"question {i}" + (", put another way" if paraphrase else "")
    return Query(text=text, embeddings={"text": _vector(f"question {i}")}, scope=SCOPE)
