"""The tier interface every cache tier implements, and the capacity budget they share.

A tier stores :class:`mmcache.types.Entry` objects. ``entry_id`` is the entry's
exact key, which already contains the scope hash, so two scopes never share an
id. The cache talks to tiers only through :class:`Tier`:

* ``put(entry)`` stores (or replaces) an entry and returns the ids it evicted;
  ``put_many(entries)`` does the same for many entries in order, as one ``put``
  each would (tiers override it to write in one batch);
* ``get(scope, entry_id)`` is the exact lookup (it counts as an access for the policy);
* ``search(scope, vectors, floors, k)`` is the semantic lookup *within one scope*
  (tiers with ``semantic = True``); it returns :class:`Candidate` s whose every
  query modality is at least ``floors[modality]`` similar, best first;
* ``delete(entry_id)``, ``evict()`` (one victim chosen by the tier's policy),
  ``capacity``/``usage()``, ``__len__``, ``scan()`` (all entries) and ``close()``.

Tiers that account their entries in a :class:`Budget` extend :class:`BudgetedTier`,
which answers ``capacity`` and ``usage()`` from it and makes ``put`` a batch of one.

A tier whose store other processes write too sets ``shared = True``: the cache's
penetration guard then never skips a lookup in it on the strength of its local
Bloom filter.

Every policy call carries hints (:mod:`mmcache.policies.base`): ``now`` from the
tier's ``clock`` (seconds; a :class:`~mmcache.TieredCache` sets it to its own clock) on
``put`` and ``get``, or the entry's ``created_at`` when a stored entry is adopted (on
open, or when another client wrote it), plus the entry's own ``hints`` (``cost``,
``entropy``).
"""

from __future__ import annotations

import functools
import pickle
import time
from collections import Counter
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Iterator, Mapping, Sequence

import numpy as np

from mmcache.policies import EvictionPolicy, make_policy
from mmcache.policies.admission import admit_miss
from mmcache.types import Entry


@dataclass(frozen=True)
class Capacity:
    """Limits of one tier; ``None`` means unlimited in that dimension."""

    max_entries: int | None = None
    max_bytes: int | None = None

    def admits(self, size: int) -> bool:
        """Whether one entry of ``size`` bytes could ever fit in an empty tier."""
        return (self.max_entries is None or self.max_entries >= 1) and (
            self.max_bytes is None or size <= self.max_bytes)

    def exceeded(self, entries: int, nbytes: int) -> bool:
        """Whether ``entries`` entries totalling ``nbytes`` bytes break a limit."""
        return (self.max_entries is not None and entries > self.max_entries) or (
            self.max_bytes is not None and nbytes > self.max_bytes)


@dataclass(frozen=True)
class Candidate:
    """A semantic-search result: an entry id and its cosine similarity per modality."""

    entry_id: str
    similarities: Mapping[str, float] = field(default_factory=dict)

    @property
    def similarity(self) -> float:
        """The smallest per-modality similarity (the one that decides a hit)."""
        return min(self.similarities.values()) if self.similarities else 0.0


#: An undoable budget copies its state once its log of calls since the last copy holds at
#: least this many calls and at least one per resident key (so copying is O(1) amortised).
COPY_AFTER_CALLS = 256


def _logged(method: Callable[..., Any]) -> Callable[..., Any]:
    """Log calls of a state-changing :class:`Budget` method while the budget is undoable."""
    @functools.wraps(method)
    def logged(self: "Budget", *args: Any, **kwargs: Any) -> Any:
        if self._log is None:
            return method(self, *args, **kwargs)
        self._log.append((method.__name__, args, kwargs))
        result = method(self, *args, **kwargs)
        if self._mark is None and self._log_is_long():  # nothing to undo: copy now
            self._copy, self._log = self._state(), []
        return result
    return logged


class Budget:
    """Capacity accounting plus an eviction policy: decides which ids must leave.

    The owning tier keeps the data; the budget keeps sizes and drives the policy
    through the protocol of :mod:`mmcache.policies.base` (``on_miss``, ``evict``,
    ``insert``, ``access``, ``take_dropped``), forwarding each call's ``hints`` to the
    policy. ``admit`` returns the victims the tier must drop;
    afterwards ``key in budget`` says whether the key itself was admitted (a policy
    may decline it, e.g. an admission filter or GDSF ranking it lowest).

    An ``undoable`` budget (for tiers whose write may fail after admission) can
    :meth:`rollback` to its last :meth:`begin`, restoring the policy's order exactly: it
    keeps a copy of its state and a log of its calls since, and replays the log up to the
    mark on a fresh copy. Copies are taken at ``begin`` once the log is long enough, so a
    successful write pays O(1) amortised, and only a rollback pays O(n). Calls made after
    :meth:`end` (by other threads while the write is in flight) are not undone: a rollback
    replays them after the mark. :meth:`commit` says the write succeeded; from then until the
    next ``begin`` calls are copied away as the log grows, so a tier that only follows other
    writers (never ``begin``) keeps a bounded log.
    """

    def __init__(self, capacity: Capacity, policy: EvictionPolicy | str,
                 undoable: bool = False) -> None:
        self.capacity = capacity
        self.policy = make_policy(policy, capacity=capacity.max_bytes) \
            if isinstance(policy, str) else policy
        self.sizes: dict[str, int] = {}
        self.nbytes = 0
        self._log: list[tuple[str, tuple, dict]] | None = [] if undoable else None
        self._copy = self._state() if undoable else None
        #: Where :meth:`rollback` returns to in the log (None: no write in flight).
        self._mark: int | None = None
        #: Where the calls a rollback undoes end in the log (None: at its end).
        self._end: int | None = None
        #: Whether each entry of the last :func:`admit_all` was admitted when it came.
        self.admitted: list[bool] = []

    def __contains__(self, key: str) -> bool:
        return key in self.sizes

    def begin(self) -> None:
        """Mark the state :meth:`rollback` returns to (a no-op unless undoable)."""
        if self._log is None:
            return
        if self._log_is_long():
            self._copy, self._log = self._state(), []
        self._mark, self._end = len(self._log), None

    def end(self) -> None:
        """Mark the end of the calls :meth:`rollback` undoes (a no-op unless undoable): the
        calls made after it are kept."""
        if self._log is not None:
            self._end = len(self._log)

    def commit(self) -> None:
        """The write prepared since the last :meth:`begin` succeeded: nothing before now will
        be undone (a no-op unless undoable)."""
        self._mark = self._end = None

    def rollback(self) -> None:
        """Return to the state of the last :meth:`begin`: sizes and the policy's order, with
        the calls made after :meth:`end` made again."""
        if self._log is None:
            raise TypeError("rollback needs a Budget made with undoable=True")
        if self._mark is None:
            raise RuntimeError("rollback needs a begin() not yet committed")
        later = [] if self._end is None else self._log[self._end:]
        calls, self._log = self._log[:self._mark] + later, None
        self.policy, self.sizes = pickle.loads(self._copy)
        self.nbytes = sum(self.sizes.values())
        for name, args, kwargs in calls:
            getattr(self, name)(*args, **kwargs)
        self._log, self._mark, self._end = calls, None, None

    def _log_is_long(self) -> bool:
        """Whether copying the state now costs O(1) per logged call."""
        return len(self._log) >= max(COPY_AFTER_CALLS, len(self.sizes))

    @_logged
    def admit(self, key: str, size: int, **hints: Any) -> list[str]:
        """Account ``key`` (``size`` bytes), evicting until it fits; return the victims.

        A key already resident is re-admitted at its new size. The caller checks
        ``capacity.admits(size)`` first and ``key in budget`` afterwards.
        """
        if key in self.sizes:
            self._remove(key)
        victims: list[str] = []
        admit_miss(self.policy, key, size, overfull=self._overfull, keep=self._keep,
                   drop=lambda keys: victims.extend(self._forget_all(keys)), **hints)
        return victims

    @_logged
    def adopt(self, key: str, size: int, **hints: Any) -> None:
        """Account ``key``, already stored (e.g. loaded from a file on open), without evicting;
        the tier enforces capacity afterwards with :meth:`pick_victim`."""
        if key in self.sizes:
            self._remove(key)
        self.policy.on_miss(key, size, **hints)
        self.policy.insert(key, size, **hints)
        self.sizes[key] = size
        self.nbytes += size

    @_logged
    def touch(self, key: str, **hints: Any) -> list[str]:
        """Record an access to resident ``key``; return keys the policy dropped meanwhile."""
        if key not in self.sizes:
            return []
        self.policy.access(key, **hints)
        return self._dropped()

    @_logged
    def remove(self, key: str) -> bool:
        """Forget ``key``; False when it was not resident."""
        return self._remove(key)

    @_logged
    def pick_victim(self) -> str | None:
        """Let the policy choose one resident key, forget it and return it."""
        if not self.sizes:
            return None
        victim = self.policy.evict()
        if victim is None:
            return None
        self._forget(str(victim))
        return str(victim)

    def _state(self) -> bytes:
        """The policy and sizes, pickled in memory (never stored; faster than a deep copy)."""
        return pickle.dumps((self.policy, self.sizes), pickle.HIGHEST_PROTOCOL)

    def _remove(self, key: str) -> bool:
        if key not in self.sizes:
            return False
        self.nbytes -= self.sizes.pop(key)
        self.policy.remove(key)
        return True

    def _forget(self, key: str) -> None:
        self.nbytes -= self.sizes.pop(key)

    def _dropped(self) -> list[str]:
        take = getattr(self.policy, "take_dropped", None)
        return self._forget_all(take()) if take is not None else []

    def _forget_all(self, keys: Iterable[Any]) -> list[str]:
        """Forget the resident ones of ``keys``; all of them, as ids."""
        dropped = [str(k) for k in keys]
        for key in dropped:
            if key in self.sizes:
                self._forget(key)
        return dropped

    def _overfull(self, size: int) -> bool:
        return bool(self.sizes) and self.capacity.exceeded(len(self.sizes) + 1,
                                                           self.nbytes + size)

    def _keep(self, key: str, size: int) -> None:
        self.sizes[key] = size
        self.nbytes += size


def admit_all(budget: Budget, entries: Sequence[Entry],
              now: float) -> tuple[list[str], list[Entry]]:
    """Admit ``entries`` into ``budget`` one by one at time ``now``, as sequential puts would;
    ``budget.rollback()`` undoes it (and nothing made after it), and ``budget.admitted``
    says which were admitted.

    Returns every victim in order (ids of this batch included) and the entries to
    store: the last version of each id that is still admitted at the end.
    """
    budget.begin()
    victims, budget.admitted = [], []
    for e in entries:
        victims += budget.admit(e.entry_id, e.size, **policy_hints(e, now))
        budget.admitted.append(e.entry_id in budget)
    budget.end()
    return victims, [e for e in last_versions(entries) if e.entry_id in budget]


def policy_hints(entry: Entry, now: float) -> dict[str, Any]:
    """The hints of a policy call about ``entry`` at time ``now``: ``now`` and its own hints."""
    return {"now": now, **entry.hints}


def last_versions(entries: Iterable[Entry]) -> list[Entry]:
    """The last entry of each id, in the order the ids were last written."""
    latest: dict[str, Entry] = {}
    for entry in entries:
        latest.pop(entry.entry_id, None)
        latest[entry.entry_id] = entry
    return list(latest.values())


def gone_ids(victims: Iterable[str], entries: Iterable[Entry]) -> list[str]:
    """Ids whose stored rows a batch replaces or evicts, each once, victims first."""
    return list(dict.fromkeys([*victims, *(e.entry_id for e in entries)]))


class Tier(ABC):
    """One level of the cache (memory, semantic index, SQLite, Redis, ...)."""

    #: Short name used in hits and metrics: ``"l1"``, ``"l2"``, ``"l3"``.
    name: str = ""
    #: True when the tier answers :meth:`search`.
    semantic: bool = False
    #: True when other processes write the same store (the local Bloom filter is incomplete).
    shared: bool = False
    #: Seconds; stamps ``now`` on the policy calls of ``put`` and ``get``. A TieredCache sets
    #: it to its own clock, so time-aware policies (hotness-freshness) age by that clock.
    clock: Callable[[], float] = time.time

    @property
    @abstractmethod
    def capacity(self) -> Capacity:
        """The tier's limits."""

    @abstractmethod
    def usage(self) -> tuple[int, int]:
        """``(entries, bytes)`` currently held."""

    @abstractmethod
    def put(self, entry: Entry) -> list[str]:
        """Store or replace ``entry``; return the ids evicted to make room."""

    def put_many(self, entries: Sequence[Entry]) -> list[str]:
        """Store or replace every entry in order, as one :meth:`put` each would (the
        last of two with one id wins); return every id evicted, in order."""
        return [victim for entry in entries for victim in self.put(entry)]

    def admitted(self, entries: Sequence[Entry]) -> list[bool]:
        """Whether the last ``put_many(entries)`` admitted each entry when it came (a policy
        may decline one); the default says whether the tier holds it now."""
        return [e.entry_id in self for e in entries]

    @abstractmethod
    def get(self, scope: str, entry_id: str) -> Entry | None:
        """The entry with this id in ``scope``, or None (exact lookup; counts as an access)."""

    def search(self, scope: str, vectors: Mapping[str, np.ndarray],
               floors: Mapping[str, float], k: int = 1) -> list[Candidate]:
        """Up to ``k`` entries of ``scope`` with every modality of ``vectors`` at least
        ``floors[m]`` similar, best (largest smallest similarity) first.

        ``vectors`` are L2-normalised float32. Non-semantic tiers return nothing.
        """
        return []

    @abstractmethod
    def delete(self, entry_id: str) -> bool:
        """Remove an entry; False when it was not there."""

    @abstractmethod
    def evict(self) -> str | None:
        """Evict one entry chosen by the tier's policy; return its id (None when empty)."""

    @abstractmethod
    def scan(self) -> Iterator[Entry]:
        """Every entry held (for rebuilds, inspection and tests)."""

    @abstractmethod
    def __len__(self) -> int: ...

    def __contains__(self, entry_id: str) -> bool:
        return any(e.entry_id == entry_id for e in self.scan())

    def ids(self) -> Iterator[str]:
        """Every entry id held (tiers override this when a cheaper way exists)."""
        return (e.entry_id for e in self.scan())

    def dims(self) -> dict[str, int]:
        """Embedding dimension per modality of the vectors held (empty when none)."""
        return {}

    def backend(self) -> str:
        """What holds this tier's entries, in words, for displays (no I/O)."""
        return type(self).__name__

    def scopes(self) -> Counter[str] | None:
        """Entries per scope, from what the tier keeps in this process's memory (no I/O);
        None where only a scan of its store would tell."""
        return None

    def close(self) -> None:
        """Release files, connections and memory; the default does nothing."""


class BudgetedTier(Tier):
    """A tier whose limits and usage are those of its :class:`Budget` (``self._budget``) and
    whose ``put`` is a batch of one: subclasses implement :meth:`put_many`."""

    _budget: Budget

    @property
    def capacity(self) -> Capacity:
        return self._budget.capacity

    def usage(self) -> tuple[int, int]:
        return len(self._budget.sizes), self._budget.nbytes

    def put(self, entry: Entry) -> list[str]:
        return self.put_many([entry])

    def admitted(self, entries: Sequence[Entry]) -> list[bool]:
        return list(self._budget.admitted)

    @abstractmethod
    def put_many(self, entries: Sequence[Entry]) -> list[str]:
        """Store or replace every entry in order, as one put each would; return the evicted ids."""
