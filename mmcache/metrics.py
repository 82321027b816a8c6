"""Cache metrics: hits per tier and modality, misses, false hits, latency histograms.

Counters are plain dictionaries keyed by ``(tier, modalities)`` where
``modalities`` is the query's modality set as :func:`mmcache.types.modality_set_name` names it
(``"text+image"``; a video clip, keyframes and track: ``"video"``, with text ``"text+video"``).
``not_stored`` counts puts that no tier admitted (every tier's policy declined the
entry), by the modalities of the entry's vectors (``"none"``: an exact key only).
A hit is *false* when the query carries ``ground_truth`` and the entry's stored
ground truth differs. A sharded store (the Redis tier, most usefully on a cluster)
counts its requests per shard in ``shard_requests`` and, in ``skew_alerts``, the windows
in which a shard took over 1.8x (by default) the mean: the skew watch of seed 000 §2.4,
:mod:`mmcache.tiers.skew`; both are keyed by the shard's ``host:port``. Export with
:meth:`CacheMetrics.to_dataframe` (tidy pandas) or :meth:`CacheMetrics.to_prometheus`
(text exposition format). ``failure_events`` counts the failure events the cache emitted, by
``(code, tier)`` (see *Failure events* below). ``verifier_calls`` counts the calls of the cache's
verifier, by the tier holding the judged candidate. ``cross_modal_hits`` counts hits of multimodal
queries (seed 001 §4.4's CrossModalHitRate is it over their lookups); :func:`register_serving`
exports that rate and CacheWarmupLatencyP99 labelled ``model_type`` and ``modality_set``, as the
seed names them.

In a notebook a :class:`CacheMetrics` shows itself as a compact table (``_repr_html_``: hit
ratio per tier and per modality set, the counters, latency quantiles per stage); its plain
``repr`` is one line.

Progress: :func:`progress_bar` is the one progress bar (``tqdm.auto``: a widget in a notebook,
text on stderr elsewhere) that every long call of the package shows (encoding a pool, an
online replay, ``opt_bounds``, a sweep, CLIP training). A call's ``progress=False`` silences
its bar, and ``MMCACHE_PROGRESS=0`` in the environment silences every bar (read at each call,
so a papermill run or a notebook cell can set it); a bar appears only once its call has run
``PROGRESS_DELAY_S`` seconds.

Failure events: when the cache detects that processes sharing a store
disagree (another key version, another encoder, another store schema, an entry its codec cannot
read, a writer's clock ahead of its own), it emits a :class:`FailureEvent` with a stable code
from :data:`FAILURE_CODES`, which holds each code's cause and fix. An :class:`EventLog` keeps
the last :data:`EVENTS_KEPT` events, counts each in ``failure_events``, logs the first of each
code as a warning on the ``mmcache.events`` logger and calls its listener
(``TieredCache(on_event=...)``). Detecting changes nothing the cache does: a mismatch that
refused to open still refuses (the error carries the code), an entry that was not served is
still not served.

Threads: a :class:`CacheMetrics` has its own lock. Its methods (counting, ``reset``,
``snapshot``, the exports, ``hit_ratio``) hold it, so a thread may export or reset the
metrics of a cache other threads are using; to read several counters consistently
from such a thread, read them from :meth:`CacheMetrics.snapshot`.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from bisect import bisect_left
from collections import Counter, deque
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Iterable, Mapping, NamedTuple, Sequence

import numpy as np

from mmcache.errors import ConfigError, InvalidInputError
from mmcache.types import (fmt, fmt_seconds, html_card, html_table, is_multimodal,
                           modality_set_channels, preview, safe_display)

if TYPE_CHECKING:
    import pandas as pd
    from tqdm import tqdm

#: Upper bounds (seconds) of the latency histogram buckets: 1 µs … 10 s, 1-2.5-5 steps.
LATENCY_BUCKETS: tuple[float, ...] = tuple(
    float(f"{m}e{e}") for e in range(-6, 1) for m in (1, 2.5, 5)) + (10.0,)


class Histogram:
    """Cumulative-bucket latency histogram in seconds (Prometheus semantics)."""

    def __init__(self, buckets: Iterable[float] = LATENCY_BUCKETS) -> None:
        self.buckets = tuple(buckets)
        self.counts = [0] * (len(self.buckets) + 1)  # last = above every bound
        self.sum = 0.0
        self.count = 0

    def copy(self) -> "Histogram":
        """An independent copy."""
        other = Histogram(self.buckets)
        other.counts, other.sum, other.count = list(self.counts), self.sum, self.count
        return other

    def minus(self, earlier: "Histogram | None") -> "Histogram":
        """The observations made after ``earlier`` (a copy of this histogram; None: all)."""
        other = self.copy()
        if earlier is not None:
            other.counts = [a - b for a, b in zip(self.counts, earlier.counts)]
            other.sum, other.count = self.sum - earlier.sum, self.count - earlier.count
        return other

    def observe(self, seconds: float) -> None:
        """Record one duration."""
        self.counts[bisect_left(self.buckets, seconds)] += 1
        self.sum += seconds
        self.count += 1

    def quantile(self, q: float) -> float:
        """Upper bucket bound below which a fraction ``q`` of observations fall (inf if beyond)."""
        target, seen = q * self.count, 0
        for bound, n in zip(self.buckets + (float("inf"),), self.counts):
            seen += n
            if seen >= target and seen > 0:
                return bound
        return float("nan")


#: The counters of a CacheMetrics, by attribute name.
COUNTERS: tuple[str, ...] = ("hits", "false_hits", "judged_hits", "stale_hits", "misses",
                             "bypasses", "puts", "not_stored", "evictions", "guard_skips",
                             "errors", "shard_requests", "skew_alerts", "cross_modal_hits",
                             "failure_events", "verifier_calls")


class CacheMetrics:
    """Counters and latency histograms of one TieredCache (thread-safe: see the module)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.reset()

    def reset(self) -> None:
        """Zero every counter and histogram."""
        with self._lock:
            self._zero()

    def snapshot(self) -> "CacheMetrics":
        """An independent copy of every counter and histogram, taken at one instant."""
        copy = CacheMetrics()
        with self._lock:
            for name in COUNTERS:
                setattr(copy, name, Counter(getattr(self, name)))
            copy.latency = {stage: hist.copy() for stage, hist in self.latency.items()}
        return copy

    def since(self, earlier: "CacheMetrics") -> "CacheMetrics":
        """What was counted after ``earlier`` (a snapshot of this object): every counter and
        histogram of this one less that one's."""
        window = CacheMetrics()
        for name in COUNTERS:
            setattr(window, name, getattr(self, name) - getattr(earlier, name))
        window.latency = {stage: hist.minus(earlier.latency.get(stage))
                          for stage, hist in self.latency.items()}
        return window

    def count(self, counter: str, key: Any, n: int = 1) -> None:
        """Add ``n`` to ``key`` of the counter called ``counter`` (one of :data:`COUNTERS`)."""
        with self._lock:
            getattr(self, counter)[key] += n

    def _zero(self) -> None:
        """Fresh counters and histograms (the caller holds the lock or owns the object)."""
        self.hits: Counter[tuple[str, str]] = Counter()
        self.false_hits: Counter[tuple[str, str]] = Counter()
        self.judged_hits: Counter[tuple[str, str]] = Counter()
        self.stale_hits: Counter[tuple[str, str]] = Counter()
        self.misses: Counter[str] = Counter()
        self.bypasses: Counter[str] = Counter()
        self.puts: Counter[str] = Counter()
        self.not_stored: Counter[str] = Counter()
        self.evictions: Counter[str] = Counter()
        self.guard_skips: Counter[str] = Counter()
        self.errors: Counter[str] = Counter()
        self.shard_requests: Counter[str] = Counter()
        self.skew_alerts: Counter[str] = Counter()
        self.cross_modal_hits: Counter[tuple[str, str]] = Counter()
        self.failure_events: Counter[tuple[str, str]] = Counter()
        self.verifier_calls: Counter[str] = Counter()
        self.latency: dict[str, Histogram] = {}

    def hit(self, tier: str, modalities: str, freshness: str, correct: bool | None) -> None:
        """Count a hit served by ``tier``."""
        with self._lock:
            self.hits[(tier, modalities)] += 1
            if is_multimodal(modalities):  # a hit matches every modality: two or more hit
                self.cross_modal_hits[(tier, modalities)] += 1
            if freshness != "fresh":
                self.stale_hits[(tier, freshness)] += 1
            if correct is not None:
                self.judged_hits[(tier, modalities)] += 1
                if not correct:
                    self.false_hits[(tier, modalities)] += 1

    def time(self, stage: str, seconds: float) -> None:
        """Record the duration of one stage (``"l1"``, ``"l2"``, ``"encode"``, ``"get"``, ...)."""
        with self._lock:
            hist = self.latency.get(stage)
            if hist is None:
                hist = self.latency[stage] = Histogram()
            hist.observe(seconds)

    @property
    def lookups(self) -> int:
        """Gets answered (hits + misses; bypasses excluded)."""
        with self._lock:
            return sum(self.hits.values()) + sum(self.misses.values())

    def hit_ratio(self) -> float:
        """Hits ÷ lookups (nan before the first lookup)."""
        with self._lock:
            hits = sum(self.hits.values())
            lookups = hits + sum(self.misses.values())
        return hits / lookups if lookups else float("nan")

    def to_dataframe(self) -> "pd.DataFrame":
        """Tidy table: one row per counter (by tier, modalities or shard) and latency summary."""
        return _frame(self.snapshot())

    def __repr__(self) -> str:
        return safe_display(lambda: plain_summary(self.snapshot()), self)

    def _repr_html_(self) -> str:
        return safe_display(lambda: html_card("CacheMetrics", *html_sections(self.snapshot()),
                                              note="plain data: .to_dataframe()"),
                            self, as_html=True)

    def to_prometheus(self, prefix: str = "mmcache", model_type: str = "unknown") -> str:
        """The metrics in Prometheus text exposition format (via ``prometheus_client``), with
        seed 001 §4.4's CrossModalHitRate per modality set labelled ``model_type``."""
        # deferred: prometheus_client only when metrics are exported
        from prometheus_client import CollectorRegistry, generate_latest

        snap = self.snapshot()
        registry = CollectorRegistry(auto_describe=False)
        registry.register(_Collector(snap, prefix))
        register_serving(registry, model_type=model_type,
                         cross_modal=_cross_modal_rates(snap), prefix=prefix)
        return generate_latest(registry).decode()


# -- failure events --------------------------------------------------------------------------
class FailureCode(NamedTuple):
    """What a failure code means: why it is emitted, and what to do about it."""

    cause: str
    fix: str


#: Every failure code the cache emits, with its cause and its fix (the docs list this table).
FAILURE_CODES: dict[str, FailureCode] = {
    "MM-KEY-VERSION": FailureCode(
        cause="the store records another exact-key version (mmcache.keys.KEY_VERSION) than "
              "this process's: the exact keys it holds were hashed another way, so its entries "
              "are never exact hits here (only semantic ones) and a put of the same query "
              "stores a second entry beside the first; the cache opens all the same",
        fix="run one mmcache version in every process sharing the store; after an upgrade "
            "that changed the key version, move to a new store (another path or prefix) or "
            "clear the old one"),
    "MM-ENCODER-IDENTITY": FailureCode(
        cause="the store records another encoder for a modality (its encoder_id, or the "
              "registry name the config gives) than this cache's: the stored vectors are in "
              "another space, so the cache refuses to open over the store (ConfigError)",
        fix="configure the same encoder in every cache sharing the store, or give this cache "
            "a store of its own (another path or prefix)"),
    "MM-SCHEMA-VERSION": FailureCode(
        cause="the store was laid out by another mmcache version (a SQLite file of another "
              "schema version, a Redis prefix of another key layout), so the store refuses to "
              "open (StorageError)",
        fix="open the store with the mmcache version that wrote it, or use another path or "
            "prefix"),
    "MM-ENTRY-UNREADABLE": FailureCode(
        cause="a stored entry does not decode here (a value type tag another serializer "
              "version wrote, malformed JSON, a broken vector): the store serves it as absent "
              "and moves it out of the store, reported once (SQLite to its quarantine table, "
              "Redis to a quarantine hash under its prefix)",
        fix="run one mmcache (serializer) version in every process sharing the store; "
            "inspect the store's quarantined() (SQLiteStore, RedisStore) or the quarantine "
            "key the event names, and put the entry again"),
    "MM-CLOCK-SKEW": FailureCode(
        cause="another process wrote entries stamped more than MAX_CLOCK_SKEW_S seconds "
              "after this process's clock reads: one of the clocks is off, so those entries' "
              "ages and expiry times are off by as much here (they are still adopted)",
        fix="synchronise the hosts' clocks (NTP, chrony), and give every cache sharing a "
            "store the same kind of clock (no fake clock beside a real one)"),
}
#: Failure events an :class:`EventLog` keeps (older ones are dropped; the counters keep all).
EVENTS_KEPT = 1000
_EVENT_LOG = logging.getLogger("mmcache.events")


@dataclass(frozen=True)
class FailureEvent:
    """One detected failure: its ``code`` (a key of :data:`FAILURE_CODES`) and that code's
    ``cause``, the ``tier`` that detected it, what exactly was seen (``detail``) and when
    (``time``, the detecting cache's clock)."""

    code: str
    cause: str
    tier: str
    detail: str
    time: float

    @property
    def fix(self) -> str:
        """What to do about it (:data:`FAILURE_CODES`)."""
        return FAILURE_CODES[self.code].fix

    def as_dict(self) -> dict[str, Any]:
        """The event as plain data (with its fix), e.g. to send from another process."""
        return {"code": self.code, "cause": self.cause, "fix": self.fix, "tier": self.tier,
                "detail": self.detail, "time": self.time}


def failure_event(code: str, tier: str, detail: str, when: float | None = None) -> FailureEvent:
    """The event of ``code`` (its cause from :data:`FAILURE_CODES`; KeyError for an unknown
    code), detected by ``tier``, at ``when`` (None: now, by ``time.time``)."""
    return FailureEvent(code, FAILURE_CODES[code].cause, tier, detail,
                        time.time() if when is None else float(when))


class EventLog:
    """The last ``keep`` failure events (thread-safe), each counted in ``metrics`` (when given)
    and handed to ``listener``; with ``log``, the first of each code is logged as a warning on
    the ``mmcache.events`` logger, later ones at debug level (a cache's log does; a tier's own
    log, which the cache adopts, does not, so no event is logged twice). ``tier``: the tier that
    reports into this log by :meth:`report`; ``clock`` stamps those events."""

    def __init__(self, tier: str = "", *, keep: int = EVENTS_KEPT,
                 clock: Callable[[], float] = time.time, metrics: CacheMetrics | None = None,
                 listener: Callable[[FailureEvent], None] | None = None,
                 log: bool = True) -> None:
        self.tier, self.clock, self.metrics, self.listener = tier, clock, metrics, listener
        self.log = log
        self._events: deque[FailureEvent] = deque(maxlen=keep)
        self._logged: set[str] = set()
        self._lock = threading.Lock()

    def report(self, code: str, detail: str, tier: str | None = None) -> FailureEvent:
        """Emit the event of ``code`` seen by ``tier`` (None: this log's) now, by this log's
        clock; return it."""
        event = failure_event(code, self.tier if tier is None else tier, detail, self.clock())
        self.emit(event)
        return event

    def emit(self, event: FailureEvent) -> None:
        """Keep, count, log and hand on ``event``. A listener that raises is logged, never
        raised: a hook must not break the call that detected the failure."""
        with self._lock:
            self._events.append(event)
            first = event.code not in self._logged
            self._logged.add(event.code)
        if self.metrics is not None:
            self.metrics.count("failure_events", (event.code, event.tier))
        if self.log:
            _EVENT_LOG.log(logging.WARNING if first else logging.DEBUG,
                           "%s in tier %s: %s; fix: %s", event.code, event.tier or "?",
                           event.detail, event.fix)
        if self.listener is not None:
            try:
                self.listener(event)
            except Exception:  # a failing hook is reported, the cache carries on
                _EVENT_LOG.exception("the failure-event listener raised on %s", event.code)

    def adopt(self, other: "EventLog") -> None:
        """Emit here every event ``other`` holds, and every event it gets from now on."""
        for event in other.events():
            self.emit(event)
        other.listener = self.emit

    def events(self, code: str | None = None) -> list[FailureEvent]:
        """The events kept, oldest first (only those of ``code`` when given)."""
        with self._lock:
            return [e for e in self._events if code is None or e.code == code]

    def __len__(self) -> int:
        with self._lock:
            return len(self._events)


def failure_table() -> "pd.DataFrame":
    """:data:`FAILURE_CODES` as a table: one row per code, its cause and its fix."""
    # deferred: pandas only for this export
    import pandas as pd

    return pd.DataFrame([{"code": c, "cause": f.cause, "fix": f.fix}
                         for c, f in FAILURE_CODES.items()]).set_index("code")


# -- display ---------------------------------------------------------------------------------
#: Latency quantiles a display shows per stage.
DISPLAY_QUANTILES: tuple[float, ...] = (0.5, 0.95, 0.99)


def _tier_names(snap: CacheMetrics, tiers: Sequence[str] | None) -> list[str]:
    """The tiers to show: ``tiers`` in order, else every tier the counters name."""
    if tiers is not None:
        return list(tiers)
    seen = {t for t, _ in snap.hits} | set(snap.puts) | set(snap.evictions)
    return sorted(seen)


def plain_summary(snap: CacheMetrics) -> str:
    """One line: lookups, hits (per tier), hit ratio, misses, puts, evictions, timed stages."""
    hits = Counter()
    for (tier, _), n in snap.hits.items():
        hits[tier] += n
    n_hits, misses = sum(hits.values()), sum(snap.misses.values())
    lookups = n_hits + misses
    ratio = n_hits / lookups if lookups else float("nan")
    per_tier = ", ".join(f"{t}={n}" for t, n in sorted(hits.items()))
    return (f"CacheMetrics(lookups={lookups}, hits={n_hits}"
            f"{f' [{per_tier}]' if per_tier else ''}, hit_ratio={fmt(ratio, 3)}, "
            f"misses={misses}, puts={sum(snap.puts.values())}, "
            f"evictions={sum(snap.evictions.values())}, stages={len(snap.latency)})")


def html_sections(snap: CacheMetrics, tiers: Sequence[str] | None = None) -> list[str]:
    """The tables of a metrics display: counters, hit ratio per tier and per modality set
    (each cell: the share of that set's lookups the tier answered), per-tier counters,
    latency quantiles per stage (upper bounds of histogram buckets), shards when a
    sharded store counted any, and failure events when the cache emitted any. ``tiers``: the
    tiers to show, in order."""
    names = _tier_names(snap, tiers)
    hits_by = Counter()
    for (tier, _), n in snap.hits.items():
        hits_by[tier] += n
    n_hits, misses = sum(hits_by.values()), sum(snap.misses.values())
    lookups = n_hits + misses
    judged, false = sum(snap.judged_hits.values()), sum(snap.false_hits.values())
    counters = [
        ("lookups", lookups), ("hits", n_hits),
        ("hit ratio", n_hits / lookups if lookups else float("nan")), ("misses", misses),
        ("bypasses", sum(snap.bypasses.values())), ("puts", sum(snap.puts.values())),
        ("not stored", sum(snap.not_stored.values())),
        ("evictions", sum(snap.evictions.values())),
        ("stale hits", sum(snap.stale_hits.values())),
        ("false / judged hits", f"{false:,} / {judged:,}"),
        ("guard skips", sum(snap.guard_skips.values())),
        ("verifier calls", sum(snap.verifier_calls.values())),
        ("errors", sum(snap.errors.values()))]
    summary = html_table([name for name, _ in counters], [[value for _, value in counters]],
                         caption="Counters (puts: per tier written)")
    sets = sorted({m for _, m in snap.hits} | set(snap.misses))
    by_set = []
    for kind in sets:
        n = snap.misses[kind] + sum(v for (_, m), v in snap.hits.items() if m == kind)
        row: list[Any] = [kind, n]
        row += [snap.hits[(t, kind)] / n if n else float("nan") for t in names]
        row.append(sum(snap.hits[(t, kind)] for t in names) / n if n else float("nan"))
        by_set.append(row)
    by_set.append(["all", lookups] + [hits_by[t] / lookups if lookups else float("nan")
                                      for t in names]
                  + [n_hits / lookups if lookups else float("nan")])
    hit_ratio = html_table(["modality set", "lookups", *(f"hit ratio {t}" for t in names),
                            "hit ratio (all tiers)"], by_set,
                           caption="Hit ratio per tier and modality set")
    stale, false_by = Counter(), Counter()
    for (tier, _), n in snap.stale_hits.items():
        stale[tier] += n
    for (tier, _), n in snap.false_hits.items():
        false_by[tier] += n
    per_tier = html_table(["tier", "hits", "hit ratio", "stale hits", "false hits", "puts",
                           "evictions", "errors"],
                          [[t, hits_by[t], hits_by[t] / lookups if lookups else float("nan"),
                            stale[t], false_by[t], snap.puts[t], snap.evictions[t],
                            snap.errors[t]] for t in names], caption="Per tier")
    latency = html_table(
        ["stage", "count", "mean", *(f"p{round(q * 100)} ≤" for q in DISPLAY_QUANTILES)],
        [[stage, h.count, fmt_seconds(h.sum / h.count if h.count else float("nan")),
          *(fmt_seconds(h.quantile(q)) for q in DISPLAY_QUANTILES)]
         for stage, h in sorted(snap.latency.items())],
        caption="Latency per stage (quantiles: histogram bucket bounds)") if snap.latency \
        else ""
    shards = html_table(["shard", "requests", "skew alerts"],
                        [[k, snap.shard_requests[k], snap.skew_alerts[k]]
                         for k in sorted(set(snap.shard_requests) | set(snap.skew_alerts))],
                        caption="Shards") if snap.shard_requests or snap.skew_alerts else ""
    failures = html_table(["code", "tier", "events", "fix"],
                          [[c, t, n, FAILURE_CODES[c].fix if c in FAILURE_CODES else ""]
                           for (c, t), n in sorted(snap.failure_events.items())],
                          caption="Failure events") if snap.failure_events else ""
    return [summary, hit_ratio, per_tier, latency, shards, failures]


# -- live view ---------------------------------------------------------------------------------
#: ``MMCACHE_DASHBOARD=static`` makes every dashboard a static table (for batch runs).
DASHBOARD_ENV = "MMCACHE_DASHBOARD"


class Dashboard:
    """A live view of a cache in a notebook (:meth:`mmcache.TieredCache.dashboard`): hit ratio
    per tier and modality set, counters and latency quantiles over the last ``window_s``
    seconds, the threshold rule's δ per modality, what the rule holds for ``scope`` (when one
    is named: its threshold per modality; an error-budget rule's ledger), and the last served
    hits with their tier, similarity, verdict and freshness.

    It listens on the cache's ``after_get`` hook (after any hook already there) and re-renders
    at most every ``refresh_s`` seconds, so a loop streaming queries through the cache in the
    same notebook sees it move while costing the loop little. In a Jupyter kernel with
    ipywidgets it is an ``ipywidgets.HTML`` that updates in place; elsewhere, with
    ``live=False`` or with ``MMCACHE_DASHBOARD=static`` (a papermill run), it is a static
    table of the moment it is shown. :meth:`close` takes it off the hook.
    """

    def __init__(self, cache: Any, *, refresh_s: float = 0.5, window_s: float = 30.0,
                 recent: int = 8, live: bool | None = None, scope: str | None = None,
                 clock: Any = time.monotonic) -> None:
        if not (refresh_s >= 0 and window_s > 0 and isinstance(recent, int) and recent > 0):
            raise InvalidInputError("dashboard needs refresh_s >= 0, window_s > 0 and a "
                                    f"positive int recent; got {refresh_s!r}, {window_s!r}, "
                                    f"{recent!r}")
        self._cache, self._clock, self.scope = cache, clock, scope
        self.refresh_s, self.window_s = float(refresh_s), float(window_s)
        self._hits: deque[Any] = deque(maxlen=recent)
        self._marks: deque[tuple[float, CacheMetrics]] = deque([(clock(),
                                                                 cache.metrics.snapshot())])
        self._rendered_at = -float("inf")
        #: How many times the hook refreshed the view (a live one renders it each time, at
        #: the cost of one metrics snapshot; a static one renders only when displayed).
        self.renders = 0
        self._chained = cache.after_get
        cache.after_get = self._after_get
        self.widget = _live_widget() if live is not False else None

    def html(self) -> str:
        """The view now, as HTML."""
        now = self._clock()
        snap = self._cache.metrics.snapshot()
        self._marks.append((now, snap))
        while len(self._marks) > 1 and self._marks[1][0] <= now - self.window_s:
            self._marks.popleft()
        since, earlier = self._marks[0]
        names = [t.name for t in self._cache.tiers]
        deltas = self._cache.thresholds.deltas()
        rule = html_table(["modality", "δ", "hit needs cosine ≥"],
                          [[m, d, 1.0 - d] for m, d in sorted(deltas.items())],
                          caption="Threshold rule now")
        hits = html_table(["tier", "similarity", "verdict", "freshness", "value"],
                          [[h.tier, h.similarity, "—" if h.verdict is None else h.verdict,
                            h.freshness, preview(h.value, 60)] for h in reversed(self._hits)],
                          caption="Last served hits (newest first)")
        window = html_sections(snap.since(earlier), names)
        return html_card(f"Cache dashboard: the last {now - since:.1f} s", *window[:2],
                         *window[3:4], rule, self._scope_html(snap), hits,
                         note=f"refreshed every {self.refresh_s:g} s while gets run; "
                              "cache.metrics has the totals")

    def _scope_html(self, snap: "CacheMetrics") -> str:
        """The rule's state for :attr:`scope` on the channels looked up so far ("" without one)."""
        if self.scope is None:
            return ""
        channels = {c for kind in set(snap.misses) | {m for _, m in snap.hits}
                    for c in modality_set_channels(kind)}
        state = self._cache.thresholds.scope_state(self.scope, sorted(channels))
        return html_table(["", "value"], [[k, v] for k, v in state.items()],
                          caption=f"Threshold state of scope {self.scope!r}")

    def refresh(self) -> None:
        """Render the view now (the hook does so at most every ``refresh_s`` seconds)."""
        self._rendered_at = self._clock()
        self.renders += 1
        if self.widget is not None:
            self.widget.value = self.html()

    def close(self) -> None:
        """Stop listening: the cache's ``after_get`` is what it was before."""
        if self._cache.after_get == self._after_get:
            self._cache.after_get = self._chained

    def _after_get(self, hit: Any) -> None:
        if self._chained is not None:
            self._chained(hit)
        if hit is not None:
            self._hits.append(hit)
        if self._clock() - self._rendered_at >= self.refresh_s:
            self.refresh()

    def _repr_html_(self) -> str:
        return safe_display(self.html, self, as_html=True)

    def _ipython_display_(self) -> None:
        # deferred: IPython only in a notebook
        from IPython.display import HTML, display

        if self.widget is not None:
            self.refresh()
            display(self.widget)
        else:
            display(HTML(self._repr_html_()))


def _live_widget() -> Any:
    """An ``ipywidgets.HTML`` when this runs in a Jupyter kernel with ipywidgets and
    ``MMCACHE_DASHBOARD`` is not ``static``; None otherwise."""
    if os.environ.get(DASHBOARD_ENV, "").strip().lower() == "static":
        return None
    try:
        # deferred: IPython and ipywidgets only in a notebook
        from IPython import get_ipython
        import ipywidgets
    except ImportError:
        return None
    shell = get_ipython()
    return ipywidgets.HTML() if shell is not None and hasattr(shell, "kernel") else None


# -- progress --------------------------------------------------------------------------------
#: ``MMCACHE_PROGRESS=0`` silences every progress bar (read at each call, never at import).
PROGRESS_ENV = "MMCACHE_PROGRESS"
#: Seconds a call runs before its bar appears, so a short call shows none.
PROGRESS_DELAY_S = 2.0
_PROGRESS_OFF = frozenset({"0", "false", "no", "off"})
_PROGRESS_ON = frozenset({"", "1", "true", "yes", "on"})


def progress_enabled(progress: bool | None = None) -> bool:
    """Whether a call shows its progress bar: not when its ``progress`` is False, and not
    anywhere while the environment has ``MMCACHE_PROGRESS=0`` (``0/false/no/off``; read
    now). ``progress`` must be True, False or None (InvalidInputError); an unreadable
    ``MMCACHE_PROGRESS`` is a ConfigError."""
    if progress is not None and not isinstance(progress, bool):
        raise InvalidInputError(f"progress must be True, False or None, got {progress!r}")
    value = os.environ.get(PROGRESS_ENV, "")
    if value.strip().lower() not in _PROGRESS_OFF | _PROGRESS_ON:
        raise ConfigError(f"{PROGRESS_ENV}={value!r}: set it to 0 (no progress bars) or 1")
    return progress is not False and value.strip().lower() not in _PROGRESS_OFF


def progress_bar(total: int | None, desc: str, *, unit: str = "it",
                 progress: bool | None = None, **options: Any) -> "tqdm":
    """A ``tqdm.auto`` bar (a widget in a notebook, stderr elsewhere) of ``total`` steps,
    disabled as :func:`progress_enabled` says (a disabled bar prints nothing and costs
    nothing), shown after :data:`PROGRESS_DELAY_S` seconds. Use it as a context manager and
    ``update(n)`` once per chunk of work."""
    enabled = progress_enabled(progress)
    from tqdm.auto import tqdm  # deferred: in a kernel tqdm.auto loads ipywidgets

    return tqdm(total=total, desc=desc, unit=unit, disable=not enabled,
                delay=PROGRESS_DELAY_S, **options)


def _cross_modal_rates(snap: "CacheMetrics") -> dict[str, float]:
    """Cross-modal hits ÷ lookups per multimodal modality set."""
    hits, lookups = Counter(), Counter(snap.misses)
    for (_, mods), n in snap.hits.items():
        lookups[mods] += n
    for (_, mods), n in snap.cross_modal_hits.items():
        hits[mods] += n
    return {mods: hits[mods] / n for mods, n in lookups.items() if is_multimodal(mods) and n}


def register_serving(registry: Any, *, model_type: str, cross_modal: Mapping[str, float],
                     warmup_ms: Mapping[str, Iterable[float]] | None = None,
                     prefix: str = "mmcache") -> None:
    """Register seed 001 §4.4's metrics on a ``prometheus_client`` ``registry``, labelled
    ``model_type`` and ``modality_set``: ``{prefix}_cross_modal_hit_rate`` (share of a
    multimodal modality set's queries where at least two modalities hit) and, from the
    latencies (ms) of the requests after a cold start, the histogram
    ``{prefix}_cache_warmup_latency_seconds`` with its p99 as
    ``{prefix}_cache_warmup_latency_p99_seconds`` (CacheWarmupLatencyP99)."""
    if not model_type:
        raise InvalidInputError("model_type must be a non-empty label value")
    registry.register(_ServingCollector(model_type, dict(cross_modal),
                                        {k: list(v) for k, v in (warmup_ms or {}).items()},
                                        prefix))


class _ServingCollector:
    """prometheus_client adapter of :func:`register_serving`'s values."""

    def __init__(self, model_type: str, cross_modal: dict[str, float],
                 warmup_ms: dict[str, list[float]], prefix: str) -> None:
        self.model_type, self.cross_modal, self.warmup_ms, self.prefix = \
            model_type, cross_modal, warmup_ms, prefix

    def collect(self):
        # deferred: prometheus_client only when metrics are exported
        from prometheus_client.core import GaugeMetricFamily, HistogramMetricFamily

        labels = ["model_type", "modality_set"]
        rate = GaugeMetricFamily(f"{self.prefix}_cross_modal_hit_rate", "CrossModalHitRate: share "
                                 "of multimodal queries where at least two modalities hit",
                                 labels=labels)
        for mods, value in sorted(self.cross_modal.items()):
            rate.add_metric([self.model_type, mods], value)
        yield rate
        if not self.warmup_ms:
            return
        hist = HistogramMetricFamily(f"{self.prefix}_cache_warmup_latency_seconds",
                                     "Latency of the requests after a cold start", labels=labels)
        p99 = GaugeMetricFamily(f"{self.prefix}_cache_warmup_latency_p99_seconds",
                                "CacheWarmupLatencyP99: p99 latency after a cold start",
                                labels=labels)
        for mods, samples in sorted(self.warmup_ms.items()):
            h = Histogram()
            for ms in samples:
                h.observe(ms / 1e3)
            hist.add_metric([self.model_type, mods], _buckets(h), h.sum)
            p99.add_metric([self.model_type, mods], float(np.percentile(samples, 99)) / 1e3
                           if samples else float("nan"))
        yield hist
        yield p99


def _buckets(hist: Histogram) -> list[tuple[str, int]]:
    """A histogram's cumulative buckets as prometheus_client takes them."""
    cumulative, buckets = 0, []
    for bound, n in zip(hist.buckets + (float("inf"),), hist.counts):
        cumulative += n
        buckets.append(("+Inf" if bound == float("inf") else repr(bound), cumulative))
    return buckets


def _frame(snap: CacheMetrics) -> "pd.DataFrame":
    """The tidy table of :meth:`CacheMetrics.to_dataframe` for a snapshot."""
    # deferred: pandas only for this export
    import pandas as pd

    rows: list[dict[str, Any]] = []
    for metric, counter in (("hits", snap.hits), ("false_hits", snap.false_hits),
                            ("judged_hits", snap.judged_hits),
                            ("cross_modal_hits", snap.cross_modal_hits)):
        rows += [{"metric": metric, "tier": t, "modalities": m, "value": v}
                 for (t, m), v in sorted(counter.items())]
    rows += [{"metric": "stale_hits", "tier": t, "modalities": f, "value": v}
             for (t, f), v in sorted(snap.stale_hits.items())]
    for metric, counter, column in (("misses", snap.misses, "modalities"),
                                    ("bypasses", snap.bypasses, "modalities"),
                                    ("puts", snap.puts, "tier"),
                                    ("not_stored", snap.not_stored, "modalities"),
                                    ("evictions", snap.evictions, "tier"),
                                    ("guard_skips", snap.guard_skips, "tier"),
                                    ("verifier_calls", snap.verifier_calls, "tier"),
                                    ("errors", snap.errors, "tier")):
        rows += [{"metric": metric, column: k, "value": v} for k, v in sorted(counter.items())]
    for metric, counter in (("shard_requests", snap.shard_requests),
                            ("skew_alerts", snap.skew_alerts)):
        rows += [{"metric": metric, "shard": k, "value": v} for k, v in sorted(counter.items())]
    rows += [{"metric": "failure_events", "tier": t, "code": c, "value": v}
             for (c, t), v in sorted(snap.failure_events.items())]
    for stage, hist in sorted(snap.latency.items()):
        rows += [{"metric": "latency_count", "tier": stage, "value": hist.count},
                 {"metric": "latency_mean_s", "tier": stage,
                  "value": hist.sum / hist.count if hist.count else float("nan")},
                 {"metric": "latency_p50_s", "tier": stage, "value": hist.quantile(0.5)},
                 {"metric": "latency_p99_s", "tier": stage, "value": hist.quantile(0.99)}]
    return pd.DataFrame(rows, columns=["metric", "tier", "modalities", "shard", "code", "value"])


class _Collector:
    """Adapter exposing a CacheMetrics snapshot to prometheus_client."""

    def __init__(self, metrics: CacheMetrics, prefix: str) -> None:
        self.metrics, self.prefix = metrics, prefix

    def collect(self):
        # deferred: prometheus_client only when metrics are exported
        from prometheus_client.core import CounterMetricFamily, HistogramMetricFamily

        m, p = self.metrics, self.prefix
        for name, doc, counter, labels in (
                ("hits", "Cache hits", m.hits, ["tier", "modalities"]),
                ("false_hits", "Hits whose entry ground truth differs from the query's",
                 m.false_hits, ["tier", "modalities"]),
                ("stale_hits", "Hits served stale", m.stale_hits, ["tier", "freshness"]),
                ("misses", "Cache misses", m.misses, ["modalities"]),
                ("bypasses", "Lookups that bypassed the cache", m.bypasses, ["modalities"]),
                ("not_stored", "Puts that no tier admitted", m.not_stored, ["modalities"]),
                ("evictions", "Entries evicted", m.evictions, ["tier"]),
                ("guard_skips", "Lookups skipped by the penetration guard", m.guard_skips,
                 ["tier"]),
                ("verifier_calls", "Calls of the verifier, by the tier of the judged candidate",
                 m.verifier_calls, ["tier"]),
                ("shard_requests", "Requests a sharded store sent to each shard",
                 m.shard_requests, ["shard"]),
                ("cross_modal_hits", "Hits of multimodal queries (every modality matched)",
                 m.cross_modal_hits, ["tier", "modality_set"]),
                ("skew_alerts", "Windows in which a shard took over the skew factor times the "
                 "mean of requests", m.skew_alerts, ["shard"]),
                ("failure_events", "Failure events the cache emitted, by failure code and the "
                 "tier that detected it", m.failure_events, ["code", "tier"])):
            family = CounterMetricFamily(f"{p}_{name}", doc, labels=labels)
            for key, value in sorted(counter.items()):
                family.add_metric(list(key) if isinstance(key, tuple) else [key], value)
            yield family
        hist_family = HistogramMetricFamily(f"{p}_latency_seconds", "Latency per stage",
                                            labels=["stage"])
        for stage, hist in sorted(m.latency.items()):
            hist_family.add_metric([stage], _buckets(hist), hist.sum)
        yield hist_family
