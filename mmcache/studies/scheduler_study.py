"""Notebook 04's experiment: the scheduler's controllers on a CacheBench-MM workload that
shifts half-way (arrival rate and popularity), scored window by window.

:func:`shift_load` makes the load shift; :func:`run_controller` replays one controller;
:func:`scores` turns its windows into the issue's metrics (:func:`mmcache.scheduler.
control_metrics` plus latency) and the gain-choice ``cost``; :func:`settle_after_shifts` checks
where a run ends before and after the shift; :func:`window_noise` the noise of
a held setting's windows; :func:`grid` replays a gain grid on tuning seeds;
:func:`exchange_rate` gives the Lagrangian's objective unit (``objective_scale``);
:func:`needed_multiplier` the λ a stream's held settings say the target needs.

What is judged: a window of a few hundred requests measures the hit rate with several points
of noise (sessions and bursts cluster hits), more than the ±1 point band the target is held
to, and the first windows are an empty cache's whatever the controller does. So the scores
are of :func:`judged`: the exponentially weighted mean of the window hit rates from window
``warmup`` on (the newest window's weight ``smoothing``), started afresh at the shift
(``restart``) so that what is judged after it carries nothing from before; the controllers are
fed the same filter without the restart (``Scheduler(signal_smoothing=...)``).
"""

from __future__ import annotations

import itertools
import math
from dataclasses import replace
from typing import Any, Mapping, Sequence

import numpy as np
import pandas as pd

from mmcache.sim.latency import LatencyModel
from mmcache.sim.cachebench import TierSpec, at_load
from mmcache.errors import ConfigError
from mmcache.sim.cachebench.neighbours import NeighbourTable
from mmcache.scheduler import Levers, Scheduler, control_metrics, make_controller, replay_table
from mmcache.types import MODALITIES
from mmcache.sim.workload import Workload


def shift_load(workload: Workload, latency: LatencyModel, before: float,
               after: float) -> Workload:
    """``workload`` at offered load ``before`` (:func:`mmcache.sim.cachebench.at_load`) whose
    second half's inter-arrival gaps are shrunk by ``before / after``: its load is ``after``
    for a stream that is the same in both halves (the cycle and bursts aside)."""
    if not (before > 0 and after > 0):
        raise ConfigError(f"loads must be positive, got {before!r} and {after!r}")
    times = at_load(workload, latency, before).time.copy()
    half = len(workload) // 2
    times[half:] = times[half] + (times[half:] - times[half]) * before / after
    return replace(workload, time=times)


def offset_settings(offsets: Sequence[float]) -> list[Levers]:
    """One :class:`Levers` per δ offset, the same offset on every modality."""
    return [Levers({m: float(d) for m in MODALITIES}) for d in offsets]


def run_controller(workload: Workload, tiers: Sequence[TierSpec], latency: LatencyModel,
                   settings: Sequence[Levers], name: str, target: float, *, window: int,
                   params: Mapping[str, Any] | None = None, seed: int = 0,
                   signal_smoothing: float = 1.0, objective_scale: float = 1.0,
                   mix: bool = True, table: NeighbourTable | None = None) -> pd.DataFrame:
    """Replay ``workload`` with a scheduler minimising the false-hit rate (÷
    ``objective_scale``) subject to hit rate ≥ ``target`` under controller ``name`` fed the
    hit rate filtered with ``signal_smoothing``, mixing two neighbouring settings by λ
    (``Scheduler(mix="hit_rate")``; ``mix=False``: one setting per window); one row per
    window (its history). ``table``: the workload's neighbour table to share across runs
    (:func:`mmcache.scheduler.replay_table` of these or more settings; default: built here)."""
    controller = make_controller(name, target, **dict(params or {}))
    scheduler = Scheduler(settings, {"hit_rate": controller}, objective="error_rate",
                          objective_scale=objective_scale, seed=seed,
                          signal_smoothing=signal_smoothing, mix="hit_rate" if mix else None)
    scheduler.replay(workload, tiers, window=window, latency=latency, seed=seed, table=table)
    return pd.DataFrame(scheduler.history).rename(columns={"lambda_hit_rate": "lam"})


def exchange_rate(held: pd.DataFrame) -> float:
    """False hits bought per unit of hit rate across held settings (rows with ``hit_rate``,
    ``error_rate``): the chord from the lowest-hit to the highest-hit setting. As the
    Lagrangian's ``objective_scale`` it makes λ = 1 the settings' mean exchange rate."""
    ends = held.sort_values("hit_rate").iloc[[0, -1]]
    rate = float(ends.error_rate.diff().iloc[-1] / ends.hit_rate.diff().iloc[-1])
    if not rate > 0:
        raise ConfigError(f"the held settings buy no hits with false hits (rate {rate!r})")
    return rate


def needed_multiplier(held: Sequence[Mapping[str, float]], settings: Sequence[Levers],
                      target: float, *, objective_scale: float = 1.0,
                      band: float = 0.005) -> tuple[float, float]:
    """Where the settings held with the mean window measurements ``held`` (one mapping per
    setting, with ``hit_rate`` and ``error_rate``) put the target: the λ at which the mixture
    of their hull reaches hit rate ``target`` in expectation under the false-hit objective ÷
    ``objective_scale`` (:meth:`mmcache.scheduler.Scheduler.multiplier`), and the hit rate's
    slope in λ there (2·``band`` over the λs that target ± ``band`` need; inf where equal)."""
    scheduler = Scheduler(settings, {"hit_rate": make_controller("fixed", target)},
                          objective="error_rate", objective_scale=objective_scale,
                          mix="hit_rate")
    scheduler.estimates = [dict(h) for h in held]
    low, high = (scheduler.multiplier(target + d) for d in (-band, band))
    return scheduler.multiplier(target), 2 * band / (high - low) if high > low else math.inf


def judged(windows: pd.DataFrame, *, smoothing: float = 1.0, warmup: int = 0,
           restart: int | None = None) -> pd.Series:
    """The judged hit rate: from window ``warmup`` on, the exponentially weighted mean of the
    window hit rates so far, the newest window's weight ``smoothing`` (1: the raw windows),
    started afresh at window ``restart`` (a shift: no weight on windows before it after it)."""
    if not 0 <= warmup < len(windows):
        raise ConfigError(f"warmup must be in 0..{len(windows) - 1} windows, got {warmup!r}")
    if restart is not None and not warmup < restart < len(windows):
        raise ConfigError(f"restart must be in {warmup + 1}..{len(windows) - 1}, got {restart!r}")
    if not 0 < smoothing <= 1:
        raise ConfigError(f"smoothing is the newest window's weight, in (0, 1], got {smoothing!r}")
    hits = windows.hit_rate.iloc[warmup:]
    phase = hits.index >= (restart if restart is not None else len(windows))
    return hits.groupby(phase).transform(lambda h: h.ewm(alpha=smoothing, adjust=True).mean())


def scores(windows: pd.DataFrame, target: float, *, smoothing: float = 1.0, warmup: int = 0,
           restart: int | None = None, objective_scale: float = 1.0,
           tracking_weight: float = 1.0) -> dict[str, float]:
    """:func:`mmcache.scheduler.control_metrics` of the :func:`judged` hit rate, and over the
    windows from ``warmup`` on: the request-weighted hit, false-hit and mean latency, the p99 of
    the windows' p99s, the mean absolute distance of the judged hit rate to the target
    (``tracking_error``), the raw windows' violation area (``raw_violation_area``), λ's
    window-to-window chatter (``lambda_step_sd``, the std of its steps), ``cost``: the
    false-hit rate ÷ ``objective_scale`` plus ``tracking_weight`` × the tracking error (the
    Lagrangian at λ = ``tracking_weight`` with the constraint's miss counted both ways; the
    gain-choice criterion: with a weight above every setting's exchange rate, missing the
    target never pays for the false hits it saves), and ``lagrangian_cost``: the same with
    the mean violation (judged windows below the target only) in place of the tracking error,
    the Lagrangian itself (it charges a margin above the target only through its false hits)."""
    signal = judged(windows, smoothing=smoothing, warmup=warmup, restart=restart)
    windows = windows.iloc[warmup:]
    weight = windows.requests / windows.requests.sum()
    error_rate = float((weight * windows.error_rate).sum())
    tracking = float((signal - target).abs().mean())
    shortfall = float((target - signal).clip(lower=0).mean())
    return {**control_metrics(signal.to_numpy(), target),
            "raw_violation_area": float((target - windows.hit_rate).clip(lower=0).sum()),
            "hit_rate": float((weight * windows.hit_rate).sum()), "error_rate": error_rate,
            "mean_latency_ms": float((weight * windows.mean_latency_ms).sum()),
            "p99_latency_ms": float(windows.p99_latency_ms.quantile(0.99)),
            "tracking_error": tracking, "lambda_step_sd": float(windows.lam.diff().std()),
            "cost": error_rate / objective_scale + tracking_weight * tracking,
            "lagrangian_cost": error_rate / objective_scale + tracking_weight * shortfall}


def settle_after_shifts(windows: pd.DataFrame, target: float, *, smoothing: float = 1.0,
                        warmup: int = 0, restart: int | None = None,
                        band: float = 0.01) -> dict[str, Any]:
    """The :func:`judged` hit rate at the last window before the half and at the end, and
    whether each is within ``band`` of ``target``."""
    signal = judged(windows, smoothing=smoothing, warmup=warmup, restart=restart)
    ends = {"before_shift": signal.loc[len(windows) // 2 - 1], "at_end": signal.iloc[-1]}
    return {**{k: float(v) for k, v in ends.items()},
            "within_band": bool(all(abs(v - target) <= band for v in ends.values()))}


def window_noise(held: pd.DataFrame, *, warmup: int, restart: int) -> float:
    """The window-to-window noise of the run ``held`` of one setting throughout: the std of
    the change of the window hit rate from one window to the next over √2, over the second
    half of each phase (the windows from ``warmup`` to ``restart`` and from ``restart`` on),
    so the cache's refill and slow drifts do not count as noise."""
    steps = [held.hit_rate.iloc[(start + stop) // 2:stop].diff().dropna()
             for start, stop in ((warmup, restart), (restart, len(held)))]
    return float(pd.concat(steps).std() / np.sqrt(2))


def grid(cases: Mapping[int, tuple[Workload, Sequence[TierSpec]]], latency: LatencyModel,
         settings: Sequence[Levers], name: str, target: float, axes: Mapping[str, Sequence[float]],
         *, window: int, fixed: Mapping[str, Any] | None = None, smoothing: float = 1.0,
         warmup: int = 0, restart: int | None = None, objective_scale: float = 1.0,
         tracking_weight: float = 1.0) -> pd.DataFrame:
    """:func:`scores` of controller ``name`` (fed the hit rate filtered with ``smoothing``)
    at every combination of ``axes`` (parameter → values; ``fixed`` parameters held), replayed
    on every case (seed → its workload and tiers; the seed also seeds the replay), averaged
    over the cases: one row per combination (each case's neighbour table built once)."""
    tables = {seed: replay_table(stream, tiers, settings)
              for seed, (stream, tiers) in cases.items()}
    rows = []
    for values in itertools.product(*axes.values()):
        params = {**dict(fixed or {}), **dict(zip(axes, values))}
        runs = [scores(run_controller(stream, tiers, latency, settings, name, target,
                                      window=window, params=params, seed=seed,
                                      signal_smoothing=smoothing,
                                      objective_scale=objective_scale, table=tables[seed]),
                       target, smoothing=smoothing, warmup=warmup, restart=restart,
                       objective_scale=objective_scale, tracking_weight=tracking_weight)
                for seed, (stream, tiers) in cases.items()]
        rows.append({**dict(zip(axes, values)), **pd.DataFrame(runs).mean().to_dict()})
    return pd.DataFrame(rows)


def best(table: pd.DataFrame, by: str = "cost") -> dict[str, float]:
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
