"""Verdicts over seeds: a claim tested on per-seed outcomes, stated with its 95% interval.

A notebook's "holds", "works" or "helps" comes from one of two stated tests on paired outcomes
(the treated and the control run of each seed, or of each seed and setting):

* :func:`sign_test` — the exact sign test: the effect is the mean sign of treated − control
  (for 0/1 outcomes such as "collapsed", the difference of the two rates), its interval the
  Clopper–Pearson interval of the share of untied pairs where treated is above, mapped to that
  scale (conditional on the number of ties);
* :func:`mean_difference` — the mean of treated − ``factor`` × control with its Student-t
  interval over the pairs.

:func:`mean_within` tests a mean against a band (its Student-t interval inside the band).

:func:`verdict_of_interval` applies the one rule: **holds** when the whole interval lies on the
claimed side of the line, **does not hold** when it lies wholly on the other side (the line
itself belongs to neither side), **inconclusive** otherwise. :func:`all_hold`, :func:`any_holds` and
:func:`replicates` combine verdicts; :func:`describe` prints one with its interval.
"""

from __future__ import annotations

import math
from typing import Literal, Sequence, TypedDict

import numpy as np
from scipy import stats

from mmcache.errors import InvalidInputError

#: The three verdicts, in the words the notebooks print.
VERDICTS = ("holds", "does not hold", "inconclusive")
#: The side of the line a claim puts the effect on.
Side = Literal["below", "above"]


class Verdict(TypedDict):
    """A claim's verdict with the effect and its 95% interval, the number of pairs (or
    samples) and the test's name."""

    verdict: str
    effect: float
    ci95: list[float]
    n: int
    test: str


def interval(samples: Sequence[float], level: float = 0.95) -> tuple[float, float, float]:
    """``(mean, low, high)``: the mean of ``samples`` and its ``level`` Student-t interval (one
    sample, or samples that do not vary: the interval is the point)."""
    x = np.asarray(samples, float)
    if x.ndim != 1 or x.size == 0 or not np.isfinite(x).all():
        raise InvalidInputError(f"interval needs finite samples, got {list(samples)!r}")
    mean = float(x.mean())
    if x.size == 1:
        return mean, mean, mean
    half = float(stats.t.ppf(0.5 + level / 2, x.size - 1) * x.std(ddof=1) / math.sqrt(x.size))
    return mean, mean - half, mean + half


def verdict_of_interval(effect: float, low: float, high: float, n: int, test: str, *,
                        claim: Side, line: float = 0.0) -> Verdict:
    """The verdict on the claim that the effect lies ``claim`` (below / above) ``line``, from
    its 95% interval ``[low, high]``."""
    if claim not in ("below", "above"):
        raise InvalidInputError(f"claim must be 'below' or 'above', got {claim!r}")
    if not all(math.isfinite(v) for v in (effect, low, high, line)) or not low <= high:
        raise InvalidInputError(f"a verdict needs a finite effect in a finite interval, got "
                                f"{effect!r} in [{low!r}, {high!r}], line {line!r}")
    wholly_below, wholly_above = high < line, low > line
    claimed, other = (wholly_below, wholly_above) if claim == "below" else (wholly_above,
                                                                            wholly_below)
    word = "holds" if claimed else "does not hold" if other else "inconclusive"
    return Verdict(verdict=word, effect=float(effect), ci95=[float(low), float(high)], n=int(n),
                   test=test)


def _spread_interval(samples: np.ndarray) -> tuple[float, float, float]:
    """:func:`interval` of at least two samples (one sample has no spread to test with)."""
    if samples.size < 2:
        raise InvalidInputError(f"a t-interval verdict needs at least two samples, got "
                                f"{samples.size}")
    return interval(samples)


def _paired(treated: Sequence[float], control: Sequence[float]) -> tuple[np.ndarray, np.ndarray]:
    """The two outcome arrays, refused unless they are non-empty, of one length and not NaN
    (an infinite outcome, such as a diverged run's loss, is allowed)."""
    t, c = np.asarray(treated, float), np.asarray(control, float)
    if t.ndim != 1 or t.shape != c.shape or t.size == 0:
        raise InvalidInputError(f"paired outcomes need two non-empty sequences of one length, "
                                f"got {t.size} and {c.size}")
    if np.isnan(t).any() or np.isnan(c).any():
        raise InvalidInputError("paired outcomes must not be NaN")
    return t, c


def sign_test(treated: Sequence[float], control: Sequence[float], *, claim: Side,
              pairs: str = "paired seeds") -> Verdict:
    """The exact sign test of the claim that treated lies ``claim`` control, over pairs
    (``pairs`` names them in the test's name). Effect: (pairs above − pairs below) / pairs."""
    t, c = _paired(treated, control)
    above, below = int((t > c).sum()), int((t < c).sum())
    n, untied = t.size, above + below
    if untied:
        ci = stats.binomtest(above, untied).proportion_ci(0.95, method="exact")
        low, high = (untied / n * (2 * p - 1) for p in (ci.low, ci.high))
    else:
        low = high = 0.0
    return verdict_of_interval((above - below) / n, low, high, n, f"sign test over {n} {pairs}",
                               claim=claim)


def mean_difference(treated: Sequence[float], control: Sequence[float], *, claim: Side,
                    factor: float = 1.0, pairs: str = "seeds") -> Verdict:
    """The claim that treated − ``factor`` × control lies ``claim`` 0, from the mean
    difference and its Student-t 95% interval over the pairs."""
    t, c = _paired(treated, control)
    mean, low, high = _spread_interval(t - factor * c)
    return verdict_of_interval(mean, low, high, t.size,
                               f"paired t-interval over {t.size} {pairs}", claim=claim)


def mean_within(samples: Sequence[float], low: float, high: float, *,
                pairs: str = "seeds") -> Verdict:
    """The claim that the mean of ``samples`` lies inside ``(low, high)``, from its Student-t
    95% interval: holds when the interval is inside, does not hold when it is wholly outside."""
    if not low < high:
        raise InvalidInputError(f"mean_within needs low < high, got {low!r}, {high!r}")
    mean, lo, hi = _spread_interval(np.asarray(samples, float))
    word = ("holds" if low < lo and hi < high
            else "does not hold" if hi < low or lo > high else "inconclusive")
    return Verdict(verdict=word, effect=mean, ci95=[lo, hi], n=len(samples),
                   test=f"t-interval over {len(samples)} {pairs}")


def all_hold(verdicts: Sequence[Verdict]) -> str:
    """"holds" when every verdict holds, "does not hold" when any does not, else
    "inconclusive"."""
    words = [v["verdict"] for v in verdicts]
    if not words:
        raise InvalidInputError("all_hold needs at least one verdict")
    return ("does not hold" if "does not hold" in words
            else "holds" if set(words) == {"holds"} else "inconclusive")


def any_holds(verdicts: Sequence[Verdict]) -> str:
    """"holds" when some verdict holds, "does not hold" when none does and every one is
    conclusive, else "inconclusive"."""
    words = [v["verdict"] for v in verdicts]
    if not words:
        raise InvalidInputError("any_holds needs at least one verdict")
    return ("holds" if "holds" in words
            else "does not hold" if set(words) == {"does not hold"} else "inconclusive")


def replicates(original: Verdict, repeat: Verdict) -> str:
    """Whether ``original``'s conclusion holds again in ``repeat``: "holds" when both are
    conclusive and say the same, "does not hold" when both are conclusive and differ,
    "inconclusive" when either is."""
    words = (original["verdict"], repeat["verdict"])
    if "inconclusive" in words:
        return "inconclusive"
    return "holds" if words[0] == words[1] else "does not hold"


def describe(v: Verdict, digits: int = 2) -> str:
    """Markdown: the verdict in bold and its effect, 95% interval and test, e.g.
    ``**holds** (effect −0.42, 95% CI −0.61 to −0.20, sign test over 8 paired seeds)``."""
    def num(x: float) -> str:
        return f"{x:.{digits}f}".replace("-", "−")

    lo, hi = v["ci95"]
    return (f"**{v['verdict']}** (effect {num(v['effect'])}, 95% CI {num(lo)} to {num(hi)}, "
            f"{v['test']})")
