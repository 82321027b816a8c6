"""Offline lower bounds on the misses of the optimal cache with variable object sizes.

After Berger, Beckmann and Harchol-Balter, "Practical bounds on optimal caching with
variable object sizes" (SIGMETRICS 2018). A *reuse interval* runs from a request to
the next request for the same object; that next request hits only if the object
stays cached for the whole interval, occupying its bytes in every cache state from
the first request up to (not including) the second. Misses are counted as
:func:`mmcache.sim.replay.simulate` counts them: the first request of every object
misses, and so does every request whose interval cannot fit (larger than the cache).

Three lower bounds, each below the misses of every schedule a policy can follow:

* ``"foo-l"``: FOO's linear program (cache each interval fractionally, at most
  ``cache_size`` bytes in every cache state), solved exactly as the min-cost flow
  it is, by HiGHS. For unit sizes it is integral and equals the misses of MIN with
  bypass (``belady-bypass``, optimal there). Its cost grows faster than linearly, so
  ``"auto"`` uses it up to :data:`FOO_MAX_INTERVALS` intervals.
* ``"pfoo-l"``: the space-time relaxation (each interval costs size × length of
  cache space-time, the cache offers ``cache_size`` × the trace's length; cheapest
  intervals first, the last one fractionally). O(n log n), and loose: it lets a busy
  stretch of the trace borrow space from an idle one.
* ``"lagrange"`` (``"auto"`` beyond FOO's limit): the Lagrangian dual of FOO's LP,
  one price per cache state. Any prices give a bound (weak duality); it starts from
  PFOO-L's single price, which gives exactly PFOO-L's bound, raises the price where
  the intervals it would cache overflow the cache and lowers it elsewhere
  (multiplicative weights, :data:`LAGRANGE_STEPS` steps), and keeps the best.

So FOO-L ≥ Lagrange ≥ PFOO-L: both of the others relax FOO's LP, and the Lagrangian
search never returns less than its start.

Where every request has the same size (unit sizes), ``"auto"`` needs none of them: no
schedule holds more than ``cache_size // size`` objects, and MIN with bypass
(``belady-bypass``) is the offline optimum for that many, so ``"auto"`` replays it (method
``"min-bypass"``): a bound equal to the optimum, in a fraction of the Lagrangian search's
time. It equals FOO-L when the cache holds whole objects (the LP is integral there) and
exceeds it otherwise (the LP also caches fractions of intervals in the bytes left over).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Iterable, Iterator, Mapping

import numpy as np
import scipy.sparse as sp
from numba import njit
from scipy.optimize import linprog

from mmcache.errors import ConfigError
from mmcache.metrics import progress_bar
from mmcache.policies import POLICIES
from mmcache.sim.kernels import KERNELS
from mmcache.sim.replay import check_cache_size, check_trace, policy_name, simulate
from mmcache.sim.trace import Trace
from mmcache.types import fmt_bytes, html_card, html_fields, html_table, safe_display

#: ``method="auto"`` solves the FOO LP exactly up to this many reuse intervals (HiGHS, one
#: core: 6,222 intervals of cloudPhysics took 1-2 s, 14,071 took about 40 s).
FOO_MAX_INTERVALS = 10_000
LOWER_BOUND_METHODS = ("auto", "foo-l", "lagrange", "pfoo-l")
#: The method ``"auto"`` reports on unit sizes: MIN with bypass replayed (the optimum there).
UNIT_SIZE_METHOD = "min-bypass"
#: Price updates of the Lagrangian bound, and their step (log-price change at full overflow).
LAGRANGE_STEPS = 500
LAGRANGE_STEP_SIZE = 0.3
#: Slack for solver round-off before rounding a fractional bound up to whole misses.
_RELATIVE_SLACK = 1e-6


@dataclass(frozen=True)
class LowerBound:
    """A lower bound on the optimal misses and how it was computed.

    ``schedule_misses`` is the misses of a feasible schedule the bound was read from and
    ``schedule`` its name: FOO-U (the FOO LP's intervals cached in full, ``"foo-u"``) or, on
    unit sizes, MIN with bypass itself (``"belady-bypass"``); None for the relaxations.
    """

    misses: int
    method: str
    schedule_misses: int | None = None
    schedule: str | None = None


@dataclass(frozen=True)
class ReuseIntervals:
    """The reuse intervals that fit the cache, and the misses no schedule avoids;
    ``fixed_sizes``: every object keeps one size through the trace."""

    start: np.ndarray
    end: np.ndarray
    size: np.ndarray
    forced_misses: int
    n_req: int
    fixed_sizes: bool


def reuse_intervals(trace: Trace, cache_size: int) -> ReuseIntervals:
    """Every reuse interval of ``trace`` whose object can fit ``cache_size`` bytes.

    An interval occupies the smallest size its object had up to the interval's start
    (a hit does not update the resident size, so no policy holds it with fewer bytes).
    """
    ids, n_obj = trace.dense_ids()
    start = np.flatnonzero(trace.next_access >= 0)
    resident, resized = _resident_size(ids, trace.obj_size, n_obj)
    size = resident[start]
    fits = size <= cache_size
    forced = n_obj + int((~fits).sum())
    return ReuseIntervals(start[fits], trace.next_access[start[fits]], size[fits], forced,
                          trace.n_req, not resized)


@njit(cache=True)
def _resident_size(ids, sizes, n_obj):
    """Per request, the smallest size its object has had so far; and whether any object
    changed size."""
    smallest = np.zeros(n_obj, np.int64)
    out = np.empty(ids.shape[0], np.int64)
    resized = False
    for i in range(ids.shape[0]):
        x = ids[i]
        if smallest[x] == 0:
            smallest[x] = sizes[i]
        elif sizes[i] != smallest[x]:
            resized = True
            smallest[x] = min(smallest[x], sizes[i])
        out[i] = smallest[x]
    return out, resized


def lower_bound(trace: Trace, cache_size: int, method: str = "auto") -> LowerBound:
    """A lower bound on the misses of any policy replaying ``trace`` at ``cache_size`` bytes.

    ``method``: ``"foo-l"`` (exact LP), ``"lagrange"`` (its Lagrangian dual),
    ``"pfoo-l"`` (space-time relaxation) or ``"auto"`` (on unit sizes MIN with bypass's
    misses, the optimum, reported as :data:`UNIT_SIZE_METHOD`; otherwise FOO-L up
    to :data:`FOO_MAX_INTERVALS` intervals, Lagrange beyond or should the solver fail).
    Raises :class:`ConfigError` for another method.
    """
    if method not in LOWER_BOUND_METHODS:
        raise ConfigError(f"unknown lower-bound method {method!r}; choose one of "
                          f"{LOWER_BOUND_METHODS}")
    if method == "auto" and _unit_sizes(trace, cache_size):

        misses = simulate(trace, "belady-bypass", cache_size).miss_cnt
        return LowerBound(misses, UNIT_SIZE_METHOD, misses, "belady-bypass")
    intervals = reuse_intervals(trace, cache_size)
    if method == "foo-l" or (method == "auto" and intervals.start.shape[0] <= FOO_MAX_INTERVALS):
        foo = foo_lower_bound(intervals, cache_size)
        if foo is not None:
            return foo
    if method == "pfoo-l":
        return LowerBound(_misses(intervals, pfoo_max_hits(intervals, cache_size)), "pfoo-l")
    return LowerBound(_misses(intervals, lagrange_max_hits(intervals, cache_size)), "lagrange")


def _unit_sizes(trace: Trace, cache_size: int) -> bool:
    """Whether every request of ``trace`` has one size, and an object of it fits the cache."""
    sizes = trace.obj_size
    return bool(sizes.shape[0]) and sizes.min() == sizes.max() and int(sizes[0]) <= cache_size


def pfoo_max_hits(intervals: ReuseIntervals, cache_size: int) -> float:
    """PFOO-L's (fractional) hits: intervals only share the cache's total space-time."""
    cost = np.sort(intervals.size.astype(np.float64) * (intervals.end - intervals.start))
    budget = float(cache_size) * (intervals.n_req - 1)
    spent = np.cumsum(cost)
    whole = int(np.searchsorted(spent, budget, side="right"))
    if whole == cost.shape[0]:
        return float(whole)
    return whole + (budget - (spent[whole - 1] if whole else 0.0)) / cost[whole]


def lagrange_max_hits(intervals: ReuseIntervals, cache_size: int) -> float:
    """The least Lagrangian dual value of FOO's LP found from PFOO-L's price (see module)."""
    n = intervals.start.shape[0]
    if n == 0:
        return 0.0
    size = intervals.size.astype(np.float64)
    pfoo_hits = pfoo_max_hits(intervals, cache_size)
    cost = np.sort(size * (intervals.end - intervals.start))
    marginal = cost[min(int(pfoo_hits), n - 1)]  # the interval PFOO-L splits
    searched = _lagrange_search(intervals.start, intervals.end, size, intervals.n_req - 1,
                                float(cache_size), 1.0 / marginal, LAGRANGE_STEPS,
                                LAGRANGE_STEP_SIZE)
    return min(pfoo_hits, searched)


@njit(cache=True)
def _lagrange_search(start, end, size, n_states, cache_size, first_price, steps, step_size):
    """Least dual value over ``steps`` multiplicative price updates from a uniform price.

    At prices λ (one per cache state) the dual value cache_size·Σλ + Σ max(0, 1 − size·Σ_{t
    in interval} λ_t) bounds the LP's hits from above; the intervals with a positive term
    are those worth caching, and each state's price moves by exp(step · clip(their bytes
    there / cache_size − 1, −1, 1)).
    """
    price = np.full(n_states, first_price)
    paid = np.zeros(n_states + 1)  # paid[t]: the prices of the states before t
    for t in range(n_states):
        paid[t + 1] = paid[t] + price[t]
    held = np.zeros(n_states + 1)  # bytes the worthwhile intervals start (+) or end (-) at t
    rise, fall = np.exp(step_size), np.exp(-step_size)  # the factors of a clipped move
    best = np.inf
    for step in range(steps):
        value = cache_size * paid[n_states]
        for k in range(start.shape[0]):
            gain = 1.0 - size[k] * (paid[end[k]] - paid[start[k]])
            # without a branch: adding 0.0 leaves value and held as they are, and the
            # worthwhile intervals are too unpredictable for the branch predictor
            worth = gain > 0.0
            value += gain if worth else 0.0
            bytes_held = size[k] if worth else 0.0
            held[start[k]] += bytes_held
            held[end[k]] -= bytes_held
        best = min(best, value)
        if step == steps - 1:
            break
        occupancy = 0.0
        factor = rise
        seen = np.nan  # the occupancy ``factor`` belongs to: runs of equal occupancy share it
        for t in range(n_states):
            occupancy += held[t]
            held[t] = 0.0
            if occupancy != seen:
                seen = occupancy
                overflow = occupancy / cache_size - 1.0
                factor = rise if overflow >= 1.0 else fall if overflow <= -1.0 \
                    else np.exp(step_size * overflow)
            price[t] *= factor
            paid[t + 1] = paid[t] + price[t]
        held[n_states] = 0.0
    return best


def _misses(intervals: ReuseIntervals, max_hits: float) -> int:
    """Whole misses implied by an upper bound on (fractional) hits, after solver slack."""
    hits = math.floor(max_hits * (1 + _RELATIVE_SLACK) + _RELATIVE_SLACK)
    return intervals.forced_misses + intervals.start.shape[0] - min(hits, intervals.start.shape[0])


def foo_lower_bound(intervals: ReuseIntervals, cache_size: int) -> LowerBound | None:
    """FOO-L: FOO's LP as a min-cost flow over the cache states, solved by HiGHS (None if
    the solver does not reach an optimum).

    Bytes of every interval flow from its start to its end, either along the cache
    (at most ``cache_size`` bytes between consecutive states) or around it, at a cost
    of 1/size per byte: one miss per interval that is not cached at all.
    """
    n = intervals.start.shape[0]
    if n == 0:
        return LowerBound(intervals.forced_misses, "foo-l", intervals.forced_misses, "foo-u")
    nodes = np.unique(np.r_[intervals.start, intervals.end])
    first, last = np.searchsorted(nodes, intervals.start), np.searchsorted(nodes, intervals.end)
    share = intervals.size / cache_size  # flows in units of the cache's size
    m = nodes.shape[0]
    edges = np.arange(m - 1)
    bypass = m - 1 + np.arange(n)
    flow = sp.csr_matrix(
        (np.r_[np.ones(m - 1), -np.ones(m - 1), share, -share],
         (np.r_[edges, edges + 1, first, last], np.r_[edges, edges, bypass, bypass])),
        shape=(m, m - 1 + n))
    supply = np.bincount(first, share, m) - np.bincount(last, share, m)
    res = linprog(np.r_[np.zeros(m - 1), np.ones(n)], A_eq=flow, b_eq=supply, bounds=(0, 1),
                  method="highs")
    if res.status != 0:
        return None
    uncached = math.ceil(res.fun - _RELATIVE_SLACK * (1 + res.fun))
    bypassed = res.x[m - 1:]
    schedule_misses = _schedule_misses(intervals, cache_size, bypassed <= _RELATIVE_SLACK)
    return LowerBound(intervals.forced_misses + max(uncached, 0), "foo-l", schedule_misses,
                      None if schedule_misses is None else "foo-u")


def _schedule_misses(intervals: ReuseIntervals, cache_size: int, cached: np.ndarray) -> int | None:
    """Misses of the schedule that caches exactly the ``cached`` intervals; None if it
    overflows the cache in some state (solver round-off), or if objects change size
    (a policy then holds an object at the size it was inserted with, not the LP's)."""
    if not intervals.fixed_sizes:
        return None
    occupancy = np.zeros(intervals.n_req + 1, np.int64)
    np.add.at(occupancy, intervals.start[cached], intervals.size[cached])
    np.add.at(occupancy, intervals.end[cached], -intervals.size[cached])
    if np.cumsum(occupancy).max() > cache_size:
        return None
    return intervals.forced_misses + intervals.start.shape[0] - int(cached.sum())


@dataclass(frozen=True)
class OptBounds:
    """Misses of the optimal offline policy lie in [lower, upper]; unpacks as ``lo, hi``.

    ``lower_method`` names the lower bound (``"foo-l"``, ``"lagrange"``, ``"pfoo-l"`` or, on
    unit sizes, ``"min-bypass"``, see :mod:`mmcache.sim.bounds`); ``upper_by`` the feasible
    schedule whose misses are ``upper``: a policy's name, ``"foo-u"`` (the FOO LP's fully
    cached intervals), ``"belady-bypass"`` (on unit sizes) or ``"no cache"``.
    """

    lower: int
    upper: int
    lower_method: str
    upper_by: str
    #: The trace's requests and the cache's bytes (for miss ratios; None when not given).
    n_req: int | None = field(default=None, compare=False)
    cache_size: int | None = field(default=None, compare=False)

    def __iter__(self) -> Iterator[int]:
        return iter((self.lower, self.upper))

    @property
    def gap(self) -> int:
        """``upper - lower``: 0 when the bound found the optimum."""
        return self.upper - self.lower

    def __repr__(self) -> str:
        return safe_display(lambda: (
            f"OptBounds(lower={self.lower:,}, upper={self.upper:,}, gap={self.gap:,}, "
            f"lower_method={self.lower_method!r}, upper_by={self.upper_by!r}"
            + ("" if self.n_req is None else f", n_req={self.n_req:,}") + ")"), self)

    def _repr_html_(self) -> str:
        return safe_display(self._html, self, as_html=True)

    def _html(self) -> str:
        def ratio(misses: int) -> float | None:
            return None if not self.n_req else misses / self.n_req

        bounds = html_table(["bound", "misses", "miss ratio", "by"],
                            [["lower", self.lower, ratio(self.lower), self.lower_method],
                             ["upper", self.upper, ratio(self.upper), self.upper_by],
                             ["gap", self.gap, ratio(self.gap), ""]])
        sizes = html_fields([("requests", self.n_req),
                             ("cache size", fmt_bytes(self.cache_size) if self.cache_size
                              else None)])
        return html_card("OptBounds: misses of the optimal offline policy", bounds, sizes,
                         note="unpacks as lo, hi")


def opt_bounds(trace: Trace, cache_size: int, *, policies: Iterable[str] | None = None,
               method: str = "auto", known: Mapping[str, int] | None = None,
               progress: bool | None = None) -> OptBounds:
    """Bounds on the fewest misses any policy can have on ``trace`` at ``cache_size`` bytes,
    counted as :func:`simulate` counts them.

    ``lower`` is at most every policy's misses, and at least the space-time relaxation
    (PFOO-L); ``method`` picks it (see :func:`mmcache.sim.bounds.lower_bound`). ``upper``
    is the fewest misses among the FOO-U schedule (when the LP was solved; on unit sizes
    MIN with bypass's, which the bound replayed) and
    ``policies`` simulated with their defaults (every registered one unless given), so
    it is at most each of them; ``known`` gives misses already counted (by :func:`simulate`,
    at this size) for some of them, which are then not replayed. A progress bar (one step for
    the lower bound, one per policy replayed; ``progress=False`` or ``MMCACHE_PROGRESS=0``
    silences it) appears when the call runs more than two seconds. Raises
    :class:`TraceFormatError` for an empty or non-trace, :class:`ConfigError` for a bad size
    or method and :class:`UnknownPolicyError` for an unknown policy.
    """
    check_trace(trace, "opt_bounds()")
    cache_size = check_cache_size(cache_size)
    names = [policy_name(p) for p in (POLICIES if policies is None else policies)]
    known = {policy_name(name): int(misses) for name, misses in (known or {}).items()}
    order = sorted(names, key=lambda n: (n not in KERNELS, n))  # compiled kernels first
    with progress_bar(1 + sum(n not in known for n in order), "opt_bounds", unit="step",
                      progress=progress) as bar:
        bar.set_postfix_str(f"lower bound ({method})", refresh=False)
        low = lower_bound(trace, cache_size, method)
        bar.update()
        upper, upper_by = trace.n_req, "no cache"
        if low.schedule_misses is not None and low.schedule_misses < upper:
            upper, upper_by = low.schedule_misses, low.schedule
        for name in order:
            if upper == low.misses:  # optimal: no policy can miss less
                break
            if name in known:
                misses = known[name]
            else:
                bar.set_postfix_str(name, refresh=False)
                misses = simulate(trace, name, cache_size, progress=False).miss_cnt
                bar.update()
            if misses < upper:
                upper, upper_by = misses, name
    return OptBounds(low.misses, upper, low.method, upper_by, trace.n_req, cache_size)
