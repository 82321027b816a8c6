"""Error-budgeted rule, in the spirit of vCache (from its paper only), with a shared prior.

Each entry has its own logistic model P(correct | s) = σ(w·φ(s)) per modality, a
Gaussian over w that starts at the shared prior of its (modality, encoder)
channel (:mod:`mmcache.thresholds.prior`, fitted offline on labelled pairs) and is
updated by that entry's feedback (Laplace posterior). So an entry can be served at
its first lookup, and an entry that served wrong answers becomes stricter.

Budget: error is counted as vCache counts it, wrong answers served ÷ all lookups. Per
scope the rule keeps the lookups seen and the expected wrong answers it has served
(each served hit adds its P(wrong), which :meth:`served` returns; feedback on that hit
replaces exactly that charge by the truth). A candidate is served only if its
P(wrong) ≤ ``max_risk`` and serving it keeps ``spent ≤ budget · max(lookups, credit)``:
the first ``credit`` lookups share an allowance of ``budget · credit`` (so a new cache
may serve its first lookup), an advance repaid once the scope has seen ``credit``
lookups; from then on the expected error after n lookups is at most the budget, if the
curves are calibrated (feedback corrects ``spent`` when they are not). In expectation is
not enough on a short stream: a hit with P(wrong) = 0.4 that turns out wrong adds 0.6 of
an answer beyond what was charged. So a candidate with P(wrong) above ``tail`` is served
only while the allowance could absorb it being wrong (``spent + 1 ≤ allowance``): with
immediate feedback, the realised error then exceeds the budget only through a hit whose
P(wrong) was at most ``tail`` (a chance constraint). P(correct) of a
multimodal candidate is the product over modalities, times the verifier's probability
when one is given as evidence; the prior is the channel conditioned on that verifier
(:func:`~mmcache.thresholds.prior.channel`), since its probability is multiplied in.
A modality whose channel has no prior starts from an uninformative one (P = 1/2, so
it is never served before feedback lifts it: vCache's cold start).

``parts`` switches checks off for ablations: ``ledger`` keeps only the scope's ledger
(``spent + P(wrong) ≤ allowance``); ``curves`` keeps only a per-hit bound, P(wrong) ≤
``budget`` (each served hit within the budget on its own, no ledger).

Ledgers are kept for the ``max_scopes`` scopes used most recently; a scope forgotten past
that starts again as a new one, with its ``credit`` (a bound on memory, paid in budget by
an application that cycles through more scopes than that).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Mapping, Sequence

from mmcache.thresholds.base import MAX_SCOPES, ThresholdRule, recent_scopes
from mmcache.thresholds.prior import channel_priors, curve, posterior

#: Prior over w for a channel without a fitted one: centred on P = 1/2, wide.
UNINFORMATIVE = ((0.0, 0.0), ((100.0, 0.0), (0.0, 100.0)))
#: Observations an entry keeps per modality (the oldest are dropped).
MAX_OBSERVATIONS = 64
#: The values of ``parts``: every check, the ledger alone, the per-hit curves alone.
PARTS = ("both", "ledger", "curves")


class ErrorBudgetThreshold(ThresholdRule):
    """Serve a candidate while the expected error per lookup stays within ``budget``."""

    name = "error-budget"

    def __init__(self, budget: float = 0.02, prior: str | Path | None = None,
                 encoders: Mapping[str, str] | None = None, max_risk: float = 0.5,
                 credit: float = 10.0, search_floor: float = 0.5,
                 verifier: str = "none", tail: float = 0.05, parts: str = "both",
                 max_scopes: int = MAX_SCOPES) -> None:
        self.budget, self.max_risk, self.credit, self.tail = budget, max_risk, credit, tail
        self.parts = parts
        self.search_floor = search_floor
        self.encoders = dict(encoders or {})
        self._prior: dict[str, tuple] = {
            m: (p.mean, p.cov) for m, p in
            channel_priors(prior, self.encoders, verifier, "error-budget prior").items()}
        #: entry id -> modality -> ((s, correct) observations, posterior mean, posterior cov).
        self._entries: dict[str, dict[str, tuple[list, tuple, tuple]]] = {}
        #: scope -> [lookups seen, expected wrong answers served].
        self._ledger = recent_scopes(max_scopes)

    def floor(self, modality: str) -> float:
        return self.search_floor

    def p_correct(self, modality: str, similarity: float, entry_id: str | None = None) -> float:
        """The entry's current P(correct | similarity) on ``modality``: its posterior mode's
        curve, which for an entry without feedback is the channel's pooled fit (the chance that
        an entry drawn as the training pairs were answers right); made non-decreasing in
        similarity: the least value on [s, 1]."""
        state = self._entries.get(entry_id, {}).get(modality) if entry_id is not None else None
        mean = state[1] if state else self._prior.get(modality, UNINFORMATIVE)[0]
        s = min(float(similarity), 1.0)
        return min(curve(mean, s + k * (1.0 - s) / 8) for k in range(9))

    def risk(self, similarities: Mapping[str, float], entry_id: str | None = None,
             evidence: Mapping[str, float] | None = None) -> float:
        """P(wrong answer) if this candidate were served."""
        p = math.prod(self.p_correct(m, s, entry_id) for m, s in similarities.items())
        return 1.0 - p * (evidence or {}).get("verifier", 1.0)

    def accepts(self, similarities: Mapping[str, float], entry_id: str | None = None,
                scope: str | None = None, evidence: Mapping[str, float] | None = None) -> bool:
        if any(s < self.search_floor for s in similarities.values()):
            return False
        risk = self.risk(similarities, entry_id, evidence)
        if self.parts == "curves":
            return risk <= self.budget
        lookups, spent = self._ledger.get(scope or "", (0.0, 0.0))
        allowance = self.allowance(lookups + 1)
        within = spent + risk <= allowance
        if self.parts == "ledger":
            return within
        return within and risk <= self.max_risk and \
            (risk <= self.tail or spent + 1.0 <= allowance)

    def allowance(self, lookups: float) -> float:
        """Expected wrong answers a scope may have served after ``lookups`` lookups."""
        return self.budget * max(lookups, self.credit)

    def threshold(self, modality: str, entry_id: str | None = None,
                  scope: str | None = None) -> float:
        """The least similarity on ``modality`` alone that this entry would be served at now."""
        lo, hi = self.search_floor, 1.0
        if not self.accepts({modality: hi}, entry_id, scope):
            return math.inf
        for _ in range(30):
            mid = (lo + hi) / 2
            lo, hi = (lo, mid) if self.accepts({modality: mid}, entry_id, scope) else (mid, hi)
        return hi

    def served(self, similarities: Mapping[str, float], entry_id: str, scope: str,
               evidence: Mapping[str, float] | None = None) -> float:
        charge = self.risk(similarities, entry_id, evidence)
        self._ledger.setdefault(scope, [0.0, 0.0])[1] += charge
        return charge

    def observe_lookup(self, scope: str, modalities: Sequence[str],
                       nearest: Mapping[str, float] | None) -> None:
        self._ledger.setdefault(scope, [0.0, 0.0])[0] += 1

    def feedback(self, similarities: Mapping[str, float], entry_id: str, correct: bool,
                 scope: str | None = None, charged: float = 0.0) -> None:
        """Update the entry's posterior; for a served hit (``scope`` given) replace what
        :meth:`served` ``charged`` for it in the ledger by the observed error."""
        if scope is not None and scope in self._ledger:
            self._ledger[scope][1] += (0.0 if correct else 1.0) - charged
        states = self._entries.setdefault(entry_id, {})
        for modality, s in similarities.items():
            observations = list(states.get(modality, ([],))[0])
            observations = (observations + [(float(s), bool(correct))])[-MAX_OBSERVATIONS:]
            prior_mean, prior_cov = self._prior.get(modality, UNINFORMATIVE)
            mean, cov = posterior(prior_mean, prior_cov, [o[0] for o in observations],
                                  [o[1] for o in observations])
            states[modality] = (observations, mean, cov)

    def forget(self, entry_id: str) -> None:
        self._entries.pop(entry_id, None)

    def scope_state(self, scope: str, modalities: Sequence[str]) -> dict[str, float]:
        """The scope's ledger (lookups, expected-or-observed wrong answers served, what its
        budget allows) beside the least similarity per modality it would serve now."""
        lookups, spent = self.realised(scope)
        return {"lookups": lookups, "wrong answers served (expected or observed)": spent,
                "allowed now": self.allowance(lookups + 1),
                **super().scope_state(scope, modalities)}

    def realised(self, scope: str) -> tuple[int, float]:
        """(lookups seen, expected-or-observed wrong answers served) in ``scope``."""
        lookups, spent = self._ledger.get(scope, (0.0, 0.0))
        return int(lookups), spent
