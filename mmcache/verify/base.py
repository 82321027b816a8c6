"""Verifiers: a second opinion on a semantic candidate the threshold rule would serve.

A verifier is any callable ``verifier(query, entry) -> float`` returning P(the entry's
answer is right for the query), in [0, 1] (:class:`Verifier`). The cache calls it on
every candidate its threshold rule accepts (with ``thresholds.verifier_band`` below 2, only
on those within that cosine of the rule's threshold); a candidate it gives less than
``thresholds.verifier_min`` is not served, and rules that use probabilities (calibrated,
error-budget) also multiply it into P(correct). ``entry.question`` and ``entry.context`` say what the entry was asked.

:data:`VERIFIERS` (a :class:`mmcache.registry.Registry`) names the ones ``thresholds.verifier``
in a config may name: each value is a zero-argument factory of a Verifier, or None for
``"none"``, which skips the stage (no verifier is called; no probability is made up).
Built in: ``"edits"`` (:mod:`mmcache.verify.edits`, offline), ``"pairs"``
(:mod:`mmcache.verify.pair_model`, offline, learned) and the opt-in ``"judge"``
(:mod:`mmcache.verify.judge`: an OpenAI-compatible chat server named by the
``MMCACHE_JUDGE_URL`` / ``MMCACHE_JUDGE_MODEL`` / ``MMCACHE_JUDGE_API_KEY`` environment
variables). Users pass their own as ``TieredCache(verifier=...)``, or register a factory
(``VERIFIERS.register("my-judge", make_judge)``) and name it in the config.
"""

from __future__ import annotations

import math
from typing import Callable, Protocol

from mmcache.verify.edits import EditVerifier
from mmcache.verify.judge import judge_from_env
from mmcache.verify.pair_model import PairVerifier
from mmcache.errors import ConfigError, InvalidInputError
from mmcache.registry import Registry
from mmcache.types import Entry, Query


class Verifier(Protocol):
    """P(the cached entry's answer is right for the query)."""

    def __call__(self, query: Query, entry: Entry) -> float: ...


#: Verifier name → zero-argument factory (None: no verifier stage).
VERIFIERS: Registry[Callable[[], Verifier] | None] = Registry("verifier", {
    "none": None,
    "edits": EditVerifier,  # built-in, offline: negation / number / date / name / history edits
    "pairs": PairVerifier,  # learned on labelled pairs over MiniLM (make verifier), offline
    "judge": judge_from_env,  # opt-in: an LLM judge on a chat server named by MMCACHE_JUDGE_*
}, error=ConfigError, allow_none=True)


def make_verifier(name: str) -> Verifier | None:
    """The registered verifier ``name`` (None for ``"none"``); ConfigError if unknown."""
    try:
        factory = VERIFIERS.lookup(name)
    except ConfigError as exc:
        raise ConfigError(f"thresholds.verifier: {exc}") from None
    return None if factory is None else factory()


def checked_probability(p: object, verifier: object) -> float:
    """``p`` as a float in [0, 1]; InvalidInputError naming the verifier otherwise."""
    if isinstance(p, bool) or not isinstance(p, (int, float)) or not math.isfinite(p) or \
            not 0.0 <= p <= 1.0:
        raise InvalidInputError(f"verifier {verifier!r} returned {p!r}; a verifier must return "
                                "a probability in [0, 1]")
    return float(p)
