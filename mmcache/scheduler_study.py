"""Notebook 04's experiment: the scheduler's controllers on a CacheBench-MM workload that
shifts half-way (arrival rate and popularity), scored window by window.

:func:`shift_load` makes the load shift; :func:`run_controller` replays one controller;
:func:`scores` turns its windows into the issue's metrics (:func:`mmcache.scheduler.
control_metrics` plus latency); :func:`settle_after_shifts` checks where a run ends before
and after the shift; :func:`grid` replays a gain grid.
"""

from __future__ import annotations

import itertools
from dataclasses import replace
from typing import Any, Mapping, Sequence

import pandas as pd

from .cachebench import LatencyModel, TierSpec, at_load
from .errors import ConfigError
from .scheduler import Levers, Scheduler, control_metrics, make_controller
from .types import MODALITIES
from .workload import Workload


def shift_load(workload: Workload, latency: LatencyModel, before: float,
               after: float) -> Workload:
    """``workload`` at offered load ``before`` (:func:`mmcache.cachebench.at_load`) whose
    second half's inter-arrival gaps are shrunk by ``before / after``: its load is ``after``
    for a stream that is the same in both halves (the cycle and bursts aside)."""
    if not (before > 0 and after > 0):
        raise ConfigError(f"loads must be positive, got {before!r} and {after!r}")
    times = at_load(workload, latency, before).time.copy()
    half = len(workload) // 2
    times[half:] = times[half] + (times[half:] - times[half]) * before / after
    return replace(workload, time=times)


#: The per-query columns of a :class:`Workload`.
COLUMNS = ("intent", "modality", "variant", "topic", "session", "burst", "time", "size",
           "modality_set")


def head(workload: Workload, n: int) -> Workload:
    """The first ``n`` queries of ``workload`` (the same draws, e.g. to tune on a prefix)."""
    if not 0 < n <= len(workload):
        raise ConfigError(f"n must be in 1..{len(workload)}, got {n!r}")
    return replace(workload, **{c: getattr(workload, c)[:n] for c in COLUMNS})


def offset_settings(offsets: Sequence[float]) -> list[Levers]:
    """One :class:`Levers` per δ offset, the same offset on every modality."""
    return [Levers({m: float(d) for m in MODALITIES}) for d in offsets]


def run_controller(workload: Workload, tiers: Sequence[TierSpec], latency: LatencyModel,
                   settings: Sequence[Levers], name: str, target: float, *, window: int,
                   params: Mapping[str, Any] | None = None, seed: int = 0) -> pd.DataFrame:
    """Replay ``workload`` with a scheduler minimising the false-hit rate subject to hit rate
    ≥ ``target`` under controller ``name``; one row per window (its history)."""
    controller = make_controller(name, target, **dict(params or {}))
    scheduler = Scheduler(settings, {"hit_rate": controller}, objective="error_rate",
                          seed=seed)
    scheduler.replay(workload, tiers, window=window, latency=latency, seed=seed)
    return pd.DataFrame(scheduler.history).rename(columns={"lambda_hit_rate": "lam"})


def scores(windows: pd.DataFrame, target: float) -> dict[str, float]:
    """:func:`mmcache.scheduler.control_metrics` of the windows' hit rates, with the
    request-weighted hit, false-hit and mean latency, the p99 of the windows' p99s, and the
    mean absolute distance to the target (``tracking_error``)."""
    weight = windows.requests / windows.requests.sum()
    return {**control_metrics(windows.hit_rate.to_numpy(), target),
            "hit_rate": float((weight * windows.hit_rate).sum()),
            "error_rate": float((weight * windows.error_rate).sum()),
            "mean_latency_ms": float((weight * windows.mean_latency_ms).sum()),
            "p99_latency_ms": float(windows.p99_latency_ms.quantile(0.99)),
            "tracking_error": float((windows.hit_rate - target).abs().mean())}


def settle_after_shifts(windows: pd.DataFrame, target: float, *, tail: int = 5,
                        band: float = 0.01) -> dict[str, Any]:
    """Mean hit rate of the last ``tail`` windows before the half and at the end, and whether
    each is within ``band`` of ``target``."""
    half = len(windows) // 2
    ends = {"before_shift": windows.hit_rate.iloc[half - tail:half].mean(),
            "at_end": windows.hit_rate.iloc[-tail:].mean()}
    return {**{k: float(v) for k, v in ends.items()},
            "within_band": bool(all(abs(v - target) <= band for v in ends.values()))}


def grid(workload: Workload, tiers: Sequence[TierSpec], latency: LatencyModel,
         settings: Sequence[Levers], name: str, target: float, axes: Mapping[str, Sequence[float]],
         *, window: int, fixed: Mapping[str, Any] | None = None) -> pd.DataFrame:
    """:func:`scores` of controller ``name`` at every combination of ``axes`` (parameter →
    values; ``fixed`` parameters held), one row each."""
    rows = []
    for values in itertools.product(*axes.values()):
        params = {**dict(fixed or {}), **dict(zip(axes, values))}
        run = run_controller(workload, tiers, latency, settings, name, target,
                             window=window, params=params)
        rows.append({**dict(zip(axes, values)), **scores(run, target)})
    return pd.DataFrame(rows)


def best(table: pd.DataFrame, by: str = "tracking_error") -> dict[str, float]:
    """The row of ``table`` with the least ``by``."""
    return {k: float(v) for k, v in table.loc[table[by].idxmin()].items()}


def hindsight_fixed(runs: pd.DataFrame, target: float) -> float:
    """The best fixed λ in hindsight: of the λs whose mean hit rate over ``runs`` (rows with
    ``lam``, ``hit_rate``, ``error_rate``) meets ``target``, the one with the fewest false
    hits; the λ with the highest hit rate when none meets it."""
    means = runs.groupby("lam")[["hit_rate", "error_rate"]].mean()
    feasible = means[means.hit_rate >= target]
    if feasible.empty:
        return float(means.hit_rate.idxmax())
    return float(feasible.error_rate.idxmin())
