"""Offered load: a workload rescaled to a load on the inference servers, and sweeps over it.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Sequence

import numpy as np

from mmcache.errors import ConfigError
from mmcache.sim.cachebench.degradation import LEVELS, Degrader
from mmcache.sim.cachebench.engine import Replayer, _RequestCosts, loosest_floor, replay
from mmcache.sim.cachebench.report import Report
from mmcache.sim.cachebench.spec import TierSpec
from mmcache.sim.latency import LatencyModel
from mmcache.sim.workload import Workload


def offered_load(workload: Workload, latency: LatencyModel) -> float:
    """Arrival rate ÷ the inference servers' capacity: the stream's mean requests per ms × the
    mean inference time of its requests (the model's seeded draws) ÷ servers (the servers'
    utilisation if nothing hit; the daily cycle and bursts push the peak above it)."""
    if not latency.servers:
        raise ConfigError("offered load needs a bounded pool (LatencyModel.servers)")
    span_ms = 1e3 * float(workload.time[-1] - workload.time[0])
    service = float(_RequestCosts(latency, workload, []).service_ms.mean())
    return (len(workload) - 1) / span_ms * service / latency.servers


def at_load(workload: Workload, latency: LatencyModel, load: float) -> Workload:
    """``workload`` with its arrival times scaled so its :func:`offered_load` is ``load``."""
    if not load > 0:
        raise ConfigError(f"load must be positive, got {load!r}")
    start = workload.time[0]
    scale = offered_load(workload, latency) / load
    return replace(workload, time=start + (workload.time - start) * scale)


def load_reports(workload: Workload, tiers: Sequence[TierSpec], latency: LatencyModel,
                 loads: Sequence[float], *, ttl_s: float | None = None) -> dict[float, Report]:
    """:func:`replay` (no limits) at each offered load, arrival times scaled by :func:`at_load`."""
    return {float(load): replay(at_load(workload, latency, load), tiers, latency, limits=False,
                                ttl_s=ttl_s) for load in loads}


def load_sweep(workload: Workload, tiers: Sequence[TierSpec], latency: LatencyModel,
               loads: Sequence[float], *, ttl_s: float | None = None) -> list[dict[str, Any]]:
    """One row per offered load of :func:`load_reports` (see :func:`load_row`)."""
    return [load_row(load, r) for load, r in
            load_reports(workload, tiers, latency, loads, ttl_s=ttl_s).items()]


def load_row(load: float, report: Report) -> dict[str, Any]:
    """``load, p50_ms, p95_ms, p99_ms, sla_violation_rate, miss_rate`` of one replay, with its
    queue's ``mean_wait_ms`` and ``utilisation``."""
    return {"load": float(load),
            **{f"{q}_ms": report.latency_ms[q] for q in ("p50", "p95", "p99")},
            "sla_violation_rate": report.sla_violation_rate, "miss_rate": 1 - report.hit_rate,
            "mean_wait_ms": report.queue["mean_wait_ms"],
            "utilisation": report.queue["utilisation"]}


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
