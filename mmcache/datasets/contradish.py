"""Policy questions and their same-answer rewordings from contradish (PyPI ``contradish``, MIT):
data that no generator here made, for threshold studies on external text.

contradish ships benchmark files of support-bot policy questions in 25 domains (finance,
healthcare, travel, ...): each case has an ``original`` question and about eight
``adversarial`` rewordings that a consistent assistant must answer as it answers the original
(the same policy), written by contradish's authors: casual phrasings, added personal detail,
pressure, claimed authority, hypotheticals. :func:`load_policy_questions` reads the v1, v2 and
v3 files (questions asked in more than one version are merged) without importing the package.
:func:`policy_pairs` turns them into labelled :class:`~mmcache.datasets.pairs.Pair` objects:
each rewording against its own original (``same``) and against another original of its domain
(not the same answer; a *derived* negative, formed here, labelled so).
"""

from __future__ import annotations

import importlib.util
import json
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import numpy as np

from mmcache.datasets.pairs import Pair
from mmcache.datasets.splits import split_of
from mmcache.offline import missing_asset
from mmcache.types import Query

#: What to print next to any result that uses these questions.
CONTRADISH_PROVENANCE = ("contradish 1.34.0 (PyPI, MIT): policy questions with same-answer "
                         "rewordings written by its authors (benchmarks v1-v3); negatives across "
                         "questions of one domain formed by mmcache (labelled derived)")
VERSIONS = ("v1", "v2", "v3")
SCOPE = "contradish"


@dataclass(frozen=True)
class PolicyQuestion:
    """One policy question (``id``, e.g. ``finance-001``) of a ``domain``: its original
    wording and the rewordings that must get the same answer."""

    id: str
    domain: str
    original: str
    rewordings: tuple[str, ...]

    def wordings(self) -> tuple[str, ...]:
        """The original, then every rewording."""
        return (self.original, *self.rewordings)


def _benchmarks_dir() -> Path:
    spec = importlib.util.find_spec("contradish")
    if spec is None or not spec.submodule_search_locations:
        raise missing_asset("contradish's policy questions", "pip install contradish==1.34.0")
    return Path(next(iter(spec.submodule_search_locations))) / "benchmarks"


@lru_cache(maxsize=1)
def load_policy_questions() -> tuple[PolicyQuestion, ...]:
    """Every policy question of contradish's v1–v3 benchmarks, in id order; a question whose
    original is asked in several versions is one question with every version's rewordings."""
    merged: dict[str, dict] = {}
    for version in VERSIONS:
        for path in sorted((_benchmarks_dir() / version).glob("*.json")):
            data = json.loads(path.read_text(encoding="utf-8"))
            for case in data["cases"]:
                key = " ".join(case["original"].lower().split())
                question = merged.setdefault(key, {"id": case["id"], "domain": data["policy"],
                                                   "original": case["original"].strip(),
                                                   "rewordings": []})
                question["rewordings"] += [r.strip() for r in case.get("adversarial", [])
                                           if r.strip() and r.strip() not in
                                           question["rewordings"]]
    return tuple(sorted((PolicyQuestion(q["id"], q["domain"], q["original"],
                                        tuple(q["rewordings"]))
                         for q in merged.values() if q["rewordings"]), key=lambda q: q.id))


def question_split(question: PolicyQuestion, seed: int = 0) -> str:
    """The split of ``question`` under ``seed``: "train" (70 %) or "test" (30 %)."""
    return "train" if split_of(question.id, seed, (0.7, 0.0, 0.3)) == "train" else "test"


def policy_pairs(seed: int = 0) -> list[Pair]:
    """Each rewording against its own original (``same``, kind ``rewording``) and against the
    original of another question of its domain drawn with ``seed`` (not ``same``, kind
    ``derived-other-question``). A pair's ``source`` is its rewording's question, its split
    that question's (70 % train / 30 % test), its ``note`` the domain."""
    questions = load_policy_questions()
    by_domain: dict[str, list[PolicyQuestion]] = {}
    for q in questions:
        by_domain.setdefault(q.domain, []).append(q)
    rng = np.random.default_rng(seed)
    pairs = []
    for q in questions:
        others = [o for o in by_domain[q.domain] if o.id != q.id]
        split = question_split(q, seed)
        for rewording in q.rewordings:
            query = Query(text=rewording, scope=SCOPE)
            pairs.append(Pair(query, Query(text=q.original, scope=SCOPE), True, "rewording",
                              "text", q.id, split, note=q.domain))
            if others:
                other = others[int(rng.integers(len(others)))]
                pairs.append(Pair(query, Query(text=other.original, scope=SCOPE), False,
                                  "derived-other-question", "text", q.id, split,
                                  note=q.domain))
    return pairs
