"""The cache-invalidation MDP replayed in simulation, from stated key-class models.

This is a model, not a measurement: every probability and cost comes from the parameters of a
:class:`KeyClass`, none from a live cache. A key class is described by how often it is asked
for (``rate_per_s``), how long a backend load takes (``load_s``), how often a load fails
(``p_fail``), how often the backend value changes between two requests (``p_update``) and how
often an entry is evicted between two requests (``p_evict``);
:meth:`KeyClass.transition` turns them into ``P(s' | s, a)`` for the states and actions of
:mod:`mmcache.sim.invalidation_mdp`, and :meth:`KeyClass.mdp` adds the cost table of its
:class:`~mmcache.sim.invalidation_mdp.CostParams`.

The transition model, stated once (``u`` = ``p_update``, ``f`` = ``p_fail``, ``d`` = the
chance that a load in flight finishes before the next request, ``1 / (1 + rate_per_s ·
load_s)`` with load durations exponential of mean ``load_s`` and Poisson requests; "fresh" =
HIT with probability ``1 - u``, STALE with ``u``):

* PRELOAD serves what is held and starts an asynchronous load. A fresh entry stays fresh; a
  stale one becomes fresh if the load finishes and succeeds (``d(1 - f)``), else stays stale;
  in a miss state the load finishes and succeeds (fresh), finishes and fails (MISS_FAILED) or is
  still in flight (MISS_LOADING).
* BLOCK waits for a load (its own, or the one in flight), so it is finished by the next
  request: fresh with ``1 - f``; on failure a stale entry stays STALE, a miss is MISS_FAILED.
  In HIT there is nothing to wait for: the hit is served.
* BYPASS sends the request to the backend and leaves the cache alone: HIT stays fresh, STALE
  stays stale, MISS_FAILED stays failed, and a load already in flight runs on (as under PRELOAD).
* Between two requests an entry held (HIT or STALE) is evicted or expires with probability
  ``p_evict``; the next request then finds no entry and no load in flight, which the four states
  count as MISS_FAILED (read it as "a miss with nothing loading": the last load failed, or the
  entry is gone).
* A request that BLOCKs on a load that fails pays ``failed_wait_ms`` on top of the cost table
  (a timeout, a retry): :meth:`KeyClass.cost` adds ``p_fail · failed_wait_ms`` to BLOCK in
  STALE, MISS_LOADING and MISS_FAILED.

:func:`replay` runs one policy over a stream of requests whose true model changes at stated
times (:class:`Phase`), with the same arrivals and random draws for every policy; the
``"estimated"`` policy learns the MDP online with a
:class:`~mmcache.sim.invalidation_mdp.TransitionEstimator` over a sliding window and re-solves
it every ``resolve_every_s`` seconds (ε-greedy, so that every action keeps being observed);
``"oracle"`` solves the true MDP of each phase. :func:`compare_policies` tabulates every
policy's simulated cost and its exact regret against the oracle, per phase;
:func:`compare_over_seeds` repeats it over seeds (a seed's policies share its arrivals), the
pairs a test over seeds needs.
"""

from __future__ import annotations

import collections
import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Sequence

import numpy as np

from mmcache.errors import ConfigError, InvalidInputError, check_number
from mmcache.sim.invalidation_mdp import (MDP, Action, CostParams, State, TransitionEstimator,
                                          check_discount, cost_matrix, evaluate_policy,
                                          fixed_policy, value_iteration)

if TYPE_CHECKING:
    import pandas as pd

#: The policies :func:`replay` knows, besides one fixed action per state.
POLICIES = ("estimated", "oracle", "preload", "block", "bypass")
_FIXED = {"preload": Action.PRELOAD, "block": Action.BLOCK, "bypass": Action.BYPASS}
#: value_iteration's tolerance here: costs are in the hundreds of ms (see its docstring).
SOLVER_TOL = 1e-6


@dataclass(frozen=True)
class KeyClass:
    """The stated model of one key class (see the module docstring for what each parameter
    does to the transitions). ``costs`` prices one request (:func:`cost_matrix`)."""

    name: str
    rate_per_s: float
    load_s: float
    p_fail: float
    p_update: float
    p_evict: float = 0.0
    costs: CostParams = field(default_factory=CostParams)
    failed_wait_ms: float = 0.0

    def __post_init__(self) -> None:
        check_number(self.rate_per_s, f"{self.name}: rate_per_s", 0)
        check_number(self.load_s, f"{self.name}: load_s", 0, strict=False)
        check_number(self.failed_wait_ms, f"{self.name}: failed_wait_ms", 0, strict=False)
        for name in ("p_fail", "p_update", "p_evict"):
            value = getattr(self, name)
            if not (math.isfinite(value) and 0 <= value <= 1):
                raise ConfigError(f"{self.name}: {name} must be a probability in [0, 1], "
                                  f"got {value!r}")

    @property
    def async_done(self) -> float:
        """P(a load in flight finishes before the next request) = 1 / (1 + rate · load_s):
        load durations exponential with mean ``load_s``, requests Poisson at ``rate_per_s``."""
        return 1.0 / (1.0 + self.rate_per_s * self.load_s)

    def transition(self) -> np.ndarray:
        """``P[action, state, next_state]`` of this class."""
        u, f, d = self.p_update, self.p_fail, self.async_done
        fresh = np.zeros(len(State))
        fresh[State.HIT], fresh[State.STALE] = 1 - u, u
        stale, loading, failed = (np.eye(len(State))[s] for s in
                                  (State.STALE, State.MISS_LOADING, State.MISS_FAILED))
        in_flight = d * (1 - f) * fresh + d * f * failed + (1 - d) * loading
        waited_miss = (1 - f) * fresh + f * failed
        p = np.empty((len(Action), len(State), len(State)))
        p[Action.PRELOAD] = [fresh, d * (1 - f) * fresh + (1 - d * (1 - f)) * stale,
                             in_flight, in_flight]
        p[Action.BLOCK] = [fresh, (1 - f) * fresh + f * stale, waited_miss, waited_miss]
        p[Action.BYPASS] = [fresh, stale, in_flight, failed]
        held = p[:, :, State.HIT] + p[:, :, State.STALE]  # an entry there may be evicted
        p[:, :, State.HIT] *= 1 - self.p_evict
        p[:, :, State.STALE] *= 1 - self.p_evict
        p[:, :, State.MISS_FAILED] += self.p_evict * held
        return p

    def cost(self) -> np.ndarray:
        """``cost[state, action]``: :func:`cost_matrix` of ``costs``, plus ``p_fail ·
        failed_wait_ms`` where BLOCK waits for a load (STALE, MISS_LOADING, MISS_FAILED): a
        request that waited for a load that failed pays for it (a timeout, a retry)."""
        cost = cost_matrix(self.costs)
        cost[[State.STALE, State.MISS_LOADING, State.MISS_FAILED], Action.BLOCK] += \
            self.p_fail * self.failed_wait_ms
        return cost

    def mdp(self) -> MDP:
        """The true MDP of this class: :meth:`transition` and :meth:`cost`."""
        return MDP(self.transition(), self.cost())


@dataclass(frozen=True)
class Phase:
    """From ``start_s`` on (seconds into the stream), requests follow ``key_class``."""

    start_s: float
    key_class: KeyClass


def regret_per_request(mdp: MDP, policy: Sequence[int] | np.ndarray, discount: float,
                       start: int = State.HIT, optimal: np.ndarray | None = None) -> float:
    """``(1 - γ)(V_π(start) - V*(start))``: the discounted cost per request ``policy`` adds
    over the optimum from ``start`` (a fresh entry by default), both values exact
    (:func:`evaluate_policy`); the optimum is ``optimal`` or :func:`value_iteration`'s policy
    at :data:`SOLVER_TOL`. Never below ``-(1 - γ)·γ·tol/2`` (value iteration's bound)."""
    best = value_iteration(mdp, discount, SOLVER_TOL).policy if optimal is None else optimal
    gap = evaluate_policy(mdp, policy, discount) - evaluate_policy(mdp, best, discount)
    return float((1 - discount) * gap[start])


@dataclass(frozen=True)
class ReplayRun:
    """One policy over one stream, per request: its time, phase index, state, action, the
    observed cost, and the exact per-request regret (:func:`regret_per_request`) of the greedy
    policy in force under the true MDP of its phase. ``solves``: every re-solve of the
    estimated policy as ``(time, policy)`` (empty for the other policies)."""

    policy: str
    times: np.ndarray
    phase: np.ndarray
    states: np.ndarray
    actions: np.ndarray
    costs: np.ndarray
    regret: np.ndarray
    solves: list[tuple[float, tuple[int, ...]]]
    in_force: list[tuple[int, ...]]


def _check_phases(phases: Sequence[Phase], duration_s: float) -> None:
    if not phases:
        raise InvalidInputError("replay needs at least one Phase")
    check_number(duration_s, "duration_s", 0)
    starts = [p.start_s for p in phases]
    if starts[0] != 0 or any(b <= a for a, b in zip(starts, starts[1:])) or starts[-1] >= duration_s:
        raise InvalidInputError(f"phase starts must begin at 0, increase, and lie before "
                                f"duration_s={duration_s}; got {starts}")


def arrivals(phases: Sequence[Phase], duration_s: float, rng: np.random.Generator) -> np.ndarray:
    """Poisson request times over ``[0, duration_s)``, each phase at its class's rate."""
    _check_phases(phases, duration_s)
    ends = [p.start_s for p in phases[1:]] + [duration_s]
    out = []
    for phase, end in zip(phases, ends):
        n = rng.poisson(phase.key_class.rate_per_s * (end - phase.start_s))
        out.append(np.sort(rng.uniform(phase.start_s, end, n)))
    return np.concatenate(out)


def check_run_params(window_s: float, resolve_every_s: float, discount: float,
                     epsilon: float) -> None:
    """A ConfigError unless the estimated policy's settings are usable: a discount in (0, 1),
    a positive finite window and re-solve period, and an exploration probability."""
    check_discount(discount)
    for name, value in (("window_s", window_s), ("resolve_every_s", resolve_every_s)):
        check_number(value, name, 0)
    if not (math.isfinite(epsilon) and 0 <= epsilon <= 1):
        raise ConfigError(f"epsilon must be a probability in [0, 1], got {epsilon!r}")


def replay(phases: Sequence[Phase], duration_s: float, policy: str, *, window_s: float,
           resolve_every_s: float, discount: float = 0.99, epsilon: float = 0.05,
           cost_noise: float = 0.0, seed: int = 0, prior_cost: np.ndarray | None = None,
           initial_state: int = State.HIT) -> ReplayRun:
    """Run ``policy`` (one of :data:`POLICIES`) over a seeded stream of ``phases``.

    Every policy sees the same arrivals and the same uniform draws per request (common random
    numbers), so differences come from the policies, not the draws. A request's observed cost
    is the true ``cost[s, a]`` times a mean-1 log-normal of σ = ``cost_noise``. ``"estimated"``
    feeds each transition to a :class:`TransitionEstimator` (``window_s``, ``prior_cost``:
    default the first phase's stated costs), re-solves at the first request at or after each
    multiple of ``resolve_every_s`` (the first at time 0, from the prior: uniform rows) and takes
    a uniformly random action with probability ``epsilon``; the other policies never explore.
    """
    if policy not in POLICIES:
        raise ConfigError(f"policy must be one of {POLICIES}, got {policy!r}")
    check_run_params(window_s, resolve_every_s, discount, epsilon)
    check_number(cost_noise, "cost_noise", 0, strict=False)
    streams = [np.random.default_rng(s) for s in np.random.SeedSequence(seed).spawn(4)]
    times = arrivals(phases, duration_s, streams[0])
    n = times.size
    step_u = streams[1].random(n)
    explore_u, explore_a = streams[2].random(n), streams[2].integers(len(Action), size=n)
    noise = np.exp(cost_noise * streams[3].standard_normal(n) - cost_noise ** 2 / 2)
    phase = np.searchsorted([p.start_s for p in phases], times, side="right") - 1
    true = [p.key_class.mdp() for p in phases]
    cumulative = [np.cumsum(m.transition, axis=2) for m in true]
    oracle = [value_iteration(m, discount, SOLVER_TOL).policy for m in true]
    # the policy in force of a non-learning policy, per phase (it never changes within one)
    fixed = ([tuple(int(a) for a in oracle[k]) if policy == "oracle"
              else tuple(int(a) for a in fixed_policy(true[k], _FIXED[policy]))
              for k in range(len(true))] if policy != "estimated" else [])
    regret_cache: dict[tuple[tuple[int, ...], int], float] = {}

    def regret_of(pol: tuple[int, ...], k: int) -> float:
        if (pol, k) not in regret_cache:
            regret_cache[pol, k] = regret_per_request(true[k], pol, discount, optimal=oracle[k])
        return regret_cache[pol, k]

    estimator = None
    if policy == "estimated":
        estimator = TransitionEstimator(window_s, true[0].cost if prior_cost is None
                                        else prior_cost)
    states = np.empty(n, dtype=np.int64)
    actions = np.empty(n, dtype=np.int64)
    costs = np.empty(n)
    regret = np.empty(n)
    solves: list[tuple[float, tuple[int, ...]]] = []
    in_force: list[tuple[int, ...]] = []
    greedy: tuple[int, ...] = ()
    next_solve = 0.0
    state = int(initial_state)
    for i in range(n):
        t, k = float(times[i]), int(phase[i])
        if estimator is not None:
            if i > 0:
                estimator.observe(t, int(states[i - 1]), int(actions[i - 1]), state, costs[i - 1])
            if t >= next_solve:
                greedy = tuple(int(a) for a in
                               value_iteration(estimator.estimate(), discount, SOLVER_TOL).policy)
                solves.append((t, greedy))
                next_solve = (math.floor(t / resolve_every_s) + 1) * resolve_every_s
            pol = greedy
            action = int(explore_a[i]) if explore_u[i] < epsilon else pol[state]
        else:
            pol = fixed[k]
            action = pol[state]
        states[i], actions[i] = state, action
        costs[i] = true[k].cost[state, action] * noise[i]
        regret[i] = regret_of(pol, k)
        in_force.append(pol)
        row = cumulative[k][action, state]
        state = min(int(np.searchsorted(row, step_u[i] * row[-1], side="right")), len(State) - 1)
    return ReplayRun(policy, times, phase, states, actions, costs, regret, solves, in_force)


def policy_names(policy: Sequence[int]) -> dict[str, str]:
    """``{state name: action name}`` of a policy, e.g. ``{"HIT": "BLOCK", ...}``."""
    return {State(s).name: Action(int(a)).name for s, a in enumerate(policy)}


def compare_policies(phases: Sequence[Phase], duration_s: float,
                     policies: Sequence[str] = POLICIES, phase_names: Sequence[str] | None = None,
                     **kwargs) -> tuple[pd.DataFrame, dict[str, ReplayRun]]:
    """Every policy in ``policies`` replayed (:func:`replay`, ``kwargs`` passed on) over the
    same stream; one row per policy and phase: ``requests``, ``cost_ms`` (mean observed cost,
    exploration included), ``regret_ms`` (mean exact per-request regret of the policy in force
    against the oracle), ``excess_cost_ms`` (``cost_ms`` minus the oracle's: simulated, so it
    can fall below 0 by chance), ``oracle_agreement`` (share of requests whose policy in force
    is the oracle's) and ``policy`` (the policy in force for most of the phase's requests).
    Returns the table and the runs."""
    # deferred: pandas only for this table
    import pandas as pd

    names = list(phase_names) if phase_names is not None else [f"phase {k}" for k in
                                                                 range(len(phases))]
    if len(names) != len(phases):
        raise InvalidInputError(f"{len(phases)} phases but {len(names)} phase names")
    wanted = list(dict.fromkeys(["oracle", *policies]))
    runs = {p: replay(phases, duration_s, p, **kwargs) for p in wanted}
    oracle = runs["oracle"]
    rows = []
    for p in policies:
        run = runs[p]
        for k, name in enumerate(names):
            mask = run.phase == k
            if not mask.any():
                continue
            in_phase = [pol for pol, m in zip(run.in_force, mask) if m]
            oracle_pol = oracle.in_force[int(np.flatnonzero(oracle.phase == k)[0])]
            modal = collections.Counter(in_phase).most_common(1)[0][0]
            rows.append({"policy_name": p, "phase": name, "requests": int(mask.sum()),
                         "cost_ms": float(run.costs[mask].mean()),
                         "regret_ms": float(run.regret[mask].mean()),
                         "excess_cost_ms": float(run.costs[mask].mean()
                                                 - oracle.costs[oracle.phase == k].mean()),
                         "oracle_agreement": float(np.mean([pol == oracle_pol
                                                            for pol in in_phase])),
                         "policy": policy_names(modal)})
    return pd.DataFrame(rows), runs


def compare_over_seeds(phases: Sequence[Phase], duration_s: float, seeds: Sequence[int],
                       policies: Sequence[str] = POLICIES,
                       phase_names: Sequence[str] | None = None,
                       **kwargs) -> tuple[pd.DataFrame, dict[int, dict[str, ReplayRun]]]:
    """:func:`compare_policies` once per seed in ``seeds`` (``kwargs`` passed on, ``seed``
    excepted): one row per seed, policy and phase, with a ``seed`` column first. Within a
    seed every policy sees the same arrivals and draws, so two policies' rows of one seed and
    phase are a pair (a paired test over seeds compares them). Returns the table and the runs
    per seed."""
    # deferred: pandas only for this table
    import pandas as pd

    seeds = [int(s) for s in seeds]
    if not seeds or len(set(seeds)) != len(seeds):
        raise InvalidInputError(f"compare_over_seeds needs distinct seeds, got {seeds!r}")
    if "seed" in kwargs:
        raise InvalidInputError("compare_over_seeds takes its seeds from `seeds`, not `seed`")
    tables, runs = [], {}
    for seed in seeds:
        table, runs[seed] = compare_policies(phases, duration_s, policies, phase_names,
                                             seed=seed, **kwargs)
        tables.append(table.assign(seed=seed))
    out = pd.concat(tables, ignore_index=True)
    return out[["seed", *(c for c in out.columns if c != "seed")]], runs
