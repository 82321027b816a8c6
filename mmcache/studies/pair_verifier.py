"""``make verifier``: fit the learned pair verifier (:mod:`mmcache.verify.pair_model`) and report
it leave-one-source-out.

Sources (:func:`training_sources`), each with its own train / test split by source question:
``generated`` (this project's text pairs, :func:`mmcache.datasets.pairs.text_pairs`: ShareGPT
prompts with rewrites and one-edit traps; a development set) and ``contradish`` (same-answer
rewordings written by contradish's authors; negatives across questions of a domain, "derived").
The IDF weights come from real ShareGPT prompts. :func:`leave_one_source_out` fits on the
training splits of every source but one and measures on the held-out one's test split, so no
number about a source comes from a model that saw it; held-out files (the examples, the probe set,
the ShareGPT pairs of :mod:`mmcache.datasets.mined`, a pairs file of your own) are measured with
the model fitted on every source.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping, Sequence

import numpy as np
from scipy.optimize import minimize
from scipy.special import expit
from sklearn.metrics import brier_score_loss, roc_auc_score

from mmcache.datasets.contradish import CONTRADISH_PROVENANCE, policy_pairs
from mmcache.datasets.mined import PAIRS_PATH as MINED_PAIRS_PATH
from mmcache.datasets.pairs import PAIRS_PROVENANCE, Pair, PairSizes, text_pairs
from mmcache.datasets.pairs_file import read_pairs
from mmcache.datasets.prompts import PROMPTS_PROVENANCE, load_prompts
from mmcache.encoders import get_encoder
from mmcache.encoders.text import MAX_TOKENS, MiniLMEncoder
from mmcache.metrics import progress_bar
from mmcache.paths import DATA_DIR
from mmcache.verify.pair_model import FEATURES, MODEL_PATH, SIGNS, PairModel, pair_features, text_views

#: The seed of the sources' pairs and splits the shipped model is fitted on.
SEED = 0
#: Real prompts the IDF table is counted over.
IDF_PROMPTS = 12_000
#: Inverse L2 regularisation strength of the logistic regression (as in scikit-learn's C).
C = 1.0
#: Pairs files no source shares (the hand-written examples and near-miss probe set; the ShareGPT
#: pairs mined and labelled by rule, ShareGPT stating no licence), measured with the model fitted
#: on every source.
HELD_OUT_FILES = (DATA_DIR / "examples" / "pairs.jsonl",
                  DATA_DIR / "probes" / "near_misses.jsonl", MINED_PAIRS_PATH)
#: Bins of the reliability curve.
RELIABILITY_BINS = 10


def training_sources(seed: int = SEED, sizes: PairSizes = PairSizes()) -> dict[str, list[Pair]]:
    """Every source's text pairs, both splits (``pair.split``), question texts on both sides."""
    generated = text_pairs("train", seed, sizes) + text_pairs("test", seed, sizes)
    return {"generated": generated, "contradish": policy_pairs(seed)}


def idf_table(encoder: MiniLMEncoder, n_prompts: int = IDF_PROMPTS) -> np.ndarray:
    """log((n + 1) / (df + 1)) per MiniLM word piece over ``n_prompts`` real ShareGPT prompts."""
    prompts = load_prompts(n_prompts)
    ids = encoder.tokenizer(prompts, truncation=True, max_length=MAX_TOKENS,
                            add_special_tokens=False)["input_ids"]
    df = np.zeros(encoder.tokenizer.vocab_size)
    for piece_ids in ids:
        df[list(set(piece_ids))] += 1
    return np.log((len(ids) + 1) / (df + 1)).astype(np.float32)


@dataclass(frozen=True)
class Featurised:
    """The pairs' features (``x``: one row per pair, :data:`FEATURES`), labels and splits."""

    x: np.ndarray
    same: np.ndarray
    split: np.ndarray

    def part(self, split: str) -> "Featurised":
        keep = self.split == split
        return Featurised(self.x[keep], self.same[keep], self.split[keep])


def featurise(pairs: Sequence[Pair], encoder: MiniLMEncoder, idf: np.ndarray) -> Featurised:
    """The :data:`FEATURES` of every pair (each distinct text encoded once)."""
    texts = sorted({t for p in pairs for t in (p.query.text, p.cached.text)})
    views = dict(zip(texts, text_views(encoder, idf, texts)))
    x = np.array([pair_features(views[p.query.text], views[p.cached.text]) for p in pairs])
    return Featurised(x.reshape(len(pairs), len(FEATURES)), np.array([p.same for p in pairs]),
                      np.array([p.split for p in pairs]))


def fit(data: Sequence[Featurised], idf: np.ndarray, provenance: Mapping[str, object]
        ) -> PairModel:
    """An L2-regularised logistic regression on the standardised features of ``data`` (all rows),
    each coefficient held to its sign in :data:`SIGNS`."""

    x = np.vstack([d.x for d in data])
    y = np.concatenate([d.same for d in data]).astype(float)
    mean, scale = x.mean(axis=0), x.std(axis=0)
    scale[scale == 0] = 1.0
    z = (x - mean) / scale

    def loss(theta: np.ndarray) -> tuple[float, np.ndarray]:
        w, b = theta[:-1], theta[-1]
        logit = z @ w + b
        residual = expit(logit) - y
        value = float(np.logaddexp(0.0, logit).sum() - y @ logit + 0.5 * w @ w / C)
        return value, np.append(z.T @ residual + w / C, residual.sum())

    bounds = [(0.0, None) if sign > 0 else (None, 0.0) for sign in SIGNS] + [(None, None)]
    theta = minimize(loss, np.zeros(len(FEATURES) + 1), jac=True, method="L-BFGS-B",
                     bounds=bounds).x
    return PairModel(tuple(mean.tolist()), tuple(scale.tolist()), tuple(theta[:-1].tolist()),
                     float(theta[-1]), tuple(idf.tolist()), dict(provenance))


def scores(model: PairModel, data: Featurised) -> np.ndarray:
    """The model's P(same answer) for each row of ``data``."""
    return np.array([model.probability(row) for row in data.x])


def report(p: np.ndarray, same: np.ndarray, verifier_min: float = 0.5) -> dict[str, float]:
    """n, ROC AUC, the share of same / different pairs passed at ``verifier_min``, Brier score
    and expected calibration error (equal-width bins)."""

    passed = p >= verifier_min
    both = same.any() and (~same).any()
    return {"n": int(len(p)), "n_same": int(same.sum()),
            "auc": float(roc_auc_score(same, p)) if both else float("nan"),
            "passes_same": float(passed[same].mean()) if same.any() else float("nan"),
            "passes_different": float(passed[~same].mean()) if (~same).any() else float("nan"),
            "brier": float(brier_score_loss(same, p, pos_label=True)),
            "ece": expected_calibration_error(p, same)}


def reliability(p: np.ndarray, same: np.ndarray, bins: int = RELIABILITY_BINS
                ) -> list[tuple[float, float, int]]:
    """Per non-empty equal-width bin of P: (mean P, share same, n)."""
    which = np.minimum((p * bins).astype(int), bins - 1)
    return [(float(p[which == b].mean()), float(same[which == b].mean()),
             int((which == b).sum())) for b in range(bins) if (which == b).any()]


def expected_calibration_error(p: np.ndarray, same: np.ndarray,
                               bins: int = RELIABILITY_BINS) -> float:
    """Σ over bins of (n_bin / n) · |mean P − share same|."""
    return float(sum(n * abs(mp - ms) for mp, ms, n in reliability(p, same, bins)) / len(p))


def leave_one_source_out(data: Mapping[str, Featurised], idf: np.ndarray,
                         held_out: Mapping[str, Featurised] | None = None,
                         verifier_min: float = 0.5) -> dict[str, dict[str, object]]:
    """Per source: fitted on the other sources' training splits, measured on its test split;
    per held-out set: fitted on every source's training split. Each value is :func:`report`
    plus ``fitted_on`` and the ``reliability`` curve."""
    out: dict[str, dict[str, object]] = {}
    targets = [(name, [s for s in data if s != name], data[name].part("test"))
               for name in data] + [(name, list(data), d) for name, d in (held_out or {}).items()]
    for name, fitted_on, target in targets:
        model = fit([data[s].part("train") for s in fitted_on], idf, {})
        p = scores(model, target)
        out[name] = {"fitted_on": fitted_on, **report(p, target.same, verifier_min),
                     "reliability": reliability(p, target.same)}
    return out


def format_report(results: Mapping[str, Mapping[str, object]]) -> str:
    """:func:`leave_one_source_out`'s results as a table, one line per measured set."""
    lines = [f"{'measured on':<20} {'fitted on':<22} {'n':>6} {'AUC':>6} {'pass same':>10} "
             f"{'pass diff':>10} {'Brier':>6} {'ECE':>6}"]
    for name, r in results.items():
        lines.append(f"{name:<20} {'+'.join(r['fitted_on']):<22} {r['n']:>6} {r['auc']:>6.3f} "
                     f"{r['passes_same']:>10.1%} {r['passes_different']:>10.1%} "
                     f"{r['brier']:>6.3f} {r['ece']:>6.3f}")
    return "\n".join(lines)


def fit_and_report(held_out_files: Sequence[Path] = HELD_OUT_FILES
                   ) -> tuple[PairModel, dict[str, dict[str, object]]]:
    """The model fitted on the training split of every source, and the leave-one-source-out
    report (:func:`leave_one_source_out`; ``held_out_files`` measured with that model)."""
    encoder = get_encoder("minilm")
    sources = training_sources()
    with progress_bar(1 + len(sources) + len(held_out_files), "pair verifier: encoding",
                      unit="set") as bar:
        idf = idf_table(encoder)
        bar.update(1)
        data = {}
        for name, pairs in sources.items():
            data[name] = featurise(pairs, encoder, idf)
            bar.update(1)
        held_out = {}
        for path in held_out_files:
            name = f"{path.parent.name}/{path.stem}"
            held_out[name] = featurise(read_pairs(path), encoder, idf)
            bar.update(1)
    provenance = {
        "sources": {name: {"pairs": int(len(d.part("train").same)), "split": "train"}
                    for name, d in data.items()},
        "data": {"generated": PAIRS_PROVENANCE, "contradish": CONTRADISH_PROVENANCE,
                 "idf": f"{IDF_PROMPTS} prompts of {PROMPTS_PROVENANCE}"},
        "encoder": encoder.encoder_id, "seed": SEED, "C": C,
        "command": "python -m mmcache.studies.pair_verifier (make verifier)"}
    model = fit([d.part("train") for d in data.values()], idf, provenance)
    return model, leave_one_source_out(data, idf, held_out)


def main(argv: Sequence[str] | None = None) -> Path:
    """Fit on the training split of every source, write the model, print the leave-one-source-out
    report (held-out files measured with the model fitted on every source)."""
    parser = argparse.ArgumentParser(prog="python -m mmcache.studies.pair_verifier",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", type=Path, default=MODEL_PATH, help="where to write the model")
    parser.add_argument("--held-out", type=Path, nargs="*", default=list(HELD_OUT_FILES),
                        help="pairs files (JSONL) to measure the model on")
    args = parser.parse_args(argv)
    model, results = fit_and_report(args.held_out)
    args.model.write_text(json.dumps(model.to_json(), separators=(",", ":")) + "\n")
    print(f"wrote {args.model}; coefficients (standardised features): " + ", ".join(
        f"{name} {coef:+.2f}" for name, coef in zip(FEATURES, model.coef)))
    print(format_report(results))
    return args.model


if __name__ == "__main__":
    main()
