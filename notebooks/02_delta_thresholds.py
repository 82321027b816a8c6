# ---
# jupyter:
#   jupytext:
#     text_representation:
#       extension: .py
#       format_name: percent
#       format_version: '1.3'
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # 02 · δ-neighbour thresholds: when is a semantic hit right?
#
# A semantic cache serves a stored answer when the query is "close enough" to a stored one. Close
# in embedding space is not the same as "the answer fits": negations, changed numbers, names and
# dates embed almost identically. This notebook measures every threshold rule of
# `mmcache.thresholds` on **labelled pairs** (`mmcache.datasets.pairs`: curves fitted on the
# training split, every number measured on the held-out split), with and without the built-in offline
# verifier (`mmcache.verify.edits`), side by side with GPTCache's similarity evaluation at its
# defaults, a reimplementation of vCache's rule from its paper, and the best static δ chosen in
# hindsight.
#
# Data: text — real ShareGPT prompts and conversations (no licence stated) with rule-made
# rewrites and traps; image — Fashion-MNIST and scikit-image photos (real), bar charts rendered in
# code (**synthetic**); audio — espeak-ng speech (**synthetic**). Error is counted as vCache
# counts it: wrong answers served ÷ all lookups. Every lookup's label is fed back to the rule
# (vCache's exploration gives it one per lookup too).

# %% tags=["parameters"]
SMOKE = False
NOTEBOOK = "02_delta_thresholds"  # this notebook: metrics go to runs/<NOTEBOOK>[-smoke]/
PAIR_SEED = 0  # the split seed; the shipped priors were fitted on seed 0's training split
SEEDS = [0, 1, 2, 3, 4]  # stream orders
BUDGETS = [0.01, 0.02, 0.05]
CURVE_BUDGETS = [0.005, 0.01, 0.02, 0.05, 0.1, 0.2]
CALIBRATED_LEVELS = [0.5, 0.7, 0.8, 0.9, 0.95, 0.99]
PERCENTILES = [50, 70, 85, 95]
# rules for the curves; names in mmcache.thresholds.RULES (a missing one is marked absent)
RULE_NAMES = ["static", "percentile", "calibrated", "error-budget", "vcache"]
SWEEP_IMAGES = 400  # Fashion-MNIST test photos for the seed's δ sweep and the t-SNE view
TSNE_THRESHOLD = 0.83  # the seed's table row whose false hits the t-SNE view draws
DRIFT_WINDOW = 100  # lookups in the rolling error of the re-track measurement
# external questions through TieredCache.get (contradish): static δ grid and the contract config
EXTERNAL_DELTAS = [0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.35]
EXTERNAL_BUDGET = 0.02
EXTERNAL_QUESTIONS = 0  # how many contradish questions; zero: all of them
# feedback regimes on the external questions (cache_stream.Feedback): a share of served hits
# labelled some lookups later (beside no feedback and every hit labelled at once)
FEEDBACK_RATE = 0.1
FEEDBACK_DELAY = 50
FEEDBACK_SEED = 0  # draws which served hits are labelled
MANY_REQUESTS = 5000  # lookups of the many-requests stream (drawn with replacement)
# labelled pairs (JSONL, mmcache.datasets.pairs_file) through TieredCache.get, one scope each;
# relative to the project root; empty: the hand-written probe set
PAIRS_FILE = ""

# %%
import warnings

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import seaborn as sns
from IPython.display import Markdown, display

from mmcache.studies import alignment, threshold_study as ts
from mmcache.datasets.images import load_fashion_mnist
from mmcache.datasets.pairs import PAIRS_PROVENANCE, SMOKE_SIZES, PairSizes, load_pairs
from mmcache.datasets.pairs_file import read_pairs
from mmcache.encoders import EmbeddingStore, get_encoder
from mmcache.errors import MMCacheError
from mmcache.lab.plotting import save_figure, set_theme
from mmcache.lab.runbook import run_dir, write_metrics
from mmcache.paths import DATA_DIR, PROJECT_ROOT
from mmcache.thresholds import RULES
from mmcache.studies.priors import PRIOR_SEED
from mmcache.studies.verdicts import describe, mean_difference
from mmcache.thresholds.prior import PRIORS_PATH, channel, load_priors

set_theme()
if SMOKE:  # tiny: checks the whole pipeline in well under a minute
    SEEDS, CURVE_BUDGETS, CALIBRATED_LEVELS, PERCENTILES = SEEDS[:2], [0.02, 0.1], [0.9], [85]
    SWEEP_IMAGES, DRIFT_WINDOW = 40, 20
    EXTERNAL_DELTAS, EXTERNAL_QUESTIONS, MANY_REQUESTS = [0.1, 0.3], 60, 600
SIZES = SMOKE_SIZES if SMOKE else PairSizes()
PAIRS_EVERY = 6 if SMOKE else 1  # every n-th pair of the file (files group pairs by kind)

# %% [markdown]
# ## The held-out pairs and their encoders
#
# Text is embedded by MiniLM, images by the workbench's offline CLIP (trained by `make models`
# on Fashion-MNIST; without it the image pairs are skipped, not faked), speech by pooled Whisper
# tiny.en encoder states. Speech pairs have no text, so the verifier reads their Whisper
# transcripts.

# %%
store = EmbeddingStore()
encoders = {"text": get_encoder("minilm"), "audio": get_encoder("whisper")}
try:
    encoders["image"] = get_encoder("clip", modality="image")
except MMCacheError as err:
    print(f"image pairs skipped: {err}")
MODALITIES = [m for m in ("text", "image", "audio") if m in encoders]
whisper_model = encoders["audio"].model


def scored(split):
    return ts.score_pairs(load_pairs(split, seed=PAIR_SEED, modalities=MODALITIES, sizes=SIZES),
                          encoders=encoders, store=store,
                          transcribe=lambda clips: alignment.transcribe(whisper_model, clips))


scores = scored("test")
weights = {m: encoders[m].encoder_id for m in MODALITIES}
if "image" in encoders:
    weights["image"] += f" (card: {encoders['image'].card.get('name', 'offline CLIP')})"
provenance = {"data": PAIRS_PROVENANCE, "split": f"test (pairs seed {PAIR_SEED})",
              "weights": weights, "smoke": SMOKE}
counts = pd.crosstab([scores.modality, scores.kind], scores.same).rename(
    columns={False: "must miss", True: "should hit"})
display(counts)

# %% [markdown]
# ### Priors from the training split
#
# The error-budget and calibrated rules need P(correct | similarity) per modality and encoder:
# the shipped `mmcache/resources/threshold_priors.json` (`make priors`), fitted on the **training** pairs of
# seed 0 by `thresholds_study.fit_priors`. Each channel comes twice: fitted on every pair (for
# runs without the verifier) and on the pairs the verifier passes (`…+edits`, for runs with it:
# the rule multiplies the verifier's probability into P(correct), so its curve must be the one
# given that the verifier found no edit; the unconditioned curve would count the traps the
# verifier removes a second time). With another `PAIR_SEED` the shipped file's training split
# would overlap this held-out split, so the same function fits this seed's training split here.

# %%
if PAIR_SEED == PRIOR_SEED:
    PRIORS = PRIORS_PATH
else:
    PRIORS = ts.fit_priors(scored("train"), run_dir(NOTEBOOK, SMOKE) / "priors.json",
                           provenance={"split": "train", "seed": PAIR_SEED})
provenance["priors"] = str(PRIORS)


def rule(name, modality, use_verifier, **kw):
    """A fresh rule for ``modality``; budgeted / calibrated rules get the priors' channel
    conditioned on the verifier when it is used."""
    if name in ("error-budget", "calibrated"):
        kw.setdefault("prior", PRIORS)
        kw.setdefault("verifier", "edits" if use_verifier else "none")
    return ts.study_rule(name, modality, **kw)


# %% [markdown]
# ## Similarity is not enough
#
# Cosine similarity of each pair by kind: traps sit among (often above) the true rewrites.

# %%
frame = pd.DataFrame({"modality": scores.modality, "kind": scores.kind, "same": scores.same,
                      "cosine": scores.min_similarity(), "verifier": scores.verifier})
fig, axes = plt.subplots(1, len(MODALITIES), figsize=(5 * len(MODALITIES), 4), squeeze=False)
for ax, m in zip(axes[0], MODALITIES):
    sub = frame[frame.modality == m]
    sns.stripplot(data=sub, y="kind", x="cosine", hue="same", ax=ax, size=3, jitter=0.25)
    ax.set_title(f"{m}: {weights[m].split('/')[0]}")
fig.tight_layout()
save_figure(fig, "02_similarity_by_kind", provenance)

# %% [markdown]
# ## The verifier on the held-out split
#
# Recall per trap kind = share of that kind's pairs the verifier rejects (P < 0.5); for the
# should-hit kinds the share it wrongly rejects. Its rules were written looking at the
# training split only. Caveat: the traps are made by one-token edits, which is exactly what a
# token-diff verifier looks for; real users' near-misses are more varied, so read these numbers
# as an upper bound of what it catches.

# %%
rejected = scores.verifier < 0.5
verifier_rows = []
for (m, kind), idx in frame.groupby(["modality", "kind"]).groups.items():
    idx = np.asarray(idx)
    verifier_rows.append({"modality": m, "kind": kind, "pairs": len(idx),
                          "should hit": bool(scores.same[idx[0]]),
                          "rejected": float(rejected[idx].mean())})
verifier_table = pd.DataFrame(verifier_rows)
flagged = rejected.sum()
verifier_precision = float((rejected & ~scores.same).sum() / max(flagged, 1))
verifier_recall = float((rejected & ~scores.same).sum() / max((~scores.same).sum(), 1))
display(verifier_table)
display(Markdown(f"Verifier over all held-out pairs: precision of rejections "
                 f"{verifier_precision:.3f}, recall of must-miss pairs {verifier_recall:.3f}."))

# %% [markdown]
# ## Hit rate vs error, precision vs hit rate: every rule, with and without the verifier
#
# Static δ is swept in closed form; the adaptive rules are replayed (seed 0 order) at each of
# their parameter values.

# %%
def rule_points(name, modality, use_verifier):
    part = scores.subset(scores.modality == modality)
    if name == "static":
        return [{"param": r["delta"], **r} for r in ts.static_curve(part, use_verifier=use_verifier)]
    params = {"percentile": [("percentile", p) for p in PERCENTILES],
              "calibrated": [("level", v) for v in CALIBRATED_LEVELS]}.get(
        name, [("budget", b) for b in CURVE_BUDGETS])
    out = []
    for key, value in params:
        result = ts.run_rule(part, rule(name, modality, use_verifier, **{key: value}),
                           seed=SEEDS[0], use_verifier=use_verifier)
        out.append({"param": value, **ts.summarise(result.served, result.same)})
    return out


curve_rows, absent = [], {}
for m in MODALITIES:
    for name in RULE_NAMES:
        for use_verifier in (False, True):
            try:
                points = rule_points(name, m, use_verifier)
            except (MMCacheError, KeyError) as err:
                absent[f"{m}/{name}"] = str(err)
                continue
            curve_rows += [{"modality": m, "rule": name, "verifier": use_verifier, **p}
                           for p in points]
curves = pd.DataFrame(curve_rows)
if absent:
    display(Markdown("Absent (not faked): " + "; ".join(f"`{k}`: {v}" for k, v in absent.items())))

fig, axes = plt.subplots(2, len(MODALITIES), figsize=(5 * len(MODALITIES), 8), squeeze=False)
for col, m in enumerate(MODALITIES):
    sub = curves[curves.modality == m]
    for (name, ver), g in sub.groupby(["rule", "verifier"]):
        g = g.sort_values("hit_rate")
        style = "-" if ver else ":"
        label = f"{name}{' + verifier' if ver else ''}"
        axes[0, col].plot(g.realised_error, g.hit_rate, style, marker=".", label=label)
        axes[1, col].plot(g.hit_rate, g.precision, style, marker=".", label=label)
    axes[0, col].set(title=m, xlabel="realised error (wrong served / lookups)", ylabel="hit rate",
                     xlim=(0, 0.2))
    axes[1, col].set(xlabel="hit rate", ylabel="precision of hits")
axes[0, -1].legend(fontsize=7)
fig.tight_layout()
save_figure(fig, "02_rule_curves", provenance)

# %% [markdown]
# ## Error budgets 1 %, 2 %, 5 %: the error-budget rule with the verifier, five stream orders
#
# Side by side at the same budgets: the vcache rule (with the verifier too) and the best
# static δ chosen in hindsight on these very pairs (no verifier: the plain baseline; a
# hindsight choice is an oracle no deployment has), and GPTCache's default
# (`SearchDistanceEvaluation`, `similarity_threshold` 0.8, i.e. cos ≥ 0.6 for unit vectors).

# %%
def budget_runs(name, budget, use_verifier=True, **settings):
    rows = []
    for m in MODALITIES:
        part = scores.subset(scores.modality == m)
        try:
            rule(name, m, use_verifier, budget=budget, **settings)
        except MMCacheError as err:  # e.g. no curve could be fitted for this modality
            absent[f"{m}/{name}@{budget}"] = str(err)
            continue
        for seed in SEEDS:
            result = ts.run_rule(part, rule(name, m, use_verifier, budget=budget, **settings),
                                 seed=seed, use_verifier=use_verifier)
            rows.append({"rule": name, "budget": budget, "modality": m, "seed": seed,
                         "cold_start_hit_rate": ts.cold_start_hit_rate(result),
                         **ts.summarise(result.served, result.same)})
    return rows


def per_seed(rows):
    """Per stream order: hit rate and error over every lookup of the compared modalities."""
    df = pd.DataFrame(rows)
    df = df[df.modality.isin(COMPARED)]
    sums = df.assign(hits=df.hit_rate * df.lookups, wrong=df.realised_error * df.lookups) \
        .groupby("seed")[["hits", "wrong", "lookups"]].sum()
    return pd.DataFrame({"hit_rate": sums.hits / sums.lookups,
                         "realised_error": sums.wrong / sums.lookups})


def pooled(rows):
    """Hit rate and error over every lookup of the compared modalities, averaged over seeds."""
    return {k: float(v) for k, v in per_seed(rows).mean().items()}


runs = {(name, b): rows for name in ("error-budget", "vcache") for b in BUDGETS
        if (rows := budget_runs(name, b))}
# the side-by-side compares the modalities the error-budget rule ran on (all, unless one failed)
COMPARED = sorted({r["modality"] for r in runs.get(("error-budget", 0.02), [])}) or MODALITIES
compared = scores.subset(np.isin(scores.modality, COMPARED))
budget_table = pd.DataFrame([r for rows in runs.values() for r in rows])
if len(budget_table):
    display(budget_table.groupby(["rule", "budget", "modality"])[
        ["hit_rate", "realised_error", "precision", "cold_start_hit_rate"]].agg(["mean", "max"]))

hindsight = {b: ts.best_static(compared, b) for b in BUDGETS}
hindsight_per_modality = {m: ts.best_static(scores.subset(scores.modality == m), 0.02)
                          for m in MODALITIES}
gpt = ts.gptcache_decisions(compared)
side = pd.DataFrame(
    [{"rule": f"{n} + verifier", "budget": b, **pooled(rows)} for (n, b), rows in runs.items()]
    + [{"rule": "best static δ in hindsight", "budget": b, "delta": hindsight[b]["delta"],
        "hit_rate": hindsight[b]["hit_rate"], "realised_error": hindsight[b]["realised_error"]}
       for b in BUDGETS]
    + ([{"rule": "GPTCache default", **ts.summarise(gpt, compared.same)}] if gpt is not None
       else []))
display(Markdown(f"Compared on: {', '.join(COMPARED)}."))
display(side)
if gpt is None:
    absent["gptcache"] = "gptcache is not installed"
    display(Markdown("GPTCache is not installed (`pip install -e '.[bench]'`): its baseline is "
                     "**absent** from this run."))

# %% [markdown]
# ## Cold start
#
# Hit rate of lookups whose entry had fewer than 6 labelled observations; error-budget rule and
# vcache (which explores an entry with no observations always, and one with few mostly), 2 %
# budget, with the verifier.

# %%
cold = {name: float(np.nanmean([r["cold_start_hit_rate"] for r in runs[(name, 0.02)]]))
        for name in ("error-budget", "vcache") if (name, 0.02) in runs}
display(pd.Series(cold, name="cold-start hit rate"))

# %% [markdown]
# ## The seed's δ sweep (seed 000 §2.5) and where false hits come from
#
# 13 cosine thresholds 0.65–0.95 over every pair of Fashion-MNIST test photos embedded by the
# offline CLIP: the share of pairs above each threshold (hit rate) against semantic drift, the
# mean distance between the two photos' class centres in CLIP space (0 within a class). The
# seed's table claims 68.3 % / 52.1 % / 39.7 % hits at drift 0.41 / 0.29 / 0.18 for thresholds
# 0.72 / 0.78 / 0.83 on its own data; here is what these weights and photos give.

# %%
sweep = pd.DataFrame()
if "image" in encoders:
    photos = load_fashion_mnist("test", limit=SWEEP_IMAGES, seed=1)
    photo_vectors = store.encode(encoders["image"], list(photos.images))
    sweep = pd.DataFrame(ts.delta_sweep(photo_vectors, photos.labels))
    display(sweep)
    from sklearn.manifold import TSNE

    xy = TSNE(n_components=2, perplexity=min(30, len(photo_vectors) // 4), random_state=0,
              init="pca").fit_transform(photo_vectors)
    false_hits = ts.false_hit_pairs(photo_vectors, photos.labels, TSNE_THRESHOLD)
    fig, (ax0, ax1) = plt.subplots(1, 2, figsize=(12, 5))
    ax0.plot(sweep.drift, sweep.hit_rate, marker="o")
    for _, r in sweep.iterrows():
        ax0.annotate(f"{r.threshold:.3f}", (r.drift, r.hit_rate), fontsize=7)
    ax0.set(xlabel="mean semantic drift of hits (class-centre distance)", ylabel="hit rate",
            title="δ sweep, 13 thresholds")
    for i, j in false_hits[:400]:
        ax1.plot(xy[[i, j], 0], xy[[i, j], 1], color="red", alpha=0.15, lw=0.5)
    names = np.array(photos.class_names)[photos.labels]
    sns.scatterplot(x=xy[:, 0], y=xy[:, 1], hue=names, ax=ax1, s=12)
    ax1.set(title=f"t-SNE of CLIP photo embeddings; red: false hits at cos > {TSNE_THRESHOLD}")
    ax1.legend(fontsize=6)
    fig.tight_layout()
    save_figure(fig, "02_delta_sweep_tsne", {**provenance, "data": "Fashion-MNIST test photos"})

# %% [markdown]
# ## Time to re-track after drift
#
# The held-out text pairs twice over; from the second pass on, half of the entries hold a stale
# answer (**synthetic drift**: their labels flip, the data stays). Lookups until the error over
# the last `DRIFT_WINDOW` lookups is back within 2 %; ∞ = never.

# %%
text = scores.subset(scores.modality == "text")
retrack_rows = []
for seed in SEEDS:
    order, same, drift_at = ts.drifting_stream(text, seed=seed)
    contenders = {"error-budget + verifier": ("error-budget", True),
                  "vcache + verifier": ("vcache", True)}
    for label, (name, ver) in contenders.items():
        try:
            fresh = rule(name, "text", ver, budget=0.02)
        except MMCacheError as err:
            absent[f"retrack/{name}"] = str(err)
            continue
        result = ts.run_rule(text, fresh, use_verifier=ver, order=order, same=same)
        retrack_rows.append({"rule": label, "seed": seed, "retrack_lookups":
                             ts.retrack_lookups(result, drift_at, 0.02, DRIFT_WINDOW),
                             **ts.summarise(result.served[drift_at:], result.same[drift_at:])})
    static = ts.static_decisions(text, hindsight_per_modality["text"]["delta"])[order]
    static_result = ts.RuleRun(order, static, same, np.zeros(len(order), int), text.modality[order])
    retrack_rows.append({"rule": "best static δ (hindsight, before drift)", "seed": seed,
                         "retrack_lookups": ts.retrack_lookups(static_result, drift_at, 0.02,
                                                               DRIFT_WINDOW),
                         **ts.summarise(static[drift_at:], same[drift_at:])})
retrack = pd.DataFrame(retrack_rows)
display(retrack.groupby("rule")[["retrack_lookups", "hit_rate", "realised_error"]].median())

# %% [markdown]
# ## Interactive panel
#
# The same package functions as the batch run (`thresholds_study.panel_summary`); nothing
# recomputes until you release a control.

# %%
import ipywidgets as widgets

delta_w = widgets.FloatSlider(value=0.1, min=0.0, max=0.5, step=0.005, description="δ",
                              continuous_update=False)
budget_w = widgets.Dropdown(options=BUDGETS, value=0.02, description="budget")
modality_w = widgets.Dropdown(options=MODALITIES, value=MODALITIES[0], description="modality")
verifier_w = widgets.Checkbox(value=True, description="verifier")
# The table is an HTML widget's value, not an Output widget's capture: nbclient (papermill, the
# smoke tests) sometimes never returns from a cell that writes into an Output widget
# (jupyter/nbclient#312; seen here once in a notebook-02 smoke test).
panel_table = widgets.HTML()


def show_panel(*_):
    panel_table.value = pd.DataFrame(ts.panel_summary(
        scores, modality_w.value, delta_w.value, budget_w.value, verifier_w.value)).to_html()


for w in (delta_w, budget_w, modality_w, verifier_w):
    w.observe(show_panel, names="value")
show_panel()
display(widgets.VBox([widgets.HBox([delta_w, budget_w, modality_w, verifier_w]), panel_table]))

# %% [markdown]
# ## On data nobody here wrote, through the cache users run
#
# Everything above is measured on the project's own generated pairs, with labels fed back at
# once. Here the data are contradish's policy questions (PyPI `contradish` 1.34.0, MIT): each
# question's original wording and the same-answer rewordings its authors wrote (casual,
# personal, pressing, hypothetical). The protocol is vCache's: every wording once, popular
# questions (Zipf) first, into a cold `TieredCache` that grows on misses (a miss stores the
# question's id as its answer) and searches every entry of its one scope; a hit is right when
# it answers the lookup's question. **No label is fed back.** Rules: the contract config
# (`error-budget` at 2 % with MiniLM, every other setting at its default), the same with the
# `edits` verifier asked only near the threshold (band 0.05) and judging every candidate (band 2,
# the default), and static δ:
# chosen on the training questions' streams at the budget, then measured on the test
# questions', beside the best δ in hindsight on the test streams (an oracle).

# %%
from mmcache.datasets.contradish import (CONTRADISH_PROVENANCE, load_policy_questions,
                                         question_split)
from mmcache.studies import cache_stream

questions = load_policy_questions()
if EXTERNAL_QUESTIONS:
    questions = questions[:EXTERNAL_QUESTIONS]
wordings = [w for q in questions for w in q.wordings()]
external_vectors = dict(zip(wordings, store.encode(encoders["text"], wordings)))
contract = {"thresholds": {"rule": "error-budget", "budget": EXTERNAL_BUDGET},
            "encoders": {"text": "minilm"}}
external_configs = {
    "contract config": contract,
    "contract + edits verifier (band 0.05)": {**contract, "thresholds": {
        **contract["thresholds"], "verifier": "edits", "verifier_band": 0.05}},
    "contract + edits verifier (every candidate)": {**contract, "thresholds": {
        **contract["thresholds"], "verifier": "edits", "verifier_band": 2.0}},
    **{f"static δ={d:g}": cache_stream.static_config(d) for d in EXTERNAL_DELTAS}}
external_classes = {split: [q.wordings() for q in questions
                             if question_split(q, PAIR_SEED) == split] for split in ("train", "test")}
external_rows = {"train": cache_stream.compare_configs(
    external_classes["train"], external_vectors,
    {k: v for k, v in external_configs.items() if k.startswith("static")}, SEEDS)}
chosen = cache_stream.choose_static(external_rows["train"], EXTERNAL_BUDGET)
# the verifiers beside the static δ chosen on the training questions (the smallest of the grid
# when none kept the budget), and alone (δ = 2: every candidate goes to the verifier)
verifier_delta = dict(zip((f"static δ={d:g}" for d in EXTERNAL_DELTAS), EXTERNAL_DELTAS)).get(
    chosen, min(EXTERNAL_DELTAS))
for v in ("edits", "pairs"):
    for d, name in ((verifier_delta, f"static δ={verifier_delta:g} + {v} verifier"),
                    (2.0, f"{v} verifier alone")):
        external_configs[name] = {"thresholds": {
            **cache_stream.static_config(d)["thresholds"], "verifier": v}}
external_rows["test"] = cache_stream.compare_configs(external_classes["test"], external_vectors,
                                                     external_configs, SEEDS)
external_test = pd.DataFrame(external_rows["test"])
oracle = cache_stream.choose_static(external_rows["test"], EXTERNAL_BUDGET)
external = (external_test.groupby("rule", sort=False)
            .agg(lookups=("lookups", "first"), hit_rate=("hit_rate", "mean"),
                 error=("error", "mean"), error_high_worst=("error_high", "max"),
                 true_hits_served=("true_hits_served", "mean")))
external["role"] = ["chosen on train" if r == chosen else "oracle (hindsight on test)"
                    if r == oracle else "" for r in external.index]
print(f"{len(questions)} questions, {len(wordings)} wordings; static δ chosen on the training "
      f"questions at {EXTERNAL_BUDGET:.0%}: {chosen}; in hindsight on test: {oracle}")
external

# %%
fig, ax = plt.subplots(figsize=(6.5, 4))
statics = external[external.index.str.startswith("static")]
ax.plot(statics.error, statics.true_hits_served, marker="o", color="tab:gray",
        label="static δ (test streams)")
for name, row in statics.iterrows():
    ax.annotate(name.removeprefix("static "), (row.error, row.true_hits_served), fontsize=7,
                xytext=(3, -9), textcoords="offset points")
for (name, row), marker in zip(external[~external.index.str.startswith("static")].iterrows(),
                               ("*", "^", "s")):
    ax.plot(row.error, row.true_hits_served, marker, markersize=11, label=name)
ax.axvline(EXTERNAL_BUDGET, color="tab:red", linestyle=":", label=f"budget {EXTERNAL_BUDGET:.0%}")
ax.set_xlabel("error (wrong answers ÷ lookups)")
ax.set_ylabel("should-hit lookups served right")
ax.set_title("contradish policy questions through TieredCache.get (no feedback)")
ax.legend(fontsize=7)
save_figure(fig, "02_external_contradish", provenance={
    "weights": {"text": encoders["text"].encoder_id}, "data": CONTRADISH_PROVENANCE,
    "protocol": "every wording once, Zipf(1) question popularity, cold cache growing on "
                "misses, one scope, no feedback", "seeds": SEEDS, "smoke": SMOKE})

# %% [markdown]
# ### Feedback regimes
#
# The same test streams, now with labels fed back through `TieredCache.feedback(hit, correct)`
# (`cache_stream.Feedback`): **none**; **sampled**, a seeded share `FEEDBACK_RATE` of served hits,
# each labelled `FEEDBACK_DELAY` lookups later (labels still pending when a stream ends are never
# delivered); **immediate**, every served hit labelled before the next lookup. The vcache rule
# also explores: `get` hands its candidate back unserved (`Hit.explored`), the stream labels it
# through the same `feedback` in every regime and stores the lookup only when the candidate was
# wrong (vCache's growth). Rules: the contract config, vcache at the same budget (if registered)
# and the static δ chosen on the training questions (which does not learn: only its label count
# moves). The labels delivered are the cost, beside the verifier's calls (none of these rules has
# one) and vcache's labels of explored misses (`explored_labels`).

# %%
regimes = {"none": cache_stream.Feedback.none(),
           "sampled": cache_stream.Feedback.sampled(FEEDBACK_RATE, FEEDBACK_DELAY, FEEDBACK_SEED),
           "immediate": cache_stream.Feedback.immediate()}
regime_static = chosen or f"static δ={verifier_delta:g}"
regime_configs = {"contract config": contract, regime_static: external_configs[regime_static]}
if "vcache" in RULES.names():
    regime_configs["vcache"] = {"thresholds": {"rule": "vcache",
                                                     "budget": EXTERNAL_BUDGET}}
else:
    absent["external/vcache"] = "vcache is not in mmcache.thresholds.RULES"
regime_runs = [{**row, "regime": name} for name, regime in regimes.items()
               for row in cache_stream.compare_configs(external_classes["test"], external_vectors,
                                                       regime_configs, SEEDS, feedback=regime)]
regime_frame = pd.DataFrame(regime_runs)
regime_table = (regime_frame.groupby(["rule", "regime"], sort=False)
                .agg(lookups=("lookups", "first"), hit_rate=("hit_rate", "mean"),
                     error=("error", "mean"), error_high_worst=("error_high", "max"),
                     true_hits_served=("true_hits_served", "mean"), labels=("labels", "mean"),
                     verifier_calls=("verifier_calls", "mean"),
                     explored_labels=("explored_labels", "mean")))
feedback_regimes = {
    "regimes": {name: {"feedback": r.label, "rate": r.rate, "delay": r.delay}
                for name, r in regimes.items()},
    "seed": FEEDBACK_SEED, "seeds": SEEDS, "static": regime_static,
    "rules": {rule: {regime: row for (r, regime), row in regime_table.to_dict("index").items()
                     if r == rule} for rule in regime_configs},
    "runs": regime_runs}
print(f"sampled: {FEEDBACK_RATE:.0%} of served hits, labelled {FEEDBACK_DELAY} lookups later; "
      f"static: {regime_static}")
regime_table

# %%
fig, axes = plt.subplots(1, 3, figsize=(13, 4))
for ax, (column, title) in zip(axes, (("hit_rate", "hit rate"), ("error", "error"),
                                      ("labels", "labels delivered per stream (cost)"))):
    sns.barplot(data=regime_frame, x="rule", y=column, hue="regime", ax=ax,
                hue_order=list(regimes), errorbar=None)
    ax.set(title=title, xlabel="", ylabel=column.replace("_", " "))
    ax.set_ylim(bottom=0)
    ax.tick_params(axis="x", labelsize=7, rotation=15)
axes[1].axhline(EXTERNAL_BUDGET, color="tab:red", linestyle=":", label=f"budget {EXTERNAL_BUDGET:.0%}")
for ax in axes[1:]:
    ax.legend(fontsize=7)
axes[0].get_legend().remove()
fig.suptitle("contradish test questions through TieredCache.get: feedback regimes "
             f"(sampled {FEEDBACK_RATE:.0%}, delay {FEEDBACK_DELAY})")
fig.tight_layout()
save_figure(fig, "02_feedback_regimes", provenance={
    "weights": {"text": encoders["text"].encoder_id}, "data": CONTRADISH_PROVENANCE,
    "protocol": "as 02_external_contradish, with labels fed back through TieredCache.feedback: "
                "none / sampled / immediate", "regimes": feedback_regimes["regimes"],
    "feedback_seed": FEEDBACK_SEED, "seeds": SEEDS, "smoke": SMOKE})

# %% [markdown]
# ### Many requests per entry
#
# vCache's SemBenchmark sets ask each prompt's class many times, so its entries see many lookups
# and its per-entry fits get labels. Here `MANY_REQUESTS` lookups over the test questions are drawn
# with replacement (`cache_stream.many_requests_stream`: a question by Zipf(1) popularity, then one
# of its wordings uniformly; a repeated wording is an exact hit for every rule), into a cold cache
# as above, no label fed back on served hits. Rules: the contract config, the static δ chosen on
# the training questions, and vcache at the same budget, which labels every miss it explores
# (`explored_labels`, a model call and a comparison each) and stores an explored lookup only
# when its candidate was wrong.

# %%
many_configs = {"contract config": contract, regime_static: external_configs[regime_static]}
if "vcache" in RULES.names():
    many_configs["vcache"] = regime_configs["vcache"]
many_runs = cache_stream.compare_configs(external_classes["test"], external_vectors, many_configs,
                                         SEEDS, lookups=MANY_REQUESTS)
many_table = (pd.DataFrame(many_runs).groupby("rule", sort=False)
              .agg(lookups=("lookups", "first"), hit_rate=("hit_rate", "mean"),
                   error=("error", "mean"), error_high_worst=("error_high", "max"),
                   exact_hits=("exact_hits", "mean"), explored_labels=("explored_labels", "mean")))
many_requests = {"lookups": MANY_REQUESTS, "seeds": SEEDS, "static": regime_static,
                 "rules": many_table.to_dict("index"), "runs": many_runs}
many_table

# %% [markdown]
# ## Labelled pairs, each in its own scope
#
# The many-tenant form: every pair of `PAIRS_FILE` (by default the hand-written near misses of
# `data/probes/`, from which no verifier here was written and on which none was fitted) gets its
# own scope in one cold `TieredCache`; the cached query is stored, then the new query looked up, so
# every lookup is the first its scope makes and a per-scope ledger starts empty. A served lookup
# is right when the pair is labelled same. No label is fed back. Verifiers judge every candidate
# (band 2): `edits` (written against our generator) and `pairs` (learned, `make verifier`); the
# error-budget rule has a prior conditioned on `edits` only, so `pairs` runs with the static δ
# chosen on contradish's training questions above.

# %%
pairs_path = PROJECT_ROOT / PAIRS_FILE if PAIRS_FILE else DATA_DIR / "probes" / "near_misses.jsonl"
own_pairs = read_pairs(pairs_path)[::PAIRS_EVERY]
own_texts = sorted({q.text for p in own_pairs for q in (p.query, p.cached) if q.text})
own_vectors = dict(zip(own_texts, store.encode(encoders["text"], own_texts)))
pair_configs = {
    "contract config": contract,
    "contract + edits verifier": {**contract, "thresholds": {
        **contract["thresholds"], "verifier": "edits", "verifier_band": 2.0}},
    **{f"static δ={d:g}": cache_stream.static_config(d) for d in EXTERNAL_DELTAS},
    **{name: config for name, config in external_configs.items()
       if name.endswith((" + edits verifier", " + pairs verifier", " verifier alone"))}}
pair_runs = pd.DataFrame([cache_stream.run_pairs(own_pairs, config, vectors=own_vectors,
                                                 label=name, progress=False).summary()
                          for name, config in pair_configs.items()]).set_index("rule")
pair_kinds = pd.Series([p.kind for p in own_pairs]).value_counts()
print(f"{pairs_path.name}: {len(own_pairs)} pairs ({int(sum(p.same for p in own_pairs))} same); "
      f"kinds: {pair_kinds.to_dict()}")
pair_runs[["served", "wrong", "hit_rate", "error", "error_high", "true_hits_served"]]

# %%
fig, ax = plt.subplots(figsize=(6.5, 4))
pair_statics = pair_runs[pair_runs.index.str.startswith("static δ=") &
                         ~pair_runs.index.str.contains("verifier", regex=False)]
ax.plot(pair_statics.error, pair_statics.true_hits_served, marker="o", color="tab:gray",
        label="static δ")
for (name, row), marker in zip(pair_runs.drop(pair_statics.index).iterrows(),
                               ("*", "^", "s", "v")):
    ax.plot(row.error, row.true_hits_served, marker, markersize=10, label=name)
ax.set_xlabel("error (wrong answers ÷ lookups)")
ax.set_ylabel("same-answer pairs served")
ax.set_title(f"{pairs_path.name}, each pair in its own scope (no feedback)")
ax.legend(fontsize=7)
save_figure(fig, "02_pairs_file", provenance={
    "weights": {"text": encoders["text"].encoder_id}, "data": str(pairs_path.name),
    "protocol": "each pair in its own scope of one cold cache: put cached, get query; "
                "no feedback", "smoke": SMOKE})

# %% [markdown]
# ## What each part of the error-budget rule buys (ablation)
#
# The rule prices every candidate by one estimate, P(wrong | similarity) from its channel's curve
# as the entry's own labels have moved it, and decides with two checks: the scope's **ledger**
# (the expected wrong answers it has served stay within `budget` × its lookups) and the **per-hit
# curves** (P(wrong) ≤ `max_risk`, and above `tail` only while the allowance could absorb the hit
# being wrong). `thresholds.parts` keeps both (`both`, the default), the ledger alone (`ledger`)
# or a per-hit bound alone (`curves`: P(wrong) ≤ `budget` for every hit, no ledger); each with
# and without the `edits` verifier judging every candidate. Measured twice: on the development
# set (our generated held-out pairs, every served hit labelled at once, pooled over the compared
# modalities) and on contradish's test questions through `TieredCache.get` with the contract
# config, without feedback and with immediate feedback. What the rule guarantees, and under which
# assumptions: [docs/design/error-budget.md](../docs/design/error-budget.md).

# %%
ABLATION = {(parts, verified): f"{parts}{' + edits' if verified else ''}"
            for parts in ("both", "ledger", "curves") for verified in (False, True)}
ablation_dev = pd.DataFrame([
    {"parts": parts, "verifier": "edits" if verified else "none", "labels": "immediate",
     **pooled(budget_runs("error-budget", EXTERNAL_BUDGET, verified, parts=parts))}
    for (parts, verified) in ABLATION])
ablation_configs = {name: {**contract, "thresholds": {
    **contract["thresholds"], "parts": parts, **({"verifier": "edits"} if verified else {})}}
    for (parts, verified), name in ABLATION.items()}
ablation_external = pd.DataFrame([
    {**row, "regime": regime} for regime in ("none", "immediate")
    for row in cache_stream.compare_configs(external_classes["test"], external_vectors,
                                            ablation_configs, SEEDS, feedback=regimes[regime])])
ablation_external_table = (ablation_external.groupby(["rule", "regime"], sort=False)
                           .agg(lookups=("lookups", "first"), hit_rate=("hit_rate", "mean"),
                                error=("error", "mean"), error_high_worst=("error_high", "max"),
                                labels=("labels", "mean")))
display(Markdown("**Development set** (generated held-out pairs, labels at once):"))
display(ablation_dev)
display(Markdown("**contradish test questions** through `TieredCache.get`:"))
ablation_external_table

# %%
fig, axes = plt.subplots(1, 2, figsize=(12, 4))
for ax, (frame, error, title) in zip(axes, (
        (ablation_dev.assign(rule=[ABLATION[(p, v == "edits")] for p, v in
                                   zip(ablation_dev.parts, ablation_dev.verifier)],
                             regime="immediate"),
         "realised_error", "development set (generated pairs)"),
        (ablation_external, "error", "contradish test questions, TieredCache.get"))):
    rate = frame.groupby(["rule", "regime"], sort=False)[["hit_rate", error]].mean()
    for (name, regime), row in rate.iterrows():
        ax.plot(row[error], row.hit_rate, "o" if regime == "none" else "^")
        ax.annotate(f"{name} ({regime})", (row[error], row.hit_rate), fontsize=7,
                    xytext=(3, 3), textcoords="offset points")
    ax.axvline(EXTERNAL_BUDGET, color="tab:red", linestyle=":")
    ax.set(xlabel="error (wrong answers ÷ lookups)", ylabel="hit rate", title=title)
fig.suptitle(f"error-budget rule at {EXTERNAL_BUDGET:.0%}: ledger, per-hit curves, both "
             "(o no feedback, ^ immediate)")
fig.tight_layout()
save_figure(fig, "02_ablation", provenance={
    "weights": {m: e.encoder_id for m, e in encoders.items()},
    "data": {"development": provenance["data"], "external": CONTRADISH_PROVENANCE},
    "parts": ["both", "ledger", "curves"], "verifiers": ["none", "edits"],
    "budget": EXTERNAL_BUDGET, "seeds": SEEDS, "smoke": SMOKE})

# %% [markdown]
# ## Quality bars and metrics

# %%
def pick(name, budget):
    return pooled(runs[(name, budget)]) if (name, budget) in runs else None


eb2 = runs.get(("error-budget", 0.02), [])
worst = max((r["realised_error"] for r in eb2), default=float("nan"))
vc2 = pick("vcache", 0.02)
eb = pick("error-budget", 0.02)
# the static δ chosen in hindsight at the realised error the error-budget rule reached
same_error = eb["realised_error"] if eb is not None else 0.02
static_same = ts.best_static(compared, same_error)
# Each bar over the stream orders: a count where it says "every seed", otherwise a paired
# t-interval over the orders (mmcache.studies.verdicts), "inconclusive" when it straddles the line.
eb_seeds = per_seed(eb2) if eb2 else None
vc_seeds = per_seed(runs[("vcache", 0.02)]) if ("vcache", 0.02) in runs else None
cold_seeds = [r["cold_start_hit_rate"] for r in eb2
              if r["modality"] in COMPARED and not np.isnan(r["cold_start_hit_rate"])]
bars = {
    "error ≤ 2% on every seed and modality (error-budget + verifier, 2%)": {
        "verdict": "holds" if bool(eb2) and worst <= 0.02 else "does not hold",
        "test": f"count: worst of {len(eb2)} seed × modality runs", "worst": worst},
    "hit rate ≥ 2× best static δ in hindsight at the same realised error": None
    if eb_seeds is None else mean_difference(
        eb_seeds.hit_rate, [static_same["hit_rate"]] * len(eb_seeds), claim="above", factor=2,
        pairs="stream orders"),
    "hit rate above the vcache rule": None if eb_seeds is None or vc_seeds is None else
    mean_difference(eb_seeds.hit_rate, vc_seeds.hit_rate, claim="above", pairs="stream orders"),
    "cold-start hit rate > 0": None if len(cold_seeds) < 2 else mean_difference(
        cold_seeds, np.zeros(len(cold_seeds)), claim="above",
        pairs="seed × modality runs"),
}
display(pd.DataFrame({k: v for k, v in bars.items() if v is not None}).T)


def modality_bars(m):
    """The same bars on one modality alone (2% budget, mean of the seeds; its worst seed)."""
    def mean_of(name):
        rows = [r for r in runs.get((name, 0.02), []) if r["modality"] == m]
        return {k: float(np.mean([r[k] for r in rows])) for k in
                ("hit_rate", "realised_error", "cold_start_hit_rate")} if rows else None

    own, vcache = mean_of("error-budget"), mean_of("vcache")
    if own is None:
        return None
    mine = scores.subset(scores.modality == m)
    static = ts.best_static(mine, own["realised_error"])
    return {**own, "worst_error": max(r["realised_error"] for r in eb2 if r["modality"] == m),
            "best_static_same_error_hit_rate": static["hit_rate"],
            "best_static_same_error_hit_rate_ci95": ts.best_static_interval(
                mine, own["realised_error"]),
            "vcache_hit_rate": None if vcache is None else vcache["hit_rate"]}


per_modality = {m: modality_bars(m) for m in MODALITIES}
display(pd.DataFrame(per_modality).T)

metrics = {
    "budgets": {f"{b:.2f}": pick("error-budget", b) for b in BUDGETS},
    "budgets_worst_error": {f"{b:.2f}": max((r["realised_error"] for r in runs.get(
        ("error-budget", b), [])), default=None) for b in BUDGETS},
    "best_static_hindsight": {f"{b:.2f}": {**{k: hindsight[b][k] for k in
                                              ("hit_rate", "realised_error", "delta")},
                                           "hit_rate_ci95": ts.best_static_interval(compared, b)}
                              for b in BUDGETS},
    "best_static_hindsight_same_error": {
        **{k: static_same[k] for k in ("hit_rate", "realised_error", "delta")},
        "hit_rate_ci95": ts.best_static_interval(compared, same_error)},
    "vcache": vc2,
    "gptcache": None if gpt is None else
    {k: v for k, v in ts.summarise(gpt, compared.same).items() if k in ("hit_rate", "realised_error")},
    "cold_start_hit_rate": cold.get("error-budget"),
    "cold_start_hit_rate_vcache": cold.get("vcache"),
    "verifier": {"precision": verifier_precision, "recall": verifier_recall,
                 "rejected_by_kind": {f"{r['modality']}/{r['kind']}": r["rejected"]
                                      for r in verifier_rows}},
    "delta_sweep": sweep.to_dict("records"),
    "retrack_lookups_median": retrack.groupby("rule").retrack_lookups.median().to_dict(),
    "quality_bars": bars,
    "per_modality_0.02": per_modality,
    "prior_p_correct_at_0.99": {m: load_priors(PRIORS)[channel(m, ts.STUDY_ENCODERS[m][0])]
                                .p_correct(0.99) for m in MODALITIES},
    "absent": absent,
    "n_pairs": {m: int((scores.modality == m).sum()) for m in MODALITIES},
    "compared_modalities": COMPARED,
    "provenance": provenance,
    "feedback_regimes": feedback_regimes,  # the same as external/contradish/feedback_regimes
    "ablation": {"budget": EXTERNAL_BUDGET, "seeds": SEEDS,
                 "development": ablation_dev.to_dict("records"),
                 "contradish": {f"{rule}/{regime}": row for (rule, regime), row in
                                ablation_external_table.to_dict("index").items()}},
    "many_requests": many_requests,
    "external": {"contradish": {
        "data": CONTRADISH_PROVENANCE, "questions": len(questions), "wordings": len(wordings),
        "budget": EXTERNAL_BUDGET, "static_chosen_on_train": chosen,
        "static_oracle_on_test": oracle, "seeds": SEEDS,
        "rules": external.drop(columns="role").to_dict("index"),
        "runs": external_rows["test"], "feedback_regimes": feedback_regimes},
        "pairs_file": {"file": pairs_path.name, "pairs": len(own_pairs),
                       "same": int(sum(p.same for p in own_pairs)),
                       "kinds": {k: int(v) for k, v in pair_kinds.items()},
                       "rules": pair_runs.to_dict("index")}},
}
write_metrics(metrics, NOTEBOOK, SMOKE)
display(Markdown("\n".join(f"* {k}: " + ("absent" if v is None else describe(v) if "ci95" in v
                                           else f"**{v['verdict']}** ({v['test']})")
                             for k, v in bars.items())))
