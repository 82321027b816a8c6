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
# # 03 · Cold-start collapse of cross-modal attention
#
# **The claim under test** (seed 001 §2.4): early in training, text→image cross-attention
# collapses — softmax entropy falls towards zero and gradient norms vanish (the seed's table:
# attention-gradient L2 0.87 at step 10, 0.03 at step 50) — and Q/K weights initialised with
# Xavier × 0.1 plus gradient clipping at max_norm 1.0 fix it. These are claims, not results.
#
# **Model** (`mmcache.studies.collapse`): one multi-head cross-attention block, trained from scratch
# (no pretrained weights). Queries are caption word embeddings; keys/values are image patch tokens
# followed by the caption's own tokens (two key modalities, so we can see where the attention mass
# goes). Score(caption, image) = mean over caption tokens of a bilinear read-out of the attended
# value; loss = symmetric InfoNCE over every (caption, image) pair of a batch.
# Optimiser: Adam (β = 0.9, 0.999, ε = 1e-8), constant learning rate.
#
# **Data**: the workbench's rendered compositional scenes (`mmcache.datasets.make_scenes`:
# 5 shapes × 6 colours × 5 positions = 150 scenes, seeded jitter of position, size, colour and
# background), rendered at 32 px → 16 patch tokens of 8 × 8 px; canonical captions
# ("a red circle on the left", six words). Each run trains on 14 renderings per scene (its own
# seed) and is evaluated on 2 other renderings per scene (a fixed held-out seed), in batches with
# in-batch negatives.
#
# **Instruments** (per head, per step, `mmcache.studies.collapse.instruments`, attached by hooks that
# compute nothing when off): attention entropy as Zhai et al. (2023) compute it (mean over queries
# of −Σ A log(A + 1e-6)); maximum attention logit; spectral norm of W_Q^h (W_K^h)ᵀ; gradient norms
# of the Q, K and V weights; attention mass on image vs text keys; Adam's √v̂ / ε and update RMS.
#
# **Collapse, defined before the sweep**: a run collapses when its mean-over-heads attention
# entropy stays below `COLLAPSE_FRACTION` × its step-0 value for `COLLAPSE_PATIENCE` consecutive
# steps. Gradients *vanish* when the summed Q/K gradient norm stays below 1% of its maximum over the
# first `COLLAPSE_PATIENCE` steps for as many steps. A run *diverges* when its loss is not finite.
#
# **Feature sources.** Sections 1–8 use *learned* features (word embeddings and raw patches,
# trained from scratch). Section 9 repeats a reduced sweep on *frozen real-encoder* features:
# MiniLM token states as queries, raw patches plus Whisper tiny.en frames of spoken captions as keys.
#
# **Study size** (set in the parameters cell below): 8 seeds (0–7) per arm and learning rate,
# 6 per cell of the frozen-feature sweep, 2 tuning seeds, 200 steps — 272 training runs
# (8 tuning + 9 arms × 3 learning rates × 8 seeds + 4 arms × 2 learning rates × 6 seeds). Each run
# is seeded by its own seed, so a grid with fewer seeds is a subset of this one with those runs
# unchanged (it used 3 seeds per cell before; `LR_MULTIPLIERS = [1, 4, 16, 32]` adds the 4×
# column it once had).
#
# **Verdicts are tests over seeds.** Every "helps" and "holds" below is an exact sign test over
# runs paired by seed and learning rate (`mmcache.studies.collapse.remedy_verdicts`, the rule in
# `mmcache.studies.verdicts`), printed with its effect and 95% interval: **holds** when the whole
# interval is on the claimed side of zero, **does not hold** when it is wholly on the other side,
# **inconclusive** when it straddles zero. Three seeds gave at most six untied pairs where the
# baseline collapses, too few for a sign test to decide anything but the largest effect, and two
# runs of the notebook disagreed on verdicts read off counts; 8 seeds (6 on frozen features)
# fit the budget. A smoke run has one seed and prints every verdict as inconclusive.

# %% tags=["parameters"]
NOTEBOOK = "03_cold_start_collapse"  # this notebook: metrics go to runs/<NOTEBOOK>[-smoke]/
SMOKE = False
SEEDS = 8                            # seeds per arm and learning rate (see "Verdicts" above)
STEPS = 200                          # training steps per run
BATCH = 24                           # scenes per batch (batch² caption-image pairs scored)
TUNE_LRS = [1e-3, 2e-3, 4e-3, 8e-3]  # baseline learning-rate grid
TUNE_SEEDS = 2                       # seeds 100.. (disjoint from the sweep's 0..SEEDS-1)
TUNE_TOLERANCE = 0.1                 # relative held-out loss gap still counted as "as good"
TUNED_LR = 1e-3                      # recorded "1x" rate (section 1 shows the tuning evidence)
LR_MULTIPLIERS = [1, 16, 32]         # x the tuned baseline learning rate (see section 1)
WARMUP_FRACTION = 0.1                # "short warmup": linear over the first 10% of steps
COLLAPSE_FRACTION = 0.1
COLLAPSE_PATIENCE = 20
N_JOBS = 2                           # worker processes, one torch thread each
FROZEN_LR_MULTIPLIERS = [16, 32]     # section 9: where the learned-feature baseline collapsed
FROZEN_SEEDS = 6                     # section 9: seeds per arm and learning rate

# %%
if SMOKE:
    SEEDS, STEPS, BATCH, TUNE_SEEDS, N_JOBS = 1, 30, 16, 1, 1
    TUNE_LRS, LR_MULTIPLIERS, COLLAPSE_PATIENCE = [1e-3, 8e-3], [1, 4], 5
    FROZEN_SEEDS = 1

import math
import time
import warnings
from dataclasses import replace

import matplotlib.pyplot as plt
import seaborn as sns
import torch
from IPython.display import Markdown, display
from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

from mmcache.studies.collapse import (FROZEN, LEARNED, SEED_COMBO, CollapseCriterion, TrainConfig,
                                      best_pair, frozen_features, rank_arms, remedy_effect,
                                      remedy_verdicts, runs_table, single_remedies, summarise,
                                      sweep, sweep_tables, tuning_check)
from mmcache.studies.collapse.data import CAPTION_LEN, CAPTIONS, DATA_ID, N_PATCHES
from mmcache.studies.collapse.features import AUDIO_FRAMES, RATE, VOICE
from mmcache.lab.plotting import save_figure
from mmcache.lab.runbook import write_metrics
from mmcache.studies.verdicts import describe, interval, replicates

torch.set_num_threads(1)
T0 = time.perf_counter()
CRIT = CollapseCriterion(fraction=COLLAPSE_FRACTION, patience=COLLAPSE_PATIENCE)
BASE = TrainConfig(steps=STEPS, batch=BATCH)
WARMUP_STEPS = max(1, int(WARMUP_FRACTION * STEPS))
SINGLES = single_remedies(WARMUP_STEPS)
PROVENANCE = {"weights": "none: every model trained from scratch in this notebook",
              "features": LEARNED, "data": DATA_ID,
              "model": "mmcache.studies.collapse.CrossModalMatcher d=64, 4 heads",
              "steps": STEPS, "batch": BATCH, "seeds": SEEDS, "smoke": SMOKE,
              "collapse": f"entropy < {COLLAPSE_FRACTION} x step-0 for {COLLAPSE_PATIENCE} steps"}

# %% [markdown]
# ## 1 · Tune the baseline learning rate
# Baseline only, on seeds disjoint from the sweep's. The tuning rule: the **largest** grid learning
# rate whose mean held-out loss is within `TUNE_TOLERANCE` of the best (and that never diverged):
# among equally good rates one tunes to the fastest.
#
# **"1×" is the recorded parameter `TUNED_LR`, not the rule's output.** The rule sits on a knife
# edge here: rates within a few percent of the 10% tolerance win on one machine and lose on
# another (it chose 1e-3 on one machine and 8e-3 on another), and every collapse rate after it
# moves with that choice. So the tuning runs as evidence: the table below shows each rate's
# held-out loss and its gap to the best, and a warning is printed (and `tuning.agrees` is false
# in metrics.json) when the rule would choose a rate other than the recorded one.
#
# **Learning-rate range, chosen honestly:** the issue asked for 1×, 2× and 4× the tuned rate. A
# first full run of this notebook at exactly those rates (5 seeds per cell at the time, all nine
# arms) recorded no collapse, no vanishing gradients and no divergence in any arm, and a baseline
# pilot showed collapse only from about 16× upwards. The sweep therefore runs 1× (the tuned rate),
# 16× (the onset seen in the pilot) and 32× (well inside it). It ran 4× (the top of the requested
# range) too until the grid was sized for `make figures`: no arm collapsed there in any full run
# (5 seeds, then 3; Intel and AMD CPUs); `LR_MULTIPLIERS` in the parameters cell brings it back.

# %%
tune = runs_table(sweep({"baseline": SINGLES["baseline"]}, TUNE_LRS,
                        range(100, 100 + TUNE_SEEDS), BASE, CRIT, n_jobs=N_JOBS))
tune_summary = tune.groupby("lr").agg(final_loss=("final_loss", "mean"),
                                      final_acc=("final_acc", "mean"),
                                      collapse_rate=("collapsed", "mean"))
TUNING = tuning_check(tune, TUNED_LR, TUNE_TOLERANCE)
LRS = [TUNED_LR * m for m in LR_MULTIPLIERS]
MULT = dict(zip(LRS, LR_MULTIPLIERS))
display(tune_summary.assign(relative_gap=[TUNING["relative_gap"][f"{lr:g}"]
                                          for lr in tune_summary.index]))
print(f"recorded baseline lr = {TUNED_LR:g}; the tuning rule would choose "
      f"{TUNING['would_choose']:g} (closest gap {TUNING['margin']:.3f} from the "
      f"{TUNE_TOLERANCE:g} edge); sweep lrs = {LRS}")
if not TUNING["agrees"]:
    warnings.warn(f"the tuning rule would choose lr {TUNING['would_choose']:g}, not the recorded "
                  f"TUNED_LR {TUNED_LR:g}; the sweep below uses the recorded rate", stacklevel=1)

# %% [markdown]
# ## 2 · Each remedy alone, and the seed's combination
# Arms: the baseline (PyTorch default init), each remedy alone, and the seed's pair
# (Xavier × 0.1 on Q/K + clipping at 1.0, applied from the first step). Every arm runs at every
# learning rate over the same seeds (same data order and, where the arm permits, same init).

# %%
ARMS = dict(SINGLES)
ARMS[SEED_COMBO] = SINGLES["xavier_0.1"] + SINGLES["clip_1.0"]
results = sweep(ARMS, LRS, range(SEEDS), BASE, CRIT, n_jobs=N_JOBS)

# %% [markdown]
# ## 3 · The best pair
# Single remedies are ranked by collapse rate, then divergence rate, then mean final loss
# (each averaged over the learning rates); the best pair combines the compatible pair of single
# remedies with the lowest rank sum that is not already the seed's pair. Only that pair is run
# (no full factorial).

# %%
singles_ranking = rank_arms(summarise(runs_table(results)))
singles_ranking = singles_ranking[singles_ranking["arm"].isin(SINGLES)].reset_index(drop=True)
PAIR = best_pair(singles_ranking, SINGLES, exclude=[ARMS[SEED_COMBO]])
PAIR_ARM = f"best_pair ({PAIR[0]}+{PAIR[1]})"
ARMS[PAIR_ARM] = SINGLES[PAIR[0]] + SINGLES[PAIR[1]]
results += sweep({PAIR_ARM: ARMS[PAIR_ARM]}, LRS, range(SEEDS), BASE, CRIT, n_jobs=N_JOBS)
display(singles_ranking)
print("best pair:", PAIR)

# %%
runs, summary, curves = sweep_tables(results, MULT)
ranking = rank_arms(summary)
display(summary[["arm", "lr_mult", "n", "collapse_rate", "collapse_ci_low", "collapse_ci_high",
                 "grad_vanish_rate", "diverged_rate", "final_loss", "final_loss_sd",
                 "final_acc", "entropy_min"]].round(3))

# %% [markdown]
# ## 4 · Curves: entropy, loss, gradient norms on one time axis
# Lines are the mean over seeds, bands the min–max over seeds; the dashed line is the collapse
# threshold. Under σReparam the raw Q/K/V weights are rescaled by γ/σ(W) before use, so their
# gradient norms are not on the same scale as the other arms'.

# %%
ORDER = list(ARMS)


def _legend_below(fig: plt.Figure, ax: plt.Axes) -> None:
    handles, labels = ax.get_legend_handles_labels()
    ax.get_legend().remove()
    fig.legend(handles, labels, loc="upper center", bbox_to_anchor=(0.5, 0.0), ncol=4,
               fontsize=9, frameon=False)


def _log_ticks(ax: plt.Axes) -> None:
    """Plain-number log ticks: 1-2-5 within two decades, decades beyond."""
    low, high = ax.get_ylim()
    subs = (1.0, 2.0, 5.0) if math.log10(high / low) <= 2 else (1.0,)
    ax.yaxis.set_major_locator(LogLocator(subs=subs))
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    ax.yaxis.set_minor_formatter(NullFormatter())


# Loss is drawn on a log axis (a diverging run reaches 1e5 while normal runs stay near
# log(batch)). Gradient norms below `GRAD_FLOOR` (exact zeros included) are drawn at the floor,
# and ▼ marks each step where some run's gradient was exactly zero.
GRAD_FLOOR = 1e-8
panels = [("entropy", "attention entropy (nats)", "linear"),
          ("loss", "training loss", "log"),
          ("grad_qk", "Q/K gradient norm", "floor"),
          ("grad_v", "V gradient norm", "floor")]
floored = curves.assign(**{col: curves[col].clip(lower=GRAD_FLOOR)
                           for col, _, scale in panels if scale == "floor"})
fig, axes = plt.subplots(len(panels), len(LRS), figsize=(4.2 * len(LRS), 3.0 * len(panels)),
                         sharex=True, sharey="row", squeeze=False)
for row, (col, label, scale) in enumerate(panels):
    for c, lr in enumerate(LRS):
        ax = axes[row, c]
        sns.lineplot(data=floored[floored["lr"] == lr], x="step", y=col, hue="arm",
                     hue_order=ORDER, errorbar=("pi", 100), ax=ax, legend=(row == 0 and c == 0),
                     linewidth=1.2)
        if row == 0:
            ax.axhline(COLLAPSE_FRACTION * runs["entropy_init"].mean(), ls="--", c="k", lw=0.8)
            ax.set_title(f"{MULT[lr]}× tuned lr ({lr:.3g})")
        if scale == "log":
            ax.set_yscale("log")
        if scale == "floor":
            ax.set_yscale("log")
            zeros = curves[(curves["lr"] == lr) & (curves[col] == 0)]["step"].unique()
            ax.scatter(zeros, [GRAD_FLOOR] * len(zeros), marker="v", s=14, c="k", zorder=3)
            ax.set_ylim(bottom=GRAD_FLOOR / 3)
            if c == 0:
                ax.text(0.02, 0.04, f"sum of heads; < {GRAD_FLOOR:g} drawn at {GRAD_FLOOR:g}, "
                        "▼ exact zero", transform=ax.transAxes, fontsize=7)
        ax.set_ylabel(label if c == 0 else "")
    if scale == "log":
        _log_ticks(axes[row, 0])   # the row shares its y axis
_legend_below(fig, axes[0, 0])
save_figure(fig, "03_collapse_curves", {**PROVENANCE, "lrs": LRS})
plt.show()

# %% [markdown]
# ## 5 · Collapse rate and final loss against learning rate

# %%
fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(13, 4.8))
heat = summary.pivot(index="arm", columns="lr_mult", values="collapse_rate").loc[ORDER]
sns.heatmap(heat, annot=True, fmt=".2f", vmin=0, vmax=1, cmap="rocket_r", ax=ax1, cbar=False)
ax1.set_title(f"collapse rate ({SEEDS} seeds per cell)")
ax1.set_xlabel("learning rate (× tuned baseline)")
ax1.set_ylabel("")
sns.lineplot(data=runs, x="lr_mult", y="final_loss", hue="arm", hue_order=ORDER, marker="o",
             errorbar="sd", err_style="bars", ax=ax2)
ax2.set_xscale("log", base=2)
ax2.set_xticks(LR_MULTIPLIERS, [f"{m}×" for m in LR_MULTIPLIERS])
ax2.set_xlabel("learning rate (× tuned baseline)")
ax2.set_ylabel("held-out matching loss (mean ± sd over seeds)")
sns.move_legend(ax2, "upper left", bbox_to_anchor=(1.0, 1.0), fontsize=8)
save_figure(fig, "03_collapse_rate_and_final_loss", {**PROVENANCE, "lrs": LRS})
plt.show()

# %% [markdown]
# ## 6 · What the instruments show
# Maximum attention logit, spectral norm of W_Q W_Kᵀ (largest head), attention mass on image keys
# and Adam's √v̂/ε (smallest head, Q weights) for the baseline, the seed's pair and the best pair.

# %%
focus = ["baseline", SEED_COMBO, PAIR_ARM]
inst = [("max_logit", "max attention logit", True), ("qk_spectral", "σ(W_Q^h W_K^hᵀ), max head", True),
        ("mass_image", "attention mass on image keys", False),
        ("adam_sqrtv_over_eps_q", "Adam √v̂/ε (Q, min head)", True)]
fig, axes = plt.subplots(len(inst), len(LRS), figsize=(4.2 * len(LRS), 2.8 * len(inst)),
                         sharex=True, sharey="row", squeeze=False)
sub = curves[curves["arm"].isin(focus)]
for row, (col, label, log) in enumerate(inst):
    for c, lr in enumerate(LRS):
        ax = axes[row, c]
        sns.lineplot(data=sub[sub["lr"] == lr], x="step", y=col, hue="arm", hue_order=focus,
                     errorbar=("pi", 100), ax=ax, legend=(row == 0 and c == 0), linewidth=1.2)
        if log:
            ax.set_yscale("log")
        if row == 0:
            ax.set_title(f"{MULT[lr]}× tuned lr")
        ax.set_ylabel(label if c == 0 else "")
_legend_below(fig, axes[0, 0])
save_figure(fig, "03_collapse_instruments", {**PROVENANCE, "lrs": LRS})
plt.show()

# %% [markdown]
# ## 7 · The seed's specific numbers, measured here
# The seed reports the attention-gradient norm falling 0.87 → 0.03 between steps 10 and 50
# (ratio ≈ 0.034). Here: the ratio of the summed Q/K gradient norm at step 50 to step 10, per
# baseline run (steps clipped to the run length in smoke mode).

# %%
s10, s50 = min(10, STEPS - 1), min(50, STEPS - 1)
base_curves = curves[curves["arm"] == "baseline"]
grad_ratio = (base_curves[base_curves["step"] == s50].set_index(["lr_mult", "seed"])["grad_qk"]
              / base_curves[base_curves["step"] == s10].set_index(["lr_mult", "seed"])["grad_qk"])
grad_ratio_by_mult = grad_ratio.groupby("lr_mult").median()
display(grad_ratio_by_mult.rename(f"median grad_qk[{s50}] / grad_qk[{s10}]").to_frame())

# %% [markdown]
# ## 8 · Verdict (computed from the tables above)
# Each remedy against the baseline, over runs paired by seed and learning rate (every rate
# swept): **fewer collapses** — the exact sign test on "collapsed", its effect the difference of
# the two collapse rates; **lower final loss** — the sign test on the final held-out loss (a
# diverged run's loss counts as infinite), its effect the mean sign of the difference. The pooled
# counts, Wilson intervals and Fisher p-values beside them describe the rates where the baseline
# collapsed; the verdicts come from the sign tests alone.

# %%
def remedy_effects(summary_table, run_rows, arms) -> dict:
    """Per arm but the baseline: its collapse numbers and its two verdicts."""
    return {arm: {**remedy_effect(summary_table, arm), **remedy_verdicts(run_rows, arm)}
            for arm in arms if arm != "baseline"}


effects = remedy_effects(summary, runs, ARMS)
seed_eff = effects[SEED_COMBO]
best_arm = ranking.loc[ranking["arm"] != "baseline", "arm"].iloc[0]
base_rates = summary[summary["arm"] == "baseline"].set_index("lr_mult")["collapse_rate"]
first_collapse = next((m for m in LR_MULTIPLIERS if base_rates[m] > 0), None)


def _rates(arm: str) -> str:
    r = summary[summary["arm"] == arm].set_index("lr_mult")["collapse_rate"]
    return ", ".join(f"{m}×: {r[m]:.0%}" for m in LR_MULTIPLIERS)


def _pooled(eff: dict, prefix: str = "") -> str:
    (k, n), (lo, hi) = eff[f"{prefix}pooled_collapses"], eff[f"{prefix}pooled_ci"]
    return f"{k}/{n} (95% CI {lo:.2f}–{hi:.2f})"


def _judge(eff: dict) -> str:
    return (f"fewer collapses than the baseline {describe(eff['helps'])}; lower final loss "
            f"{describe(eff['lower_loss'])}")


hot = runs[runs["lr_mult"].isin([m for m in LR_MULTIPLIERS if base_rates[m] > 0])]
acc_by_collapse = hot.groupby("collapsed")["final_acc"].mean()
lines = [
    f"*Tuned baseline lr {TUNED_LR:g}; swept {', '.join(f'{m}×' for m in LR_MULTIPLIERS)}; "
    f"{SEEDS} seed(s) per cell; {STEPS} steps.*",
    "",
    f"- **Does the baseline collapse?** Collapse rate by learning rate — {_rates('baseline')}. "
    + (f"Collapse first appears at {first_collapse}× the tuned learning rate"
       + (" (so also at the tuned rate)." if first_collapse == 1 else
          "; at the tuned rate the attention sharpens but does not collapse.")
       if first_collapse else "No baseline run collapsed at any learning rate tried."),
    f"- **Gradient vanishing (seed: ratio ≈ 0.034 between steps 10 and 50):** median "
    f"grad_qk[{s50}]/grad_qk[{s10}] for the baseline is "
    + ", ".join(f"{m}×: {v:.2f}" for m, v in grad_ratio_by_mult.items())
    + f"; gradient vanishing (by the criterion above) in "
    f"{runs.loc[runs['arm'] == 'baseline', 'grad_vanished'].mean():.0%} of baseline runs.",
    f"- **The seed's remedy (Xavier × 0.1 + clip 1.0)** — collapse rate {_rates(SEED_COMBO)}; "
    + (f"pooled where the baseline collapsed {_pooled(seed_eff)} vs baseline "
       f"{_pooled(seed_eff, 'baseline_')}, one-sided Fisher p = {seed_eff['p_fewer']:.3f}; "
       if seed_eff["baseline_collapses_anywhere"] else "")
    + f"mean final loss {seed_eff['mean_final_loss']:.3f} vs baseline "
    f"{seed_eff['baseline_mean_final_loss']:.3f}. Verdicts: {_judge(seed_eff)}.",
    f"  Its parts alone: Xavier × 0.1 — {_rates('xavier_0.1')}; clipping — {_rates('clip_1.0')}.",
    f"- **Best remedy here: {best_arm}** (lowest collapse rate, then divergence, then final "
    f"loss, averaged over learning rates) — collapse rate {_rates(best_arm)}; "
    f"mean final loss {effects[best_arm]['mean_final_loss']:.3f}; verdicts: {_judge(effects[best_arm])}.",
    f"- Best pair tried: {PAIR_ARM} — collapse rate {_rates(PAIR_ARM)}; mean final loss "
    f"{effects[PAIR_ARM]['mean_final_loss']:.3f}; verdicts: {_judge(effects[PAIR_ARM])}.",
]
if len(acc_by_collapse) == 2:
    lines.append("- **Is entropy collapse harmful here?** At the learning rates where the baseline "
                 f"collapsed, mean held-out accuracy (all arms): collapsed runs "
                 f"{acc_by_collapse[True]:.2f}, runs that did not collapse {acc_by_collapse[False]:.2f}.")
if SMOKE:
    lines.insert(0, "**SMOKE RUN — too few seeds and steps for any conclusion.**\n")
display(Markdown("\n".join(lines)))
display(ranking.round(3))

# %% [markdown]
# ## 9 · Frozen real-encoder features
# The same matcher, but its inputs come from frozen pretrained encoders instead of embeddings
# learned from scratch (the encoders stay frozen; the linear input projections and the attention
# block are trained):
#
# - **queries**: all-MiniLM-L6-v2 last-layer hidden states of each caption's six word-piece tokens
#   (384-d, unpooled; [CLS]/[SEP] left out), through a trained linear projection;
# - **keys/values of each candidate image**: its 16 raw 8 × 8 patches as before, **plus** 16
#   Whisper tiny.en audio-frame tokens of its caption spoken by espeak-ng (synthetic speech, one
#   voice): the encoder output (after its final layer norm) over the clip's frames, averaged over
#   16 contiguous near-equal runs of frames (136–167 frames per clip, so 8–11 frames of 20 ms per
#   run; the 0.5 s of silence padding on either side included), through a second trained projection; then the caption's own 6 tokens as before.
#   So attention mass can split across three key groups: image, audio, text.
#
# Reduced sweep: the baseline, the seed's remedy, QK-layernorm and section 3's best pair, at
# `FROZEN_LR_MULTIPLIERS` × the tuned learning rate (where the learned-feature baseline
# collapsed), `FROZEN_SEEDS` seeds, the same steps, batch and collapse criterion. Features are
# encoded once and cached under `data/generated/collapse_features/`.

# %%
T_FROZEN = time.perf_counter()
FEATURES = frozen_features(CAPTIONS)
FROZEN_BASE = replace(BASE, frozen_features=str(FEATURES.path))
FROZEN_ARMS = {arm: ARMS[arm] for arm in ("baseline", SEED_COMBO, "qk_layernorm", PAIR_ARM)}
FROZEN_LRS = [TUNED_LR * m for m in FROZEN_LR_MULTIPLIERS]
FROZEN_MULT = dict(zip(FROZEN_LRS, FROZEN_LR_MULTIPLIERS))
FROZEN_PROVENANCE = {
    **PROVENANCE, "features": FROZEN, "encoders": list(FEATURES.encoders),
    "weights": "frozen all-MiniLM-L6-v2 and Whisper tiny.en; projections and block trained here",
    "data": f"{DATA_ID}; captions spoken by espeak-ng ({VOICE}, {RATE} wpm, synthetic), "
            f"{AUDIO_FRAMES} pooled Whisper frames", "seeds": FROZEN_SEEDS, "lrs": FROZEN_LRS}
frozen_results = sweep(FROZEN_ARMS, FROZEN_LRS, range(FROZEN_SEEDS), FROZEN_BASE, CRIT,
                       n_jobs=N_JOBS)
frozen_runs, frozen_summary, frozen_curves = sweep_tables(frozen_results, FROZEN_MULT)
MASSES = ["mass_image", "mass_audio", "mass_text"]
frozen_final_rows = frozen_curves[frozen_curves["step"] == frozen_curves.groupby(
    ["arm", "lr", "seed"])["step"].transform("max")]
frozen_final_mass = frozen_final_rows.groupby("arm")[MASSES].mean()
# each arm's mean final mass with its 95% t-interval over its runs (seeds × learning rates)
frozen_final_mass_ci = {arm: {m.removeprefix("mass_"): list(interval(g[m].to_numpy())[1:])
                              for m in MASSES}
                        for arm, g in frozen_final_rows.groupby("arm")}
display(frozen_summary[["arm", "lr_mult", "n", "collapse_rate", "collapse_ci_low",
                        "collapse_ci_high", "grad_vanish_rate", "diverged_rate", "final_loss",
                        "final_acc", "entropy_init", "entropy_min"]].round(3))
display(frozen_final_mass.round(3).rename(columns=lambda c: c.replace("mass_", "final mass: ")))

# %%
FROZEN_ORDER = list(FROZEN_ARMS)
rows = [("entropy", "entropy (nats, mean of heads)"),
        ("mass_image", "mass on image keys"),
        ("mass_audio", "mass on audio keys")]
fig, axes = plt.subplots(len(rows), len(FROZEN_LRS), figsize=(4.6 * len(FROZEN_LRS), 3.0 * len(rows)),
                         sharex=True, sharey="row", squeeze=False)
for r, (col, label) in enumerate(rows):
    for c, lr in enumerate(FROZEN_LRS):
        ax = axes[r, c]
        sns.lineplot(data=frozen_curves[frozen_curves["lr"] == lr], x="step", y=col, hue="arm",
                     hue_order=FROZEN_ORDER, errorbar=("pi", 100), ax=ax,
                     legend=(r == 0 and c == 0), linewidth=1.2)
        if r == 0:
            ax.axhline(COLLAPSE_FRACTION * frozen_runs["entropy_init"].mean(), ls="--", c="k", lw=0.8)
            ax.set_title(f"frozen features, {FROZEN_MULT[lr]}× tuned lr ({lr:.3g})")
        ax.set_ylabel(label if c == 0 else "")
_legend_below(fig, axes[0, 0])
save_figure(fig, "03_frozen_features_entropy", FROZEN_PROVENANCE)
plt.show()

# %%
frozen_effects = remedy_effects(frozen_summary, frozen_runs, FROZEN_ARMS)


def _frozen_rates(arm: str) -> str:
    r = frozen_summary[frozen_summary["arm"] == arm].set_index("lr_mult")["collapse_rate"]
    return ", ".join(f"{m}×: {r[m]:.0%}" for m in FROZEN_LR_MULTIPLIERS)


# Does a learned-feature conclusion hold on real features? **holds** when both sign tests are
# conclusive and agree, **does not hold** when both are conclusive and disagree, **inconclusive**
# when either is (`mmcache.studies.verdicts.replicates`).
QUESTIONS = {"seed_remedy_helps": SEED_COMBO, "qk_layernorm_helps": "qk_layernorm"}
frozen_conclusions = {question: {"verdict": replicates(effects[arm]["helps"],
                                                       frozen_effects[arm]["helps"]),
                                 "learned": effects[arm]["helps"],
                                 "frozen": frozen_effects[arm]["helps"]}
                      for question, arm in QUESTIONS.items()}
base_mass = frozen_final_mass.loc["baseline"]
flines = [
    f"*Frozen features ({FROZEN}); {FROZEN_SEEDS} seed(s) per cell; {STEPS} steps; "
    f"learning rates {', '.join(f'{m}×' for m in FROZEN_LR_MULTIPLIERS)} the tuned {TUNED_LR:g}.*",
    "",
    f"- **Does the baseline collapse on real features?** Collapse rate — {_frozen_rates('baseline')} "
    f"(learned features, section 2: {_rates('baseline')}). Final attention mass of the baseline: "
    f"image {base_mass['mass_image']:.2f}, audio {base_mass['mass_audio']:.2f}, "
    f"text {base_mass['mass_text']:.2f}.",
]
for question, arm in QUESTIONS.items():
    c, eff = frozen_conclusions[question], frozen_effects[arm]
    flines.append(
        f"- **{arm} — does it reduce collapse?** Collapse rate {_frozen_rates(arm)}; mean final "
        f"loss {eff['mean_final_loss']:.3f} vs baseline {eff['baseline_mean_final_loss']:.3f}. "
        f"On real features: {_judge(eff)}. Learned features' verdict on fewer collapses: "
        f"**{c['learned']['verdict']}**; that conclusion on real features: **{c['verdict']}**.")
flines.append(f"- Best pair ({PAIR_ARM}) on real features — collapse rate {_frozen_rates(PAIR_ARM)}; "
              f"mean final loss {frozen_effects[PAIR_ARM]['mean_final_loss']:.3f}; verdicts: "
              f"{_judge(frozen_effects[PAIR_ARM])}.")
if SMOKE:
    flines.insert(0, "**SMOKE RUN — too few seeds and steps for any conclusion.**\n")
FROZEN_RUNTIME_S = time.perf_counter() - T_FROZEN
flines.append(f"- Section 9 took {FROZEN_RUNTIME_S:.0f} s (feature encoding, if not cached, included).")
display(Markdown("\n".join(flines)))

# %%
def _per_arm(col: str, table=summary, arms=ARMS) -> dict:
    return {arm: {f"{m}x": float(v) for m, v in
                  table[table["arm"] == arm].set_index("lr_mult")[col].items()}
            for arm in arms}


def _per_arm_ci(table=summary, arms=ARMS) -> dict:
    """Each arm's 95% Wilson interval of its collapse rate per learning rate, as [low, high]."""
    low, high = _per_arm("collapse_ci_low", table, arms), _per_arm("collapse_ci_high", table, arms)
    return {arm: {m: [low[arm][m], high[arm][m]] for m in low[arm]} for arm in arms}


n_keys = N_PATCHES + CAPTION_LEN
write_metrics({
    "smoke": SMOKE, "seeds": SEEDS, "steps": STEPS, "batch": BATCH,
    "weights": PROVENANCE["weights"], "data": DATA_ID, "features": LEARNED,
    "collapse_definition": PROVENANCE["collapse"],
    "tune_lrs": TUNE_LRS, "tuned_lr": TUNED_LR, "tuning": TUNING,
    "lr_multipliers": LR_MULTIPLIERS, "lrs": LRS,
    "arms": list(ARMS), "best_pair": list(PAIR), "best_arm": best_arm,
    "n_runs": len(runs),
    "collapse_rate": _per_arm("collapse_rate"),
    "collapse_rate_ci95": _per_arm_ci(),
    "collapse_rate_per_arm": runs.groupby("arm")["collapsed"].mean().to_dict(),
    "grad_vanish_rate": _per_arm("grad_vanish_rate"),
    "diverged_rate": _per_arm("diverged_rate"),
    "final_loss": _per_arm("final_loss"),
    "final_acc": _per_arm("final_acc"),
    "n_keys": n_keys, "log_n_keys": math.log(n_keys),
    "entropy_init_mean": float(runs["entropy_init"].mean()),
    "entropy_init_by_arm": runs.groupby("arm")["entropy_init"].mean().to_dict(),
    "baseline_grad_ratio_steps": [s10, s50],
    "baseline_grad_ratio": {f"{m}x": float(v) for m, v in grad_ratio_by_mult.items()},
    "seed_remedy": seed_eff,
    "remedy_effects": effects,
    "frozen_features": FROZEN, "frozen_encoders": list(FEATURES.encoders),
    "frozen_data": FROZEN_PROVENANCE["data"],
    "frozen_lr_multipliers": FROZEN_LR_MULTIPLIERS, "frozen_lrs": FROZEN_LRS,
    "frozen_seeds": FROZEN_SEEDS, "frozen_steps": STEPS, "frozen_arms": list(FROZEN_ARMS),
    "frozen_n_runs": len(frozen_runs),
    "frozen_run_features": sorted(frozen_runs["features"].unique()),
    "frozen_n_keys": N_PATCHES + AUDIO_FRAMES + CAPTION_LEN,
    "frozen_entropy_init_mean": float(frozen_runs["entropy_init"].mean()),
    "frozen_collapse_rate": _per_arm("collapse_rate", frozen_summary, FROZEN_ARMS),
    "frozen_collapse_rate_ci95": _per_arm_ci(frozen_summary, FROZEN_ARMS),
    "frozen_diverged_rate": _per_arm("diverged_rate", frozen_summary, FROZEN_ARMS),
    "frozen_final_loss": _per_arm("final_loss", frozen_summary, FROZEN_ARMS),
    "frozen_final_acc": _per_arm("final_acc", frozen_summary, FROZEN_ARMS),
    "frozen_final_mass": {arm: {m.removeprefix("mass_"): float(v) for m, v in row.items()}
                          for arm, row in frozen_final_mass.iterrows()},
    "frozen_final_mass_ci95": frozen_final_mass_ci,
    "frozen_remedy_effects": frozen_effects,
    "frozen_conclusions": frozen_conclusions,
    "frozen_runtime_s": FROZEN_RUNTIME_S,
    "runtime_s": time.perf_counter() - T0,
}, NOTEBOOK, SMOKE)
