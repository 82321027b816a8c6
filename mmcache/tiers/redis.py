"""Remote tier: entries in a shared Redis server, vector search on the client (FAISS).

Debian's Redis has no vector search, so every client keeps a local
:class:`mmcache.tiers.vectors.SemanticIndex` built from the server on open and
brought up to date before each search (Redis is the shared store; the index is
a local view of it).

Layout under ``prefix`` (default ``"mmcache"``), no pickle anywhere:

* ``{prefix}:{scope-hash}:{entry_id}`` — one hash per entry; every scope is its
  own key space, so a lookup in one scope cannot reach another scope's keys.
  Fields: ``entry_id``, ``scope``, ``exact_key``, ``value_type`` + ``value``
  (type-tagged bytes, :mod:`mmcache.tiers.codec`), ``size``, ``created_at``,
  ``expires_at``, ``ground_truth`` (JSON), ``hints`` (the entry's policy hints, JSON;
  empty when it has none, absent in entries written before hints existed) and ``vec:{modality}`` (raw float32).
* ``{prefix}:log`` — sorted set of entry keys scored by a write sequence number
  (``{prefix}:seq``), assigned atomically with the write by a Lua script; a
  client loads exactly the entries written after the last sequence it has seen.

Entries deleted by another client are noticed when this client looks them up.
Capacity and eviction are accounted per client over the entries it has seen; a
client adopts each entry it loads with its hints, so a reopened tier ranks as before.
"""

from __future__ import annotations

from typing import Any, Iterator, Mapping, NamedTuple, Sequence

import numpy as np
import redis
import xxhash

from ..errors import StorageError
from ..policies import EvictionPolicy
from ..types import Entry
from .base import Budget, BudgetedTier, Candidate, Capacity, admit_all, gone_ids, policy_hints
from .codec import (decode_hints, decode_label, decode_value, encode_hints, encode_label,
                    encode_value, vector_from_bytes, vector_to_bytes)
from .vectors import IndexSpec, SemanticIndex

VECTOR_FIELD = "vec:"

# KEYS: seq, log, entry key; ARGV: field/value pairs of the entry hash. A put_many batch
# runs one call per entry, after deleting its victims, in one MULTI/EXEC transaction.
_PUT_SCRIPT = """
local seq = redis.call('INCR', KEYS[1])
redis.call('DEL', KEYS[3])
redis.call('HSET', KEYS[3], unpack(ARGV))
redis.call('ZADD', KEYS[2], seq, KEYS[3])
return seq
"""


class _Known(NamedTuple):
    """What a client remembers of one stored entry."""

    scope: str
    key: str
    modalities: tuple[str, ...]
    size: int
    hints: dict[str, float]


def scope_tag(scope: str) -> str:
    """The short, key-safe hash of a scope used in Redis key names."""
    return xxhash.xxh3_64_hexdigest(scope.encode("utf-8", "surrogatepass"))


class RedisTier(BudgetedTier):
    """A shared remote tier in Redis; semantic search over a local FAISS view of it."""

    semantic = True
    shared = True

    def __init__(self, url: str = "redis://127.0.0.1:6379/0", capacity: Capacity = Capacity(),
                 policy: EvictionPolicy | str = "lru", spec: IndexSpec = IndexSpec(),
                 precheck: bool = True, prefix: str = "mmcache", name: str = "l3",
                 socket_timeout: float = 5.0) -> None:
        self.name = name
        self.url = url
        self.prefix = prefix
        self._budget = Budget(capacity, policy, undoable=True)
        self.index = SemanticIndex(spec, precheck=precheck)
        self._known: dict[str, _Known] = {}
        self._last_seq = 0
        self._seq_key, self._log_key = f"{prefix}:seq", f"{prefix}:log"
        try:
            self._db = redis.Redis.from_url(url, socket_timeout=socket_timeout)
            self._db.ping()
            self._put_script = self._db.register_script(_PUT_SCRIPT)
        except (redis.RedisError, ValueError) as exc:
            raise StorageError(f"cannot reach the Redis tier at {url}: {exc}") from exc
        self.refresh()

    # -- Tier protocol -------------------------------------------------------------------
    def put_many(self, entries: Sequence[Entry]) -> list[str]:
        """Write ``entries`` in one MULTI/EXEC pipeline; the budget admits them one by one first."""
        fields = {e.entry_id: _entry_fields(e) for e in entries}  # SerializationError first
        keys = {e.entry_id: self.key(e.scope, e.entry_id) for e in entries}
        now = self.clock()
        victims, kept = admit_all(self._budget, entries, now)
        gone = gone_ids(victims, entries)
        stored = {e.entry_id for e in kept}
        removed = [keys[g] if g in keys else self._known[g].key for g in gone
                   if g not in stored and (g in keys or g in self._known)]
        try:
            pipe = self._db.pipeline(transaction=True)
            if removed:  # victims, and entries the policy declined (any old version goes)
                pipe.delete(*removed)
                pipe.zrem(self._log_key, *removed)
            for entry in kept:
                self._put_script(keys=[self._seq_key, self._log_key, keys[entry.entry_id]],
                                 args=fields[entry.entry_id], client=pipe)
            seqs = pipe.execute()[2 if removed else 0:]
        except redis.RedisError as exc:
            self._budget.rollback()
            raise StorageError(f"Redis tier write to {self.url} failed: {exc}") from exc
        for entry_id in gone:
            self._unindex(entry_id)
        for entry in kept:
            self._index(entry, keys[entry.entry_id])
        if seqs and seqs[0] == self._last_seq + 1:
            self._last_seq = seqs[-1]  # nobody else wrote in between: nothing else to load
        return victims

    def get(self, scope: str, entry_id: str) -> Entry | None:
        raw = self._call("read", self._db.hgetall, self.key(scope, entry_id))
        if not raw:
            if entry_id in self._known and self._known[entry_id].scope == scope:
                self._forget(entry_id)  # deleted by another client
            return None
        entry = _decode_entry(raw, self.url)
        if entry.scope != scope or entry.entry_id != entry_id:
            raise StorageError(f"Redis tier {self.url}: key {self.key(scope, entry_id)!r} "
                               f"holds entry {entry.entry_id!r} of another scope")
        dropped = self._budget.touch(entry_id, **policy_hints(entry, self.clock()))
        if dropped:
            self._remove_keys([self._known[d].key for d in dropped if d in self._known])
            for d in dropped:
                self._unindex(d)
        return None if entry_id in dropped else entry

    def search(self, scope: str, vectors: Mapping[str, np.ndarray],
               floors: Mapping[str, float], k: int = 1) -> list[Candidate]:
        self.refresh()
        return self.index.search(scope, vectors, floors, k)

    def delete(self, entry_id: str) -> bool:
        if entry_id not in self._known:
            self.refresh()
        known = self._known.get(entry_id)
        if known is None:
            return False
        gone = self._remove_keys([known.key])
        self._forget(entry_id)
        return gone > 0

    def evict(self) -> str | None:
        victim = self._budget.pick_victim()
        if victim is None:
            return None
        if victim in self._known:
            self._remove_keys([self._known[victim].key])
        self._unindex(victim)
        return victim

    def scan(self) -> Iterator[Entry]:
        keys = self._call("read", self._db.zrange, self._log_key, 0, -1)
        for raw in self._fetch(keys):
            if raw:
                yield _decode_entry(raw, self.url)

    def ids(self) -> Iterator[str]:
        self.refresh()
        return iter(list(self._known))

    def dims(self) -> dict[str, int]:
        return self.index.dims()

    def __len__(self) -> int:
        return int(self._call("read", self._db.zcard, self._log_key))

    def __contains__(self, entry_id: str) -> bool:
        self.refresh()
        known = self._known.get(entry_id)
        return known is not None and bool(self._call("read", self._db.exists, known.key))

    def close(self) -> None:
        self._db.close()

    # -- shared-store view ---------------------------------------------------------------
    def key(self, scope: str, entry_id: str) -> str:
        """The Redis key of ``entry_id`` in ``scope``."""
        return f"{self.prefix}:{scope_tag(scope)}:{entry_id}"

    def refresh(self) -> int:
        """Load the entries other clients wrote since the last refresh; return how many."""
        logged = self._call("read", self._db.zrangebyscore, self._log_key,
                            f"({self._last_seq}", "+inf", withscores=True)
        if not logged:
            return 0
        loaded = 0
        for (_, seq), raw in zip(logged, self._fetch([key for key, _ in logged])):
            self._last_seq = max(self._last_seq, int(seq))
            if raw:
                self._adopt(_decode_entry(raw, self.url))
                loaded += 1
        return loaded

    # -- internals -----------------------------------------------------------------------
    def _adopt(self, entry: Entry) -> None:
        """Account and index an entry that is already in the store (no eviction); it counts
        as last used at its put."""
        self._unindex(entry.entry_id)
        self._budget.adopt(entry.entry_id, entry.size, **policy_hints(entry, entry.created_at))
        self._index(entry, self.key(entry.scope, entry.entry_id))

    def _fetch(self, keys: list[bytes]) -> list[dict[bytes, bytes]]:
        pipe = self._db.pipeline(transaction=False)
        for key in keys:
            pipe.hgetall(key)
        return self._call("read", pipe.execute)

    def _remove_keys(self, keys: list[str]) -> int:
        if not keys:
            return 0
        pipe = self._db.pipeline(transaction=True)
        pipe.delete(*keys)
        pipe.zrem(self._log_key, *keys)
        return int(self._call("delete", pipe.execute)[0])

    def _call(self, what: str, fn: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except redis.RedisError as exc:
            raise StorageError(f"Redis tier {what} at {self.url} failed: {exc}") from exc

    def _index(self, entry: Entry, key: str) -> None:
        self._known[entry.entry_id] = _Known(entry.scope, key, tuple(entry.embeddings), entry.size,
                                             entry.hints)
        self.index.add(entry.scope, entry.entry_id, entry.embeddings)

    def _unindex(self, entry_id: str) -> None:
        known = self._known.pop(entry_id, None)
        if known is not None:
            self.index.remove(known.scope, entry_id, known.modalities)

    def _forget(self, entry_id: str) -> None:
        self._budget.remove(entry_id)
        self._unindex(entry_id)


def _entry_fields(entry: Entry) -> list[Any]:
    """The entry as a flat field/value list for HSET (raises SerializationError first)."""
    tag, payload = encode_value(entry.value)
    label = encode_label(entry.ground_truth)
    fields: dict[str, Any] = {
        "entry_id": entry.entry_id, "scope": entry.scope, "exact_key": entry.exact_key,
        "value_type": tag, "value": payload, "size": int(entry.size),
        "created_at": repr(float(entry.created_at)),
        "expires_at": "" if entry.expires_at is None else repr(float(entry.expires_at)),
        "ground_truth": "" if label is None else label,
        "hints": encode_hints(entry.hints) or "",
    }
    for modality, vec in entry.embeddings.items():
        fields[VECTOR_FIELD + modality] = vector_to_bytes(vec)
    return [x for pair in fields.items() for x in pair]


def _decode_entry(raw: Mapping[bytes, bytes], url: str) -> Entry:
    """The Entry stored in one Redis hash; StorageError when it is malformed."""
    try:
        text = {k.decode(): v for k, v in raw.items()}
        embeddings = {k[len(VECTOR_FIELD):]: vector_from_bytes(v)
                      for k, v in text.items() if k.startswith(VECTOR_FIELD)}
        expires, label = text["expires_at"].decode(), text["ground_truth"].decode()
        return Entry(entry_id=text["entry_id"].decode(), scope=text["scope"].decode(),
                     exact_key=text["exact_key"].decode(),
                     value=decode_value(text["value_type"].decode(), text["value"]),
                     embeddings=embeddings, size=int(text["size"]),
                     created_at=float(text["created_at"]),
                     expires_at=float(expires) if expires else None,
                     ground_truth=decode_label(label) if label else None,
                     hints=decode_hints(text.get("hints") or None))
    except (KeyError, ValueError, TypeError, AttributeError, UnicodeDecodeError) as exc:
        raise StorageError(f"Redis tier {url} holds a malformed entry: {exc!r}") from None
