"""Remote L3 in a shared Redis server: :class:`RedisStore` and the tier over it, :class:`RedisTier`.

Debian's Redis has no vector search, so every client keeps a local
:class:`mmcache.tiers.vectors.SemanticIndex` built from the server on open and
brought up to date from the change log before each search (Redis is the shared
store; the index is a local view of it, :mod:`mmcache.tiers.store`).

Layout under ``prefix`` (default ``"mmcache"``), no pickle anywhere:

* ``{prefix}:{scope-hash}:{entry_id}`` — one hash per entry; every scope is its
  own key space, so a lookup in one scope cannot reach another scope's keys.
  Fields: ``entry_id``, ``scope``, ``exact_key``, ``value_type`` + ``value``
  (type-tagged bytes, :mod:`mmcache.tiers.codec`), ``size``, ``created_at``,
  ``expires_at``, ``ground_truth`` (JSON), ``hints`` (the entry's policy hints, JSON;
  empty when it has none, absent in entries written before hints existed),
  ``version`` (absent in entries written before versions: 0) and ``vec:{modality}``
  (raw float32). An entry with a TTL carries an EXPIRE (its expiry plus the cache's
  stale windows), so expired entries leave Redis by themselves.
* ``{prefix}:seq`` — the store's sequence counter; ``{prefix}:log`` — sorted set of entry
  keys scored by the number of their latest change. Writes and compare-and-deletes are
  Lua scripts that take the next number atomically with the change, so a client loads
  exactly the writes, replaces and deletes made after the last number it has seen.
* ``{prefix}:capacity`` — the capacity recorded by the first client (JSON).
"""

from __future__ import annotations

import json
from typing import Any, Iterator, Mapping, Sequence

import redis
import xxhash

from ..errors import StorageError
from ..policies import EvictionPolicy
from ..types import Entry
from .base import Capacity
from .codec import (decode_hints, decode_label, decode_value, encode_hints, encode_label,
                    encode_value, vector_from_bytes, vector_to_bytes)
from .store import Change, Removal, Store, StoreTier
from .vectors import IndexSpec

VECTOR_FIELD = "vec:"

# KEYS: seq, log, entry key; ARGV: milliseconds to keep it (0: no expiry), then the
# field/value pairs of the entry hash. Returns the entry's version.
_PUT_SCRIPT = """
local seq = redis.call('INCR', KEYS[1])
redis.call('DEL', KEYS[3])
redis.call('HSET', KEYS[3], 'version', seq, unpack(ARGV, 2))
if tonumber(ARGV[1]) > 0 then redis.call('PEXPIRE', KEYS[3], ARGV[1]) end
redis.call('ZADD', KEYS[2], seq, KEYS[3])
return seq
"""

# KEYS: seq, log, entry key; ARGV: the version to delete ('' for any). Returns 1 if deleted.
_DELETE_SCRIPT = """
if ARGV[1] ~= '' and redis.call('HGET', KEYS[3], 'version') ~= ARGV[1] then return 0 end
if redis.call('DEL', KEYS[3]) == 0 then return 0 end
redis.call('ZADD', KEYS[2], redis.call('INCR', KEYS[1]), KEYS[3])
return 1
"""


def scope_tag(scope: str) -> str:
    """The short, key-safe hash of a scope used in Redis key names."""
    return xxhash.xxh3_64_hexdigest(scope.encode("utf-8", "surrogatepass"))


class RedisStore(Store):
    """Entries in a Redis server under one key prefix, with a change log."""

    shared = True

    def __init__(self, url: str = "redis://127.0.0.1:6379/0", prefix: str = "mmcache",
                 socket_timeout: float = 5.0) -> None:
        self.url = self.location = url
        self.prefix = prefix
        self._seq_key, self._log_key = f"{prefix}:seq", f"{prefix}:log"
        self._capacity_key = f"{prefix}:capacity"
        try:
            self._db = redis.Redis.from_url(url, socket_timeout=socket_timeout)
            self._db.ping()
            self._put_script = self._db.register_script(_PUT_SCRIPT)
            self._delete_script = self._db.register_script(_DELETE_SCRIPT)
        except (redis.RedisError, ValueError) as exc:
            raise StorageError(f"cannot reach the Redis tier at {url}: {exc}") from exc

    def key(self, scope: str, entry_id: str) -> str:
        """The Redis key of ``entry_id`` in ``scope``."""
        return f"{self.prefix}:{scope_tag(scope)}:{entry_id}"

    # -- Store protocol ------------------------------------------------------------------
    def encode(self, entry: Entry, keep_for: float | None) -> list[Any]:
        """``[milliseconds to keep, field, value, ...]`` (SerializationError first)."""
        return [0 if keep_for is None else max(1, int(keep_for * 1000)), *_entry_fields(entry)]

    def write(self, batch: Sequence[tuple[Entry, Any]], removed: Sequence[Removal]) -> list[int]:
        return self._call("write", self._write_batch, batch, removed)

    def read(self, scope: str, entry_id: str) -> Entry | None:
        raw = self._call("read", self._db.hgetall, self.key(scope, entry_id))
        if not raw:
            return None
        entry = _decode_entry(raw, self.url)
        if entry.scope != scope or entry.entry_id != entry_id:
            raise StorageError(f"Redis tier {self.url}: key {self.key(scope, entry_id)!r} "
                               f"holds entry {entry.entry_id!r} of another scope")
        return entry

    def delete(self, removed: Sequence[Removal]) -> list[str]:
        if not removed:
            return []
        done = self._call("delete", self._delete_batch, removed)
        return [r.entry_id for r, ok in zip(removed, done) if int(ok)]

    def latest(self) -> int:
        return int(self._call("read", self._db.get, self._seq_key) or 0)

    def changes(self, since: int) -> list[Change]:
        logged = self._call("read", self._db.zrangebyscore, self._log_key, f"({since}", "+inf",
                            withscores=True)
        skip = len(self.prefix) + 18  # "{prefix}:" + 16 hex digits of the scope tag + ":"
        return [Change(int(seq), key.decode()[skip:], key.decode()) for key, seq in logged]

    def fetch(self, refs: Sequence[str]) -> list[Entry | None]:
        pipe = self._db.pipeline(transaction=False)
        for ref in refs:
            pipe.hgetall(ref)
        return [_decode_entry(raw, self.url) if raw else None
                for raw in self._call("read", pipe.execute)]

    def record_capacity(self, capacity: Capacity, replace: bool = False) -> Capacity:
        text = json.dumps([capacity.max_entries, capacity.max_bytes])
        if replace:
            self._call("write", self._db.set, self._capacity_key, text)
        else:
            self._call("write", self._db.set, self._capacity_key, text, nx=True)
        max_entries, max_bytes = json.loads(self._call("read", self._db.get, self._capacity_key))
        return Capacity(max_entries, max_bytes)

    def count(self) -> int:
        keys = self._call("read", self._db.zrange, self._log_key, 0, -1)
        pipe = self._db.pipeline(transaction=False)
        for key in keys:
            pipe.exists(key)
        return sum(self._call("read", pipe.execute))

    def scan(self) -> Iterator[Entry]:
        keys = self._call("read", self._db.zrange, self._log_key, 0, -1)
        return iter([e for e in self.fetch(keys) if e is not None])

    def close(self) -> None:
        self._db.close()

    # -- internals -----------------------------------------------------------------------
    def _script_keys(self, scope: str, entry_id: str) -> list[str]:
        return [self._seq_key, self._log_key, self.key(scope, entry_id)]

    def _write_batch(self, batch: Sequence[tuple[Entry, Any]],
                     removed: Sequence[Removal]) -> list[int]:
        """:meth:`write` as one MULTI/EXEC transaction (redis errors pass through)."""
        pipe = self._db.pipeline(transaction=True)
        self._queue_deletes(pipe, removed)
        for entry, args in batch:
            self._put_script(keys=self._script_keys(entry.scope, entry.entry_id), args=args,
                             client=pipe)
        return [int(v) for v in pipe.execute()[len(removed):]]

    def _delete_batch(self, removed: Sequence[Removal]) -> list[Any]:
        pipe = self._db.pipeline(transaction=True)
        self._queue_deletes(pipe, removed)
        return pipe.execute()

    def _queue_deletes(self, pipe: Any, removed: Sequence[Removal]) -> None:
        for scope, entry_id, version in removed:
            self._delete_script(keys=self._script_keys(scope, entry_id),
                                args=["" if version is None else version], client=pipe)

    def _call(self, what: str, fn: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except redis.RedisError as exc:
            raise StorageError(f"Redis tier {what} at {self.url} failed: {exc}") from exc


class RedisTier(StoreTier):
    """A shared remote tier in Redis; semantic search over a local FAISS view of it."""

    store: RedisStore

    def __init__(self, url: str = "redis://127.0.0.1:6379/0", capacity: Capacity | None = None,
                 policy: EvictionPolicy | str = "lru", spec: IndexSpec = IndexSpec(),
                 precheck: bool = True, prefix: str = "mmcache", name: str = "l3",
                 socket_timeout: float = 5.0, max_staleness: float = 0.0) -> None:
        super().__init__(RedisStore(url, prefix, socket_timeout), capacity, policy, spec, precheck, name,
                         max_staleness)

    @property
    def url(self) -> str:
        """The server's URL."""
        return self.store.url

    @property
    def prefix(self) -> str:
        """The key prefix of this store."""
        return self.store.prefix

    def key(self, scope: str, entry_id: str) -> str:
        """The Redis key of ``entry_id`` in ``scope``."""
        return self.store.key(scope, entry_id)


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
                     hints=decode_hints(text.get("hints") or None),
                     version=int(text.get("version", 0)))
    except (KeyError, ValueError, TypeError, AttributeError, UnicodeDecodeError) as exc:
        raise StorageError(f"Redis tier {url} holds a malformed entry: {exc!r}") from None
