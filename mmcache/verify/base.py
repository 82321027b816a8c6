"""Verifiers: a second opinion on a semantic candidate near the threshold.

A verifier is any callable ``verifier(query, entry) -> float`` returning P(the entry's
answer is right for the query), in [0, 1] (:class:`Verifier`). The cache calls it on
candidates its threshold rule accepts within ``thresholds.verifier_band`` (cosine) of
the rule's threshold; a candidate it gives less than ``thresholds.verifier_min`` is not
served, and rules that use probabilities (calibrated, error-budget) also multiply it
into P(correct). ``entry.question`` and ``entry.context`` say what the entry was asked.

:data:`VERIFIERS` names the built-in ones for ``thresholds.verifier`` in a config: each
value is a zero-argument factory of a Verifier, or None for ``"none"``, which skips the
stage (no verifier is called; no probability is made up). Users pass their own (e.g.
an LLM judge) as ``TieredCache(verifier=...)``.
"""

from __future__ import annotations

import math
from typing import Callable, Protocol

from mmcache.verify.edits import EditVerifier
from mmcache.errors import ConfigError, InvalidInputError
from mmcache.types import Entry, Query


class Verifier(Protocol):
    """P(the cached entry's answer is right for the query)."""

    def __call__(self, query: Query, entry: Entry) -> float: ...


#: Verifier name → zero-argument factory (None: no verifier stage).
VERIFIERS: dict[str, Callable[[], Verifier] | None] = {
    "none": None,
    "edits": EditVerifier,  # built-in, offline: negation / number / date / name / history edits
}


def make_verifier(name: str) -> Verifier | None:
    """The registered verifier ``name`` (None for ``"none"``); ConfigError if unknown."""
    if name not in VERIFIERS:
        raise ConfigError(f"thresholds.verifier: unknown verifier {name!r}; known: "
                          f"{sorted(VERIFIERS)}")
    factory = VERIFIERS[name]
    return None if factory is None else factory()


def checked_probability(p: object, verifier: object) -> float:
    """``p`` as a float in [0, 1]; InvalidInputError naming the verifier otherwise."""
    if isinstance(p, bool) or not isinstance(p, (int, float)) or not math.isfinite(p) or \
            not 0.0 <= p <= 1.0:
        raise InvalidInputError(f"verifier {verifier!r} returned {p!r}; a verifier must return "
                                "a probability in [0, 1]")
    return float(p)
