"""The Lagrangian dynamic-weight scheduler (seed 000 §3.2): dual control of a cache's levers.

The problem: minimise latency subject to constraints on what a window of requests
measured: hit rate ≥ target, and optionally error (false-hit) rate ≤ budget and p99
latency ≤ SLA. Its Lagrangian for a lever setting ``s`` is

    L(s, λ) = objective(s) / objective_scale + Σ_k λ_k · violation_k(s)

(the objective: mean latency, or with ``objective="error_rate"`` the false-hit rate)

where ``violation_k`` is ``target − value`` for an at-least constraint and
``value − target`` for an at-most one. Each λ_k comes from one :class:`Controller`
(fixed, the seed's I, PI, PID, PI-aim; see :data:`CONTROLLERS`), updated with every window's
measurement of its metric (or, for PI-aim, set from the value it aims at through the
mixture below).

The decision: the :class:`Scheduler` picks, per window, a setting from a declared finite
set of :class:`Levers` — the one minimising L under per-setting estimates (exponential
moving averages of the requests served with it). Settings never served are tried first, in
order; afterwards a share ``explore`` of windows uses a random setting, so estimates of
unused settings follow a changing workload (an estimate also carries the cache's state when
it was measured: in a cold cache the settings tried first look worse until they are used
again). Why a finite set with learned estimates: how a δ offset or an admission rate moves
hit rate and latency depends on the workload, so no fixed mapping λ → lever is honest, while
the argmin over a finite set is exact and needs no model. Its price: the chosen hit rate is
piecewise constant in λ, a staircase whose steps (neighbouring settings) can be wider than
the band a target is held to. ``mix=<constraint>`` removes the steps the way a Lagrangian
relaxation over discrete actions does, by randomising between neighbours (:meth:`Scheduler.
mixture`): on the lower convex hull of the settings' (constraint, objective) estimates, each
hull setting is served purely at its break-even multiplier (the λ at which it starts to win
the argmin) and between two break-evens the window is split between the two neighbours,
the looser one's share rising linearly in λ — so the expected constrained metric is
continuous and monotone in λ, and a controller can hold a target between two settings
without alternating. The split is deterministic (the first requests of the window with one
setting, the rest with the other), so the estimates learn each part's requests, the same in
replay and live; a finer grid of settings would narrow the steps too, but its estimates each
get fewer requests, so each is noisier, while the mix keeps the grid and needs no model.

Levers: a δ offset per modality (added to the threshold rule's δ: the cosine a semantic
hit needs is lowered by it), admission (the probability that a miss is stored) and tiers
not probed (``skip``: no lookup cost, no hits from them; live, through the cache's
``probe`` set of tiers consulted).

Where it runs, with the same :class:`Scheduler`: :meth:`Scheduler.replay` replays a
CacheBench-MM workload window by window (:class:`mmcache.sim.cachebench.Replayer`), and
:meth:`Scheduler.attach` drives a live :class:`mmcache.TieredCache` from its metrics.

:func:`demonstrate` runs the four controllers on a :class:`FirstOrderPlant` (a known
response) and scores them with :func:`control_metrics`."""

from mmcache.scheduler.controllers import (
    AimPIController, CONTROLLERS, Controller, FixedController, IController, PIController,
    PIDController, cosine_lr, make_controller)
from mmcache.scheduler.levers import Levers, WindowStats
from mmcache.scheduler.decision import METRICS, OBJECTIVES, Scheduler
from mmcache.scheduler.drivers import (
    CacheAdapter, OffsetThreshold, compiles, replay_cutoff, replay_table, window_stats)
from mmcache.scheduler.plant import FirstOrderPlant, control_metrics, demonstrate, run_plant

__all__ = [
    "AimPIController", "CONTROLLERS", "CacheAdapter", "Controller", "FirstOrderPlant",
    "FixedController", "IController", "Levers", "METRICS", "OBJECTIVES", "OffsetThreshold",
    "PIController", "PIDController", "Scheduler", "WindowStats", "compiles", "control_metrics",
    "cosine_lr", "demonstrate", "make_controller", "replay_cutoff", "replay_table", "run_plant",
    "window_stats"]
