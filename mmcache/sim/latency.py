"""Latency distributions and the inference-server queue of CacheBench-MM.

:class:`LogNormal` is one latency distribution in milliseconds with the source it
comes from; :func:`load_profile` reads the distributions the workbench measured on
this machine (``mmcache/resources/latency_profile.json``, written by
``python -m mmcache.lab.bench.latency_profile``); :func:`fit_samples` and
:func:`fit_histogram` fit one to timed samples or to a :class:`mmcache.metrics.Histogram`.
A miss's model inference is measured where a model runs here (the profile's ``infer.image``
and ``infer.audio``: :func:`default_inference`); text inference is the labelled assumption
:data:`ASSUMED_TEXT_INFERENCE`.

:class:`ServerPool` is a bounded pool of identical inference servers serving misses
first come, first served: a miss that arrives while every server is busy waits for
the first one to free. It is exact for a c-server FCFS queue whose customers arrive
in the order they are offered (a heap of server-free times).
"""

from __future__ import annotations

import heapq
import json
import math
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from statistics import NormalDist
from typing import Any, Mapping, Sequence

import numpy as np
from numba import njit

from mmcache.errors import ConfigError, InvalidInputError, StaleProfileError, check_number
from mmcache.paths import RESOURCES
from mmcache.types import MODALITIES

#: The committed latency profile (regenerate: ``make latency-profile``).
PROFILE_PATH = RESOURCES / "latency_profile.json"


@dataclass(frozen=True)
class LogNormal:
    """A log-normal latency: ``median_ms`` and the σ of its logarithm (0: a constant),
    with ``source``, where the numbers come from."""

    median_ms: float
    sigma: float = 0.0
    source: str = "given constant"

    def __post_init__(self) -> None:
        check_number(self.median_ms, "median_ms", 0, strict=False)
        check_number(self.sigma, "sigma", 0, strict=False)
        if not self.source.strip():
            raise ConfigError("a latency distribution must name its source")

    @property
    def mean_ms(self) -> float:
        """The distribution's mean."""
        return self.median_ms * math.exp(self.sigma ** 2 / 2)

    def quantile_ms(self, q: float) -> float:
        """The ``q`` quantile (0 < q < 1)."""
        return self.median_ms * math.exp(self.sigma * NormalDist().inv_cdf(q))

    def sample(self, rng: np.random.Generator, n: int) -> np.ndarray:
        """``n`` seeded draws (ms)."""
        if self.sigma == 0 or self.median_ms == 0:
            return np.full(n, float(self.median_ms))
        return rng.lognormal(math.log(self.median_ms), self.sigma, n)


def fit_samples(samples_ms: Sequence[float], source: str) -> LogNormal:
    """The log-normal of ``samples_ms`` (maximum likelihood: mean and σ of the logs)."""
    samples = np.asarray(samples_ms, dtype=float)
    if samples.size < 2 or not (np.isfinite(samples).all() and (samples > 0).all()):
        raise InvalidInputError("fit_samples needs at least two positive, finite samples")
    logs = np.log(samples)
    return LogNormal(float(np.exp(logs.mean())), float(logs.std(ddof=1)), source)


def fit_histogram(hist: Any, source: str) -> LogNormal:
    """The log-normal of a :class:`mmcache.metrics.Histogram` (seconds): the median
    interpolated log-linearly inside its bucket, σ from the exact mean over the median."""
    if hist.count < 2:
        raise InvalidInputError("fit_histogram needs a histogram of at least two observations")
    bounds = (hist.buckets[0] / 10, *hist.buckets)
    target, seen = hist.count / 2, 0
    for k, n in enumerate(hist.counts[:-1]):
        if seen + n >= target:
            lo, hi = bounds[k], bounds[k + 1]
            median_s = lo * (hi / lo) ** ((target - seen) / n)
            break
        seen += n
    else:
        raise InvalidInputError("the histogram's median lies above its last bucket")
    mean_s = hist.sum / hist.count
    sigma = math.sqrt(2 * math.log(mean_s / median_s)) if mean_s > median_s else 0.0
    return LogNormal(1e3 * median_s, sigma, source)


def load_profile(path: str | Path = PROFILE_PATH) -> dict[str, LogNormal]:
    """The measured distributions of ``path`` by name (``encode.text``, ``l2.semantic``, ...);
    each one's source names the machine, date and command that measured it."""
    doc = read_profile(path)
    where = f"measured on {doc['machine']['node']} on {doc['date']} by `{doc['command']}`"
    return {name: LogNormal(e["median_ms"], e["sigma"], f"{e['source']}; {where}")
            for name, e in doc["entries"].items()}


def read_profile(path: str | Path = PROFILE_PATH) -> dict[str, Any]:
    """The profile document as written (machine, date, command, entries)."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"no latency profile at {path}; run `make latency-profile`")
    return json.loads(path.read_text())


def profile_entry(dist: LogNormal, samples_ms: Sequence[float] | None = None) -> dict[str, Any]:
    """One JSON entry of the profile: the fit, and the samples' own quantiles when given."""
    entry = asdict(dist)
    if samples_ms is not None:
        s = np.asarray(samples_ms, dtype=float)
        entry |= {"n": int(s.size),
                  **{f"p{q}_ms": float(np.percentile(s, q)) for q in (50, 95, 99)}}
    return entry


class ServerPool:
    """``servers`` identical servers, first come first served (None: one per request, no queue)."""

    def __init__(self, servers: int | None) -> None:
        if servers is not None and (isinstance(servers, bool) or int(servers) != servers
                                    or servers < 1):
            raise ConfigError(f"servers must be a positive integer or None, got {servers!r}")
        self.servers = servers
        self._free = [0.0] * servers if servers else []
        self.busy_ms = 0.0
        self.last_finish_ms = -math.inf

    def wait_ms(self, arrival_ms: float, service_ms: float) -> float:
        """Queue a job arriving at ``arrival_ms`` needing ``service_ms``; returns its wait."""
        self.busy_ms += service_ms
        start = max(arrival_ms, self._free[0]) if self._free else arrival_ms
        if self._free:
            heapq.heapreplace(self._free, start + service_ms)
        self.last_finish_ms = max(self.last_finish_ms, start + service_ms)
        return start - arrival_ms

    def waits_ms(self, arrival_ms: np.ndarray, service_ms: np.ndarray) -> np.ndarray:
        """Queue the jobs arriving at ``arrival_ms`` needing ``service_ms``, in order, as
        :meth:`wait_ms` one after another would (compiled); returns their waits."""
        free = np.array(self._free, np.float64)
        waits, self.busy_ms, self.last_finish_ms = _fcfs(
            free, np.asarray(arrival_ms, np.float64), np.asarray(service_ms, np.float64),
            self.busy_ms, self.last_finish_ms)
        self._free = sorted(free.tolist())  # the same free times; a sorted list is a heap
        return waits


@njit(cache=True)
def _fcfs(free, arrivals, services, busy, last):
    """(waits, busy, last finish) of jobs through servers free at ``free`` (any order; updated),
    each job taking the first server to free (:meth:`ServerPool.wait_ms`'s arithmetic)."""
    waits = np.zeros(arrivals.shape[0])
    for j in range(arrivals.shape[0]):
        busy += services[j]
        start = arrivals[j]
        if free.shape[0]:
            s = np.argmin(free)
            start = max(start, free[s])
            free[s] = start + services[j]
        last = max(last, start + services[j])
        waits[j] = start - arrivals[j]
    return waits, busy, last


def fcfs_waits(arrivals: np.ndarray, services: np.ndarray, servers: int) -> np.ndarray:
    """Waiting times of jobs through a ``servers``-server FCFS queue, in the given order."""
    pool = ServerPool(servers)
    return np.array([pool.wait_ms(a, s) for a, s in zip(arrivals.tolist(), services.tolist())])


#: Model-inference time of a text miss. **An assumption, not a measurement**: no language model
#: is served on this machine, so there is nothing to time; this log-normal (median 400 ms, σ 0.5,
#: v1's assumed text cost) is a parameter to vary (``LatencyModel.measured(text_inference_ms=
#: ...)``, :meth:`LatencyModel.with_text_inference_scaled`).
ASSUMED_TEXT_INFERENCE = LogNormal(
    400.0, 0.5, "assumption: no language model is served here; a parameter, not measured")

#: The profile entry that times a miss's model call, for each modality whose model runs here:
#: a Whisper tiny.en transcription (audio), the offline CLIP's zero-shot classification (image).
MEASURED_INFERENCE_STAGES: Mapping[str, str] = {"image": "infer.image", "audio": "infer.audio"}


def default_inference(profile: Mapping[str, LogNormal],
                      text: Cost = ASSUMED_TEXT_INFERENCE) -> dict[str, Cost]:
    """The miss costs :meth:`LatencyModel.measured` uses by default: image and audio measured
    (``profile``'s :data:`MEASURED_INFERENCE_STAGES`), text the given assumption."""
    missing = sorted(set(MEASURED_INFERENCE_STAGES.values()) - set(profile))
    if missing:
        raise StaleProfileError(f"the latency profile has no entries {missing} (the measured "
                                "Whisper and CLIP miss costs); run `make latency-profile`")
    return {"text": text, **{m: profile[stage] for m, stage in MEASURED_INFERENCE_STAGES.items()}}


#: Which measured profile stage times each :func:`three_tier` tier's lookup.
THREE_TIER_STAGES: Mapping[str, str] = {"L1-gpu": "l1.exact", "L2-cpu": "l2.semantic",
                                        "L3-nvme": "l3.exact"}


Cost = float | LogNormal


@dataclass(frozen=True)
class LatencyModel:
    """Costs outside the tiers' transfers: per-modality encoder and model-inference time (ms,
    each a constant or a :class:`mmcache.sim.latency.LogNormal`), tier lookups by tier name
    (``lookup_ms``, overriding a :class:`TierSpec`'s ``lookup_us``), a pool of ``servers``
    inference servers that misses queue for (None: unbounded, no queueing), the SLA bound, and
    the seed of the per-request draws.

    ``LatencyModel()`` is v1's table of **assumed constants** with no load;
    :meth:`measured` is the measured profile of this machine with a bounded server pool.
    """

    encode_ms: Mapping[str, Cost] = field(
        default_factory=lambda: {"text": 5.0, "image": 15.0, "audio": 40.0})
    inference_ms: Mapping[str, Cost] = field(
        default_factory=lambda: {"text": 400.0, "image": 700.0, "audio": 1000.0})
    sla_ms: float = 150.0
    servers: int | None = None
    lookup_ms: Mapping[str, LogNormal] = field(default_factory=dict)
    seed: int = 0
    kind: str = "assumed constants, not measured"

    def __post_init__(self) -> None:
        for name in ("encode_ms", "inference_ms"):
            table = getattr(self, name)
            missing = set(MODALITIES) - set(table)
            if missing or min(_dist(v).median_ms for v in table.values()) < 0:
                raise ConfigError(f"{name} needs a non-negative cost for each of {MODALITIES}")
        if self.sla_ms <= 0:
            raise ConfigError("sla_ms must be positive")
        ServerPool(self.servers)  # raises for a bad pool size

    @classmethod
    def measured(cls, *, servers: int = 4, inference_ms: Mapping[str, Cost] | None = None,
                 text_inference_ms: Cost = ASSUMED_TEXT_INFERENCE, sla_ms: float = 150.0,
                 seed: int = 0, profile: Mapping[str, LogNormal] | None = None,
                 tier_stages: Mapping[str, str] = THREE_TIER_STAGES) -> LatencyModel:
        """The model of this machine: encoders and tier lookups from ``profile`` (default: the
        committed :func:`mmcache.sim.latency.load_profile`), tier names mapped to profile stages by
        ``tier_stages``, inference from ``inference_ms`` (default :func:`default_inference`: the
        profile's measured Whisper and CLIP calls, ``text_inference_ms`` for text) on ``servers``
        FCFS servers."""
        profile = load_profile() if profile is None else profile
        unknown = sorted({*(f"encode.{m}" for m in MODALITIES), *tier_stages.values()}
                         - set(profile))
        if unknown:
            raise ConfigError(f"the latency profile has no entries {unknown}")
        inference = (dict(inference_ms) if inference_ms is not None
                     else default_inference(profile, text_inference_ms))
        return cls(encode_ms={m: profile[f"encode.{m}"] for m in MODALITIES},
                   inference_ms=inference, sla_ms=sla_ms, servers=servers, seed=seed,
                   lookup_ms={tier: profile[stage] for tier, stage in tier_stages.items()},
                   kind=f"measured encoders and tier lookups (mmcache/resources/latency_profile."
                        f"json); inference {_inference_kind(inference)}; {servers} FCFS "
                        "inference servers")

    def with_text_inference_scaled(self, factor: float) -> LatencyModel:
        """This model with the text miss cost's median times ``factor`` (its σ kept), labelled
        so: the sensitivity of a result to the assumed text inference time."""
        if not (math.isfinite(factor) and factor > 0):
            raise ConfigError(f"factor must be a positive number, got {factor!r}")
        text = _dist(self.inference_ms["text"])
        scaled = LogNormal(text.median_ms * factor, text.sigma, f"{text.source}; median × {factor:g}")
        inference = {**self.inference_ms, "text": scaled}
        return replace(self, inference_ms=inference,
                       kind=f"{self.kind}; text inference median × {factor:g}")

    def mean_inference_ms(self, modality: str) -> float:
        """Mean model-inference time of a ``modality`` miss (the policies' cost hint)."""
        return _dist(self.inference_ms[modality]).mean_ms

    def describe(self) -> dict[str, Any]:
        """Every cost with its source, JSON-ready."""
        out = asdict(self)
        for name in ("encode_ms", "inference_ms", "lookup_ms"):
            out[name] = {k: asdict(_dist(v)) for k, v in getattr(self, name).items()}
        return out


def _inference_kind(inference: Mapping[str, Cost]) -> str:
    """Which modalities' inference is measured (a profile entry's source), which a labelled
    assumption and which given otherwise."""
    def kind(cost: Cost) -> str:
        source = _dist(cost).source
        return ("measured" if "; measured on " in source else
                "a labelled assumption" if source.startswith("assumption") else "given")
    groups = {k: [m for m in MODALITIES if kind(inference[m]) == k]
              for k in ("measured", "a labelled assumption", "given")}
    return "; ".join(f"{k} for {', '.join(ms)}" for k, ms in groups.items() if ms)


def _dist(cost: Cost) -> LogNormal:
    return cost if isinstance(cost, LogNormal) else LogNormal(float(cost), 0.0)
