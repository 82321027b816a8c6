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
# # 04 · The Lagrangian dynamic-weight scheduler: I, PI and PID dual control (seed 000 §3.2)
#
# Seed 000 minimises latency subject to hit rate ≥ 92% with dual ascent on λ
# (λ ← max(0, λ + lr·(0.92 − hit rate)), lr cosine-annealed 0.05 → 0.001) and claims 38.7 ms /
# 92.4% against fixed weights' 42.3 ms / 89.1%. Those are claims to test here, not results.
# `mmcache.scheduler` picks, per window of requests, the lever setting (a δ offset on every
# modality) minimising the Lagrangian under per-setting estimates, **mixed with its neighbour**
# (`Scheduler(mix="hit_rate")`): neighbouring offsets are several points of hit rate apart, wider
# than the ±1-point band, so one setting per window can only alternate around a target between
# two of them. As in a Lagrangian relaxation over discrete actions, the window is split between
# the two hull neighbours, each pure at its break-even λ and the looser one's share linear in λ
# between them, so the expected hit rate is continuous in λ (`Scheduler.mixture`). λ comes from
# one controller:
# fixed, I (the seed's update and schedule), PI, PID (derivative on the measurement,
# anti-windup), and PI-aim: a PI on the hit rate's own scale whose output, the hit rate to aim
# at, the scheduler turns into λ through the inverse of the mixture's expected hit rate under its
# estimates (`Scheduler.multiplier`), so its gains do not depend on how steeply the hit rate
# rises with λ on a given stream (see "Why single seeds end off the target" below).
# `mmcache.studies.scheduler_study` holds the experiment's runner and scores.
#
# **Workload** (`mmcache.sim.workload.generate`, synthetic vectors and timing): Zipf intents asked
# through text / image / speech variants, a share of two-modality queries, novel queries,
# sessions, bursts; one popularity reshuffle half-way (`drift_period` = half the stream) and a
# load shift half-way (`shift_load`: offered load `LOAD_BEFORE` → `LOAD_AFTER`, arrival rate ÷
# the servers' capacity as if nothing hit; the backend load, what reaches the servers, is printed
# for the strictest and loosest settings in the first pass).
# **Latency model**: `LatencyModel.measured(servers=SERVERS)` — encoders and tier lookups
# measured on this machine (`mmcache/resources/latency_profile.json`), a miss's model inference
# **measured** for images (the offline CLIP's zero-shot classification, `infer.image`) and speech
# (a Whisper tiny.en transcription, `infer.audio`) and a labelled **assumption** for text
# (`ASSUMED_TEXT_INFERENCE`, median 400 ms: no language model runs here; the headline's
# sensitivity to it is shown at the end), misses queue FCFS for a bounded pool of inference
# servers. **Cache**: CacheBench-MM's GPU → CPU → NVMe hierarchy
# (`three_tier`, L3 = `CAPACITY_SHARE` of the working set).
#
# **What is judged.** A window of `WINDOW` requests measures the hit rate with several points of
# noise (sessions and bursts cluster hits; the first pass prints it), more than the ±1-point band
# of the quality bar, and the first windows are an empty cache's whatever the controller does. So
# every score is computed on one documented signal (`scheduler_study.judged`): the exponentially
# weighted mean of the window hit rates, the newest window's weight `SIGNAL_SMOOTHING` (about ten
# windows' memory), counted from window `WARMUP` on (the windows in which the scheduler tries each
# setting once from an empty cache) and **started afresh at the shift** (window `WINDOWS // 2`),
# so the hit rate judged after the shift carries nothing from before it. The controllers are fed
# the same filter, from the same window on (the first one chosen with every setting estimated)
# and run on without a restart (`Scheduler(signal_smoothing=...)`: a controller is not told when
# the workload shifts). The raw windows' scores are reported next to it.
#
# **λ's scale.** The Lagrangian is false-hit rate ÷ `objective_scale` + λ·(target − hit rate), with
# `objective_scale` the tuning seed's exchange rate (`scheduler_study.exchange_rate`: false hits
# bought per unit of hit rate from the strictest to the loosest held setting), so λ = 1 prices a
# unit of hit rate at the settings' mean exchange rate, and the λ that switches between two
# neighbouring settings is their local exchange rate over the mean one (of order 1).

# %% tags=["parameters"]
NOTEBOOK = "04_lagrangian_scheduler"  # this notebook: metrics go to runs/<NOTEBOOK>[-smoke]/
SMOKE = False
SEEDS = [0, 1, 2, 3, 4]
TUNE_SEED = 100  # the target, λ's scale and clamp come from this seed's stream
TUNE_SEEDS = [100, 101, 102]  # the gains minimise the mean cost over these streams
N_QUERIES = 20_000
N_INTENTS = 1_500
WINDOW = 400
MULTIMODAL = {"text+image": 0.15, "audio+image": 0.1, "text+audio": 0.1}
DRIFT_FRACTION = 0.5  # share of popularity ranks reshuffled at the half (synthetic)
SERVERS = 4
LOAD_BEFORE, LOAD_AFTER = 0.7, 1.1
CAPACITY_SHARE = 0.05
OFFSETS = [-0.1, -0.075, -0.05, -0.025, 0.0, 0.025, 0.05, 0.075, 0.1]
SIGNAL_SMOOTHING = 0.1  # the newest window's weight in the judged, and fed, hit rate
FIXED_LAMBDAS = [0.0, 0.25, 0.5, 1.0, 2.0]  # in the Lagrangian's normalised unit
PI_GRID = {"kp": [0.3, 1.0, 3.0, 10.0, 30.0, 100.0],
           "ki": [0.01, 0.03, 0.1, 0.3, 1.0, 3.0, 10.0, 30.0]}
KD_GRID = [0.0, 1.0, 3.0, 10.0, 30.0, 100.0]  # PID: kd at PI's chosen kp and ki (0: PI)
I_LR_GRID = [0.05, 0.2, 0.5, 1.0]
AIM_GRID = {"kp": [0.0, 0.3, 1.0, 3.0, 10.0, 30.0],  # PI-aim: in hit-rate units
            "ki": [0.003, 0.01, 0.03, 0.1, 0.3, 1.0]}

# %%
import math

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import seaborn as sns
from IPython.display import Markdown, display

from mmcache.sim.latency import LatencyModel
from mmcache.sim.cachebench import backend_load, three_tier
from mmcache.lab.plotting import save_figure
from mmcache.lab.runbook import write_metrics
from mmcache.scheduler import replay_table
from mmcache.studies.scheduler_study import (best, exchange_rate, grid, hindsight_fixed, judged,
                                             needed_multiplier, offset_settings, run_controller,
                                             scores, settle_after_shifts, shift_load, window_noise)
from mmcache.studies.text_inference import sensitivity_metrics, text_inference_sensitivity
from mmcache.sim.workload import generate
from mmcache.studies.verdicts import all_hold, any_holds, describe, mean_difference, mean_within

if SMOKE:
    SEEDS, N_QUERIES, N_INTENTS, WINDOW = [0, 1], 4_000, 400, 200
    FIXED_LAMBDAS = [0.0, 1.0]
    PI_GRID = {"kp": [3.0], "ki": [0.03, 0.1]}
    KD_GRID = [0.0, 10.0]
    I_LR_GRID = [0.05, 0.5]
    AIM_GRID = {"kp": [1.0], "ki": [0.1, 0.3]}
    TUNE_SEEDS = TUNE_SEEDS[:1]

latency = LatencyModel.measured(servers=SERVERS)
settings = offset_settings(OFFSETS)
WINDOWS = N_QUERIES // WINDOW
WARMUP = len(settings)  # each setting tried once, from an empty cache
JUDGING = {"smoothing": SIGNAL_SMOOTHING, "warmup": WARMUP, "restart": WINDOWS // 2}


def workload(seed: int, model: LatencyModel = latency):
    """The shifted multimodal stream of ``seed``, its offered loads under ``model``."""
    stream = generate(n_queries=N_QUERIES, n_intents=N_INTENTS, multimodal_mix=MULTIMODAL,
                      drift_period=N_QUERIES // 2, drift_fraction=DRIFT_FRACTION, seed=seed)
    return shift_load(stream, model, LOAD_BEFORE, LOAD_AFTER)


def tiers(stream):
    return three_tier(int(stream.size.sum() * CAPACITY_SHARE))


provenance = {"workload": f"mmcache.sim.workload.generate, synthetic, {N_QUERIES} queries, "
                          f"{N_INTENTS} intents, multimodal {MULTIMODAL}, popularity reshuffle "
                          f"({DRIFT_FRACTION}) and load {LOAD_BEFORE} -> {LOAD_AFTER} half-way",
              "latency_model": latency.kind, "weights": "none (synthetic vectors)",
              "seeds": SEEDS, "tune_seed": TUNE_SEED, "tune_seeds": TUNE_SEEDS,
              "window": WINDOW,
              "judged": JUDGING, "smoke": SMOKE}

# %% [markdown]
# ## First pass: what each setting does, and the target
#
# Every δ offset held for the whole run (the tuning seed). The target is derived, not picked: the
# midpoint of the strictest and loosest settings' hit rates, so some settings reach it and others
# do not (whether it stays reachable on the evaluated seeds, before and after the shift, is
# checked below). `window_hit_rate_sd`: the raw windows' spread; `judged_sd`: the judged signal's
# spread over the second half's last half (a held setting: what noise alone leaves in it). From
# the same table: `objective_scale` (the exchange rate, see above) and `LAM_MAX`, twice the λ at
# which the loosest setting wins (the steepest neighbouring exchange rate ÷ `objective_scale`):
# above it no decision changes, so the PI/PID clamp leaves room without letting λ wind up further.

# %%
first = workload(TUNE_SEED)
first_table = replay_table(first, tiers(first), settings)  # one neighbour table per stream
held = {d: run_controller(first, tiers(first), latency, [s], "fixed", 0.0, window=WINDOW,
                          table=first_table)
        for d, s in zip(OFFSETS, settings)}
static = pd.DataFrame([{"delta_offset": d, **scores(r, 0.0, **JUDGING),
                        "window_hit_rate_sd": float(r.hit_rate.iloc[WARMUP:].std()),
                        "judged_sd": float(judged(r, **JUDGING).iloc[-WINDOWS // 4:].std())}
                       for d, r in held.items()])
TARGET = round(float((static.hit_rate.iloc[0] + static.hit_rate.iloc[-1]) / 2), 3)
LATENCY_FALLS_WITH_HITS = bool(static.sort_values("hit_rate").mean_latency_ms
                               .is_monotonic_decreasing)
SCALE = exchange_rate(static)
ordered = static.sort_values("hit_rate")
LAM_MAX = round(float(2 * (ordered.error_rate.diff() / ordered.hit_rate.diff()).max() / SCALE), 1)
print(f"hit-rate target: {TARGET}; objective_scale {SCALE:.3f}; lam_max {LAM_MAX}; mean latency "
      f"falls as the hit rate rises over the held settings: {LATENCY_FALLS_WITH_HITS}")
# The load that reaches the inference servers (arrival rate × miss rate × the misses' mean
# inference time ÷ servers; mmcache.sim.cachebench.backend_load) in each half, under the
# strictest and the loosest setting held (the semantic tier's threshold moved by the offset).
HALF = len(first) // 2
BACKEND_LOAD = {f"{d:+g}": [backend_load(first, three_tier(
    int(first.size.sum() * CAPACITY_SHARE), threshold=0.85 - d), latency, **part)
    for part in ({"stop": HALF}, {"start": HALF})] for d in (OFFSETS[0], OFFSETS[-1])}
print(f"offered load {LOAD_BEFORE} -> {LOAD_AFTER}; backend load " + "; ".join(
    f"offset {d}: {b:.2f} -> {a:.2f}" for d, (b, a) in BACKEND_LOAD.items()))
static[["delta_offset", "hit_rate", "error_rate", "mean_latency_ms", "p99_latency_ms",
        "window_hit_rate_sd", "judged_sd"]]

# %% [markdown]
# What moves latency here: every looser setting serves more hits, and each hit skips inference
# and shortens the servers' queue, so mean latency falls as the hit rate rises (printed above,
# checked on the held settings) — when that prints True, no δ lever trades latency against hit
# rate on this model. A
# hit-rate constraint only binds against something a looser δ costs: false hits. So the scheduler
# here minimises the false-hit rate subject to hit rate ≥ target (`objective="error_rate"`), and
# latency is reported as a consequence (the seed's "minimise latency" objective would simply pick
# the loosest δ and never be constrained).
#
# The last two columns are why the judged signal is filtered: the raw windows spread by several
# points, so "within ±1 point for good" could not happen window by window for any controller; the
# judged signal's residual spread for a held setting is the floor under what a controller can
# reach.

# %% [markdown]
# ## The noise floor: what a controller exactly on target would still score
#
# `window_noise`: each held setting's window-to-window noise (the std of its window hit rate's
# steps over √2, over each phase's second half, so the cache's refill is not counted). With
# independent Gaussian windows of that noise: the last window enters the judged end with weight
# `SIGNAL_SMOOTHING` and is measured after the last decision, so no controller can cancel it —
# `LAST_SD` bounds from below how far any controller's judged end strays from its aim, and
# `WITHIN_BOUND ** ENDS_JUDGED` bounds from above the chance that all judged ends (before and
# after the shift, every seed, I, PI, PID and PI-aim) lie within 1 point even when every aim is
# the target;
# `OPEN_SD` is the judged signal's spread with no feedback at all (a held setting). A window on
# target in expectation falls σ/√(2π) below it on average, so `RAW_AREA_ON_TARGET` is the raw
# violation area of a controller exactly on target.

# %%
WINDOW_NOISE = float(np.mean([window_noise(r, warmup=WARMUP, restart=WINDOWS // 2)
                              for r in held.values()]))
LAST_SD = SIGNAL_SMOOTHING * WINDOW_NOISE
OPEN_SD = WINDOW_NOISE * math.sqrt(SIGNAL_SMOOTHING / (2 - SIGNAL_SMOOTHING))
WITHIN_BOUND = math.erf(0.01 / (LAST_SD * math.sqrt(2)))
ENDS_JUDGED = 2 * len(SEEDS) * 4  # I, PI, PID, PI-aim
RAW_AREA_ON_TARGET = WINDOW_NOISE / math.sqrt(2 * math.pi) * (WINDOWS - WARMUP)
print(f"window noise {WINDOW_NOISE:.4f}; judged end's spread: ≥ {LAST_SD:.4f} under any "
      f"controller, {OPEN_SD:.4f} with none; all {ENDS_JUDGED} judged ends within 1 point: "
      f"chance ≤ {WITHIN_BOUND ** ENDS_JUDGED:.1%}; raw area on target ≈ {RAW_AREA_ON_TARGET:.2f}")

# %% [markdown]
# ## Gains: chosen on the tuning seeds, shown on a grid
#
# Procedure: PI's kp and ki minimise the mean `cost` over the tuning seeds' (`TUNE_SEEDS`) whole
# streams (shifts included) over a log grid: a run's false-hit rate ÷ `objective_scale` plus
# `LAM_MAX` × its tracking
# error (mean |judged hit rate − target|), i.e. the Lagrangian at λ = `LAM_MAX` with the
# constraint's miss counted on both sides. The weight exceeds every setting's exchange rate, so
# sitting below the target never pays for the false hits it saves (at weight 1 the criterion
# prefers a point below the target). Tracking error alone rewards a λ that slams between 0 and
# its cap (the choice alternates between far settings, whose mean is on target, at several times
# the false hits of the two settings next to it); the false-hit term charges that. PID keeps
# PI's kp and ki and takes the kd of a line search (kd = 0 included, i.e. PI itself) by the same
# criterion. The evaluated seeds are never used. I keeps the seed's schedule (lr 0.05 → 0.001)
# for the reported row; its lr grid is shown for comparison. Why several tuning seeds: a
# stream's windows carry several points of noise (below), so one stream's minimum is partly that
# stream's noise; the gains minimise the mean over three. PI-aim's kp and ki (in hit-rate units:
# the aim moves by kp·e + Σ ki·e; its integral bounded at ±0.1, 10 points) come from their own
# grid by the same criterion.
#
# The criterion is also shown one-sided: `lagrangian_cost` counts only the judged windows below
# the target (the Lagrangian at λ = `LAM_MAX` itself, the constraint as the first quality bar
# weighs it); a margin above the target then costs only its false hits. Its PI gains are run on
# the evaluated seeds below as a sensitivity row, not as the reported PI.

# %%
common = dict(window=WINDOW, objective_scale=SCALE, tracking_weight=LAM_MAX, **JUDGING)
tuning = {seed: (s, tiers(s)) for seed in TUNE_SEEDS
          for s in [first if seed == TUNE_SEED else workload(seed)]}
pi_grid = grid(tuning, latency, settings, "PI", TARGET, PI_GRID, fixed={"lam_max": LAM_MAX},
               **common)
pi_best = best(pi_grid)
pi_one_sided = best(pi_grid, "lagrangian_cost")
pid_grid = grid(tuning, latency, settings, "PID", TARGET, {"kd": KD_GRID},
                fixed={"kp": pi_best["kp"], "ki": pi_best["ki"], "lam_max": LAM_MAX}, **common)
pid_best = best(pid_grid)
i_grid = grid(tuning, latency, settings, "I", TARGET, {"lr_start": I_LR_GRID},
              fixed={"horizon": WINDOWS}, **common)
aim_grid = grid(tuning, latency, settings, "PI-aim", TARGET, AIM_GRID, **common)
aim_best = best(aim_grid)
PARAMS = {"fixed": None,  # the best fixed λ in hindsight, set below
          "I": {"horizon": WINDOWS},
          "PI": {"kp": pi_best["kp"], "ki": pi_best["ki"], "lam_max": LAM_MAX},
          "PID": {"kp": pi_best["kp"], "ki": pi_best["ki"], "kd": pid_best["kd"],
                  "lam_max": LAM_MAX},
          "PI-aim": {"kp": aim_best["kp"], "ki": aim_best["ki"]}}
ONE_SIDED = {"kp": pi_one_sided["kp"], "ki": pi_one_sided["ki"], "lam_max": LAM_MAX}
print("chosen gains:", {k: v for k, v in PARAMS.items() if k in ("PI", "PID", "PI-aim")},
      "; by the one-sided criterion, PI:", ONE_SIDED)
ON_EDGE = {"PI": [k for k in PI_GRID if pi_best[k] in (min(PI_GRID[k]), max(PI_GRID[k]))],
           "PID": ["kd"] if pid_best["kd"] in (min(KD_GRID), max(KD_GRID)) else [],
           "PI-aim": [k for k in AIM_GRID
                      if aim_best[k] in (min(AIM_GRID[k]), max(AIM_GRID[k]))]}
KD_GAIN = 1 - pid_best["cost"] / float(pid_grid.cost.iloc[0])  # cost cut against kd = 0 (PI)
print(f"PI: cost over the grid {pi_grid.cost.min():.3f}–{pi_grid.cost.max():.3f}; chosen gains "
      f"on the grid's edge in {ON_EDGE}; PID's best kd {pid_best['kd']:g} (cost "
      f"{pid_best['cost']:.4f} against kd = 0's {pid_grid.cost.iloc[0]:.4f}: {KD_GAIN:.1%} less)")

fig, axes = plt.subplots(1, 5, figsize=(22, 4))
for ax, metric in zip(axes[:3], ("cost", "lagrangian_cost", "violation_area")):
    sns.heatmap(pi_grid.pivot(index="kp", columns="ki", values=metric), annot=True,
                fmt=".3g", ax=ax, cbar=False)
    ax.set_title(f"PI, mean over seeds {TUNE_SEEDS}:\n{metric}")
for metric, style in (("cost", "o-"), ("tracking_error", "s--")):
    axes[3].plot(pid_grid.kd, pid_grid[metric], style, label=f"PID, {metric}")
axes[3].set_xscale("symlog", linthresh=1.0)
axes[3].set_xlabel(f"kd (kp={pi_best['kp']:g}, ki={pi_best['ki']:g})")
axes[3].legend()
sns.heatmap(aim_grid.pivot(index="kp", columns="ki", values="cost"), annot=True, fmt=".3g",
            ax=axes[4], cbar=False)
axes[4].set_title(f"PI-aim, mean over seeds {TUNE_SEEDS}:\ncost")
fig.tight_layout()
save_figure(fig, "04_gain_grid", {**provenance, "tuned_on": f"seeds {TUNE_SEEDS}"})
pd.concat([pid_grid[["kd", "cost", "tracking_error", "error_rate", "lambda_step_sd"]],
           i_grid[["lr_start", "cost", "tracking_error", "error_rate", "lambda_step_sd"]],
           aim_grid[["kp", "ki", "cost", "tracking_error", "error_rate", "lambda_step_sd"]]])

# %% [markdown]
# ## The fixed-λ sweep and the best fixed λ in hindsight

# %%
streams = {seed: workload(seed) for seed in SEEDS}
tables = {seed: replay_table(s, tiers(s), settings) for seed, s in streams.items()}
sweep = pd.DataFrame([{"seed": seed, "lam": lam, **scores(run_controller(
    s, tiers(s), latency, settings, "fixed", TARGET, window=WINDOW, params={"lam": lam},
    seed=seed, objective_scale=SCALE, table=tables[seed]), TARGET, **JUDGING)}
    for seed, s in streams.items() for lam in FIXED_LAMBDAS])
BEST_FIXED = hindsight_fixed(sweep, TARGET)
PARAMS["fixed"] = {"lam": BEST_FIXED}
print(f"best fixed λ in hindsight: {BEST_FIXED}")
sweep.groupby("lam")[["hit_rate", "error_rate", "violation_area", "mean_latency_ms"]].mean()

# %% [markdown]
# ## Is the target reachable on every evaluated seed, before and after the shift?
#
# Every setting held on each evaluated seed (`held_eval`, used again below); the strictest and
# loosest ones' mean hit rate over the
# second half of each phase (the cache refilled) bounds what any controller can reach there. The
# target was not chosen here; this only checks that it is not outside, or at the edge of, the
# reachable range. `margin`: the target's distance to the nearer end.

# %%
HALF = WINDOWS // 2
phases = {"before": slice(HALF // 2, HALF), "after": slice(HALF + HALF // 2, WINDOWS)}
held_eval = {(seed, k): run_controller(s, tiers(s), latency, [setting], "fixed", 0.0,
                                       window=WINDOW, table=tables[seed])
             for seed, s in streams.items() for k, setting in enumerate(settings)}
reach = pd.DataFrame([{"seed": seed, "phase": phase, "setting": which,
                       "hit_rate": float(held_eval[seed, k].hit_rate.iloc[part].mean())}
                      for seed in SEEDS
                      for which, k in (("strictest", 0), ("loosest", len(settings) - 1))
                      for phase, part in phases.items()]).pivot(
    index=["seed", "phase"], columns="setting", values="hit_rate")
reach["margin"] = np.minimum(reach.loosest - TARGET, TARGET - reach.strictest)
TARGET_MARGIN = float(reach.margin.min())
print(f"the target's least margin inside the reachable range: {TARGET_MARGIN:.3f}")
reach

# %% [markdown]
# ## The four controllers on every seed

# %%
runs = {(name, seed): run_controller(s, tiers(s), latency, settings, name, TARGET,
                                     window=WINDOW, params=params, seed=seed,
                                     signal_smoothing=SIGNAL_SMOOTHING, objective_scale=SCALE,
                                     table=tables[seed])
        for name, params in PARAMS.items() for seed, s in streams.items()}
per_seed = pd.DataFrame([{"controller": name, "seed": seed,
                          **scores(r, TARGET, objective_scale=SCALE, tracking_weight=LAM_MAX,
                                   **JUDGING)}
                         for (name, seed), r in runs.items()])
settled = {name: [settle_after_shifts(runs[name, seed], TARGET, **JUDGING) for seed in SEEDS]
           for name in PARAMS}
RAW = {"warmup": WARMUP}  # the raw windows: the last window before the shift and the last one
settled_raw = {name: [settle_after_shifts(runs[name, seed], TARGET, **RAW) for seed in SEEDS]
               for name in PARAMS}
table = per_seed.groupby("controller", sort=False).mean(numeric_only=True).drop(columns="seed")
table[["violation_area", "raw_violation_area", "overshoot", "settling_windows",
       "steady_state_error", "hit_rate", "error_rate", "mean_latency_ms", "p99_latency_ms",
       "lambda_step_sd"]]

# %% [markdown]
# ## Why single seeds end off the target: the λ the target needs differs by stream and phase
#
# From the held settings above, per evaluated seed and phase (its second half):
# `needed_lambda`, the λ at which the mixture of the held settings' hull reaches the target in
# expectation (`scheduler_study.needed_multiplier`), and `slope`, how many points of hit rate a
# unit of λ buys there. A PI on λ with integral gain ki moves the hit rate by about
# ki × slope × e per window, so its integral needs about 1 / (ki × slope) windows to close a gap
# (`pi_windows`; a phase has `WINDOWS // 2`); what it has not closed its proportional term holds
# as a standing error. PI-aim's integral moves its aim by ki × e per window whatever the slope.
# `lam_PI`, `lam_PI-aim`: λ at the phase's last window; `end_PI`, `end_PI-aim`: the judged ends.

# %%
ENDS = {"before": ("before_shift", HALF - 1), "after": ("at_end", WINDOWS - 1)}
needed = pd.DataFrame([
    {"seed": seed, "phase": phase,
     **dict(zip(("needed_lambda", "slope"), needed_multiplier(
         [held_eval[seed, k].iloc[part][["hit_rate", "error_rate"]].mean()
          for k in range(len(settings))], settings, TARGET, objective_scale=SCALE))),
     **{f"lam_{c}": float(runs[c, seed].lam.iloc[ENDS[phase][1]]) for c in ("PI", "PI-aim")},
     **{f"end_{c}": settled[c][i][ENDS[phase][0]] for c in ("PI", "PI-aim")}}
    for i, seed in enumerate(SEEDS) for phase, part in phases.items()])
needed["pi_windows"] = 1 / (PARAMS["PI"]["ki"] * needed.slope)
needed.round(3)

# %% [markdown]
# ## Criterion sensitivity: PI with the one-sided criterion's gains
#
# The same runs with PI's gains chosen (on the tuning seeds) by `lagrangian_cost` instead.

# %%
one_sided_runs = [run_controller(s, tiers(s), latency, settings, "PI", TARGET, window=WINDOW,
                                 params=ONE_SIDED, seed=seed, signal_smoothing=SIGNAL_SMOOTHING,
                                 objective_scale=SCALE, table=tables[seed])
                  for seed, s in streams.items()]
one_sided = pd.DataFrame([scores(r, TARGET, objective_scale=SCALE, tracking_weight=LAM_MAX,
                                 **JUDGING) for r in one_sided_runs]).mean()
one_sided_ends = [settle_after_shifts(r, TARGET, **JUDGING) for r in one_sided_runs]
SIDED = ["violation_area", "raw_violation_area", "hit_rate", "error_rate", "mean_latency_ms"]
pd.DataFrame({"I": table.loc["I", SIDED], "PI (cost)": table.loc["PI", SIDED],
              "PI (lagrangian_cost)": one_sided[SIDED]})

# %% [markdown]
# ## What the mix changes: the same gains, one setting per window
#
# I and PI again on every seed with the scheduler's argmin alone (`mix=False`), the gains as
# chosen above (with the mix): how much of each score is the lever's quantisation.

# %%
argmin_only = pd.DataFrame([{"controller": name, "seed": seed, **scores(run_controller(
    s, tiers(s), latency, settings, name, TARGET, window=WINDOW, params=PARAMS[name], seed=seed,
    signal_smoothing=SIGNAL_SMOOTHING, objective_scale=SCALE, mix=False, table=tables[seed]),
    TARGET, objective_scale=SCALE, tracking_weight=LAM_MAX, **JUDGING)}
    for name in ("I", "PI") for seed, s in streams.items()])
COMPARED = ["violation_area", "raw_violation_area", "steady_state_error", "hit_rate",
            "error_rate", "mean_latency_ms", "lambda_step_sd"]
unmixed = argmin_only.groupby("controller", sort=False)[COMPARED].mean()
pd.concat({"mixed": table.loc[["I", "PI"], COMPARED], "argmin only": unmixed})

# %%
series = pd.concat([r.assign(controller=name, seed=seed, judged=judged(r, **JUDGING))
                    for (name, seed), r in runs.items()], ignore_index=True)
fig, axes = plt.subplots(3, 1, figsize=(11, 9), sharex=True)
for ax, (column, label) in zip(axes, (("judged", "judged hit rate"),
                                      ("mean_latency_ms", "mean latency (ms)"),
                                      ("lam", "λ"))):
    sns.lineplot(series, x="window", y=column, hue="controller", errorbar=("pi", 100), ax=ax)
    ax.axvline(WINDOWS // 2, c="grey", ls=":", lw=1)
    ax.set_ylabel(label)
axes[0].axhline(TARGET, c="k", ls="--", lw=1)
axes[0].axhspan(TARGET - 0.01, TARGET + 0.01, color="k", alpha=0.08)
axes[1].set_yscale("log")
axes[2].set_xlabel(f"window of {WINDOW} requests (dotted: load and popularity shift; "
                   "bands: min–max over seeds)")
save_figure(fig, "04_controllers_over_time", provenance)

# %%
mean = table.to_dict("index")
ADAPTIVE = ("I", "PI", "PID", "PI-aim")
CHALLENGERS = ("PI", "PID", "PI-aim")


def seed_values(controller: str, column: str) -> np.ndarray:
    """``column`` of ``controller``'s runs, one value per seed in seed order."""
    rows = per_seed[per_seed.controller == controller].sort_values("seed")
    return rows[column].to_numpy(float)


def area_bar(area: str) -> dict:
    """PI, PID or PI-aim has at most half I's ``area`` at ≤ 5% higher mean latency, tested per
    challenger over seeds: the paired t-intervals of its ``area`` − ½ × I's and its mean latency
    − 1.05 × I's must both lie below 0; the bar holds when one challenger holds on both."""
    challengers = {}
    for c in CHALLENGERS:
        parts = {"area": mean_difference(seed_values(c, area), seed_values("I", area),
                                         claim="below", factor=0.5),
                 "latency": mean_difference(seed_values(c, "mean_latency_ms"),
                                            seed_values("I", "mean_latency_ms"), claim="below",
                                            factor=1.05)}
        challengers[c] = {"verdict": all_hold(list(parts.values())), **parts}
    return {"verdict": any_holds(list(challengers.values())), "challengers": challengers}


def settle_bar(ends: dict) -> tuple[bool, dict]:
    """(every adaptive run ends within 1 point before and after the shift: a count over these
    seeds, no test; the seed means do: each controller's mean end before and after the shift,
    its t-interval over seeds inside the band, every one of them)."""
    means = {c: {k: mean_within([e[k] for e in ends[c]], TARGET - 0.01, TARGET + 0.01)
                 for k in ("before_shift", "at_end")} for c in ADAPTIVE}
    return (all(e["within_band"] for c in ADAPTIVE for e in ends[c]),
            {"verdict": all_hold([v for by_end in means.values() for v in by_end.values()]),
             "ends": means})


def area_detail(bar: dict) -> str:
    """Each challenger's two tests, with their intervals."""
    return "; ".join(f"{c}: area − ½·I's {describe(parts['area'], 3)}, latency − 1.05·I's "
                     f"{describe(parts['latency'], 0)}" for c, parts in bar["challengers"].items())


def seed_mean_detail(bar: dict) -> str:
    """Each controller's seed-mean ends, with their intervals."""
    return "; ".join(f"{c} {k.replace('_', ' ')} {describe(v, 3)}"
                     for c, by_end in bar["ends"].items() for k, v in by_end.items())


ratio = {c: mean[c]["violation_area"] / max(mean["I"]["violation_area"], 1e-12)
         for c in CHALLENGERS}
raw_ratio = {c: mean[c]["raw_violation_area"] / max(mean["I"]["raw_violation_area"], 1e-12)
             for c in CHALLENGERS}
BARS = {"violation_area_halved_vs_I": area_bar("violation_area"),
        "raw_violation_area_halved_vs_I": area_bar("raw_violation_area")}
BARS["adaptive_within_1pt_after_each_shift"], BARS["within_1pt_on_seed_mean"] = \
    settle_bar(settled)
BARS["raw_within_1pt_after_each_shift"], BARS["raw_within_1pt_on_seed_mean"] = \
    settle_bar(settled_raw)
REACHES_92 = bool(static.hit_rate.max() >= 0.92)
seed_mean_ends = {c: {k: float(np.mean([e[k] for e in settled[c]]))
                      for k in ("before_shift", "at_end")} for c in PARAMS}
one_sided_ratio = {area: float(one_sided[area] / max(mean["I"][area], 1e-12))
                   for area in ("violation_area", "raw_violation_area")}
one_sided_mean_ends = {k: float(np.mean([e[k] for e in one_sided_ends]))
                       for k in ("before_shift", "at_end")}
SATURATED = {c: float(series[series.controller == c].lam.isin([0.0, LAM_MAX]).mean())
             for c in ("PI", "PID")}
verdict = {k: ("holds" if v else "does not hold") if isinstance(v, bool) else v["verdict"]
           for k, v in BARS.items()}
RAW_FORM = ("the raw form of the first bar needs a margin above the target, not better tracking"
            if RAW_AREA_ON_TARGET > 0.5 * mean["I"]["raw_violation_area"] else
            "so on target the raw form of the first bar is within reach")
WINDUP = ("anti-windup rarely acts in these runs" if max(SATURATED.values()) < 0.1 else
          "the clamp and anti-windup act")
SIDED_NOTE = ("the same gains as the two-sided criterion's" if ONE_SIDED == PARAMS["PI"] else
              "it buys the area with a margin above the target"
              if one_sided["hit_rate"] > mean["PI"]["hit_rate"] else "it tracks the target")
display(Markdown(f"""
**Quality bars** (seeds {SEEDS}). A bar on a mean over seeds is a test over the seeds: a paired
t-interval (challenger − factor × I) or the t-interval of a mean end, **holds** when its 95%
interval is wholly on the bar's side, **does not hold** when wholly on the other,
**inconclusive** when it straddles the line. A bar "on every seed" is a count over these seeds,
not an estimate, and is stated as it is (holds / does not hold).

* PI, PID or PI-aim cuts the violation area by at least half against I at ≤ 5% higher mean
  latency: on the judged signal **{verdict['violation_area_halved_vs_I']}** (PI/I area =
  {ratio['PI']:.2f}, PID/I = {ratio['PID']:.2f}, PI-aim/I = {ratio['PI-aim']:.2f};
  {area_detail(BARS['violation_area_halved_vs_I'])}); on the raw
  windows **{verdict['raw_violation_area_halved_vs_I']}** (PI/I = {raw_ratio['PI']:.2f}, PID/I =
  {raw_ratio['PID']:.2f}, PI-aim/I = {raw_ratio['PI-aim']:.2f};
  {area_detail(BARS['raw_violation_area_halved_vs_I'])}); mean latency I
  {mean['I']['mean_latency_ms']:.0f} ms, PI {mean['PI']['mean_latency_ms']:.0f} ms, PID
  {mean['PID']['mean_latency_ms']:.0f} ms, PI-aim {mean['PI-aim']['mean_latency_ms']:.0f} ms.
* Every adaptive controller ends within 1 point of the target before and after the shift
  (judged signal restarted at the shift), on every seed:
  **{verdict['adaptive_within_1pt_after_each_shift']}**
  ({ {c: [round(e['before_shift'], 3) for e in settled[c]] for c in ADAPTIVE} } before,
  { {c: [round(e['at_end'], 3) for e in settled[c]] for c in ADAPTIVE} } at the end);
  on the mean over seeds: **{verdict['within_1pt_on_seed_mean']}**
  ({seed_mean_detail(BARS['within_1pt_on_seed_mean'])}).
  On the raw last windows: every seed **{verdict['raw_within_1pt_after_each_shift']}**, seed
  mean **{verdict['raw_within_1pt_on_seed_mean']}**
  ({seed_mean_detail(BARS['raw_within_1pt_on_seed_mean'])}). The target lies at least
  {TARGET_MARGIN:.1%} inside the reachable range on every seed and phase, so this is not
  infeasibility. For scale: a held setting's judged signal still spreads by
  {static.judged_sd.mean():.1%} (raw windows: {static.window_hit_rate_sd.mean():.1%}).

**The noise floor.** A held setting's windows carry {WINDOW_NOISE:.1%} of window-to-window
noise; the last window alone moves the judged end by {LAST_SD:.2%} (sd) under any controller
({OPEN_SD:.2%} with no feedback), so even a controller aiming exactly at the target would have
all {ENDS_JUDGED} judged ends within the band with a chance of at most about
{WITHIN_BOUND ** ENDS_JUDGED:.0%}: "on every seed" is mostly a bar on the noise. A controller
exactly on target would leave a raw violation area of about {RAW_AREA_ON_TARGET:.2f}, against half
I's raw area, {0.5 * mean['I']['raw_violation_area']:.2f}: {RAW_FORM}.
λ sits at 0 or its clamp in {SATURATED['PI']:.0%} (PI) and {SATURATED['PID']:.0%} (PID) of
windows, so {WINDUP}.

**Criterion sensitivity.** PI with the one-sided criterion's gains (kp {ONE_SIDED['kp']:g},
ki {ONE_SIDED['ki']:g}): violation area {one_sided['violation_area']:.2f}
({one_sided_ratio['violation_area']:.2f} of I's; raw {one_sided_ratio['raw_violation_area']:.2f}),
hit rate {one_sided['hit_rate']:.3f}, {one_sided['mean_latency_ms']:.0f} ms, judged ends
{one_sided_mean_ends['before_shift']:.3f} before and {one_sided_mean_ends['at_end']:.3f} after the
shift on the seed mean: {SIDED_NOTE}.

λ's window-to-window chatter (std of its step): { {c: round(mean[c]['lambda_step_sd'], 3) for c in PARAMS} }.

**The seed's claim** (38.7 ms at 92.4% hit rate against fixed weights' 42.3 ms / 89.1%):
{'its 92% target is reachable here' if REACHES_92 else 'not reproduced here: no setting reaches a 92% hit rate'}
(the first pass's loosest setting gets {static.hit_rate.max():.1%}); latency is set by inference
misses queueing for {SERVERS} servers (text misses at an assumed inference time, speech
misses at a measured Whisper transcription): the controllers' means
are {min(mean[c]['mean_latency_ms'] for c in PARAMS):.0f}–{max(mean[c]['mean_latency_ms'] for c in PARAMS):.0f} ms
against the seed's tens of ms. In kind: the
fixed λ={BEST_FIXED} (best in hindsight) gets {mean['fixed']['hit_rate']:.1%} at
{mean['fixed']['mean_latency_ms']:.0f} ms; I {mean['I']['hit_rate']:.1%} at
{mean['I']['mean_latency_ms']:.0f} ms; PI {mean['PI']['hit_rate']:.1%} at
{mean['PI']['mean_latency_ms']:.0f} ms; PID {mean['PID']['hit_rate']:.1%} at
{mean['PID']['mean_latency_ms']:.0f} ms; PI-aim {mean['PI-aim']['hit_rate']:.1%} at
{mean['PI-aim']['mean_latency_ms']:.0f} ms (target {TARGET:.1%}).
"""))

# %% [markdown]
# ## On a known plant
#
# The four controllers (fixed λ = 1, the seed's I with lr cosine-annealed 0.05 → 0.001, PI, PID
# with derivative on the measurement and anti-windup) on a first-order plant
# (`mmcache.scheduler.demonstrate`: hit-rate target 0.92, 300 windows, no noise), where what each
# controller does to a step is visible without the stream's noise. "Settling windows" equal to the
# window count means it never settled.

# %%
from mmcache.scheduler import demonstrate

known_plant = demonstrate()
pd.DataFrame(known_plant).T

# %% [markdown]
# ## Sensitivity to the assumed text inference time
#
# Image and speech misses cost measured model calls; a text miss costs an assumed time (no
# language model runs here). The headline, PI's judged violation area over I's (seed means), and
# PI's mean latency, recomputed with the text median at half and twice the assumption (1x: the
# run above again): the evaluated streams are rebuilt under each model (the load shift sets
# arrivals from the offered load, which the text time changes) and only I and PI rerun, with the
# gains, target and scale chosen above, not retuned, which keeps this cheap. The lever trades
# hits against false hits and no hit depends on timing here (no TTL), so the area ratio can only
# move through the arrival times; latency moves with the text cost.

# %%
def headline_at(model: LatencyModel) -> dict[str, float]:
    """PI's judged violation area over I's and PI's mean latency, seed means, under ``model``."""
    rows = []
    for seed in SEEDS:
        s = workload(seed, model)
        table_s = replay_table(s, tiers(s), settings)
        for name in ("I", "PI"):
            run = run_controller(s, tiers(s), model, settings, name, TARGET, window=WINDOW,
                                 params=PARAMS[name], seed=seed,
                                 signal_smoothing=SIGNAL_SMOOTHING, objective_scale=SCALE,
                                 table=table_s)
            rows.append({"controller": name, **scores(run, TARGET, **JUDGING)})
    means = pd.DataFrame(rows).groupby("controller").mean(numeric_only=True)
    return {"pi_vs_i_violation_area": means.violation_area["PI"] / means.violation_area["I"],
            "pi_mean_latency_ms": means.mean_latency_ms["PI"]}


SENSITIVITY = text_inference_sensitivity(headline_at, latency)
SENSITIVITY

# %%
FIELDS = ("violation_area", "overshoot", "settling_windows", "steady_state_error",
          "mean_latency_ms", "p99_latency_ms", "hit_rate")
metrics = {
    "controllers": {name: {k: float(mean[name][k]) for k in (*FIELDS, "error_rate",
                                                              "raw_violation_area",
                                                              "lambda_step_sd")}
                    for name in PARAMS},
    "best_fixed_lambda": BEST_FIXED,
    "target": TARGET, "windows": WINDOWS, "seeds": SEEDS,
    "gains": PARAMS, "static_settings": static.to_dict("records"),
    "argmin_only": {name: {k: float(v) for k, v in row.items()}
                    for name, row in unmixed.to_dict("index").items()},
    "mixed_window_share": float((series.mix_weight > 0).mean()),
    "area_ratio_vs_I": {"judged": ratio, "raw": raw_ratio},
    "settled_range": {c: [min(e[k] for e in settled[c] for k in ("before_shift", "at_end")),
                          max(e[k] for e in settled[c] for k in ("before_shift", "at_end"))]
                      for c in ADAPTIVE},
    "settled": settled, "settled_raw": settled_raw, "settled_seed_mean": seed_mean_ends,
    "gains_on_grid_edge": ON_EDGE, "kd_cost_cut": KD_GAIN, "objective_scale": SCALE,
    "tune_seeds": TUNE_SEEDS,
    "noise_floor": {"window_noise": WINDOW_NOISE, "judged_end_sd_last_window": LAST_SD,
                    "judged_end_sd_open_loop": OPEN_SD, "ends_judged": ENDS_JUDGED,
                    "all_ends_within_1pt_chance_bound": WITHIN_BOUND ** ENDS_JUDGED,
                    "raw_area_on_target": RAW_AREA_ON_TARGET},
    "lambda_saturated_share": SATURATED,
    "needed_lambda": {"range": [float(needed.needed_lambda.min()),
                                float(needed.needed_lambda.max())],
                      "slope_range": [float(needed.slope.min()), float(needed.slope.max())],
                      "pi_windows_range": [float(needed.pi_windows.min()),
                                           float(needed.pi_windows.max())],
                      "pi_lambda_end_range": [float(needed.lam_PI.min()),
                                              float(needed.lam_PI.max())],
                      "aim_lambda_end_range": [float(needed["lam_PI-aim"].min()),
                                               float(needed["lam_PI-aim"].max())],
                      "rows": needed.to_dict("records")},
    "one_sided_criterion": {"gains": ONE_SIDED, "area_ratio_vs_I": one_sided_ratio,
                            "settled_seed_mean": one_sided_mean_ends,
                            **{k: float(one_sided[k]) for k in SIDED}},
    "lam_max": LAM_MAX, "target_margin": TARGET_MARGIN,
    "judged_sd_held": float(static.judged_sd.mean()),
    "window_hit_rate_sd_held": float(static.window_hit_rate_sd.mean()),
    "seed_target_reachable": REACHES_92,
    "latency_falls_with_hits": LATENCY_FALLS_WITH_HITS,
    "load": {"offered": [LOAD_BEFORE, LOAD_AFTER], "backend_by_offset": BACKEND_LOAD,
             "seed": TUNE_SEED},
    "quality_bars": BARS,
    "known_plant": known_plant,
    "text_inference_sensitivity": sensitivity_metrics(SENSITIVITY),
    "provenance": provenance,
}
write_metrics(metrics, NOTEBOOK, SMOKE)
