"""Remote L3 in a shared Redis server or Redis Cluster: :class:`RedisStore` and the tier
over it, :class:`RedisTier`.

Debian's Redis has no vector search, so every client keeps a local
:class:`mmcache.tiers.vectors.SemanticIndex` built from the server on open and
brought up to date from the change log before each search (Redis is the shared
store; the index is a local view of it, :mod:`mmcache.tiers.store`).

Layout under ``prefix`` (default ``"mmcache"``) on one server, no pickle anywhere:

* ``{prefix}:{scope-hash}:{entry_id}`` — one hash per entry; every scope is its
  own key space, so a lookup in one scope cannot reach another scope's keys.
  Fields: ``entry_id``, ``scope``, ``exact_key``, ``value_type`` + ``value``
  (type-tagged bytes, :mod:`mmcache.tiers.codec`), ``size``, ``created_at``,
  ``expires_at``, ``ground_truth`` (JSON), ``hints`` (the entry's policy hints, JSON;
  empty when it has none, absent in entries written before hints existed),
  ``question``, ``context`` (the conversation turns, JSON) and ``context_vector`` (raw
  float32; all three empty when absent, and absent in entries written before them),
  ``image_fingerprint`` (the entry's grey thumbnail, :mod:`mmcache.verify.image_check`; empty
  without an image, absent in entries written before it),
  ``version`` (absent in entries written before versions: 0) and ``vec:{modality}``
  (raw float32). An entry with a TTL carries an EXPIRE (its expiry plus the cache's
  stale windows), so expired entries leave Redis by themselves.
* ``{prefix}:seq`` — the store's sequence counter; ``{prefix}:log`` — sorted set of entry
  keys scored by the number of their latest change. Writes and compare-and-deletes are
  Lua scripts that take the next number atomically with the change, so a client loads
  exactly the writes, replaces and deletes made after the last number it has seen.
* ``{prefix}:epoch`` — the identity of the data the sequence numbers: a random token the
  first client (or write) records when there is none. A store that loses its data (a
  restart without persistence, FLUSHALL, maxmemory evicting the control keys) loses it
  too, so the next client records another; a store rolled back (an older snapshot, a
  lagging replica promoted) shows a sequence below what clients have seen. Either way every
  client resyncs from what the store holds and drops the private copies it took before
  (:class:`~mmcache.tiers.store.Head`).
* ``{prefix}:floor`` — the number up to which the log was compacted: each client, every
  :data:`COMPACT_EVERY` changes it makes, drops the members more than :data:`COMPACT_LAG`
  below the head whose key is gone (deleted, or expired by Redis); a client that has not
  replayed up to the floor resyncs.
* ``{prefix}:quarantine:{scope-hash}:{entry_id}`` — an entry hash that did not decode,
  moved here (its fields kept, without expiry) with ``quarantine_reason``,
  ``quarantined_at`` (the server's time) and ``quarantined_key``; ``{prefix}:quarantined`` —
  sorted set of those keys by that time. The move is one script that also logs the removal
  like a delete (so every client drops the entry, and it no longer counts), done only while
  the key still holds the version that failed to decode; it is reported once
  (``MM-ENTRY-UNREADABLE``) and served as absent (:meth:`RedisStore.quarantined` lists them).
* ``{prefix}:recency`` — sorted set of entry keys scored by their place in the store's
  recency, ``{prefix}:tick`` the counter that numbers it, ``{prefix}:sizes`` — hash of each
  entry key's size, ``{prefix}:bytes`` — their sum. The write scripts keep them; a put
  takes the next number, and so does each served get a tier sends (``ZADD XX``, with its
  next write or after :data:`~mmcache.tiers.store.TOUCH_BATCH` of them). On one server the
  put script then deletes the keys of the lowest numbers, each logged like a delete, until
  the store is within its recorded capacity (:attr:`RedisStore.evicts`), so every client
  evicts by one view; it returns their keys and versions. An entry Redis expired stays
  counted until it comes up as a victim or a sweep deletes it; a tier sweeps before a put
  that would take the store past its capacity (:mod:`mmcache.tiers.store`). Either way its
  removal is logged like a delete, so every client drops its copy on replay.
* ``{prefix}:capacity`` — the capacity recorded by the first client (JSON);
  ``{prefix}:fact:{name}`` — what every client must agree on, recorded by the first one: the
  key layout (``layout``) and the encoder of each modality (``encoder:<modality>``).

On a Redis Cluster (``cluster=True``; config ``l3.options.cluster: true``, with the URL
of any node) a script and a MULTI/EXEC may only touch keys of one hash slot, so each
scope keeps its own sequence and change log next to its entries, in the slot of a hash
tag (Redis hashes only the part in braces, which are literal here; ``H`` is the scope
hash): ``mmcache:{H}:<entry_id>``, ``mmcache:seq:{H}``, ``mmcache:log:{H}``,
``mmcache:epoch:{H}``, ``mmcache:quarantine:{H}:<entry_id>``, ``mmcache:quarantined:{H}``
and the recency keys ``mmcache:recency:{H}``, ``mmcache:tick:{H}``, ``mmcache:sizes:{H}``,
``mmcache:bytes:{H}``, with ``mmcache:scopes`` the set of scope hashes that have a log (and
no brace in the prefix). A script cannot see the other scopes' entries, so a cluster does
not evict by itself: each client keeps it within capacity by its own budget.
Scopes spread over the shards while a write stays one atomic step in one slot; a batch
over several scopes is one transaction per scope, in order, so a failure part-way keeps
the scopes written before it (every client replays them). One scope never spans shards:
a hot scope is a hot shard, which the skew watch reports (:mod:`mmcache.tiers.skew`;
every request is counted on the shard of its key, in the cache's
``metrics.shard_requests`` and ``metrics.skew_alerts``).
"""

from __future__ import annotations

import json
import logging
import uuid
from collections import Counter, defaultdict
from typing import Any, Callable, Collection, Iterable, Iterator, Mapping, Sequence

import redis
import xxhash
from redis.backoff import NoBackoff
from redis.retry import Retry
from redis.cluster import RedisCluster
from redis.exceptions import RedisClusterException

from mmcache.errors import ConfigError, StorageError
from mmcache.policies import EvictionPolicy
from mmcache.types import Entry, redacted_url
from mmcache.tiers.base import Capacity
from mmcache.tiers.codec import (decode_hints, decode_label, decode_turns, decode_value, encode_hints,
                    encode_label, encode_turns, encode_value, vector_from_bytes,
                    vector_to_bytes)
from mmcache.tiers.skew import SKEW_WINDOW, SkewWatch
from mmcache.tiers.store import Change, Head, Removal, Store, StoreTier, Written
from mmcache.tiers.vectors import IndexSpec

_LOG = logging.getLogger(__name__)
VECTOR_FIELD = "vec:"
#: The version of the key layout below; a store of another one is refused.
LAYOUT = "4"
#: Seconds a request waits to connect or read before the store counts as failing.
SOCKET_TIMEOUT_S = 1.0
#: A sequence's log is compacted each time its head passes a multiple of this many numbers.
COMPACT_EVERY = 1000
#: Records of gone entries this many numbers below the head survive a compaction.
COMPACT_LAG = 10_000

# The next number of the sequence (KEYS[1]), above every number its log (KEYS[2]) holds even
# when the counter was lost and its log kept, with the epoch (KEYS[4]) recorded if the store
# has none (ARGV[2]).
_NEXT_SEQ = """
redis.call('SET', KEYS[4], ARGV[2], 'NX')
local seq = redis.call('INCR', KEYS[1])
local top = redis.call('ZREVRANGE', KEYS[2], 0, 0, 'WITHSCORES')[2]
if top and tonumber(top) >= seq then
  seq = tonumber(top) + 1
  redis.call('SET', KEYS[1], seq)
end
"""

# Drops the entry key ``key`` from the recency (KEYS[5]), sizes (KEYS[6]) and bytes (KEYS[7]);
# true if it was counted there.
_UNCOUNT = """
local function uncount(key)
  local size = redis.call('HGET', KEYS[6], key)
  if size then
    redis.call('HDEL', KEYS[6], key)
    redis.call('DECRBY', KEYS[7], size)
  end
  return redis.call('ZREM', KEYS[5], key) == 1 or size ~= false
end
"""

# KEYS: seq, log, entry key, epoch, recency, sizes, bytes, tick; ARGV: milliseconds to keep
# it (0: no expiry), a new epoch, the store's max_entries and max_bytes ('': unlimited), then
# the field/value pairs of the entry hash. Returns the entry's version, then the key and
# version of each entry evicted (least recent first) to bring the store within those limits.
# The arguments are checked before the first write: a script that fails part-way keeps what
# it already wrote.
_PUT_SCRIPT = """
local keep = tonumber(ARGV[1])
if keep == nil or keep < 0 or keep > 1e15 or keep ~= math.floor(keep) or #ARGV % 2 ~= 0 then
  return redis.error_reply('ERR mmcache put: bad expiry or fields')
end
""" + _UNCOUNT + _NEXT_SEQ + """
uncount(KEYS[3])
redis.call('DEL', KEYS[3])
redis.call('HSET', KEYS[3], 'version', seq, unpack(ARGV, 5))
if keep > 0 then redis.call('PEXPIRE', KEYS[3], ARGV[1]) end
redis.call('ZADD', KEYS[2], seq, KEYS[3])
local size = redis.call('HGET', KEYS[3], 'size')
redis.call('HSET', KEYS[6], KEYS[3], size)
redis.call('INCRBY', KEYS[7], size)
redis.call('ZADD', KEYS[5], redis.call('INCR', KEYS[8]), KEYS[3])
local max_entries, max_bytes = tonumber(ARGV[3]), tonumber(ARGV[4])
local result = {seq}
while (max_entries and redis.call('ZCARD', KEYS[5]) > max_entries) or
    (max_bytes and tonumber(redis.call('GET', KEYS[7]) or '0') > max_bytes) do
  local victim = redis.call('ZRANGE', KEYS[5], 0, 0)[1]
  if not victim then break end
  local version = redis.call('HGET', victim, 'version') or '0'
  uncount(victim)
  redis.call('ZADD', KEYS[2], redis.call('INCR', KEYS[1]), victim)
  if redis.call('DEL', victim) == 1 then
    result[#result + 1] = victim
    result[#result + 1] = version
  end
end
return result
"""

# KEYS: seq, log, entry key, epoch, recency, sizes, bytes; ARGV: the version to delete ('' for
# any), a new epoch. Returns 1 if deleted. A key Redis expired that is still counted leaves the
# recency too, and its removal is logged like a delete (so every client drops its copy).
_DELETE_SCRIPT = _UNCOUNT + """
if redis.call('EXISTS', KEYS[3]) == 0 then
  if uncount(KEYS[3]) then
""" + _NEXT_SEQ + """
    redis.call('ZADD', KEYS[2], seq, KEYS[3])
  end
  return 0
end
if ARGV[1] ~= '' and redis.call('HGET', KEYS[3], 'version') ~= ARGV[1] then return 0 end
uncount(KEYS[3])
redis.call('DEL', KEYS[3])
""" + _NEXT_SEQ + """
redis.call('ZADD', KEYS[2], seq, KEYS[3])
return 1
"""

# KEYS: recency, tick; ARGV: entry keys served, oldest first. Gives each one still counted the
# next number of the recency, as if written now.
_TOUCH_SCRIPT = """
for i = 1, #ARGV do
  redis.call('ZADD', KEYS[1], 'XX', redis.call('INCR', KEYS[2]), ARGV[i])
end
return #ARGV
"""

# KEYS: an entry key. Returns the entry hash's field/value pairs (flat, as HGETALL) but its
# stored value, read in one step so the vectors and the version come from one write.
_METADATA_SCRIPT = """
local fields = redis.call('HGETALL', KEYS[1])
local kept = {}
for i = 1, #fields, 2 do
  if fields[i] ~= 'value' then
    kept[#kept + 1] = fields[i]
    kept[#kept + 1] = fields[i + 1]
  end
end
return kept
"""

# KEYS: seq, log, entry key, epoch, recency, sizes, bytes, tick, quarantine key, quarantined
# set; ARGV: the raw version field of the hash that failed to decode ('' when it had none), a
# new epoch, the reason. Moves the entry hash to the quarantine key (its fields kept, no
# expiry) with the reason and the server's time, lists it in the quarantined set (scored by
# that time) and logs the removal like a delete, only while the entry still holds that
# version; returns 1 if moved.
_QUARANTINE_SCRIPT = _UNCOUNT + """
if redis.call('EXISTS', KEYS[3]) == 0 then return 0 end
if (redis.call('HGET', KEYS[3], 'version') or '') ~= ARGV[1] then return 0 end
local now = redis.call('TIME')
local at = now[1] .. '.' .. string.format('%06d', tonumber(now[2]))
uncount(KEYS[3])
redis.call('RENAME', KEYS[3], KEYS[9])
redis.call('PERSIST', KEYS[9])
redis.call('HSET', KEYS[9], 'quarantine_reason', ARGV[3], 'quarantined_at', at,
           'quarantined_key', KEYS[3])
redis.call('ZADD', KEYS[10], at, KEYS[9])
""" + _NEXT_SEQ + """
redis.call('ZADD', KEYS[2], seq, KEYS[3])
return 1
"""

# KEYS: seq, log, floor; ARGV: how many numbers below the head delete records survive.
# Removes the log's members numbered between the last floor and the new one whose key is
# gone (deleted, or expired by Redis), and raises the floor; returns how many went.
_COMPACT_SCRIPT = """
local head = tonumber(redis.call('GET', KEYS[1]) or '0')
local floor = tonumber(redis.call('GET', KEYS[3]) or '0')
local bound = head - tonumber(ARGV[1])
if bound <= floor then return 0 end
local gone = 0
for _, member in ipairs(redis.call('ZRANGEBYSCORE', KEYS[2], '(' .. floor, bound)) do
  if redis.call('EXISTS', member) == 0 then
    redis.call('ZREM', KEYS[2], member)
    gone = gone + 1
  end
end
redis.call('SET', KEYS[3], bound)
return gone
"""

#: What redis-py raises for a failed request (its cluster client's own errors are no RedisError).
REDIS_ERRORS = (redis.RedisError, RedisClusterException)


def scope_tag(scope: str) -> str:
    """The short, key-safe hash of a scope used in Redis key names."""
    return xxhash.xxh3_64_hexdigest(scope.encode("utf-8", "surrogatepass"))


def _layout_refusal(location: str, prefix: str, layout: str) -> str:
    """Why a store of another key layout is refused, and the two ways to go on."""
    return (f"the Redis store at {location} prefix {prefix!r} has key layout {layout!r}, this "
            f"mmcache reads and writes layout {LAYOUT!r} only (no migration): set another "
            "`l3.options.prefix`, or drop the old cache's keys, e.g. `redis-cli -u <url> --scan "
            f"--pattern '{prefix}:*' | xargs -r redis-cli -u <url> unlink` (they hold cached "
            "answers only, which the cache stores again on misses)")


class RedisStore(Store):
    """Entries in a Redis server (or cluster) under one key prefix, with change logs."""

    shared = True

    def __init__(self, url: str = "redis://127.0.0.1:6379/0", prefix: str = "mmcache",
                 socket_timeout: float = SOCKET_TIMEOUT_S, cluster: bool = False,
                 skew_window: int = SKEW_WINDOW) -> None:
        if cluster and ("{" in prefix or "}" in prefix):
            raise ConfigError(f"the Redis tier prefix {prefix!r} holds a brace, which would "
                              "change the hash slot of its keys on a cluster: use a prefix "
                              "without '{' and '}'")
        self.url = url
        #: The URL without its password, for every message.
        self.location = redacted_url(url)
        self.prefix = prefix
        self.cluster = cluster
        #: One server evicts by itself; a cluster's scripts cannot see the other shards.
        self.evicts = not cluster
        self._capacity = Capacity()
        self._capacity_key = f"{prefix}:capacity"
        self._scopes_key = f"{prefix}:scopes"
        self._id_offset = len(self.key("", ""))
        #: Scope logs this client has registered in ``{prefix}:scopes``.
        self._registered: set[str] = set()
        #: Changes this client made per sequence since it last compacted that sequence.
        self._changes: Counter[str] = Counter()
        #: ``(key, raw version)`` of the unreadable hashes this client reported but could not
        #: move (a failed request): each is reported once.
        self._reported: set[tuple[str, bytes]] = set()
        self._db = _connect(url, socket_timeout, cluster)
        try:
            self._put_script = self._script(_PUT_SCRIPT)
            self._delete_script = self._script(_DELETE_SCRIPT)
            self._touch_script = self._script(_TOUCH_SCRIPT)
            self._compact_script = self._script(_COMPACT_SCRIPT)
            self._quarantine_script = self._script(_QUARANTINE_SCRIPT)
            self._metadata_script = self._script(_METADATA_SCRIPT)
            self.skew = SkewWatch(self._shards(), window=skew_window, where=self.location)
            layout = self.record_fact("layout", LAYOUT)
            if layout != LAYOUT:
                raise StorageError(_layout_refusal(self.location, prefix, layout),
                                   code="MM-SCHEMA-VERSION")
        except BaseException:
            self._db.close()
            raise

    def key(self, scope: str, entry_id: str) -> str:
        """The Redis key of ``entry_id`` in ``scope``."""
        tag = scope_tag(scope)
        return f"{self.prefix}:{{{tag}}}:{entry_id}" if self.cluster else \
            f"{self.prefix}:{tag}:{entry_id}"

    def shard_of(self, key: str) -> str:
        """The ``host:port`` of the server that holds ``key``."""
        if self.cluster:
            return self._db.get_node_from_key(key).name
        kwargs = self._db.connection_pool.connection_kwargs
        return kwargs["path"] if "path" in kwargs else f"{kwargs['host']}:{kwargs['port']}"

    # -- Store protocol ------------------------------------------------------------------
    def encode(self, entry: Entry, keep_for: float | None) -> list[Any]:
        """``[milliseconds to keep, epoch, max_entries, max_bytes, field, value, ...]``: the
        limits the put script evicts down to (``''``: none); SerializationError first."""
        limits = self._capacity if self.evicts else Capacity()
        return [0 if keep_for is None else max(1, int(keep_for * 1000)), _new_epoch(),
                *("" if n is None else int(n) for n in (limits.max_entries, limits.max_bytes)),
                *_entry_fields(entry)]

    def write(self, batch: Sequence[tuple[Entry, Any]], removed: Sequence[Removal],
              touched: Sequence[tuple[str, str]] = ()) -> Written:
        written = self._call("write", self._transactions, batch, removed,
                             touched if self.evicts else ())[0]
        self._count_changes([e.scope for e, _ in batch] + [r.scope for r in removed])
        return written

    def read(self, scope: str, entry_id: str) -> Entry | None:
        key = self.key(scope, entry_id)
        raw = self._call("read", self._db.hgetall, self._counted(key))
        entry = self._readable(raw, key)
        if entry is None:
            return None
        if entry.scope != scope or entry.entry_id != entry_id:
            raise StorageError(f"Redis tier {self.location}: key {key!r} "
                               f"holds entry {entry.entry_id!r} of another scope")
        return entry

    def delete(self, removed: Sequence[Removal]) -> list[str]:
        if not removed:
            return []
        done = self._call("delete", self._transactions, [], removed, ())[1]
        self._count_changes([r.scope for r in removed])
        return [r.entry_id for r, ok in zip(removed, done) if int(ok)]

    def latest(self, log: str = "") -> int:
        """The last number of sequence ``log`` (one server: ``""``, the only one)."""
        return self.heads([log])[log].seq

    def changes(self, since: int, log: str = "") -> list[Change]:
        """The changes after ``since`` in sequence ``log`` (one server: ``""``)."""
        return self.changes_after({log: since})

    def log_of(self, scope: str) -> str:
        """``""`` on one server; on a cluster, the scope's hash (its own sequence)."""
        return scope_tag(scope) if self.cluster else ""

    def heads(self, logs: Collection[str] | None = None) -> dict[str, Head]:
        names = sorted(self._logs() if logs is None else logs)
        keys = (self._seq_key, self._epoch_key, self._floor_key)
        read = self._pipelined("read", "get", [(key(n),) for n in names for key in keys])
        epochs = dict(zip(names, read[1::3]))
        lost = [name for name, epoch in epochs.items() if epoch is None]
        if lost:  # new, or lost with the data: the first client to ask records a new epoch
            self._registered -= set(lost)  # the list of scopes went too: register again
            fresh = [_new_epoch() for _ in lost]
            before = self._pipelined("write", "set", [(self._epoch_key(name), token)
                                                      for name, token in zip(lost, fresh)],
                                     nx=True, get=True)
            epochs.update((name, old or token.encode())
                          for name, old, token in zip(lost, before, fresh))
        return {name: Head(int(seq or 0), epochs[name].decode(), int(floor or 0))
                for name, seq, floor in zip(names, read[::3], read[2::3])}

    def changes_after(self, since: Mapping[str, int]) -> list[Change]:
        names = sorted(since)
        logged = self._pipelined("read", "zrangebyscore",
                                 [(self._log_key(n), f"({since[n]}", "+inf") for n in names],
                                 withscores=True)
        return [Change(int(seq), key.decode()[self._id_offset:], key.decode(), name)
                for name, changes in zip(names, logged) for key, seq in changes]

    def fetch(self, refs: Sequence[str], values: bool = True) -> list[Entry | None]:
        raws = self._pipelined("read", "hgetall", [(r,) for r in refs]) if values \
            else self._metadata(refs)
        return [self._readable(raw, ref, values) for ref, raw in zip(refs, raws)]

    def _metadata(self, refs: Sequence[str]) -> list[dict[bytes, bytes]]:
        """The hashes under ``refs`` without their ``value`` field, in one pipeline."""
        pipe = self._db.pipeline(transaction=False)
        for ref in refs:
            self._metadata_script(keys=[self._counted(ref)], args=[], client=pipe)
        flat = self._call("read", pipe.execute) if refs else []
        return [dict(zip(fields[::2], fields[1::2])) for fields in flat]

    def _readable(self, raw: Mapping[bytes, bytes], key: str,
                  values: bool = True) -> Entry | None:
        """The entry one hash holds (None: none), without its value unless ``values``; one
        that does not decode is quarantined (:meth:`_quarantine`) and served as absent."""
        if not raw:
            return None
        try:
            return _decode_entry(raw, self.location, values)
        except StorageError as exc:
            self._quarantine(key, raw.get(b"version", b""), str(exc))
            return None

    def quarantined(self) -> list[tuple[str, str]]:
        """``(entry_id, reason)`` of every stored entry that could not be read back, oldest
        first: each was moved to its quarantine hash and is absent from the store."""
        logs = self._logs()
        listed = self._pipelined("read", "zrange", [(self._quarantined_key(n), 0, -1)
                                                    for n in logs], withscores=True)
        moved = sorted((at, key.decode()) for keys in listed for key, at in keys)
        reasons = self._pipelined("read", "hget", [(key, "quarantine_reason")
                                                   for _, key in moved])
        offset = len(self._quarantine_key(self.key("", "")))
        return [(key[offset:], reason.decode("utf-8", "replace"))
                for (_, key), reason in zip(moved, reasons) if reason is not None]

    def record_capacity(self, capacity: Capacity, replace: bool = False) -> Capacity:
        text = json.dumps([capacity.max_entries, capacity.max_bytes])
        key = self._capacity_key
        if replace:
            self._call("write", self._db.set, self._counted(key), text)
        else:
            self._call("write", self._db.set, self._counted(key), text, nx=True)
        max_entries, max_bytes = json.loads(self._call("read", self._db.get, self._counted(key)))
        self._capacity = Capacity(max_entries, max_bytes)
        return self._capacity

    def record_fact(self, name: str, value: str) -> str:
        key = self._counted(f"{self.prefix}:fact:{name}")
        before = self._call("write", self._db.set, key, value, nx=True, get=True)
        return value if before is None else before.decode()

    def count(self) -> int:
        return sum(self._pipelined("read", "exists", [(k,) for k in self._logged_keys()]))

    def scan(self) -> Iterator[Entry]:
        return iter([e for e in self.fetch(self._logged_keys()) if e is not None])

    def close(self) -> None:
        self._db.close()

    # -- internals -----------------------------------------------------------------------
    def _seq_key(self, log: str) -> str:
        return f"{self.prefix}:seq:{{{log}}}" if log else f"{self.prefix}:seq"

    def _log_key(self, log: str) -> str:
        return f"{self.prefix}:log:{{{log}}}" if log else f"{self.prefix}:log"

    def _floor_key(self, log: str) -> str:
        return f"{self.prefix}:floor:{{{log}}}" if log else f"{self.prefix}:floor"

    def _count_changes(self, scopes: Sequence[str]) -> None:
        """Count this client's changes per sequence; compact each one it has changed
        :data:`COMPACT_EVERY` times since it last did."""
        for scope in scopes:
            self._changes[self.log_of(scope)] += 1
        for log in [log for log, n in self._changes.items() if n >= COMPACT_EVERY]:
            del self._changes[log]
            self._compact(log)

    def _compact(self, log: str) -> None:
        """Drop the records of gone entries more than :data:`COMPACT_LAG` numbers below the
        head of sequence ``log`` and raise its floor (clients behind it resync)."""
        keys = [self._seq_key(log), self._log_key(log), self._floor_key(log)]
        self._call("write", self._compact_script, keys=keys, args=[COMPACT_LAG],
                   client=self._db)

    def _quarantined_key(self, log: str) -> str:
        return f"{self.prefix}:quarantined:{{{log}}}" if log else f"{self.prefix}:quarantined"

    def _quarantine_key(self, key: str) -> str:
        """Where the entry hash at ``key`` goes when it is quarantined (its hash slot)."""
        return f"{self.prefix}:quarantine:{key[len(self.prefix) + 1:]}"

    def _log_of_key(self, key: str) -> str:
        """The sequence of the entry key ``key`` (on a cluster, its hash tag)."""
        if not self.cluster:
            return ""
        return key[len(self.prefix) + 1:].split(":", 1)[0].strip("{}")

    def _quarantine(self, key: str, version: bytes, reason: str) -> None:
        """Move the unreadable entry hash at ``key`` (of raw ``version``) to its quarantine hash
        and log its removal, so every client drops it, in one script that moves nothing
        once another write replaced the entry; the move is reported
        (``MM-ENTRY-UNREADABLE``, with a warning) once. A move that fails leaves the hash
        at its key, reported once by this client."""
        log = self._log_of_key(key)
        keys = [*self._script_keys_of(log, key), self._quarantine_key(key),
                self._quarantined_key(log)]
        self._counted(key)
        try:
            moved = int(self._call("write", self._quarantine_script, keys=keys,
                                   args=[version, _new_epoch(), reason], client=self._db))
        except StorageError as exc:
            if (key, version) in self._reported:
                return
            self._reported.add((key, version))
            reason += f" (and it could not be moved to quarantine: {exc})"
            where = f"left at key {key!r}"
        else:
            if not moved:  # replaced or deleted since it was read: nothing to quarantine
                _LOG.debug("Redis tier %s: unreadable key %r changed before it was "
                           "quarantined", self.location, key)
                return
            self._changes[log] += 1
            where = f"moved to key {keys[8]!r}"
        _LOG.warning("Redis tier %s: the entry at key %r cannot be read (%s); it is served as "
                     "absent and %s for inspection", self.location, key, reason, where)
        if self.events is not None:
            self.events.report("MM-ENTRY-UNREADABLE", f"{reason} (key {key!r}, served as "
                                                      f"absent, {where})")

    def _epoch_key(self, log: str) -> str:
        return f"{self.prefix}:epoch:{{{log}}}" if log else f"{self.prefix}:epoch"

    def _script_keys(self, scope: str, entry_id: str) -> list[str]:
        return self._script_keys_of(self.log_of(scope), self.key(scope, entry_id))

    def _script_keys_of(self, log: str, key: str) -> list[str]:
        """The keys a write script of the entry key ``key`` of sequence ``log`` touches:
        seq, log, the entry, epoch, recency, sizes, bytes, tick."""
        return [self._seq_key(log), self._log_key(log), key, self._epoch_key(log),
                *(self._counter_key(name, log) for name in ("recency", "sizes", "bytes", "tick"))]

    def _counter_key(self, name: str, log: str) -> str:
        """The recency key ``name`` of sequence ``log`` (in its hash slot on a cluster)."""
        return f"{self.prefix}:{name}:{{{log}}}" if log else f"{self.prefix}:{name}"

    def _logs(self) -> list[str]:
        """Every sequence's name (a cluster's scopes that have one)."""
        if not self.cluster:
            return [""]
        tags = self._call("read", self._db.smembers, self._counted(self._scopes_key))
        return [t.decode() for t in tags]

    def _logged_keys(self) -> list[str]:
        """The key of every entry the change logs name."""
        logged = self._pipelined("read", "zrange", [(self._log_key(n), 0, -1)
                                                    for n in self._logs()])
        return [key.decode() for keys in logged for key in keys]

    def _transactions(self, batch: Sequence[tuple[Entry, Any]], removed: Sequence[Removal],
                      touched: Sequence[tuple[str, str]]) -> tuple[Written, list[Any]]:
        """Record ``touched``, compare-and-delete ``removed`` and write ``batch`` in one
        MULTI/EXEC per sequence (in that order); what was written and the deletes' results,
        each in order (redis errors pass through)."""
        groups: dict[str, tuple[list[int], list[int], list[str]]] = \
            defaultdict(lambda: ([], [], []))
        for scope, entry_id in touched:
            groups[self.log_of(scope)][2].append(self.key(scope, entry_id))
        for i, r in enumerate(removed):
            groups[self.log_of(r.scope)][1].append(i)
        for i, (entry, _) in enumerate(batch):
            groups[self.log_of(entry.scope)][0].append(i)
        self._register([log for log, (puts, _, _) in groups.items() if puts])
        versions, deleted, evicted = [0] * len(batch), [0] * len(removed), []
        for log, (puts, deletes, served) in groups.items():
            pipe = self._db.pipeline(transaction=True)
            if served:
                keys = [self._counter_key("recency", log), self._counter_key("tick", log)]
                self._touch_script(keys=[self._counted(k) for k in keys], args=served,
                                   client=pipe)
            self._queue_deletes(pipe, [removed[i] for i in deletes])
            for i in puts:
                entry, args = batch[i]
                keys = self._script_keys(entry.scope, entry.entry_id)
                self._put_script(keys=keys, args=args, client=pipe)
                self._counted(keys[2])
            done = pipe.execute()[1 if served else 0:]
            for i, ok in zip(deletes, done):
                deleted[i] = ok
            for i, (version, *gone) in zip(puts, done[len(deletes):]):
                versions[i] = int(version)
                evicted += [(key.decode()[self._id_offset:], int(v))
                            for key, v in zip(gone[::2], gone[1::2])]
        return Written(versions, evicted), deleted

    def _queue_deletes(self, pipe: Any, removed: Sequence[Removal]) -> None:
        for scope, entry_id, version in removed:
            keys = self._script_keys(scope, entry_id)
            self._delete_script(keys=keys, args=["" if version is None else version,
                                                 _new_epoch()], client=pipe)
            self._counted(keys[2])

    def _register(self, logs: Iterable[str]) -> None:
        """Add the scope logs this client has not registered yet to ``{prefix}:scopes``."""
        new = [log for log in logs if log and log not in self._registered]
        if new:
            self._db.sadd(self._counted(self._scopes_key), *new)
            self._registered.update(new)

    def _script(self, text: str) -> Callable[..., Any]:
        """``text`` as a callable ``(keys, args, client)``: on one server a registered script
        (EVALSHA, loaded by the pipeline as needed); on a cluster, whose redis-py pipelines
        refuse EVALSHA, an EVAL of the text (each node caches it compiled)."""
        if not self.cluster:
            return self._db.register_script(text)

        def evaluate(keys: Sequence[str], args: Sequence[Any], client: Any) -> Any:
            return client.execute_command("EVAL", text, len(keys), *keys, *args)
        return evaluate

    def _pipelined(self, what: str, command: str, calls: Sequence[tuple[Any, ...]],
                   **options: Any) -> list[Any]:
        """The results of ``command(key, *args, **options)`` for each ``(key, *args)`` of
        ``calls``, sent in one pipeline (a cluster client sends one per node)."""
        pipe = self._db.pipeline(transaction=False)
        for key, *args in calls:
            getattr(pipe, command)(self._counted(key), *args, **options)
        return self._call(what, pipe.execute) if calls else []

    def _counted(self, key: str) -> str:
        """``key``, after counting one request to its shard."""
        try:
            shard = self.shard_of(key)
        except REDIS_ERRORS as exc:
            raise StorageError(f"Redis tier {self.location} has no shard for {key!r}: "
                               f"{exc}") from exc
        if self.metrics is not None:
            self.metrics.count("shard_requests", shard)
        for skewed in self.skew.record(shard):
            if self.metrics is not None:
                self.metrics.count("skew_alerts", skewed)
        return key

    def _shards(self) -> list[str]:
        """Every shard's ``host:port`` (one server: itself)."""
        if self.cluster:
            return [node.name for node in self._db.get_primaries()]
        return [self.shard_of("")]

    def _call(self, what: str, fn: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except REDIS_ERRORS as exc:
            raise StorageError(f"Redis tier {what} at {self.location} failed: {exc}") from exc


def _new_epoch() -> str:
    """A fresh epoch: a write records it when the store has none, so every loss of the data
    gives the store a new one."""
    return uuid.uuid4().hex


def _connect(url: str, socket_timeout: float, cluster: bool) -> Any:
    """A client of the server (or cluster) at ``url``; StorageError naming the fix when it is
    unreachable or of the other kind. Each request waits at most ``socket_timeout`` seconds
    to connect and to read; a lost connection is retried once at once (a restarted server),
    a timeout is not (a black-holed one)."""
    timeouts = {"socket_timeout": socket_timeout, "socket_connect_timeout": socket_timeout}
    try:
        once = Retry(NoBackoff(), 1, supported_errors=(redis.ConnectionError,))
        client = RedisCluster.from_url(url, **timeouts) if cluster else \
            redis.Redis.from_url(url, **timeouts, retry=once)
    except (*REDIS_ERRORS, ValueError) as exc:
        raise StorageError(f"cannot reach the Redis tier at {redacted_url(url)}: {exc}") from exc
    try:
        client.ping()
        a_cluster_node = not cluster and client.info("cluster").get("cluster_enabled")
    except REDIS_ERRORS as exc:
        client.close()
        raise StorageError(f"cannot reach the Redis tier at {redacted_url(url)}: {exc}") from exc
    if a_cluster_node:
        client.close()
        raise StorageError(f"the Redis server at {redacted_url(url)} is a cluster node: set "
                           "l3.options.cluster: true to use the cluster")
    _warn_if_entries_may_be_evicted(client, url)
    return client


def _warn_if_entries_may_be_evicted(client: Any, url: str) -> None:
    """Warn when the server may evict any key under memory pressure (``allkeys-*``): an entry
    evicted so leaves no record, and other clients go on serving their copies of it."""
    try:
        policies = set(client.config_get("maxmemory-policy").values())
    except REDIS_ERRORS:  # CONFIG is often disabled on managed servers: nothing to say then
        return
    if any(str(p).startswith("allkeys") for p in policies):
        _LOG.warning("the Redis server at %s has maxmemory-policy %s: an entry it evicts "
                     "leaves no record, so other clients may serve their copies of it; use "
                     "noeviction or a volatile-* policy", redacted_url(url), sorted(policies))


class RedisTier(StoreTier):
    """A shared remote tier in Redis; semantic search over a local FAISS view of it.

    ``cluster=True`` talks to a Redis Cluster through redis-py's cluster client (``url``:
    any node); ``skew_window``: requests per window of the skew watch.
    """

    store: RedisStore

    def __init__(self, url: str = "redis://127.0.0.1:6379/0", capacity: Capacity | None = None,
                 policy: EvictionPolicy | str = "lru", spec: IndexSpec = IndexSpec(),
                 precheck: bool = True, prefix: str = "mmcache", name: str = "l3",
                 socket_timeout: float = SOCKET_TIMEOUT_S, max_staleness: float = 0.0,
                 cluster: bool = False, skew_window: int = SKEW_WINDOW) -> None:
        super().__init__(RedisStore(url, prefix, socket_timeout, cluster, skew_window), capacity,
                         policy, spec, precheck, name, max_staleness)

    @property
    def url(self) -> str:
        """The server's URL."""
        return self.store.url

    def backend(self) -> str:
        return f"redis{' cluster' if self.store.cluster else ''} {self.store.location} " \
            f"prefix {self.prefix!r} (shared)"

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
        "question": "" if entry.question is None else entry.question,
        "has_question": int(entry.question is not None),
        "context": encode_turns(entry.context) or "",
        "context_vector": b"" if entry.context_vector is None
        else vector_to_bytes(entry.context_vector),
        "image_fingerprint": entry.image_fingerprint or b"",
    }
    for modality, vec in entry.embeddings.items():
        fields[VECTOR_FIELD + modality] = vector_to_bytes(vec)
    return [x for pair in fields.items() for x in pair]


def _decode_entry(raw: Mapping[bytes, bytes], where: str, values: bool = True) -> Entry:
    """The Entry stored in one Redis hash (without ``values``: a hash read without its
    ``value`` field, the entry's ``value`` None); StorageError when it is malformed."""
    try:
        text = {k.decode(): v for k, v in raw.items()}
        embeddings = {k[len(VECTOR_FIELD):]: vector_from_bytes(v)
                      for k, v in text.items() if k.startswith(VECTOR_FIELD)}
        expires, label = text["expires_at"].decode(), text["ground_truth"].decode()
        return Entry(entry_id=text["entry_id"].decode(), scope=text["scope"].decode(),
                     exact_key=text["exact_key"].decode(),
                     value=decode_value(text["value_type"].decode(), text["value"])
                     if values else None,
                     embeddings=embeddings, size=int(text["size"]),
                     created_at=float(text["created_at"]),
                     expires_at=float(expires) if expires else None,
                     ground_truth=decode_label(label) if label else None,
                     hints=decode_hints(text.get("hints") or None),
                     version=int(text.get("version", 0)),
                     question=text["question"].decode("utf-8", "surrogatepass")
                     if int(text.get("has_question", 0)) else None,
                     context=decode_turns(text.get("context") or None),
                     context_vector=vector_from_bytes(text["context_vector"])
                     if text.get("context_vector") else None,
                     image_fingerprint=text.get("image_fingerprint") or None)
    except (KeyError, ValueError, TypeError, AttributeError, UnicodeDecodeError) as exc:
        raise StorageError(f"Redis tier {where} holds a malformed entry: {exc!r}") from None
