"""δ-neighbour rules: when is a stored entry "the same" as a query?

One interface (:class:`ThresholdRule`, :mod:`.base`: scales, call order) and one module
per rule family: :mod:`.static` (cos ≥ 1 − δ), :mod:`.percentile` (seed 000 §3.1, fed
by every lookup), :mod:`.calibrated` (P(same answer) per modality and encoder),
:mod:`.budget` (per-entry, error-budgeted, shared prior) and :mod:`.vcache`
(vCache's rule reimplemented from its paper, a baseline). :mod:`.prior` fits and
loads the shipped priors. A rule's constructor names its parameters as the
``thresholds`` config keys they come from (:func:`mmcache.build.make_threshold`);
``encoders`` is the config's ``encoders`` section.
"""

from __future__ import annotations

from typing import Callable

from .base import DEFAULT_DELTA, NEVER, ThresholdRule
from .budget import ErrorBudgetThreshold
from .calibrated import CalibratedThreshold
from .percentile import PercentileThreshold
from .static import StaticThreshold
from .vcache import VCachePaperThreshold

#: Rule name → rule factory, called with the ``thresholds`` settings its parameters name.
RULES: dict[str, Callable[..., ThresholdRule]] = {
    "static": StaticThreshold,
    "percentile": PercentileThreshold,
    "calibrated": CalibratedThreshold,
    "error-budget": ErrorBudgetThreshold,
    "vcache-paper": VCachePaperThreshold,
}

__all__ = ["DEFAULT_DELTA", "NEVER", "RULES", "CalibratedThreshold", "ErrorBudgetThreshold",
           "PercentileThreshold", "StaticThreshold", "ThresholdRule", "VCachePaperThreshold"]
