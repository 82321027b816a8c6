"""Load on the inference servers: a workload's arrivals rescaled to an offered load (arrival rate
÷ the servers' capacity, as if nothing hit) or to a backend load (the load that reaches them:
arrival rate × miss rate × the misses' mean inference time ÷ servers), and sweeps over the
backend load.

Which requests hit does not depend on their arrival times unless answers expire: only a TTL
reads ``workload.time`` (:class:`~mmcache.sim.cachebench.Replayer`,
:class:`~mmcache.sim.cachebench.kernel.TierReplay`; the policies' ``now`` hint is the request's
index). So without a TTL, scaling the arrival times by a factor scales the backend load by its
inverse, and one replay says which factor puts the servers at a given load.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Sequence

import numpy as np

from mmcache.errors import ConfigError, check_number
from mmcache.sim.cachebench.degradation import LEVELS, Degrader
from mmcache.sim.cachebench.engine import Replayer, _RequestCosts, loosest_floor, replay, served
from mmcache.sim.cachebench.report import Report
from mmcache.sim.cachebench.spec import TierSpec
from mmcache.sim.latency import LatencyModel
from mmcache.sim.workload import Workload


def offered_load(workload: Workload, latency: LatencyModel) -> float:
    """Arrival rate ÷ the inference servers' capacity: the stream's mean requests per ms × the
    mean inference time of its requests (the model's seeded draws) ÷ servers (the servers'
    utilisation if nothing hit; the daily cycle and bursts push the peak above it)."""
    _bounded(latency)
    return _RequestCosts(latency, workload, []).load(np.ones(len(workload), bool))


def at_load(workload: Workload, latency: LatencyModel, load: float) -> Workload:
    """``workload`` with its arrival times scaled so its :func:`offered_load` is ``load``."""
    check_number(load, "load", 0)
    return _scaled(workload, offered_load(workload, latency) / load)


def backend_load(workload: Workload, tiers: Sequence[TierSpec], latency: LatencyModel, *,
                 start: int = 0, stop: int | None = None) -> float:
    """The load that reaches the inference servers when ``workload`` is replayed through
    ``tiers`` (no TTL): arrival rate × miss rate × the misses' mean inference time ÷ servers
    (a whole replay's ``Report.queue["backend_load"]``), the servers' utilisation while the queue
    keeps up; over requests ``start`` to ``stop`` - 1 of the replay when given (a part of a
    stream whose rate changes). With every inference draw equal it is :func:`offered_load` × the
    miss rate."""
    _bounded(latency)
    replayer = served(workload, tiers, latency)
    return replayer.costs.load(replayer.hit_tier < 0, start, stop)


def at_backend_load(workload: Workload, tiers: Sequence[TierSpec], latency: LatencyModel,
                    load: float) -> Workload:
    """``workload`` with its arrival times scaled so its :func:`backend_load` through ``tiers``
    is ``load`` (its hits and misses stay the same: no TTL)."""
    check_number(load, "load", 0)
    return _scaled(workload, _base_backend_load(workload, tiers, latency) / load)


def load_reports(workload: Workload, tiers: Sequence[TierSpec], latency: LatencyModel,
                 loads: Sequence[float]) -> dict[float, Report]:
    """:func:`replay` (no limits, no TTL) at each backend load (:func:`at_backend_load`, the
    hits measured once)."""
    for load in loads:
        check_number(load, "load", 0)
    base = _base_backend_load(workload, tiers, latency)
    return {float(load): replay(_scaled(workload, base / load), tiers, latency, limits=False)
            for load in loads}


def load_sweep(workload: Workload, tiers: Sequence[TierSpec], latency: LatencyModel,
               loads: Sequence[float]) -> list[dict[str, Any]]:
    """One row per backend load of :func:`load_reports` (see :func:`load_row`). Past a backend
    load of 1 the queue grows for the whole stream (the last miss waits about (load - 1) × the
    stream's span), so the tail there grows with the trace's length."""
    return [load_row(load, r) for load, r in load_reports(workload, tiers, latency, loads).items()]


def load_row(load: float, report: Report) -> dict[str, Any]:
    """``backend_load`` (the load asked for), ``p50_ms, p95_ms, p99_ms, sla_violation_rate,
    miss_rate`` of one replay, and its queue's ``offered_load`` (the same arrivals ÷ the servers'
    capacity, as if nothing hit), ``arrival_per_s``, ``mean_wait_ms``, ``p99_wait_ms``,
    ``utilisation`` and ``queue_backend_load`` (the backend load the replay measured)."""
    q = report.queue
    return {"backend_load": float(load), "offered_load": q["offered_load"],
            "arrival_per_s": q["arrival_per_s"],
            **{f"{p}_ms": report.latency_ms[p] for p in ("p50", "p95", "p99")},
            "sla_violation_rate": report.sla_violation_rate, "miss_rate": 1 - report.hit_rate,
            "mean_wait_ms": q["mean_wait_ms"], "p99_wait_ms": q["p99_wait_ms"],
            "utilisation": q["utilisation"], "queue_backend_load": q["backend_load"]}


def _base_backend_load(workload: Workload, tiers: Sequence[TierSpec],
                       latency: LatencyModel) -> float:
    base = backend_load(workload, tiers, latency)
    if not base > 0:
        raise ConfigError("no load reaches the inference servers (no miss, or a single request)")
    return base


def _scaled(workload: Workload, scale: float) -> Workload:
    start = workload.time[0]
    return replace(workload, time=start + (workload.time - start) * scale)


def _bounded(latency: LatencyModel) -> None:
    if not latency.servers:
        raise ConfigError("a load needs a bounded pool (LatencyModel.servers)")


def degradation_replay(workload: Workload, tiers: Sequence[TierSpec], latency: LatencyModel,
                       level: str | Degrader, *, text_offset: float = 0.05,
                       ttl_s: float | None = None) -> tuple[Report, dict[str, float]]:
    """:func:`replay` (no limits) with every request at one degradation ``level``, or at the
    level a :class:`mmcache.sim.cachebench.degradation.Degrader` picks from the inference queue at its arrival;
    returns the report and the share of requests served at each level."""
    replayer = Replayer(workload, tiers, latency, ttl_s=ttl_s, text_offset=text_offset,
                        cutoff=loosest_floor(tiers, [{"text": text_offset}]))
    arrival = replayer.costs.arrival_ms
    for i in range(len(workload)):
        if isinstance(level, Degrader):
            replayer.serve(i, level=level.level(float(arrival[i])))
            if replayer.hit_tier[i] < 0:
                level.observe(float(arrival[i] + replayer.lat_ms[i]))
        else:
            replayer.serve(i, level=level)
    shares = np.bincount(replayer.level_served, minlength=len(LEVELS)) / max(1, len(workload))
    return replayer.report(limits=False), dict(zip(LEVELS, shares.tolist()))


def degradation_rows(workload: Workload, tiers: Sequence[TierSpec], latency: LatencyModel, *,
                     adaptive: Degrader | None = None, text_offset: float = 0.05
                     ) -> dict[str, dict[str, Any]]:
    """``{level: {"p99_ms", "false_hit_rate", "hit_rate", "mean_encode_ms", "shares"}}``: each
    level forced for the whole of ``workload``, plus ``"adaptive"`` when a degrader is given."""
    runs: dict[str, str | Degrader] = {lv: lv for lv in LEVELS}
    if adaptive is not None:
        runs["adaptive"] = adaptive
    rows = {}
    for name, level in runs.items():
        report, shares = degradation_replay(workload, tiers, latency, level,
                                            text_offset=text_offset)
        rows[name] = {"p99_ms": report.latency_ms["p99"], "p50_ms": report.latency_ms["p50"],
                      "false_hit_rate": report.false_hit_rate, "hit_rate": report.hit_rate,
                      "sla_violation_rate": report.sla_violation_rate, "shares": shares}
    return rows
