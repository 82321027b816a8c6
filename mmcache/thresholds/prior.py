"""Shared priors and calibration curves per (modality, encoder), fitted on labelled pairs.

A labelled pair is (cosine similarity of a query and a cached entry, whether the entry's
answer is right for the query). Per channel ``"modality/encoder"`` the file holds:

- ``logistic``: P(correct | s) = σ(w·φ(s)) with φ(s) = (1, s) (:func:`features`), as a
  Gaussian over w: ``mean`` the maximum a posteriori fit on the pooled pairs under a weakly
  informative prior (:func:`weak_prior`: Gelman et al. 2008's scales, as a Gaussian), so a
  fit on separable pairs (every wrong pair below every right one, or one class only) stays
  finite and its curve follows the data instead of swinging to a step; ``cov`` the Laplace
  covariance of one *entry* (the pooled Hessian scaled to the weight of ``PRIOR_WEIGHT``
  observations, plus the weak prior's precision, so it stays bounded when the pooled
  Hessian vanishes), so an entry's own feedback can move it;
- ``isotonic``: scikit-learn's IsotonicRegression of correct on s, as its knots.

The shipped file is ``mmcache/resources/threshold_priors.json``; ``make priors`` (``python -m
mmcache.studies.priors``) regenerates it — every study channel, unconditioned and
conditioned on the built-in ``edits`` verifier (:func:`channel`) — and records its
provenance (encoders and their weights, data, split, conditioning, date, command).
:func:`load_priors` raises
:class:`~mmcache.errors.PriorFileError` naming the file and the fix when it is
missing or malformed.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from mmcache.errors import ConfigError, InvalidInputError, PriorFileError
from mmcache.paths import RESOURCES

#: The shipped priors.
PRIORS_PATH = RESOURCES / "threshold_priors.json"
FORMAT = "mmcache-threshold-priors/1"
#: The fix an error about the shipped priors names.
REGENERATE = "regenerate it with `make priors` (python -m mmcache.studies.priors)"
#: How many of an entry's own observations the shared prior is worth.
PRIOR_WEIGHT = 10.0
#: The weakly informative prior's standard deviations (Gelman, Jakulin, Pittau & Su 2008,
#: "A weakly informative default prior distribution for logistic regression"): the intercept
#: at the mean similarity, and the slope per two standard deviations of the similarity.
WEAK_INTERCEPT_SD, WEAK_SLOPE_SD = 10.0, 2.5


#: Names of the logistic features of a similarity (a priors file records them).
FEATURE_NAMES = ("1", "s")


def features(s: float) -> tuple[float, float]:
    """The logistic features φ(s) = (1, s) of a similarity (clipped to [−1, 1])."""
    return 1.0, min(max(float(s), -1.0), 1.0)


@dataclass(frozen=True)
class ChannelPrior:
    """One channel's fitted curves (see the module docstring)."""

    mean: tuple[float, ...]
    cov: tuple[tuple[float, ...], ...]
    iso_x: tuple[float, ...]
    iso_y: tuple[float, ...]
    n_pairs: int

    def p_correct(self, similarity: float) -> float:
        """The fitted logistic P(correct | similarity) (the curve at the fit's mode)."""
        return curve(self.mean, similarity)

    def p_isotonic(self, similarity: float) -> float:
        """The isotonic P(correct | similarity)."""
        return float(np.interp(similarity, self.iso_x, self.iso_y))


def channel(modality: str, encoder: str | None, verifier: str = "none") -> str:
    """The key of a channel in a priors file: ``"modality/encoder"``, fitted on every pair,
    or ``"modality/encoder+verifier"``, fitted on the pairs that ``verifier`` (a name in
    :data:`mmcache.verify.VERIFIERS`) passes, for rules that multiply its probability in."""
    return f"{modality}/{encoder}" + ("" if verifier == "none" else f"+{verifier}")


def channel_priors(prior: str | Path | None, encoders: Mapping[str, str], verifier: str,
                   what: str) -> dict[str, ChannelPrior]:
    """Modality → its channel's prior (:func:`channel`) from the priors file ``prior`` (default:
    the shipped one), for a rule configured with ``encoders`` and ``verifier``; a channel the
    file lacks is a :class:`~mmcache.errors.ConfigError` naming it, what the file has and the
    fix (``what`` names the rule's use of it in the message)."""
    priors = load_priors(prior)
    out = {}
    for modality, encoder in encoders.items():
        key = channel(modality, encoder, verifier)
        if key not in priors:
            raise ConfigError(f"thresholds: no {what} for channel {key!r} in "
                              f"{prior or 'the shipped priors'}; have {sorted(priors)}; "
                              f"{REGENERATE} or fit one with its fit_channel")
        out[modality] = priors[key]
    return out


def sigmoid(z: float) -> float:
    """The logistic function, without overflow."""
    if z >= 0:
        return 1.0 / (1.0 + math.exp(-z))
    e = math.exp(z)
    return e / (1.0 + e)


def linear_and_variance(mean: Sequence[float], cov: Sequence[Sequence[float]],
                        phi: Sequence[float]) -> tuple[float, float]:
    """(w·φ, φᵀΣφ) of a Gaussian over w at features φ."""
    z = sum(m * f for m, f in zip(mean, phi))
    var = sum(phi[i] * cov[i][j] * phi[j] for i in range(len(phi)) for j in range(len(phi)))
    return z, max(var, 0.0)


def curve(mean: Sequence[float], s: float) -> float:
    """P(correct | s) = σ(w·φ(s)) at weights ``mean``."""
    return sigmoid(sum(w * f for w, f in zip(mean, features(s))))


def posterior(prior_mean: Sequence[float], prior_cov: Sequence[Sequence[float]],
              similarities: Sequence[float], correct: Sequence[bool], steps: int = 25
              ) -> tuple[tuple[float, ...], tuple[tuple[float, ...], ...]]:
    """Laplace posterior of w after an entry's labelled observations, starting from a
    Gaussian prior (Newton's method on the log posterior; a few parameters, so by hand:
    scikit-learn's LogisticRegression has no non-zero prior mean)."""
    m0 = np.asarray(prior_mean, float)
    p0 = np.linalg.inv(np.asarray(prior_cov, float))
    x = np.array([features(v) for v in similarities], float).reshape(len(similarities), len(m0))
    y = np.asarray(correct, float)
    w = m0.copy()
    for _ in range(steps):
        p = 1.0 / (1.0 + np.exp(-(x @ w)))
        grad = x.T @ (y - p) - p0 @ (w - m0)
        hess = (x.T * (p * (1 - p))) @ x + p0
        step = np.linalg.solve(hess, grad)
        w = w + step
        if float(np.abs(step).max()) < 1e-9:
            break
    p = 1.0 / (1.0 + np.exp(-(x @ w)))
    cov = np.linalg.inv((x.T * (p * (1 - p))) @ x + p0)
    return tuple(float(v) for v in w), tuple(tuple(float(v) for v in row) for row in cov)


def weak_prior(similarities: Sequence[float]) -> tuple[np.ndarray, np.ndarray]:
    """The weakly informative Gaussian prior over w = (intercept, slope) of φ(s) = (1, s), for
    pairs with these similarities: zero mean; sd ``WEAK_INTERCEPT_SD`` for the intercept at
    the mean similarity and ``WEAK_SLOPE_SD`` for the slope per two standard deviations."""
    s = np.asarray(similarities, float)
    centre, two_sd = float(s.mean()), 2.0 * max(float(s.std()), 1e-3)
    to_raw = np.array([[1.0, -centre / two_sd], [0.0, 1.0 / two_sd]])
    return np.zeros(2), to_raw @ np.diag([WEAK_INTERCEPT_SD ** 2, WEAK_SLOPE_SD ** 2]) @ to_raw.T


def fit_channel(similarities: Sequence[float], correct: Sequence[bool],
                prior_weight: float = PRIOR_WEIGHT) -> dict[str, Any]:
    """Fit one channel's curves on labelled pairs (the JSON a priors file holds per channel)."""
    # deferred: scikit-learn only when a prior is fitted
    from sklearn.isotonic import IsotonicRegression

    s = np.asarray(similarities, float)
    y = np.asarray(correct, bool)
    if s.ndim != 1 or len(s) != len(y) or len(s) < 10 or not np.isfinite(s).all():
        raise InvalidInputError("fit_channel needs ≥ 10 pairs with finite similarities, "
                                f"got {len(s)} pairs")
    prior_mean, prior_cov = weak_prior(s)
    mean, _ = posterior(prior_mean, prior_cov, s, y, steps=100)
    x = np.array([features(v) for v in s])
    p = 1.0 / (1.0 + np.exp(-(x @ np.asarray(mean))))
    hessian = (x.T * (p * (1 - p))) @ x
    cov = np.linalg.inv(hessian * prior_weight / len(s) + np.linalg.inv(prior_cov))
    iso = IsotonicRegression(y_min=0.0, y_max=1.0, out_of_bounds="clip").fit(s, y)
    return {"n_pairs": int(len(s)), "n_correct": int(y.sum()),
            "logistic": {"features": list(FEATURE_NAMES), "mean": list(mean),
                         "cov": cov.tolist(), "prior_weight": prior_weight,
                         "weak_prior_sd": [WEAK_INTERCEPT_SD, WEAK_SLOPE_SD]},
            "isotonic": {"x": iso.X_thresholds_.tolist(), "y": iso.y_thresholds_.tolist()}}


def load_priors(path: str | Path | None = None) -> dict[str, ChannelPrior]:
    """Channel key → prior from a priors file (default: the shipped one)."""
    path = Path(path) if path is not None else PRIORS_PATH
    fix = REGENERATE
    try:
        data = json.loads(path.read_text())
    except OSError as exc:
        raise PriorFileError(f"threshold prior file {path} cannot be read ({exc.strerror}); "
                             f"{fix} or set thresholds.prior to an existing file") from None
    except json.JSONDecodeError as exc:
        raise PriorFileError(f"threshold prior file {path} is not JSON ({exc}); {fix}") from None
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise PriorFileError(f"threshold prior file {path} is not in format {FORMAT!r}; {fix}")
    try:
        return {key: _channel_prior(value) for key, value in data["priors"].items()}
    except (KeyError, TypeError, ValueError, np.linalg.LinAlgError) as exc:
        raise PriorFileError(f"threshold prior file {path} is malformed ({exc!r}); "
                             f"{fix}") from None


def _channel_prior(value: Mapping[str, Any]) -> ChannelPrior:
    mean = tuple(float(v) for v in value["logistic"]["mean"])
    cov = tuple(tuple(float(v) for v in row) for row in value["logistic"]["cov"])
    iso_x = tuple(float(v) for v in value["isotonic"]["x"])
    iso_y = tuple(float(v) for v in value["isotonic"]["y"])
    values = [*mean, *(v for row in cov for v in row), *iso_x, *iso_y]
    width = len(FEATURE_NAMES)
    if value["logistic"].get("features") != list(FEATURE_NAMES) or len(mean) != width or \
            [len(r) for r in cov] != [width] * width or not iso_x or \
            len(iso_x) != len(iso_y) or not all(map(math.isfinite, values)) or \
            list(iso_x) != sorted(iso_x) or np.linalg.eigvalsh(np.array(cov)).min() <= 0:
        raise ValueError("logistic mean/cov or isotonic knots have the wrong shape or values")
    return ChannelPrior(mean, cov, iso_x, iso_y, int(value["n_pairs"]))  # type: ignore[arg-type]
