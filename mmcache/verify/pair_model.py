"""A learned verifier: a calibrated classifier over what MiniLM sees of a pair of questions.

:class:`PairVerifier` answers P(the cached answer is right for the new question) from a few
features of the two texts (:data:`FEATURES`, :func:`pair_features`): the sentence vectors'
cosine; a BERTScore-like greedy alignment of MiniLM's token states, each token weighted by its
rarity (inverse document frequency over real ShareGPT prompts) in both directions, its worst
aligned informative token, and the order of the aligned tokens (Kendall's τ); word overlap; and
whether the numbers or the parity of negation words differ. A logistic regression on standardised
features, each coefficient held to the sign of its evidence (:data:`SIGNS`), turns them into a
probability. Nothing in it lists the edits of the project's pair
generator: what it knows it learnt from the sources it was fitted on, which its model file names
(``mmcache/resources/pair_verifier.json``, written by ``make verifier``:
:mod:`mmcache.studies.pair_verifier`, where its leave-one-source-out report lives).

It judges the question texts only: a query or entry without text (an image or a clip alone)
gets 1.0 (no evidence against the hit), and conversation turns are left to the cache's context
channel.
"""

from __future__ import annotations

import json
import math
import re
import threading
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from mmcache.encoders import get_encoder
from mmcache.encoders.text import MAX_TOKENS, MiniLMEncoder
from mmcache.errors import ConfigError
from mmcache.paths import RESOURCES
from mmcache.types import Entry, Query

#: The shipped model (``make verifier`` writes it).
MODEL_PATH = RESOURCES / "pair_verifier.json"
#: The features, in the model's order (each symmetric in its two texts).
FEATURES = ("cosine", "recall_min", "recall_max", "worst_token_max", "worst_token_min",
            "token_order", "word_jaccard", "numbers_differ", "negation_differs")
#: The sign each feature's coefficient is held to when fitted: more agreement between the texts
#: is never evidence against the hit, so a text always scores at least as well against itself
#: as against any edit of it, whatever the sources' sampling taught.
SIGNS = (1, 1, 1, -1, -1, 1, 1, -1, -1)
#: General English negation words (their parity is one feature; ``n't`` splits to ``t``).
NEGATIONS = frozenset({"not", "no", "never", "without", "nor", "none", "cannot", "nothing",
                       "nobody", "neither", "nowhere", "t"})
#: Aligned tokens less similar than this take no part in the order feature.
ORDER_MIN_SIMILARITY = 0.6
#: Texts whose MiniLM states one verifier keeps (the cached side repeats across lookups).
STATE_CACHE = 4096

_WORD = re.compile(r"[a-z0-9]+")


@dataclass(frozen=True)
class TextView:
    """What the features read of one text: its sentence vector, its token states (unit rows)
    with each token's IDF weight, and its lower-cased words."""

    vector: np.ndarray
    states: np.ndarray
    weights: np.ndarray
    words: tuple[str, ...]


def text_views(encoder: MiniLMEncoder, idf: np.ndarray, texts: Sequence[str]
               ) -> list[TextView]:
    """One :class:`TextView` per text (MiniLM's vectors and token states, IDF by word piece)."""
    texts = list(texts)
    vectors = encoder.encode(texts)
    states = encoder.token_states(texts)
    ids = encoder.tokenizer(texts, truncation=True, max_length=MAX_TOKENS)["input_ids"]
    views = []
    for text, vector, state, piece_ids in zip(texts, vectors, states, ids):
        norms = np.linalg.norm(state, axis=1, keepdims=True).clip(1e-9)
        views.append(TextView(vector, state / norms, idf[np.asarray(piece_ids[1:-1])] + 1e-3,
                              tuple(_WORD.findall(text.lower()))))
    return views


def pair_features(a: TextView, b: TextView) -> list[float]:
    """The :data:`FEATURES` of one pair of texts."""
    sims = a.states @ b.states.T
    recall_a, worst_a, order_a = _direction(sims, a.weights)
    recall_b, worst_b, order_b = _direction(sims.T, b.weights)
    words_a, words_b = set(a.words), set(b.words)
    numbers_a = {w for w in words_a if w.isdigit()}
    numbers_b = {w for w in words_b if w.isdigit()}
    negation_a = sum(w in NEGATIONS for w in a.words) % 2
    negation_b = sum(w in NEGATIONS for w in b.words) % 2
    return [float(np.dot(a.vector, b.vector)), min(recall_a, recall_b), max(recall_a, recall_b),
            max(worst_a, worst_b), min(worst_a, worst_b), min(order_a, order_b),
            len(words_a & words_b) / max(1, len(words_a | words_b)),
            float(numbers_a != numbers_b), float(negation_a != negation_b)]


def _direction(sims: np.ndarray, weights: np.ndarray) -> tuple[float, float, float]:
    """From one side's tokens to the other's: IDF-weighted recall of the best matches, the
    worst-matched token's share of the heaviest weight, and Kendall's τ of the matches' order
    among the tokens at least as heavy as the median (1.0 when fewer than two take part)."""
    from scipy.stats import kendalltau  # deferred: scipy.stats is slow to import; scoring only

    best = sims.max(axis=1)
    recall = float((weights * best).sum() / weights.sum())
    worst = float((weights / weights.max() * (1.0 - best)).max())
    matches = sims.argmax(axis=1)
    keep = (best > ORDER_MIN_SIMILARITY) & (weights >= np.median(weights))
    order = 1.0
    if keep.sum() >= 2 and len(set(matches[keep].tolist())) >= 2:
        tau = kendalltau(np.arange(int(keep.sum())), matches[keep]).statistic
        order = float(tau) if math.isfinite(tau) else 1.0
    return recall, worst, order


@dataclass(frozen=True)
class PairModel:
    """A fitted logistic regression over :data:`FEATURES` with its IDF table and provenance."""

    mean: tuple[float, ...]
    scale: tuple[float, ...]
    coef: tuple[float, ...]
    intercept: float
    idf: tuple[float, ...]
    provenance: dict[str, Any]

    def probability(self, features: Sequence[float]) -> float:
        """P(same answer) for one pair's features."""
        z = self.intercept + sum(c * (x - m) / s for c, x, m, s in
                                 zip(self.coef, features, self.mean, self.scale))
        return 1.0 / (1.0 + math.exp(-z)) if z > -700 else 0.0

    def to_json(self) -> dict[str, Any]:
        """The model as the JSON object :func:`load_model` reads."""
        return {"features": list(FEATURES), "mean": list(self.mean), "scale": list(self.scale),
                "coef": list(self.coef), "intercept": self.intercept,
                "idf": [round(x, 4) for x in self.idf], "provenance": self.provenance}


def load_model(path: Path = MODEL_PATH) -> PairModel:
    """The pair model at ``path``; ConfigError when it is missing or not one."""
    try:
        raw = json.loads(Path(path).read_text())
    except (OSError, ValueError) as exc:
        raise ConfigError(f"cannot read the pair verifier's model {path}: {exc}; "
                          "`make verifier` writes it") from None
    if raw.get("features") != list(FEATURES):
        raise ConfigError(f"{path} was fitted on features {raw.get('features')}, this code "
                          f"computes {list(FEATURES)}; refit it with `make verifier`")
    return PairModel(tuple(raw["mean"]), tuple(raw["scale"]), tuple(raw["coef"]),
                     float(raw["intercept"]), tuple(raw["idf"]), raw["provenance"])


class PairVerifier:
    """P(the entry's answer is right for the query) from :class:`PairModel` over MiniLM."""

    def __init__(self, model: PairModel | None = None,
                 encoder: MiniLMEncoder | None = None) -> None:
        self.model = model or load_model()
        self.encoder = encoder or get_encoder("minilm")
        self._idf = np.asarray(self.model.idf, dtype=np.float32)
        self._views: OrderedDict[str, TextView] = OrderedDict()
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"PairVerifier(fitted on {self.model.provenance.get('sources', '?')})"

    def __call__(self, query: Query, entry: Entry) -> float:
        if not query.text or not entry.question:
            return 1.0
        return self.probability(query.text, entry.question)

    def probability(self, query_text: str, cached_text: str) -> float:
        """P(same answer) for two question texts."""
        a, b = self._view(query_text), self._view(cached_text)
        return self.model.probability(pair_features(a, b))

    def _view(self, text: str) -> TextView:
        with self._lock:
            view = self._views.get(text)
            if view is not None:
                self._views.move_to_end(text)
                return view
        view = text_views(self.encoder, self._idf, [text])[0]
        with self._lock:
            self._views[text] = view
            if len(self._views) > STATE_CACHE:
                self._views.popitem(last=False)
        return view
