"""δ-neighbour rules: when is a stored entry "the same" as a query?

One interface (:class:`ThresholdRule`, :mod:`.base`: scales, call order) and one module
per rule family: :mod:`.static` (cos ≥ 1 − δ), :mod:`.percentile` (seed 000 §3.1, fed
by every lookup), :mod:`.calibrated` (P(same answer) per modality and encoder),
:mod:`.budget` (per-entry, error-budgeted, shared prior) and :mod:`.vcache`
(vCache's rule reimplemented from its paper, a baseline: the one rule that explores). :mod:`.prior` fits and
loads the shipped priors. A rule's constructor names its parameters as the
``thresholds`` config keys they come from (:func:`mmcache.build.make_threshold`);
``encoders`` is the config's ``encoders`` section. :data:`RULES` is a
:class:`mmcache.registry.Registry`: ``RULES.register("my-rule", MyRule)`` makes
``{"thresholds": {"rule": "my-rule"}}`` a valid config.
"""

from __future__ import annotations

from typing import Callable

from mmcache.errors import ConfigError
from mmcache.registry import Registry
from mmcache.thresholds.base import DEFAULT_DELTA, NEVER, ThresholdRule
from mmcache.thresholds.budget import ErrorBudgetThreshold
from mmcache.thresholds.calibrated import CalibratedThreshold
from mmcache.thresholds.percentile import PercentileThreshold
from mmcache.thresholds.static import StaticThreshold
from mmcache.thresholds.vcache import VCacheThreshold

#: Rule name → rule factory, called with the ``thresholds`` settings its parameters name.
RULES: Registry[Callable[..., ThresholdRule]] = Registry("threshold rule", {
    "static": StaticThreshold,
    "percentile": PercentileThreshold,
    "calibrated": CalibratedThreshold,
    "error-budget": ErrorBudgetThreshold,
    "vcache": VCacheThreshold,
}, error=ConfigError)

__all__ = ["DEFAULT_DELTA", "NEVER", "RULES", "CalibratedThreshold", "ErrorBudgetThreshold",
           "PercentileThreshold", "StaticThreshold", "ThresholdRule", "VCacheThreshold"]
