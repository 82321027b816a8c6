"""The cache-invalidation MDP on a live :class:`~mmcache.cache.TieredCache`.

:mod:`mmcache.sim.invalidation_replay` draws each next state from a :class:`KeyClass`'s stated
transition model. Here the same :class:`KeyClass` parameters drive a simulated *backend* and a
request stream, and the state of every request is read from a real ``TieredCache``'s answer
(L1 only, in memory, on a fake clock that the simulated arrivals advance, so a run takes
seconds): a ``"fresh"`` hit is ``HIT``, a ``"stale-while-revalidate"`` hit is ``STALE``, a miss
while the driver has a load of the key in flight is ``MISS_LOADING``, any other miss
``MISS_FAILED``. The action the current policy picks is applied to the cache:

* ``PRELOAD``: serve what the cache holds (a miss goes to the backend) and start an
  asynchronous load that ``put`` s its value when it completes (single flight: none if one is
  already in flight). For a stale entry the load is the cache's ``on_stale`` refresh; when the
  cache withholds that callback (its own single flight, e.g. after an earlier refresh failed)
  while nothing is in flight, the driver starts it itself (counted as ``direct_refreshes``).
* ``BLOCK``: a fresh hit is served; otherwise the request waits for a load of the key (the one
  in flight, or its own), which finishes at the request's time on the fake clock (the model's
  "finished by the next request"; its latency is priced, not slept): on success its value is
  ``put`` and served, on failure a stale entry stays and a miss stays a miss.
* ``BYPASS``: the request goes to the backend; nothing is put; a load in flight runs on.

The simulated backend, per key: a load takes an exponential time of mean ``load_s`` and fails
with probability ``p_fail``; the backend value changes at the Poisson rate ``μ = λu/(1 - u)``
(``λ`` = ``rate_per_s``, ``u`` = ``p_update``), so that it changes between two requests with
probability ``u``; a load returns the value current when it completes and is put with
``ttl`` = the time until the backend's next change, so the cache's TTL expiry marks exactly the
moment its copy is superseded (the config's own ``freshness.ttl`` is only the fallback; its
stale-while-revalidate window is as long as the config allows, so a stale entry is served
until it is refreshed or evicted, as in the model). Before each request, an entry the cache
holds is evicted (``invalidate``, and its load in flight dropped) with probability
``p_evict``.

Where the live chain departs from the replay's model (so their estimates differ by more than
sampling): a refresh started by ``PRELOAD`` on a fresh entry may land after the entry went
stale and make the next request a ``HIT`` (the model: a fresh entry's next state does not
depend on the refresh); a refresh still in flight when a ``BLOCK`` or ``BYPASS`` meets the
stale entry keeps running and may freshen it (the model: ``BYPASS`` leaves a stale entry
stale); a phase change does not redraw the pending backend change. With loads much shorter
than the gap between requests these are small.

Each request's cost is the key class's cost table (:meth:`KeyClass.cost` without the
expected failed wait) plus ``failed_wait_ms`` when a ``BLOCK`` waited for a load that failed
(so its expectation is :meth:`KeyClass.cost`), plus, with ``charge_wall_latency``, the measured
wall time of the request's cache calls (``get`` and any ``put``; not deterministic). The same
:class:`~mmcache.sim.invalidation_mdp.TransitionEstimator` as the replay's estimated policy is
fed ``(state, action, next state of the key's next request, cost)``, re-solved every
``resolve_every_s`` by value iteration, ε-greedy with the replay's exploration draws; arrivals
are the replay's too (same seed), so :func:`compare_live_replay` puts the live run and the
replay side by side on the same key class: cost and regret per request against the oracle (the
true MDP of each phase), the policy, and the largest gap between their estimated transition
matrices.
"""

from __future__ import annotations

import collections
import heapq
import math
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Mapping, Sequence

import numpy as np

from mmcache.cache import TieredCache
from mmcache.config import MAX_LIFETIME_S
from mmcache.errors import ConfigError, InvalidInputError, check_number
from mmcache.sim.invalidation_mdp import (MDP, Action, State, TransitionEstimator, cost_matrix,
                                          value_iteration)
from mmcache.sim.invalidation_replay import (SOLVER_TOL, KeyClass, Phase, ReplayRun, arrivals,
                                             check_run_params, policy_names, regret_per_request,
                                             replay)
from mmcache.types import Hit, Query

if TYPE_CHECKING:
    import pandas as pd

#: The shortest ttl a put gets (a backend that changes at every instant: p_update = 1).
MIN_TTL_S = 1e-9
#: The scope of the driver's keys in its cache.
SCOPE = "invalidation-live"
#: Counters every :class:`LiveRun` reports.
COUNTERS = ("puts", "loads_started", "loads_failed", "on_stale_calls", "on_stale_refreshes",
            "direct_refreshes", "evictions", "backend_calls")


def live_cache(clock: Callable[[], float],
               on_stale: Callable[[Query, Hit], None] | None = None,
               ttl_s: float = 1.0) -> TieredCache:
    """A ``TieredCache`` with only its in-memory exact tier (L1), ``freshness.ttl`` =
    ``ttl_s`` (the fallback; the driver gives every put its own ttl), the longest
    stale-while-revalidate window the config allows and no stale-if-error, on ``clock``."""
    if not (math.isfinite(ttl_s) and 0 < ttl_s <= MAX_LIFETIME_S):
        raise ConfigError(f"ttl_s must be a number of seconds in (0, {MAX_LIFETIME_S:.0f}], "
                          f"got {ttl_s!r}")
    config = {"l2": {"enabled": False},
              "freshness": {"ttl": ttl_s, "stale_while_revalidate": MAX_LIFETIME_S,
                            "stale_if_error": 0.0}}
    return TieredCache(config, clock=clock, on_stale=on_stale)


def observe_state(hit: Hit | None, loading: bool) -> State:
    """The MDP state of a request from the cache's answer and whether a load of its key is in
    flight: fresh hit → HIT, stale hit → STALE, miss while loading → MISS_LOADING, any other
    miss → MISS_FAILED."""
    if hit is None:
        return State.MISS_LOADING if loading else State.MISS_FAILED
    return State.HIT if hit.freshness == "fresh" else State.STALE


@dataclass(frozen=True)
class LiveRun(ReplayRun):
    """One key's stream on the live cache: what a :class:`~mmcache.sim.invalidation_replay.
    ReplayRun` holds per request (``policy``: ``"estimated"``, or ``"fixed"`` when a policy
    was given; the states are those observed from the cache's answers), plus the key's name,
    the measured wall time (ms) of each request's cache calls and :data:`COUNTERS`."""

    key: str = ""
    wall_ms: np.ndarray = field(default_factory=lambda: np.zeros(0))
    counters: dict[str, int] = field(default_factory=dict)


@dataclass
class _Load:
    """A load of one key in flight: when it completes and whether it fails."""

    done_at: float
    fails: bool


@dataclass
class _Key:
    """The driver's state for one key (its stream)."""

    name: str
    phases: Sequence[Phase]
    query: Query
    times: np.ndarray
    phase: np.ndarray
    explore_u: np.ndarray
    explore_a: np.ndarray
    rng: np.random.Generator
    estimator: TransitionEstimator
    true: list[MDP]
    oracle: list[np.ndarray]
    base_cost: list[np.ndarray]
    epsilon: float
    fixed: tuple[int, ...] | None = None
    next_change: float = 0.0
    load: _Load | None = None
    asked: bool = False
    version: int = 0
    greedy: tuple[int, ...] = ()
    next_solve: float = 0.0
    states: list[int] = field(default_factory=list)
    actions: list[int] = field(default_factory=list)
    costs: list[float] = field(default_factory=list)
    regret: list[float] = field(default_factory=list)
    wall_ms: list[float] = field(default_factory=list)
    solves: list[tuple[float, tuple[int, ...]]] = field(default_factory=list)
    in_force: list[tuple[int, ...]] = field(default_factory=list)
    counters: dict[str, int] = field(default_factory=lambda: dict.fromkeys(COUNTERS, 0))

    def key_class(self, t: float) -> KeyClass:
        """The key class in force at time ``t``."""
        k = int(np.searchsorted([p.start_s for p in self.phases], t, side="right")) - 1
        return self.phases[max(k, 0)].key_class


def _change_rate(kc: KeyClass) -> float:
    """μ = λu/(1 - u): the backend's rate of value changes (inf at u = 1)."""
    return math.inf if kc.p_update >= 1 else kc.rate_per_s * kc.p_update / (1 - kc.p_update)


def _advance_changes(key: _Key, now: float) -> None:
    """Move the key's next backend change past ``now`` (Poisson at the class's rate then)."""
    mu = _change_rate(key.key_class(now))
    if mu == math.inf:
        key.next_change = now
        return
    while key.next_change <= now:
        if mu == 0:
            key.next_change = math.inf
            return
        key.next_change += key.rng.exponential(1 / mu)


def _ttl(key: _Key, now: float) -> float:
    """The ttl of a value loaded at ``now``: until the backend's next change."""
    _advance_changes(key, now)
    return min(max(key.next_change - now, MIN_TTL_S), MAX_LIFETIME_S)


def run_live(streams: Mapping[str, Sequence[Phase]] | Sequence[Phase], duration_s: float, *,
             window_s: float, resolve_every_s: float, discount: float = 0.99,
             epsilon: float = 0.05, seed: int = 0, prior_cost: np.ndarray | None = None,
             warm: bool = True, ttl_s: float = 1.0, charge_wall_latency: bool = False,
             wall_latency_weight: float = 1.0,
             policy: Sequence[int] | None = None) -> dict[str, LiveRun]:
    """Run every stream (one key each, its key class following its phases) against one live
    cache (:func:`live_cache`) with the estimated, ε-greedy policy (see the module docstring).

    ``streams`` maps a key name to its phases (a bare phase list is one key, ``"key"``). Stream
    ``j`` uses seed ``seed + j``: its arrivals and exploration draws are those of
    :func:`~mmcache.sim.invalidation_replay.replay` at that seed, its backend draws its own.
    ``warm``: each key is put at time 0, so that its first request finds an entry (the replay
    starts in HIT). ``prior_cost`` (default: the first phase's :meth:`KeyClass.cost`) seeds
    each key's :class:`TransitionEstimator`. ``charge_wall_latency`` adds
    ``wall_latency_weight`` × the measured ms of the request's cache calls to its cost. Returns
    one :class:`LiveRun` per key. ``policy`` (one action per state) replaces the greedy policy
    of the estimate in force (the estimator still learns and is re-solved; ε still explores).
    """
    check_run_params(window_s, resolve_every_s, discount, epsilon)
    check_number(wall_latency_weight, "wall_latency_weight", 0, strict=False)
    fixed = None
    if policy is not None:
        fixed = tuple(policy)
        if len(fixed) != len(State) or not all(
                isinstance(a, (int, np.integer)) and not isinstance(a, bool)
                and 0 <= a < len(Action) for a in fixed):
            raise InvalidInputError(f"policy must be {len(State)} action indices in "
                                    f"0..{len(Action) - 1}, one per State, got {policy!r}")
        fixed = tuple(int(a) for a in fixed)
    if not isinstance(streams, Mapping):
        streams = {"key": streams}
    if not streams:
        raise InvalidInputError("run_live needs at least one stream")
    now = [0.0]
    keys: dict[str, _Key] = {}

    def on_stale(query: Query, hit: Hit) -> None:
        key = keys[query.text]
        key.asked = True
        key.counters["on_stale_calls"] += 1

    cache = live_cache(lambda: now[0], on_stale, ttl_s)
    events: list[tuple[float, int, int, str]] = []  # (time, 0 load done / 1 request, seq, key)
    seq = 0
    for j, (name, phases) in enumerate(streams.items()):
        if not isinstance(name, str) or not name:
            raise InvalidInputError(f"stream names must be non-empty strings, got {name!r}")
        gens = [np.random.default_rng(s) for s in np.random.SeedSequence(seed + j).spawn(5)]
        times = arrivals(phases, duration_s, gens[0])
        n = times.size
        explore_u, explore_a = gens[2].random(n), gens[2].integers(len(Action), size=n)
        true = [p.key_class.mdp() for p in phases]
        key = _Key(name=name, phases=phases, query=Query(text=name, scope=SCOPE), times=times,
                   phase=np.searchsorted([p.start_s for p in phases], times, side="right") - 1,
                   explore_u=explore_u, explore_a=explore_a, rng=gens[4],
                   estimator=TransitionEstimator(window_s, true[0].cost if prior_cost is None
                                                 else prior_cost),
                   true=true, oracle=[value_iteration(m, discount, SOLVER_TOL).policy
                                      for m in true],
                   base_cost=[cost_matrix(p.key_class.costs) for p in phases], epsilon=epsilon,
                   fixed=fixed)
        keys[name] = key
        _advance_changes(key, 0.0)
        if warm:
            _put(cache, key, 0.0)
        for t in times:
            heapq.heappush(events, (float(t), 1, seq, name))
            seq += 1
    regret_cache: dict[tuple[str, tuple[int, ...], int], float] = {}
    try:
        while events:
            t, kind, _, name = heapq.heappop(events)
            now[0] = t
            key = keys[name]
            if kind == 0:
                _complete_load(cache, key, t)
                continue
            started = _request(cache, key, t, discount, resolve_every_s, charge_wall_latency,
                               wall_latency_weight, regret_cache)
            if started is not None:
                heapq.heappush(events, (started, 0, seq, name))
                seq += 1
    finally:
        cache.close()
    return {name: LiveRun("estimated" if policy is None else "fixed", key.times, key.phase,
                          np.array(key.states, dtype=np.int64),
                          np.array(key.actions, dtype=np.int64), np.array(key.costs),
                          np.array(key.regret), key.solves, key.in_force, key=name,
                          wall_ms=np.array(key.wall_ms), counters=key.counters)
            for name, key in keys.items()}


def _put(cache: TieredCache, key: _Key, t: float) -> float:
    """Put the backend's current value of ``key`` (loaded at ``t``); the wall ms it took."""
    key.version += 1
    ttl = _ttl(key, t)
    start = time.perf_counter()
    cache.put(key.query, f"{key.name}@{key.version}", ttl=ttl)
    key.counters["puts"] += 1
    return (time.perf_counter() - start) * 1e3


def _start_load(key: _Key, t: float) -> float:
    """Start an asynchronous load of ``key`` at ``t``; its completion time."""
    kc = key.key_class(t)
    done = t + (key.rng.exponential(kc.load_s) if kc.load_s > 0 else 0.0)
    key.load = _Load(done, bool(key.rng.random() < kc.p_fail))
    key.counters["loads_started"] += 1
    key.counters["backend_calls"] += 1
    return done


def _complete_load(cache: TieredCache, key: _Key, t: float) -> None:
    """A load completion event at ``t``: put on success (ignored if the load was dropped)."""
    load = key.load
    if load is None or load.done_at != t:
        return
    key.load = None
    if load.fails:
        key.counters["loads_failed"] += 1
    else:
        _put(cache, key, t)


def _request(cache: TieredCache, key: _Key, t: float, discount: float, resolve_every_s: float,
             charge_wall: bool, wall_weight: float,
             regret_cache: dict[tuple[str, tuple[int, ...], int], float]) -> float | None:
    """Serve one request of ``key`` at ``t``; the completion time of a load it started."""
    i = len(key.states)
    k = int(key.phase[i])
    kc = key.phases[k].key_class
    if key.rng.random() < kc.p_evict and cache.invalidate(key.query):
        key.counters["evictions"] += 1
        key.load = None
    _advance_changes(key, t)
    key.asked = False
    start = time.perf_counter()
    hit = cache.get(key.query)
    wall = (time.perf_counter() - start) * 1e3
    state = observe_state(hit, key.load is not None)
    if i > 0:
        key.estimator.observe(t, key.states[-1], key.actions[-1], int(state), key.costs[-1])
    if t >= key.next_solve:
        key.greedy = tuple(int(a) for a in
                           value_iteration(key.estimator.estimate(), discount, SOLVER_TOL).policy)
        key.solves.append((t, key.greedy))
        key.next_solve = (math.floor(t / resolve_every_s) + 1) * resolve_every_s
    pol = key.greedy if key.fixed is None else key.fixed
    action = int(key.explore_a[i]) if key.explore_u[i] < key.epsilon else pol[state]
    cost = float(key.base_cost[k][state, action])
    started = None
    if action == Action.PRELOAD:
        if hit is None:
            key.counters["backend_calls"] += 1
        if key.load is None:
            if state == State.STALE:
                key.counters["on_stale_refreshes" if key.asked else "direct_refreshes"] += 1
            started = _start_load(key, t)
    elif action == Action.BLOCK and state != State.HIT:
        key.counters["backend_calls"] += 1
        fails = key.load.fails if key.load is not None else bool(key.rng.random() < kc.p_fail)
        if key.load is None:
            key.counters["loads_started"] += 1
        key.load = None
        if fails:
            key.counters["loads_failed"] += 1
            cost += kc.failed_wait_ms
        else:
            wall += _put(cache, key, t)
    elif action == Action.BYPASS:
        key.counters["backend_calls"] += 1
    if charge_wall:
        cost += wall_weight * wall
    if (key.name, pol, k) not in regret_cache:
        regret_cache[key.name, pol, k] = regret_per_request(key.true[k], pol, discount,
                                                            optimal=key.oracle[k])
    key.states.append(int(state))
    key.actions.append(action)
    key.costs.append(cost)
    key.regret.append(regret_cache[key.name, pol, k])
    key.wall_ms.append(wall)
    key.in_force.append(pol)
    return started



def window_estimates(times: np.ndarray, phase: np.ndarray, states: np.ndarray,
                     actions: np.ndarray, costs: np.ndarray, window_s: float,
                     prior_cost: np.ndarray | None = None
                     ) -> dict[int, tuple[MDP, np.ndarray]]:
    """Per phase index, what a :class:`TransitionEstimator` of ``window_s`` fed a run's
    events (as the runs feed theirs) estimates at that phase's last request, and the counts of
    each ``(action, state)`` row in its window. The same function reads a :class:`LiveRun` and
    a :class:`~mmcache.sim.invalidation_replay.ReplayRun`."""
    estimator = TransitionEstimator(window_s, prior_cost)
    window: collections.deque[tuple[float, int, int]] = collections.deque()
    n_states, n_actions = estimator.prior_cost.shape
    counts = np.zeros((n_actions, n_states), dtype=np.int64)
    out: dict[int, tuple[MDP, np.ndarray]] = {}
    for i in range(1, len(times)):
        t = float(times[i])
        estimator.observe(t, int(states[i - 1]), int(actions[i - 1]), int(states[i]),
                          float(costs[i - 1]))
        window.append((t, int(actions[i - 1]), int(states[i - 1])))
        counts[int(actions[i - 1]), int(states[i - 1])] += 1
        while window and window[0][0] <= t - window_s:
            _, a, s = window.popleft()
            counts[a, s] -= 1
        if i == len(times) - 1 or phase[i + 1] != phase[i]:
            out[int(phase[i])] = (estimator.estimate(), counts.copy())
    return out


def max_transition_gap(a: MDP, b: MDP, counts_a: np.ndarray, counts_b: np.ndarray | None = None,
                       min_row_count: int = 30) -> float:
    """The largest ``|P_a - P_b|`` over the ``(action, state)`` rows seen at least
    ``min_row_count`` times (in both count tables where two are given); NaN if none is."""
    seen = counts_a >= min_row_count
    if counts_b is not None:
        seen &= counts_b >= min_row_count
    if not seen.any():
        return math.nan
    return float(np.abs(a.transition - b.transition)[seen].max())


def compare_live_replay(phases: Sequence[Phase], duration_s: float, *,
                        phase_names: Sequence[str] | None = None, min_row_count: int = 30,
                        **kwargs: Any) -> tuple[pd.DataFrame, dict[str, ReplayRun]]:
    """The estimated policy on the live cache (:func:`run_live`, one key) and in the replay
    (:func:`~mmcache.sim.invalidation_replay.replay`, ``"estimated"``) on the same phases and
    seed (``kwargs``: ``window_s``, ``resolve_every_s``, ``discount``, ``epsilon``, ``seed``,
    ``prior_cost``; the live-only ``ttl_s``, ``charge_wall_latency``, ``wall_latency_weight``).

    One row per source (``"live"``, ``"replay"``) and phase: ``requests``, ``cost_ms`` (mean
    cost per request, exploration included), ``regret_ms`` (mean exact per-request regret of
    the policy in force against the oracle), ``oracle_agreement``, ``policy`` (the one in
    force for most of the phase), ``max_dp_vs_other`` (:func:`max_transition_gap` between the
    two sources' window estimates at the phase's end, rows seen ``min_row_count`` times in
    both) and ``max_dp_vs_true`` (against the phase's true transitions)."""
    # deferred: pandas only for this table
    import pandas as pd

    if isinstance(min_row_count, bool) or not isinstance(min_row_count, int) or min_row_count < 1:
        raise ConfigError(f"min_row_count must be an int >= 1, got {min_row_count!r}")
    names = list(phase_names) if phase_names is not None else [f"phase {k}" for k in
                                                                range(len(phases))]
    if len(names) != len(phases):
        raise InvalidInputError(f"{len(phases)} phases but {len(names)} phase names")
    live_only = {k: kwargs.pop(k) for k in ("ttl_s", "charge_wall_latency",
                                             "wall_latency_weight", "warm") if k in kwargs}
    live = run_live(phases, duration_s, **kwargs, **live_only)["key"]
    rep = replay(phases, duration_s, "estimated", **kwargs)
    window_s = kwargs["window_s"]
    prior = kwargs.get("prior_cost")
    prior = phases[0].key_class.cost() if prior is None else prior
    runs: dict[str, ReplayRun] = {"live": live, "replay": rep}
    est = {src: window_estimates(r.times, r.phase, r.states, r.actions, r.costs, window_s, prior)
           for src, r in runs.items()}
    oracle = [value_iteration(p.key_class.mdp(), kwargs.get("discount", 0.99), SOLVER_TOL).policy
              for p in phases]
    rows = []
    for src, run in runs.items():
        other = est["replay" if src == "live" else "live"]
        for k, name in enumerate(names):
            mask = run.phase == k
            if not mask.any():
                continue
            in_phase = [pol for pol, m in zip(run.in_force, mask) if m]
            modal = collections.Counter(in_phase).most_common(1)[0][0]
            oracle_pol = tuple(int(a) for a in oracle[k])
            true = phases[k].key_class.mdp()
            mdp, counts = est[src].get(k, (None, None))
            gap_other = gap_true = math.nan
            if mdp is not None:
                gap_true = max_transition_gap(mdp, true, counts, None, min_row_count)
                if k in other:
                    gap_other = max_transition_gap(mdp, other[k][0], counts, other[k][1],
                                                   min_row_count)
            rows.append({"source": src, "phase": name, "requests": int(mask.sum()),
                         "cost_ms": float(run.costs[mask].mean()),
                         "regret_ms": float(run.regret[mask].mean()),
                         "oracle_agreement": float(np.mean([p == oracle_pol for p in in_phase])),
                         "policy": policy_names(modal), "oracle_policy": policy_names(oracle_pol),
                         "max_dp_vs_other": gap_other, "max_dp_vs_true": gap_true})
    return pd.DataFrame(rows), runs


def phase_table(runs: Mapping[str, LiveRun], phase_names: Sequence[str] | None = None
                ) -> pd.DataFrame:
    """One row per key and phase of live runs: ``requests``, ``cost_ms``, ``regret_ms`` (mean
    exact per-request regret against the oracle), ``policy`` (in force for most of the
    phase's requests) and ``wall_ms`` (mean measured wall time of the cache calls)."""
    # deferred: pandas only for this table
    import pandas as pd

    rows = []
    for name, run in runs.items():
        for k in np.unique(run.phase):
            mask = run.phase == k
            modal = collections.Counter(p for p, m in zip(run.in_force, mask) if m)
            rows.append({"key": name,
                         "phase": phase_names[k] if phase_names is not None else f"phase {k}",
                         "requests": int(mask.sum()), "cost_ms": float(run.costs[mask].mean()),
                         "regret_ms": float(run.regret[mask].mean()),
                         "policy": policy_names(modal.most_common(1)[0][0]),
                         "wall_ms": float(run.wall_ms[mask].mean())})
    return pd.DataFrame(rows)
