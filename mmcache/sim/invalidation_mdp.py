"""Cache invalidation as a Markov decision process, one per key class.

A key class is in one of four :class:`State` s (``HIT``, ``STALE``, ``MISS_LOADING``,
``MISS_FAILED``) and each request picks one of three :class:`Action` s: ``PRELOAD`` (serve
what the cache holds and warm the entry asynchronously), ``BLOCK`` (queue the request behind a
load of the key) or ``BYPASS`` (send it straight to the backend). An :class:`MDP` holds the
transition probabilities ``transition[action, state, next_state]`` and the expected cost
``cost[state, action]`` of one request.

:func:`value_iteration` finds the discounted-cost optimal policy, :func:`evaluate_policy` the
exact value of a fixed one and :func:`regret` what a fixed policy loses against the optimum.
:class:`TransitionEstimator` estimates the MDP online from the events of a sliding time window;
:func:`cost_matrix` builds ``cost[state, action]`` from the stated :class:`CostParams`.

No maintained MDP library (``pymdptoolbox``, ``mdptoolbox``, ``mdp``) is installed here, so
the solver is this module's own.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass
from enum import IntEnum
from typing import Sequence

import numpy as np

from mmcache.errors import ConfigError, InvalidInputError, SolverError, check_number

#: How far a row of transition probabilities may sum from 1.
ROW_SUM_TOLERANCE = 1e-9


class State(IntEnum):
    """The state of a key class, as seen by its next request."""

    HIT = 0
    STALE = 1
    MISS_LOADING = 2
    MISS_FAILED = 3


class Action(IntEnum):
    """What the cache does with a request."""

    PRELOAD = 0
    BLOCK = 1
    BYPASS = 2


@dataclass(frozen=True)
class MDP:
    """A finite MDP: ``transition[a, s, s']`` = P(s' | s, a), ``cost[s, a]`` the expected cost
    of taking action ``a`` in state ``s``. Both are float64 copies of what is given."""

    transition: np.ndarray
    cost: np.ndarray

    def __post_init__(self) -> None:
        transition = np.array(self.transition, dtype=float)
        cost = np.array(self.cost, dtype=float)
        _check_transition(transition)
        _check_cost(cost, transition.shape[0], transition.shape[1])
        object.__setattr__(self, "transition", transition)
        object.__setattr__(self, "cost", cost)

    @property
    def n_states(self) -> int:
        """The number of states."""
        return self.transition.shape[1]

    @property
    def n_actions(self) -> int:
        """The number of actions."""
        return self.transition.shape[0]


def _check_transition(transition: np.ndarray) -> None:
    if transition.ndim != 3 or transition.shape[1] != transition.shape[2] or 0 in transition.shape:
        raise InvalidInputError(f"transition must have shape (actions, states, states) with none "
                                f"of them 0, got shape {transition.shape}")
    if not np.isfinite(transition).all():
        raise InvalidInputError("transition has NaN or infinite probabilities; give finite ones")
    if (transition < 0).any():
        a, s, t = np.argwhere(transition < 0)[0]
        raise InvalidInputError(f"transition[{a}, {s}, {t}] = {transition[a, s, t]} is negative; "
                                f"probabilities must be >= 0")
    sums = transition.sum(axis=2)
    bad = np.abs(sums - 1) > ROW_SUM_TOLERANCE
    if bad.any():
        a, s = np.argwhere(bad)[0]
        raise InvalidInputError(f"the row transition[{a}, {s}, :] sums to {sums[a, s]!r}; every "
                                f"row must sum to 1 (within {ROW_SUM_TOLERANCE})")


def _check_cost(cost: np.ndarray, n_actions: int, n_states: int) -> None:
    if cost.shape != (n_states, n_actions):
        raise InvalidInputError(f"cost must have shape (states, actions) = {(n_states, n_actions)} "
                                f"to match transition, got {cost.shape}")
    if not np.isfinite(cost).all():
        raise InvalidInputError("cost has NaN or infinite entries; give finite costs")


@dataclass(frozen=True)
class Solution:
    """What :func:`value_iteration` found: the value of each state, the greedy policy (one
    action index per state) and the number of iterations it took."""

    value: np.ndarray
    policy: np.ndarray
    iterations: int


def check_discount(discount: float) -> None:
    """Raise :class:`ConfigError` unless 0 < ``discount`` < 1."""
    if not 0 < discount < 1:
        raise ConfigError(f"discount must lie strictly between 0 and 1, got {discount!r}")


def q_values(mdp: MDP, value: np.ndarray, discount: float) -> np.ndarray:
    """``q[s, a]``: the cost of action ``a`` in state ``s`` and then following ``value``."""
    return mdp.cost + discount * (mdp.transition @ value).T


def value_iteration(mdp: MDP, discount: float, tol: float = 1e-8) -> Solution:
    """The discounted-cost optimal value and policy of ``mdp`` (ties go to the lower action).

    Stops when the span (max - min) of the last update is below ``tol(1 - γ)/(2γ)``. The
    MacQueen bounds then bracket V* in an interval of width < ``tol/2``; the returned value is
    its midpoint, within ``tol/4`` of V*, and the greedy policy's exact value is within
    ``γ·tol/2`` of V* (Puterman, *Markov Decision Processes*, 1994, §6.6.3), so the two agree
    within ``tol``. These bounds hold in exact arithmetic; rounding adds up to about
    iterations × ε × max|V|, so ask for a ``tol`` well above that (γ = 0.999 with costs in the
    hundreds: 1e-6, not 1e-8). Raises :class:`SolverError` if rounding keeps the span above
    the threshold past twice the iterations the contraction needs.
    """
    check_discount(discount)
    check_number(tol, "tol", 0)
    stop = tol * (1 - discount) / (2 * discount)
    limit = _iteration_limit(mdp, discount, stop)
    value = np.zeros(mdp.n_states)
    for iterations in range(1, limit + 1):
        step = q_values(mdp, value, discount).min(axis=1) - value
        value = value + step
        if np.ptp(step) < stop:
            break
    else:
        raise SolverError(f"value iteration did not reach tol={tol} in {limit} iterations "
                          f"(floating point); raise tol")
    midpoint = value + discount / (1 - discount) * (step.max() + step.min()) / 2
    return Solution(midpoint, q_values(mdp, value, discount).argmin(axis=1), iterations)


def _iteration_limit(mdp: MDP, discount: float, stop: float) -> int:
    """Twice the iterations the span contraction (factor γ per step) needs, plus slack."""
    first_span = np.ptp(mdp.cost.min(axis=1))
    if first_span < stop:
        return 10
    return 10 + 2 * math.ceil(math.log(stop / first_span) / math.log(discount))


def fixed_policy(mdp: MDP, action: int) -> np.ndarray:
    """The policy that takes ``action`` in every state."""
    return check_policy(mdp, [action] * mdp.n_states)


def check_policy(mdp: MDP, policy: Sequence[int] | np.ndarray) -> np.ndarray:
    """``policy`` as an int array, one action index per state; :class:`InvalidInputError`
    unless it has one valid action per state."""
    arr = np.asarray(policy)
    if arr.shape != (mdp.n_states,) or not np.issubdtype(arr.dtype, np.integer):
        raise InvalidInputError(f"a policy is {mdp.n_states} integer action indices, one per "
                                f"state; got {arr!r}")
    if ((arr < 0) | (arr >= mdp.n_actions)).any():
        raise InvalidInputError(f"policy actions must lie in 0..{mdp.n_actions - 1}, got {arr!r}")
    return arr.astype(int)


def evaluate_policy(mdp: MDP, policy: Sequence[int] | np.ndarray, discount: float) -> np.ndarray:
    """The exact discounted cost of following ``policy`` from each state:
    V = (I - γ P_π)⁻¹ c_π."""
    check_discount(discount)
    pol = check_policy(mdp, policy)
    states = np.arange(mdp.n_states)
    p_pi = mdp.transition[pol, states, :]
    c_pi = mdp.cost[states, pol]
    return np.linalg.solve(np.eye(mdp.n_states) - discount * p_pi, c_pi)


def regret(mdp: MDP, policy: Sequence[int] | np.ndarray, discount: float,
           tol: float = 1e-10) -> np.ndarray:
    """What following ``policy`` costs above the optimal policy, from each state: both values
    exact (:func:`evaluate_policy`), the optimal policy from :func:`value_iteration` at ``tol``
    (so the regret is never below ``-γ·tol/2``)."""
    best = value_iteration(mdp, discount, tol).policy
    return evaluate_policy(mdp, policy, discount) - evaluate_policy(mdp, best, discount)


@dataclass(frozen=True)
class CostParams:
    """The cost of one request, in milliseconds of latency or its equivalent.

    These are parameters to set, not measurements: the defaults are round illustrative numbers.
    ``hit_ms``: serving from the cache; ``backend_ms``: one backend call the request waits for;
    ``blocked_wait_ms``: waiting for a load already in flight; ``staleness_penalty_ms``: serving
    a stale value; ``backend_load_penalty_ms``: each backend call a request causes, the load it
    puts on the backend.
    """

    hit_ms: float = 1.0
    backend_ms: float = 200.0
    blocked_wait_ms: float = 50.0
    staleness_penalty_ms: float = 100.0
    backend_load_penalty_ms: float = 20.0

    def __post_init__(self) -> None:
        for name, value in vars(self).items():
            check_number(value, f"CostParams.{name}", 0, strict=False)


def cost_matrix(params: CostParams = CostParams()) -> np.ndarray:
    """``cost[state, action]`` for :class:`State` × :class:`Action`: the latency a request sees,
    plus the staleness penalty if it is served a stale value, plus the load penalty for each
    backend call it causes.

    ==============  ======================  ======================  ===============
    state           PRELOAD                 BLOCK                   BYPASS
    ==============  ======================  ======================  ===============
    HIT             hit + load (refresh)    hit                     backend + load
    STALE           hit + stale + load      backend + load (waits)  backend + load
    MISS_LOADING    backend + 2 load        blocked wait            backend + load
    MISS_FAILED     backend + 2 load        backend + load (waits)  backend + load
    ==============  ======================  ======================  ===============

    In a miss state PRELOAD has nothing to serve: the request goes to the backend and the
    asynchronous load is a second call.
    """
    hit, backend, load = params.hit_ms, params.backend_ms, params.backend_load_penalty_ms
    cost = np.empty((len(State), len(Action)))
    cost[State.HIT] = [hit + load, hit, backend + load]
    cost[State.STALE] = [hit + params.staleness_penalty_ms + load, backend + load, backend + load]
    cost[State.MISS_LOADING] = [backend + 2 * load, params.blocked_wait_ms, backend + load]
    cost[State.MISS_FAILED] = [backend + 2 * load, backend + load, backend + load]
    return cost


class TransitionEstimator:
    """The MDP of one key class, estimated from the events of the last ``window_s`` seconds.

    Each event ``(time, state, action, next_state, cost)`` is one request. Transition rows are
    add-one (Laplace) smoothed, so an unseen row is uniform; the cost of a (state, action) is
    the mean observed cost, or ``prior_cost[state, action]`` (default :func:`cost_matrix` of
    the default :class:`CostParams`) where the window holds none. ``prior_cost`` also sets the
    numbers of states and actions. Not thread safe.
    """

    def __init__(self, window_s: float = 10.0, prior_cost: np.ndarray | None = None) -> None:
        if not (math.isfinite(window_s) and window_s > 0):
            raise ConfigError(f"window_s must be a finite number of seconds > 0, got {window_s!r}")
        prior = cost_matrix() if prior_cost is None else np.array(prior_cost, dtype=float)
        if prior.ndim != 2 or 0 in prior.shape or not np.isfinite(prior).all():
            raise ConfigError(f"prior_cost must be a finite (states, actions) array, got {prior!r}")
        self.window_s = window_s
        self.prior_cost = prior
        n_states, n_actions = prior.shape
        self._events: deque[tuple[float, int, int, int, float]] = deque()
        self._counts = np.zeros((n_actions, n_states, n_states), dtype=np.int64)
        self._cost_sum = np.zeros((n_states, n_actions))
        self._last_time = -math.inf

    def __len__(self) -> int:
        """The number of events in the window."""
        return len(self._events)

    def observe(self, time: float, state: int, action: int, next_state: int, cost: float) -> None:
        """Record one event at ``time`` (seconds, never before the last event's) and forget
        those that have left the window."""
        n_states, n_actions = self.prior_cost.shape
        s, a, t = (_index(state, n_states, "state"), _index(action, n_actions, "action"),
                   _index(next_state, n_states, "next_state"))
        if not math.isfinite(cost):
            raise InvalidInputError(f"an event's cost must be finite, got {cost!r}")
        self._advance(time)
        self._events.append((time, s, a, t, cost))
        self._counts[a, s, t] += 1
        self._cost_sum[s, a] += cost

    def estimate(self, now: float | None = None) -> MDP:
        """The MDP of the events in the window ending at ``now`` (default: the last event)."""
        if now is not None:
            self._advance(now)
        counts = self._counts + 1.0
        transition = counts / counts.sum(axis=2, keepdims=True)
        seen = self._counts.sum(axis=2).T
        mean = np.divide(self._cost_sum, seen, out=self.prior_cost.copy(), where=seen > 0)
        return MDP(transition, mean)

    def _advance(self, time: float) -> None:
        """Move the window's end to ``time``, dropping events at least ``window_s`` older."""
        if not math.isfinite(time):
            raise InvalidInputError(f"an event time must be finite, got {time!r}")
        if time < self._last_time:
            raise InvalidInputError(f"times must not go backwards: {time!r} comes after "
                                    f"{self._last_time!r}; feed events in time order")
        self._last_time = time
        while self._events and self._events[0][0] <= time - self.window_s:
            _, s, a, t, cost = self._events.popleft()
            self._counts[a, s, t] -= 1
            self._cost_sum[s, a] -= cost
            if not self._counts[a, s].any():
                self._cost_sum[s, a] = 0.0  # no rounding residue once a pair leaves the window


def _index(value: int, size: int, name: str) -> int:
    """``value`` as an index below ``size``; :class:`InvalidInputError` otherwise."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or not 0 <= value < size:
        raise InvalidInputError(f"{name} must be an integer index in 0..{size - 1}, got {value!r}")
    return int(value)
