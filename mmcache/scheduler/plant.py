"""A known plant for the controllers: a first-order system, its closed loop, and the metrics of
a controlled signal (violation area, settling, overshoot).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Mapping, Sequence

import numpy as np

from mmcache.errors import InvalidInputError

if TYPE_CHECKING:
    pass
from mmcache.scheduler.controllers import Controller, make_controller


# -- a plant with a known response, and the scores of a controlled run ---------------------
@dataclass
class FirstOrderPlant:
    """A first-order system: ``h ← h + rate·(g(λ) − h)`` with
    ``g(λ) = floor + (ceiling − floor)·(1 − exp(−λ / scale))`` increasing in λ.

    A stand-in for "the hit rate follows the levers with a lag": the cache needs a few
    windows to fill after a looser setting. A ``ceiling`` below the target makes the
    target unreachable.
    """

    rate: float = 0.1
    floor: float = 0.5
    ceiling: float = 0.99
    scale: float = 0.1
    h: float = 0.5

    def steady_state(self, lam: float) -> float:
        """g(λ): the hit rate λ leads to once the lag has passed."""
        return self.floor + (self.ceiling - self.floor) * (1.0 - math.exp(-lam / self.scale))

    def step(self, lam: float) -> float:
        """One window under ``lam``; returns the new hit rate."""
        self.h += self.rate * (self.steady_state(lam) - self.h)
        return self.h


def run_plant(controller: Controller, plant: FirstOrderPlant,
              windows: int) -> tuple[np.ndarray, np.ndarray]:
    """``windows`` steps of ``plant`` under ``controller``: (hit rate, λ) per window."""
    hits, lams = np.zeros(windows), np.zeros(windows)
    lam = controller.lam
    for t in range(windows):
        hits[t] = plant.step(lam)
        lam = lams[t] = controller.update(hits[t])
    return hits, lams


def control_metrics(values: Sequence[float], target: float, *, band: float = 0.01,
                    tail: float = 0.1) -> dict[str, float]:
    """Scores of an at-least metric's run (e.g. hit rate per window) against ``target``.

    ``violation_area``: Σ max(0, target − value); ``overshoot``: max(0, max value − target);
    ``settling_windows``: windows before the value enters ``target ± band`` for good (the
    run's length if it never does); ``steady_state_error``: target − the mean of the last
    ``tail`` share of windows (positive: below target).
    """
    v = np.asarray(values, dtype=float)
    if v.ndim != 1 or v.size == 0:
        raise InvalidInputError("values must be a non-empty 1-D sequence")
    outside = np.flatnonzero(np.abs(v - target) > band)
    last = v[-max(1, int(round(tail * v.size))):]
    return {"violation_area": float(np.maximum(0.0, target - v).sum()),
            "overshoot": float(max(0.0, v.max() - target)),
            "settling_windows": int(outside[-1] + 1) if outside.size else 0,
            "steady_state_error": float(target - last.mean())}


def demonstrate(target: float = 0.92, windows: int = 300,
                plant: Callable[[], FirstOrderPlant] = FirstOrderPlant,
                params: Mapping[str, Mapping[str, Any]] | None = None
                ) -> dict[str, dict[str, float]]:
    """The four registered controllers on a fresh ``plant()`` each: :func:`control_metrics`
    of their hit rates. ``params`` overrides a controller's parameters by name (defaults:
    the fixed λ is 1, the I controller's horizon is ``windows``, PI and PID their own)."""
    defaults = {"fixed": {"lam": 1.0}, "I": {"horizon": windows}, "PI": {}, "PID": {}}
    return {name: control_metrics(run_plant(
        make_controller(name, target, **{**given, **(params or {}).get(name, {})}),
        plant(), windows)[0], target) for name, given in defaults.items()}
