"""Threshold rules measured on the path users run: ``TieredCache.get`` over a stream of lookups
drawn from equivalence classes (vCache's benchmark protocol).

:func:`class_stream` orders the lookups: every wording once, popular classes (Zipf) early;
:func:`many_requests_stream` draws a given number of them with replacement (a Zipf class,
then a wording of it), so popular entries see tens of lookups, as in vCache's SemBenchmark
sets. A cold cache meets them in order (:func:`run_stream`): a lookup it answers is served,
and is right when the answer is the lookup's class; a miss stores the lookup with its class
as the answer (the backend's answer), so the cache grows on misses and every lookup searches
every entry of the scope. A miss whose candidate the rule explored (``Hit.explored``: the
``vcache`` rule) is labelled through ``TieredCache.feedback`` (right when the candidate's
class is the lookup's) and, as vCache grows, stored only when the candidate was wrong; those
labels are a cost too (``explored_labels``). A :class:`Feedback` regime says which served hits are labelled back through
``TieredCache.feedback`` and when: none (the default), every one at once, or a seeded share of
them some lookups later; the labels delivered are counted as a cost, beside the verifier's
calls. :meth:`StreamRun.summary` counts as vCache does
(hit rate and error per lookup) with a Clopper–Pearson interval on the error;
:func:`compare_configs` runs several configurations over several stream orders and
:func:`choose_static` picks a static δ on one split's runs, to be measured on another's.

Labelled pairs (a pairs file, :mod:`mmcache.datasets.pairs_file`) run in the many-tenant form
(:func:`run_pairs`): each pair in its own scope, so every lookup is the first its scope makes.
"""

from __future__ import annotations

import dataclasses
from collections import deque
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import numpy as np
from scipy.stats import binomtest

from mmcache.cache import TieredCache
from mmcache.config import CacheConfig
from mmcache.datasets.pairs import Pair
from mmcache.errors import InvalidInputError
from mmcache.metrics import progress_bar
from mmcache.types import Hit, Query

SCOPE = "stream"
#: The regime names :class:`Feedback` knows.
REGIMES = ("none", "sampled", "immediate")


@dataclass(frozen=True)
class Feedback:
    """Which served hits of a stream are labelled (``TieredCache.feedback(hit, correct)``,
    correct = the hit answers the lookup's class) and when. Each served hit is chosen with
    probability ``rate`` (a ``seed``-ed draw per served hit; none drawn when ``rate`` is 0 or 1)
    and its label delivered after the ``delay``-th lookup following the one it served, before
    the next lookup (``delay`` 0: before the very next lookup); pending labels are delivered in
    the order they were served, and those still pending when the stream ends are not. Build
    one with :meth:`none`, :meth:`immediate` (every hit, delay 0) or :meth:`sampled`."""

    name: str = "none"
    rate: float = 0.0
    delay: int = 0
    seed: int = 0

    def __post_init__(self) -> None:
        if self.name not in REGIMES:
            raise InvalidInputError(f"feedback regime must be one of {REGIMES}, got {self.name!r}")
        if isinstance(self.rate, bool) or not isinstance(self.rate, (int, float)) or \
                not 0.0 <= self.rate <= 1.0:
            raise InvalidInputError(f"feedback rate is a share of served hits in [0, 1], got "
                                    f"{self.rate!r}")
        if isinstance(self.delay, bool) or not isinstance(self.delay, int) or self.delay < 0:
            raise InvalidInputError(f"feedback delay is a whole number of lookups >= 0, got "
                                    f"{self.delay!r}")

    @classmethod
    def none(cls) -> "Feedback":
        """No label is fed back."""
        return cls("none", 0.0, 0)

    @classmethod
    def immediate(cls) -> "Feedback":
        """Every served hit labelled before the next lookup."""
        return cls("immediate", 1.0, 0)

    @classmethod
    def sampled(cls, rate: float = 0.1, delay: int = 50, seed: int = 0) -> "Feedback":
        """A seeded share ``rate`` of served hits, each labelled ``delay`` lookups later."""
        return cls("sampled", rate, delay, seed)

    @property
    def label(self) -> str:
        """A short name: ``none``, ``immediate`` or ``sampled 10% delay 50``."""
        return f"sampled {self.rate:.0%} delay {self.delay}" if self.name == "sampled" \
            else self.name


class _Labeller:
    """The pending labels of one stream under one :class:`Feedback` regime."""

    def __init__(self, regime: Feedback, cache: TieredCache) -> None:
        self.regime, self.cache, self.delivered = regime, cache, 0
        self._rng = np.random.default_rng(regime.seed)
        self._pending: deque[tuple[int, Hit, bool]] = deque()

    def served(self, lookup: int, hit: Hit, correct: bool) -> None:
        rate = self.regime.rate
        if rate >= 1.0 or (rate > 0.0 and self._rng.random() < rate):
            self._pending.append((lookup + self.regime.delay, hit, correct))

    def deliver(self, after: int) -> None:
        """Deliver, in order, every pending label due once lookup ``after`` is done."""
        while self._pending and self._pending[0][0] <= after:
            _, hit, correct = self._pending.popleft()
            self.cache.feedback(hit, correct)
            self.delivered += 1


def _open(config: Mapping[str, Any] | None, encoders: Mapping[str, Any] | None) -> TieredCache:
    """A cold ``TieredCache(config)``; its metrics count the calls of its verifier
    (``verifier_calls``: a judge call is a cost too)."""
    return TieredCache(CacheConfig.load(dict(config or {})), encoders=encoders)


@dataclass(frozen=True, eq=False)
class StreamRun:
    """Per lookup, in stream order: was it served, was the answer right, had its class been
    stored before it (a lookup that should hit), and the tier that answered ("" = miss)."""

    label: str
    served: np.ndarray
    correct: np.ndarray
    seen: np.ndarray
    tier: np.ndarray
    #: Labels fed back (:class:`Feedback`) and calls of the configured verifier.
    labels: int = 0
    verifier_calls: int = 0
    #: Labels of explored misses (each one a model call and a comparison).
    explored_labels: int = 0

    def summary(self) -> dict[str, Any]:
        """Hit rate and error (wrong answers ÷ lookups) with the error's 95 % Clopper–Pearson
        interval, the share of should-hit lookups served right, the counts behind them, and
        the costs: labels fed back, verifier calls and labels of explored misses."""
        n, wrong = len(self.served), int((self.served & ~self.correct).sum())
        interval = binomtest(wrong, n).proportion_ci(0.95, method="exact") if n else None
        should = int(self.seen.sum())
        return {"rule": self.label, "lookups": n, "served": int(self.served.sum()),
                "wrong": wrong, "hit_rate": float(self.served.mean()) if n else float("nan"),
                "error": wrong / n if n else float("nan"),
                "error_low": interval.low if interval else float("nan"),
                "error_high": interval.high if interval else float("nan"),
                "should_hit": should,
                "true_hits_served": int((self.served & self.correct).sum()) / should
                if should else float("nan"),
                "exact_hits": int((self.tier == "l1").sum()),
                "labels": self.labels, "verifier_calls": self.verifier_calls,
                "explored_labels": self.explored_labels}


def class_stream(classes: Sequence[Sequence[str]], seed: int = 0, zipf: float = 1.0,
                 n: int | None = None) -> tuple[list[str], np.ndarray]:
    """Lookups ``(texts, class indices)``: every wording of every class once (the first ``n``
    when given), in a ``seed``-ed order weighted by class popularity ∝ 1/rank^zipf (ranks a
    seeded permutation of the classes), so popular classes come early and often and no
    lookup repeats an earlier one word for word."""
    if not classes or any(len(c) == 0 for c in classes) or (n is not None and n < 1):
        raise InvalidInputError("class_stream needs classes with wordings each and n >= 1")
    rng = np.random.default_rng(seed)
    weight = np.empty(len(classes))
    weight[rng.permutation(len(classes))] = 1.0 / np.arange(1, len(classes) + 1) ** zipf
    cls = np.repeat(np.arange(len(classes)), [len(c) for c in classes])
    texts = [w for c in classes for w in c]
    # a weighted permutation (Efraimidis–Spirakis): each wording's key u^(1/w) sorted down
    order = np.argsort(-np.log(rng.random(len(cls))) / weight[cls], kind="stable")[:n]
    return [texts[i] for i in order], cls[order]


def many_requests_stream(classes: Sequence[Sequence[str]], lookups: int, seed: int = 0,
                         zipf: float = 1.0) -> tuple[list[str], np.ndarray]:
    """``lookups`` lookups ``(texts, class indices)`` drawn with replacement: a class with
    probability ∝ 1/rank^zipf (ranks a ``seed``-ed permutation of the classes), then one of its
    wordings uniformly, so a popular class's entries see many lookups and a wording may come
    again word for word (an exact hit)."""
    if not classes or any(len(c) == 0 for c in classes) or lookups < 1:
        raise InvalidInputError("many_requests_stream needs classes with wordings each and "
                                "lookups >= 1")
    rng = np.random.default_rng(seed)
    weight = np.empty(len(classes))
    weight[rng.permutation(len(classes))] = 1.0 / np.arange(1, len(classes) + 1) ** zipf
    cls = rng.choice(len(classes), size=lookups, p=weight / weight.sum())
    texts = [classes[c][rng.integers(len(classes[c]))] for c in cls]
    return texts, cls


def run_stream(texts: Sequence[str], labels: Sequence[int], config: Mapping[str, Any] | None,
               *, encoders: Mapping[str, Any] | None = None,
               vectors: np.ndarray | None = None, label: str = "",
               progress: bool | None = None, feedback: Feedback | None = None) -> StreamRun:
    """Stream the lookups through a cold ``TieredCache(config)``; ``vectors`` (one per text)
    are handed over as the query's text embedding instead of encoding the text again.
    ``feedback`` (default :meth:`Feedback.none`) labels served hits back to the cache; an
    explored miss is always labelled, and stored only when its candidate was wrong."""
    if len(texts) != len(labels) or (vectors is not None and len(vectors) != len(texts)):
        raise InvalidInputError("texts, labels and vectors must have one row per lookup")
    if feedback is not None and not isinstance(feedback, Feedback):
        raise InvalidInputError(f"feedback must be a Feedback regime, got {feedback!r}")
    n = len(texts)
    served, correct, seen = np.zeros(n, bool), np.zeros(n, bool), np.zeros(n, bool)
    tier = np.full(n, "", dtype=object)
    stored: set[int] = set()
    cache = _open(config, encoders)
    labeller = _Labeller(feedback or Feedback.none(), cache)
    explored = 0
    with cache, \
            progress_bar(n, f"stream {label}".strip(), unit="lookup", progress=progress) as bar:
        for i, (text, cls) in enumerate(zip(texts, labels)):
            query = Query(text=text, scope=SCOPE, embeddings={} if vectors is None
                          else {"text": vectors[i]})
            seen[i] = int(cls) in stored
            hit = cache.get(query)
            if hit is not None and hit.explored:
                explored += 1
                cache.feedback(hit, hit.value == int(cls))
                if hit.value != int(cls):  # vCache grows only past a wrong candidate
                    cache.put(query, int(cls))
                    stored.add(int(cls))
            elif hit is None:
                cache.put(query, int(cls))
                stored.add(int(cls))
            else:
                served[i], correct[i], tier[i] = True, hit.value == int(cls), hit.tier
                labeller.served(i, hit, bool(correct[i]))
            labeller.deliver(i)
            bar.update()
    return StreamRun(label, served, correct, seen, tier.astype(str), labeller.delivered,
                     sum(cache.metrics.verifier_calls.values()), explored)


def run_pairs(pairs: Sequence[Pair], config: Mapping[str, Any] | None, *,
              encoders: Mapping[str, Any] | None = None,
              vectors: Mapping[str, np.ndarray] | None = None, label: str = "",
              progress: bool | None = None) -> StreamRun:
    """Each pair in its own scope of one cold ``TieredCache(config)``: its cached query is
    stored, then its new query looked up; a served lookup is right when the pair says the cached
    answer is (``seen``: the pair is labelled same). ``vectors`` maps texts to text embeddings
    handed over instead of encoding them again."""
    n = len(pairs)
    served, correct = np.zeros(n, bool), np.zeros(n, bool)
    tier = np.full(n, "", dtype=object)
    cache = _open(config, encoders)
    with cache, \
            progress_bar(n, f"pairs {label}".strip(), unit="pair", progress=progress) as bar:
        for i, pair in enumerate(pairs):
            scope = f"pair-{i}"
            cache.put(_in_scope(pair.cached, scope, vectors), i)
            hit = cache.get(_in_scope(pair.query, scope, vectors))
            if hit is not None:
                served[i], correct[i], tier[i] = True, pair.same, hit.tier
            bar.update()
    return StreamRun(label, served, correct, np.array([p.same for p in pairs], bool),
                     tier.astype(str), verifier_calls=sum(cache.metrics.verifier_calls.values()))


def _in_scope(query: Query, scope: str, vectors: Mapping[str, np.ndarray] | None) -> Query:
    """``query`` in ``scope``, with its text's vector from ``vectors`` when there is one."""
    embeddings = dict(query.embeddings)
    if vectors is not None and query.text in vectors:
        embeddings["text"] = vectors[query.text]
    return dataclasses.replace(query, scope=scope, embeddings=embeddings)


def static_config(delta: float) -> dict[str, Any]:
    """The config of a static text threshold δ (hit when cosine ≥ 1 − δ), all else default."""
    return {"thresholds": {"rule": "static", "delta": {"text": float(delta)}}}


def compare_configs(classes: Sequence[Sequence[str]], vectors: Mapping[str, np.ndarray],
                    configs: Mapping[str, Mapping[str, Any]], seeds: Sequence[int],
                    zipf: float = 1.0, progress: bool | None = None,
                    feedback: Feedback | None = None,
                    lookups: int | None = None) -> list[dict[str, Any]]:
    """:meth:`StreamRun.summary` of every config (by name) on every seed's stream, under
    one ``feedback`` regime (default none; its ``seed`` draws the same way on every stream);
    ``vectors`` maps each wording to its text embedding (encoded once for all runs). The
    stream is :func:`class_stream` (every wording once), or with ``lookups``
    :func:`many_requests_stream` of that many lookups."""
    rows = []
    with progress_bar(len(seeds) * len(configs), "stream runs", unit="run",
                      progress=progress) as bar:
        for seed in seeds:
            texts, labels = class_stream(classes, seed, zipf) if lookups is None else \
                many_requests_stream(classes, lookups, seed, zipf)
            stacked = np.stack([vectors[t] for t in texts])
            for name, config in configs.items():
                run = run_stream(texts, labels, config, vectors=stacked, label=name,
                                 progress=False, feedback=feedback)
                rows.append({**run.summary(), "seed": seed,
                             "feedback": (feedback or Feedback.none()).label})
                bar.update()
    return rows


def choose_static(rows: Sequence[Mapping[str, Any]], budget: float) -> str | None:
    """The name of the ``static δ=...`` config with the highest mean hit rate whose mean error
    is within ``budget`` (None when none is)."""
    by_rule: dict[str, list[Mapping[str, Any]]] = {}
    for row in rows:
        if str(row["rule"]).startswith("static"):
            by_rule.setdefault(str(row["rule"]), []).append(row)
    means = {name: (np.mean([r["hit_rate"] for r in rs]), np.mean([r["error"] for r in rs]))
             for name, rs in by_rule.items()}
    ok = [name for name, (_, error) in means.items() if error <= budget]
    return max(ok, key=lambda name: means[name][0]) if ok else None
