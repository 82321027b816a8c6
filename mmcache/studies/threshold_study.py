"""Threshold studies on labelled pairs (notebook 02 and its widget panel call these).

:func:`score_pairs` embeds every pair once (through the embedding store) and scores it:
cosine per modality, the built-in verifier's probability. :func:`run_rule` streams the
pairs' lookups through any :class:`mmcache.thresholds.ThresholdRule` in a seeded order,
one candidate per lookup (the pair's cached entry), feeding labels back as vCache's
exploration does. :func:`summarise` counts as vCache does: hit rate = served ÷
lookups, realised error = wrong answers served ÷ lookups. Static thresholds are swept in
closed form (:func:`static_curve`, :func:`best_static`), and :func:`gptcache_decisions`
applies GPTCache's own similarity evaluation at its defaults to the same vectors.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from mmcache.datasets.pairs import Pair
from mmcache.encoders import get_encoder
from mmcache.errors import InvalidInputError, MMCacheError
from mmcache.thresholds import RULES
from mmcache.thresholds.prior import FORMAT, channel, fit_channel
from mmcache.verify.edits import verify_edits
from mmcache.verify.image_check import image_fingerprint

#: Encoder per modality of the study (names for :func:`mmcache.encoders.get_encoder`).
STUDY_ENCODERS: dict[str, tuple[str, dict[str, Any]]] = {
    "text": ("minilm", {}), "image": ("clip", {"modality": "image"}), "audio": ("whisper", {})}
#: The primary modality of each pair family: the one whose embedding decides alone.
PRIMARY = {"text": "text", "image": "image", "audio": "audio"}
#: The verifier probability at and above which a candidate counts as passed.
VERIFIER_PASS = 0.5
#: GPTCache 0.1.44's default ``similarity_threshold`` (``gptcache.Config``).
GPTCACHE_DEFAULT_THRESHOLD = 0.8
#: Decimal places of the cosines a static δ is chosen on.
SIMILARITY_DECIMALS = 6


@dataclass(frozen=True, eq=False)
class PairScores:
    """Per-pair arrays (aligned): labels, the entry each lookup hits, cosines, verifier."""

    modality: np.ndarray
    kind: np.ndarray
    same: np.ndarray
    entry: np.ndarray
    similarities: Mapping[str, np.ndarray]  # modality -> cosine (NaN where absent)
    verifier: np.ndarray
    encoder_ids: Mapping[str, str]

    def __len__(self) -> int:
        return len(self.same)

    def subset(self, mask: np.ndarray) -> "PairScores":
        """The pairs where ``mask`` is true."""
        return PairScores(self.modality[mask], self.kind[mask], self.same[mask], self.entry[mask],
                          {m: s[mask] for m, s in self.similarities.items()},
                          self.verifier[mask], self.encoder_ids)

    def min_similarity(self) -> np.ndarray:
        """Each pair's smallest cosine over its modalities (what a multimodal hit needs), to
        :data:`SIMILARITY_DECIMALS` places: a cosine of float32 vectors means nothing finer, and a
        static δ finer than that would rest on one CPU's rounding (identical queries' cosine is
        1.0 on one and 0.99999994 on another)."""
        return np.round(np.nanmin(np.vstack(list(self.similarities.values())), axis=0),
                        SIMILARITY_DECIMALS)

    def lookup(self, i: int) -> dict[str, float]:
        """Pair ``i``'s similarity as a rule sees it: its family's primary modality (an image
        pair asks the same question of both photos, so its text similarity is 1 by design)."""
        m = PRIMARY[str(self.modality[i])]
        return {m: float(self.similarities[m][i])}


def score_pairs(pairs: Sequence[Pair], encoders: Mapping[str, Any] | None = None,
                store: Any = None, verifier: Callable[..., float] = verify_edits,
                transcribe: Callable[[list[np.ndarray]], list[str]] | None = None) -> PairScores:
    """Embed and score ``pairs``; ``encoders`` maps a modality to an encoder (default
    :data:`STUDY_ENCODERS`), ``store`` an :class:`~mmcache.encoders.EmbeddingStore`.

    The verifier (:func:`~mmcache.verify.edits.verify_edits`' signature) reads each pair's
    texts and images (the cached side as an entry keeps it: its fingerprint); speech
    pairs have no text, so it reads their
    transcripts when ``transcribe`` (clips → texts, e.g. Whisper's) is given, else 1.0.
    """
    if not pairs:
        raise InvalidInputError("score_pairs needs at least one pair")
    encoders = dict(encoders or {})
    present = sorted({m for p in pairs for m in p.query.modalities()})
    for m in present:
        if m not in encoders:
            name, kw = STUDY_ENCODERS[m]
            encoders[m] = get_encoder(name, **kw)
    sims = {m: _cosines(pairs, m, encoders[m], store) for m in present}
    return PairScores(
        modality=np.array([p.modality for p in pairs]), kind=np.array([p.kind for p in pairs]),
        same=np.array([p.same for p in pairs]), entry=np.array([p.source for p in pairs]),
        similarities=sims,
        verifier=_verify_all(pairs, verifier, transcribe),
        encoder_ids={m: encoders[m].encoder_id for m in present})


def _raw(query: Any, modality: str) -> Any:
    return {"text": query.text, "image": query.image, "audio": query.audio}[modality]


def _cosines(pairs: Sequence[Pair], modality: str, encoder: Any, store: Any) -> np.ndarray:
    rows = [i for i, p in enumerate(pairs) if modality in p.query.modalities()]
    out = np.full(len(pairs), np.nan)
    if not rows:
        return out
    items = [_raw(pairs[i].query, modality) for i in rows] + \
            [_raw(pairs[i].cached, modality) for i in rows]
    vectors = store.encode(encoder, items) if store is not None else encoder.encode(items)
    vectors = np.asarray(vectors, np.float64)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    q, e = vectors[:len(rows)], vectors[len(rows):]
    out[rows] = np.clip(np.einsum("nd,nd->n", q, e), -1.0, 1.0)
    return out


def _verify_all(pairs: Sequence[Pair], verifier: Callable[..., float],
                transcribe: Callable[[list[np.ndarray]], list[str]] | None) -> np.ndarray:
    texts = [(p.query.text, p.cached.text) for p in pairs]
    spoken = [i for i, p in enumerate(pairs) if p.query.text is None and p.query.audio is not None]
    if transcribe is not None and spoken:
        said = transcribe([pairs[i].query.audio for i in spoken] +
                          [pairs[i].cached.audio for i in spoken])
        for k, i in enumerate(spoken):
            texts[i] = (said[k], said[len(spoken) + k])
    return np.array([float(verifier(q, p.query_context, e, p.cached_context,
                                    query_image=p.query.image,
                                    entry_fingerprint=_fingerprint(p.cached.image)))
                     for p, (q, e) in zip(pairs, texts)])


def _fingerprint(image: Any) -> bytes | None:
    """What a cache entry keeps of the cached image (None without one)."""
    return None if image is None else image_fingerprint(image)


@dataclass(frozen=True, eq=False)
class RuleRun:
    """What one run of a rule served: per lookup (in stream order) served / correct / observations."""

    order: np.ndarray
    served: np.ndarray
    same: np.ndarray
    observations: np.ndarray  # labels the entry had before this lookup
    modality: np.ndarray


def run_rule(scores: PairScores, rule: Any, seed: int = 0, use_verifier: bool = True,
           scope: str = "study", order: np.ndarray | None = None,
           same: np.ndarray | None = None) -> RuleRun:
    """Stream the pairs' lookups through ``rule`` and feed the labels back (see below).

    The stream is a ``seed``-ed permutation of the pairs unless ``order`` (pair indices,
    repeats allowed) is given; ``same`` overrides the label of each stream position. A served
    hit's label goes back with its scope (it settles the hit's risk in the budget ledger);
    every other lookup's label goes back without one (vCache's exploration), except, with
    the verifier, for candidates the verifier rejected. A lookup the rule explores
    (:meth:`~mmcache.thresholds.ThresholdRule.explores`, the ``vcache`` rule) is not served.
    """
    order = np.random.default_rng(seed).permutation(len(scores)) if order is None else order
    same = scores.same[order] if same is None else np.asarray(same, bool)
    served = np.zeros(len(order), bool)
    seen: dict[str, int] = {}
    observations = np.zeros(len(order), int)
    for k, i in enumerate(order):
        sims, entry = scores.lookup(int(i)), str(scores.entry[i])
        evidence = {"verifier": float(scores.verifier[i])} if use_verifier else None
        rule.observe_lookup(scope, tuple(sims), sims)
        observations[k] = seen.get(entry, 0)
        charged = 0.0
        if not rule.explores(sims, entry, scope) and rule.accepts(sims, entry, scope, evidence):
            served[k] = True
            charged = rule.served(sims, entry, scope, evidence)
        if served[k] or not use_verifier or scores.verifier[i] >= VERIFIER_PASS:
            # a served hit's label settles its risk in the scope's ledger (scope given); an
            # explored one only teaches the entry's curve, which under the verifier is the curve
            # given that the verifier passed: labels of candidates it rejected stay out
            rule.feedback(sims, entry, bool(same[k]), scope if served[k] else None, charged)
            seen[entry] = seen.get(entry, 0) + 1
    return RuleRun(np.asarray(order), served, same, observations, scores.modality[order])


def drifting_stream(scores: PairScores, seed: int = 0, epochs: int = 2,
                    stale_share: float = 0.5) -> tuple[np.ndarray, np.ndarray, int]:
    """``(order, same, drift_at)``: the pairs ``epochs`` times over in seeded orders; from the
    start of the second epoch, ``stale_share`` of the entries have a stale answer (their
    should-hit lookups become wrong hits). Synthetic drift: the labels change, not the data."""
    rng = np.random.default_rng(seed)
    order = np.concatenate([rng.permutation(len(scores)) for _ in range(epochs)])
    entries = np.unique(scores.entry)
    stale = set(rng.choice(entries, int(round(stale_share * len(entries))), replace=False))
    drift_at = len(scores)
    same = scores.same[order].copy()
    after = np.arange(len(order)) >= drift_at
    same[after & np.isin(scores.entry[order], list(stale))] = False
    return order, same, drift_at


def retrack_lookups(result: RuleRun, drift_at: int, budget: float, window: int = 100) -> float:
    """Lookups after ``drift_at`` until the error over the last ``window`` lookups is back
    within ``budget`` (0 if it never left; inf if it never came back)."""
    wrong = (result.served & ~result.same).astype(float)
    rolling = np.convolve(wrong, np.ones(window) / window, mode="full")[:len(wrong)]
    after = rolling[drift_at:]
    if not (after > budget).any():
        return 0.0
    first_bad = int(np.argmax(after > budget))
    back = np.flatnonzero(after[first_bad:] <= budget)
    return float(first_bad + back[0]) if back.size else float("inf")


def summarise(served: np.ndarray, same: np.ndarray) -> dict[str, float]:
    """hit rate, realised error (wrong served ÷ lookups), precision of hits, recall of true hits."""
    served, same = np.asarray(served, bool), np.asarray(same, bool)
    n, hits, wrong = len(served), int(served.sum()), int((served & ~same).sum())
    return {"hit_rate": hits / max(n, 1), "realised_error": wrong / max(n, 1),
            "precision": (hits - wrong) / hits if hits else 1.0,
            "recall": (hits - wrong) / max(int(same.sum()), 1), "lookups": n}


def cold_start_hit_rate(result: RuleRun, max_observations: int = 6) -> float:
    """Hit rate of lookups whose entry had fewer than ``max_observations`` labels."""
    cold = result.observations < max_observations
    return float(result.served[cold].mean()) if cold.any() else float("nan")


def static_decisions(scores: PairScores, delta: float, use_verifier: bool = False,
                     level: float = VERIFIER_PASS) -> np.ndarray:
    """Which pairs a static δ serves (every modality's cosine ≥ 1 − δ; verifier ≥ ``level``)."""
    served = scores.min_similarity() >= 1.0 - delta
    return served & (scores.verifier >= level) if use_verifier else served


def static_curve(scores: PairScores, deltas: Sequence[float] | None = None,
                 use_verifier: bool = False) -> list[dict[str, float]]:
    """:func:`summarise` of a static δ for each of ``deltas`` (default: every distinct one)."""
    if deltas is None:
        deltas = np.unique(np.clip(1.0 - scores.min_similarity(), 0.0, 2.0))
    return [{"delta": float(d), **summarise(static_decisions(scores, d, use_verifier), scores.same)}
            for d in deltas]


def _best_static_delta(scores: PairScores, budget: float, use_verifier: bool) -> float | None:
    """The δ of :func:`best_static` (None when no δ keeps the error within ``budget``): every
    distinct δ's hits and wrong answers counted at once from the pairs sorted by similarity."""
    sim = scores.min_similarity()
    passes = scores.verifier >= VERIFIER_PASS if use_verifier else np.ones(len(sim), bool)
    deltas = np.unique(np.clip(1.0 - sim, 0.0, 2.0))
    order = np.argsort(-sim, kind="stable")
    # pairs served by δ: those with sim ≥ 1 − δ, a prefix of the order
    served = np.searchsorted(-sim[order], -(1.0 - deltas), side="right")
    hits = np.r_[0, np.cumsum(passes[order])][served]
    wrong = np.r_[0, np.cumsum((passes & ~scores.same)[order])][served]
    ok = np.flatnonzero(wrong / max(len(sim), 1) <= budget)
    if not ok.size:
        return None
    return float(deltas[ok[np.argmax(hits[ok])]])   # the smallest δ among the most hits


def best_static(scores: PairScores, budget: float, use_verifier: bool = False) -> dict[str, float]:
    """The static δ chosen in hindsight: the most hits with realised error ≤ ``budget``."""
    delta = _best_static_delta(scores, budget, use_verifier)
    if delta is None:
        return {"delta": 0.0, **summarise(np.zeros(len(scores), bool), scores.same)}
    return {"delta": delta,
            **summarise(static_decisions(scores, delta, use_verifier), scores.same)}


def best_static_interval(scores: PairScores, budget: float, use_verifier: bool = False,
                         n_boot: int = 1000, seed: int = 0) -> list[float]:
    """The 95% percentile-bootstrap interval, over pairs, of :func:`best_static`'s hit rate:
    how far the hindsight choice moves when a few pairs near its threshold change."""
    rng = np.random.default_rng(seed)
    rates = []
    for _ in range(n_boot):
        sample = scores.subset(rng.integers(0, len(scores), len(scores)))
        delta = _best_static_delta(sample, budget, use_verifier)
        rates.append(0.0 if delta is None else
                     float(static_decisions(sample, delta, use_verifier).mean()))
    return [float(q) for q in np.percentile(rates, [2.5, 97.5])]


def gptcache_decisions(scores: PairScores,
                       threshold: float = GPTCACHE_DEFAULT_THRESHOLD) -> np.ndarray | None:
    """Which pairs GPTCache serves at its defaults (None when gptcache is not installed).

    GPTCache keeps one vector per entry: each pair's primary modality is used. Its
    faiss store returns the squared L2 distance; its default ``SearchDistanceEvaluation``
    scores ``4 − d`` and ``adapter.api.get`` serves when the score reaches
    ``threshold × 4`` (the evaluation's range) — for unit vectors, cos ≥ 2·threshold − 1.
    """
    try:
        # deferred: GPTCache is the bench extra's baseline, not a dependency
        from gptcache.similarity_evaluation.distance import SearchDistanceEvaluation
    except ImportError:
        return None
    evaluation = SearchDistanceEvaluation()
    low, high = evaluation.range()
    rank_threshold = (high - low) * threshold + low
    cos = np.array([scores.similarities[PRIMARY[m]][i] for i, m in enumerate(scores.modality)])
    distance = 2.0 - 2.0 * cos  # squared L2 of unit vectors
    rank = np.array([evaluation.evaluation({}, {"search_result": (d, None)}) for d in distance])
    return rank >= rank_threshold


#: The seed's δ sweep (seed 000 §2.5): 13 cosine thresholds from 0.65 to 0.95.
SEED_THRESHOLDS = tuple(float(t) for t in np.linspace(0.65, 0.95, 13))


def delta_sweep(vectors: np.ndarray, labels: np.ndarray,
                thresholds: Sequence[float] = SEED_THRESHOLDS) -> list[dict[str, float]]:
    """seed 000 §2.5 on real embeddings: for each threshold, the share of query pairs above it
    (hit rate), their mean semantic drift (1 − cos between the two queries' class centres in the
    same embedding space; 0 within a class) and the share of those hits across classes."""
    v = np.asarray(vectors, np.float64)
    v /= np.linalg.norm(v, axis=1, keepdims=True)
    labels = np.asarray(labels)
    classes = np.unique(labels)
    centres = np.stack([v[labels == c].mean(0) for c in classes])
    centres /= np.linalg.norm(centres, axis=1, keepdims=True)
    gap = 1.0 - centres @ centres.T
    idx = np.searchsorted(classes, labels)
    upper = np.triu_indices(len(v), 1)
    cos = (v @ v.T)[upper]
    drift = gap[idx[upper[0]], idx[upper[1]]]
    rows = []
    for t in thresholds:
        hit = cos > t
        rows.append({"threshold": float(t), "hit_rate": float(hit.mean()),
                     "drift": float(drift[hit].mean()) if hit.any() else 0.0,
                     "false_hit_share": float((drift[hit] > 0).mean()) if hit.any() else 0.0})
    return rows


def false_hit_pairs(vectors: np.ndarray, labels: np.ndarray, threshold: float) -> np.ndarray:
    """``(k, 2)`` index pairs above ``threshold`` whose classes differ (the false hits)."""
    v = np.asarray(vectors, np.float64)
    v /= np.linalg.norm(v, axis=1, keepdims=True)
    i, j = np.triu_indices(len(v), 1)
    keep = ((v @ v.T)[i, j] > threshold) & (np.asarray(labels)[i] != np.asarray(labels)[j])
    return np.stack([i[keep], j[keep]], axis=1)


def study_rule(name: str, modality: str, budget: float = 0.02, **overrides: Any) -> Any:
    """A fresh rule from :data:`mmcache.thresholds.RULES` set up for one modality's pairs.

    Budgeted rules get ``budget``; rules with shipped curves get the study encoder's
    channel (:data:`STUDY_ENCODERS`); ``overrides`` replace any parameter.
    """

    channel = {modality: STUDY_ENCODERS[modality][0]}
    defaults: dict[str, dict[str, Any]] = {
        "error-budget": {"budget": budget, "encoders": channel},
        "vcache": {"budget": budget},
        "calibrated": {"encoders": channel}}
    if name not in RULES:
        raise InvalidInputError(f"unknown rule {name!r}; known: {sorted(RULES)}")
    return RULES[name](**{**defaults.get(name, {}), **overrides})


def panel_summary(scores: PairScores, modality: str, delta: float, budget: float,
                  use_verifier: bool, seed: int = 0) -> list[dict[str, Any]]:
    """What the notebook's widget panel shows for one setting: static δ, the error-budget
    rule, the vcache rule and GPTCache's default on ``modality``'s pairs."""
    part = scores.subset(scores.modality == modality)
    rows = [{"rule": f"static δ={delta:.3f}",
             **summarise(static_decisions(part, delta, use_verifier), part.same)}]
    for name in ("error-budget", "vcache"):
        try:
            result = run_rule(part, study_rule(name, modality, budget), seed, use_verifier)
        except MMCacheError as err:  # e.g. no shipped prior for this channel
            rows.append({"rule": f"{name} (absent: {err})"})
            continue
        rows.append({"rule": f"{name} budget={budget}", **summarise(result.served, result.same)})
    gpt = gptcache_decisions(part)
    rows.append({"rule": "GPTCache default (absent: gptcache not installed)"} if gpt is None else
                {"rule": "GPTCache default", **summarise(gpt, part.same)})
    return rows


def fit_priors(scores: PairScores, path: str | Path, verifiers: Sequence[str] = ("none", "edits"),
               provenance: Mapping[str, Any] | None = None, level: float = VERIFIER_PASS) -> Path:
    """Fit a priors file (:mod:`mmcache.thresholds.prior`'s format) on *training* pairs: per
    modality (:data:`STUDY_ENCODERS`) and per name in ``verifiers``, the channel
    :func:`~mmcache.thresholds.prior.channel` names — ``"none"`` fitted on every pair, a
    verifier (the built-in ``"edits"``, whose probabilities ``scores.verifier`` holds) on the
    pairs it passes: P(correct | s, verifier passed), the curve a rule needs when it already
    multiplies in the verifier's probability. A class the pairs lack gets one
    pseudo-observation (add-one smoothing: a wrong pair at the least similarity, a right one
    at the greatest), so "no wrong pair passed" is a curve near 1, not a failed fit.
    ``provenance`` is recorded beside the fit's own (encoders, conditioning, skips)."""

    priors, skipped, conditioned = {}, {}, {}
    for m in sorted(set(scores.modality)):
        part = scores.subset(scores.modality == m)
        for verifier in verifiers:
            key = channel(m, STUDY_ENCODERS[m][0], verifier)
            keep = part.verifier >= level if verifier != "none" else np.ones(len(part), bool)
            conditioned[key] = f"verifier {verifier} ≥ {level}" if verifier != "none" \
                else "nothing"
            sims, same = _add_one(part.similarities[PRIMARY[m]][keep], part.same[keep])
            try:
                priors[key] = fit_channel(sims, same)
            except InvalidInputError as err:  # too few pairs, or one class only: no curve
                skipped[key] = str(err)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"format": FORMAT, "priors": priors, "provenance": {
        **dict(provenance or {}), "encoders": dict(scores.encoder_ids),
        "conditioned_on": conditioned, "smoothing": "one pseudo-pair per missing class",
        "skipped": skipped}}, indent=1) + "\n")
    return path


def _add_one(sims: np.ndarray, same: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(sims, same)`` plus one pseudo-pair of each class that is missing (see fit_priors)."""
    if not len(sims):
        return sims, same
    if same.all():
        sims, same = np.append(sims, sims.min()), np.append(same, False)
    elif not same.any():
        sims, same = np.append(sims, sims.max()), np.append(same, True)
    return sims, same
