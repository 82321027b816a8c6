"""The multiplier controllers: I (the seed's integral with a cosine-annealed rate), PI, PID,
PI-aim and fixed; one registry, :data:`CONTROLLERS`."""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from typing import Any, Callable

from mmcache.errors import ConfigError, InvalidInputError, check_number


class Controller(ABC):
    """Turns each window's measurement of one constrained metric into a multiplier λ ≥ 0.

    ``target`` is the bound; ``at_least`` says whether the metric must stay at or above
    it (hit rate) or at or below it (error rate, p99 latency).
    """

    name: str = ""
    #: Whether the controller sets ``aim`` (a value of its metric) rather than λ: a mixing
    #: :class:`Scheduler` then sets its λ (see :class:`AimPIController`).
    aims: bool = False

    def __init__(self, target: float, *, at_least: bool = True) -> None:
        self.target = check_number(target, "target")
        self.at_least = bool(at_least)
        self.reset()

    def violation(self, measurement: float) -> float:
        """How far ``measurement`` is on the wrong side of the target (negative: satisfied)."""
        return self.target - measurement if self.at_least else measurement - self.target

    def update(self, measurement: float) -> float:
        """Take one window's measurement; return the new λ (a bad measurement changes nothing)."""
        return self._step(check_number(measurement, "measurement", error=InvalidInputError))

    @abstractmethod
    def _step(self, measurement: float) -> float:
        """The update for a checked measurement; sets and returns ``self.lam``."""

    @abstractmethod
    def reset(self) -> None:
        """Back to the state before the first update."""

    def parameters(self) -> dict[str, float]:
        """The controller's gains and limits by name (what its constructor took, for displays)."""
        return {k: getattr(self, k) for k in _PARAMETERS if hasattr(self, k)}

    def state(self) -> dict[str, float]:
        """What it has learned: λ, and its integral and aim where it has them."""
        return {k: getattr(self, k) for k in ("lam", "integral", "aim") if hasattr(self, k)
                and getattr(self, k) is not None}

    def __repr__(self) -> str:
        bound = "≥" if self.at_least else "≤"
        return f"{type(self).__name__}({bound} {self.target:g}, λ={getattr(self, 'lam', 0.0):.4g})"


class FixedController(Controller):
    """A constant λ (the fixed-weights baseline)."""

    name = "fixed"

    def __init__(self, target: float, *, lam: float = 1.0, at_least: bool = True) -> None:
        self.fixed = check_number(lam, "lam", 0, strict=False)
        super().__init__(target, at_least=at_least)

    def _step(self, measurement: float) -> float:
        return self.lam

    def reset(self) -> None:
        self.lam = self.fixed


def cosine_lr(step: int, horizon: int, start: float = 0.05, end: float = 0.001) -> float:
    """Cosine-annealed learning rate: ``start`` at step 0, ``end`` from step ``horizon`` on."""
    progress = min(max(step, 0), horizon) / horizon
    return end + 0.5 * (start - end) * (1.0 + math.cos(math.pi * progress))


class IController(Controller):
    """The seed's dual ascent: λ ← max(0, λ + lr·violation), lr = :func:`cosine_lr` of the
    update count, from ``lr_start`` (0.05) to ``lr_end`` (0.001) over ``horizon`` windows."""

    name = "I"

    def __init__(self, target: float, *, lr_start: float = 0.05, lr_end: float = 0.001,
                 horizon: int = 1000, lam0: float = 0.0, at_least: bool = True) -> None:
        self.lr_start = check_number(lr_start, "lr_start", 0, strict=False)
        self.lr_end = check_number(lr_end, "lr_end", 0, strict=False)
        if isinstance(horizon, bool) or not isinstance(horizon, int) or horizon < 1:
            raise ConfigError(f"horizon must be a positive number of windows, got {horizon!r}")
        self.horizon = horizon
        self.lam0 = check_number(lam0, "lam0", 0, strict=False)
        super().__init__(target, at_least=at_least)

    def lr(self) -> float:
        """The learning rate of the next update."""
        return cosine_lr(self.steps, self.horizon, self.lr_start, self.lr_end)

    def _step(self, measurement: float) -> float:
        self.lam = max(0.0, self.lam + self.lr() * self.violation(measurement))
        self.steps += 1
        return self.lam

    def reset(self) -> None:
        self.lam, self.steps = self.lam0, 0


class PIDController(Controller):
    """PID Lagrangian (Stooke et al. 2020): λ = clip(kp·e + I + kd·D, 0, lam_max).

    ``e`` is the violation; the integral ``I ← clip(I + ki·e, 0, lam_max)`` is clamped, so a
    long infeasible stretch cannot wind it up beyond ``lam_max`` (anti-windup); ``D`` is the
    change of the measurement since the last window, signed as the violation's (derivative
    on the measurement, so a change of target gives no kick). After an infeasible stretch
    λ needs about ``(lam_max − λ*) / (ki · overshoot)`` windows to come back to the λ* the
    target needs, so set ``lam_max`` to a small multiple of the λ at which the decision
    stops changing. The default gains come from a grid search (kp 0.05–0.5, ki 0.01–0.2,
    kd 0–2) on :class:`FirstOrderPlant`'s defaults, where the derivative changes little;
    a real cache needs its own (λ's scale follows ``Scheduler.objective_scale``).
    """

    name = "PID"

    def __init__(self, target: float, *, kp: float = 0.5, ki: float = 0.05, kd: float = 0.5,
                 lam_max: float = 1.0, at_least: bool = True) -> None:
        self.kp, self.ki, self.kd = (check_number(v, n, 0, strict=False) for v, n in
                                     ((kp, "kp"), (ki, "ki"), (kd, "kd")))
        self.lam_max = check_number(lam_max, "lam_max", 0, strict=False)
        super().__init__(target, at_least=at_least)

    def _step(self, measurement: float) -> float:
        error = self.violation(measurement)
        self.integral = min(self.lam_max, max(0.0, self.integral + self.ki * error))
        change = 0.0 if self.previous is None else measurement - self.previous
        derivative = -change if self.at_least else change
        self.previous = measurement
        self.lam = min(self.lam_max, max(0.0, self.kp * error + self.integral
                                         + self.kd * derivative))
        return self.lam

    def reset(self) -> None:
        self.lam, self.integral, self.previous = 0.0, 0.0, None


class PIController(PIDController):
    """PID without the derivative term."""

    name = "PI"

    def __init__(self, target: float, *, kp: float = 0.5, ki: float = 0.05,
                 lam_max: float = 1.0, at_least: bool = True) -> None:
        super().__init__(target, kp=kp, ki=ki, kd=0.0, lam_max=lam_max, at_least=at_least)


class AimPIController(Controller):
    """PI on the constrained metric's own scale (a gain-scheduled dual update).

    Each window it sets ``aim``, the value a mixing :class:`Scheduler` is asked to reach in
    expectation: ``target + kp·e + I`` for an at-least bound (``target − …`` for an at-most
    one), ``e`` the violation, ``I ← clip(I + ki·e, −reach, reach)`` (anti-windup, in the
    metric's units); the scheduler sets ``lam`` to the multiplier whose mixture's expected
    value under its estimates is the aim (:meth:`Scheduler.multiplier`). Why: a PI on λ moves
    the metric by its gains times the slope of the mixture's expected value in λ, which
    differs by a factor of tens between streams, phases and segments of the hull, so one
    pair of gains is a fast loop on one stream and slower than a phase on another; on the
    metric's own scale the gains mean the same everywhere, and the estimates' map stands in
    for the inverse slope, the integral correcting what the estimates get wrong.
    """

    name = "PI-aim"
    aims = True

    def __init__(self, target: float, *, kp: float = 0.5, ki: float = 0.1, reach: float = 0.1,
                 at_least: bool = True) -> None:
        self.kp, self.ki, self.reach = (check_number(v, n, 0, strict=False) for v, n in
                                        ((kp, "kp"), (ki, "ki"), (reach, "reach")))
        super().__init__(target, at_least=at_least)

    def _step(self, measurement: float) -> float:
        error = self.violation(measurement)
        self.integral = min(self.reach, max(-self.reach, self.integral + self.ki * error))
        shift = self.kp * error + self.integral
        self.aim = self.target + shift if self.at_least else self.target - shift
        return self.lam

    def reset(self) -> None:
        self.lam, self.integral, self.aim = 0.0, 0.0, self.target


#: Controller name → factory ``(target, **params)``; add a controller by one class and a line.
CONTROLLERS: dict[str, Callable[..., Controller]] = {
    cls.name: cls for cls in (FixedController, IController, PIController, PIDController,
                              AimPIController)}


def make_controller(name: str, target: float, **params: Any) -> Controller:
    """Build the registered controller ``name`` for ``target``; ConfigError if unknown."""
    if name not in CONTROLLERS:
        raise ConfigError(f"unknown controller {name!r}; choose one of {sorted(CONTROLLERS)}")
    try:
        return CONTROLLERS[name](target, **params)
    except TypeError as exc:
        raise ConfigError(f"bad parameters for controller {name!r}: {exc}") from None


# -- helpers -------------------------------------------------------------------------------
#: Attribute names of controller gains and limits (see :meth:`Controller.parameters`).
_PARAMETERS = ("fixed", "lr_start", "lr_end", "horizon", "lam0", "kp", "ki", "kd", "lam_max",
               "reach")


def _window(window: Any) -> int:
    if isinstance(window, bool) or not isinstance(window, int) or window < 1:
        raise ConfigError(f"window must be a positive number of requests, got {window!r}")
    return window
