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
# `mmcache.scheduler` picks, per window of requests, one lever setting (a δ offset on every
# modality) minimising the Lagrangian under per-setting estimates; λ comes from one controller:
# fixed, I (the seed's update and schedule), PI, PID (derivative on the measurement,
# anti-windup). `mmcache.scheduler_study` holds the experiment's runner and scores.
#
# **Workload** (`mmcache.workload.generate`, synthetic vectors and timing): Zipf intents asked
# through text / image / speech variants, a share of two-modality queries, novel queries,
# sessions, bursts; one popularity reshuffle half-way (`drift_period` = half the stream) and a
# load shift half-way (`shift_load`: offered load `LOAD_BEFORE` → `LOAD_AFTER`).
# **Latency model**: `LatencyModel.measured(servers=SERVERS)` — encoders and tier lookups
# measured on this machine (`data/latency_profile.json`), model inference a labelled
# **assumption** (`ASSUMED_INFERENCE`, medians 400 / 700 / 1000 ms), misses queue FCFS for a
# bounded pool of inference servers. **Cache**: CacheBench-MM's GPU → CPU → NVMe hierarchy
# (`three_tier`, L3 = `CAPACITY_SHARE` of the working set).

# %% tags=["parameters"]
NOTEBOOK = "04_lagrangian_scheduler"  # this notebook: metrics go to runs/<NOTEBOOK>[-smoke]/
SMOKE = False
SEEDS = [0, 1, 2, 3, 4]
N_QUERIES = 20_000
N_INTENTS = 1_500
WINDOW = 400
MULTIMODAL = {"text+image": 0.15, "audio+image": 0.1, "text+audio": 0.1}
DRIFT_FRACTION = 0.5  # share of popularity ranks reshuffled at the half (synthetic)
SERVERS = 4
LOAD_BEFORE, LOAD_AFTER = 0.7, 1.1
CAPACITY_SHARE = 0.05
OFFSETS = [-0.1, -0.05, 0.0, 0.05, 0.1]
FIXED_LAMBDAS = [0.0, 0.05, 0.1, 0.2, 0.5, 1.0]
LAM_MAX = 2.0
PI_GRID = {"kp": [0.5, 1.0, 2.0], "ki": [0.05, 0.1, 0.2]}
PID_KD = 1.0
I_LR_GRID = [0.05, 0.2, 0.5, 1.0]

# %%
import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import seaborn as sns
from IPython.display import Markdown, display

from mmcache.cachebench import LatencyModel, three_tier
from mmcache.plotting import save_figure
from mmcache.runbook import write_metrics
from mmcache.scheduler_study import (best, grid, head, hindsight_fixed, offset_settings,
                                     run_controller, scores, settle_after_shifts, shift_load)
from mmcache.workload import generate

if SMOKE:
    SEEDS, N_QUERIES, N_INTENTS, WINDOW = [0, 1], 4_000, 400, 200
    FIXED_LAMBDAS = [0.0, 0.2, 1.0]
    PI_GRID = {"kp": [0.5, 2.0], "ki": [0.1]}
    I_LR_GRID = [0.05, 0.5]

latency = LatencyModel.measured(servers=SERVERS)
settings = offset_settings(OFFSETS)
WINDOWS = N_QUERIES // WINDOW


def workload(seed: int):
    """The shifted multimodal stream of ``seed``."""
    stream = generate(n_queries=N_QUERIES, n_intents=N_INTENTS, multimodal_mix=MULTIMODAL,
                      drift_period=N_QUERIES // 2, drift_fraction=DRIFT_FRACTION, seed=seed)
    return shift_load(stream, latency, LOAD_BEFORE, LOAD_AFTER)


def tiers(stream):
    return three_tier(int(stream.size.sum() * CAPACITY_SHARE))


provenance = {"workload": f"mmcache.workload.generate, synthetic, {N_QUERIES} queries, "
                          f"{N_INTENTS} intents, multimodal {MULTIMODAL}, popularity reshuffle "
                          f"({DRIFT_FRACTION}) and load {LOAD_BEFORE} -> {LOAD_AFTER} half-way",
              "latency_model": latency.kind, "weights": "none (synthetic vectors)",
              "seeds": SEEDS, "window": WINDOW, "smoke": SMOKE}

# %% [markdown]
# ## First pass: what each setting does, and the target
#
# Every δ offset held for the whole run (seed 0). The target is derived, not picked: the midpoint
# of the strictest and loosest settings' hit rates, so some settings reach it and others do not.

# %%
first = workload(SEEDS[0])
held = {d: run_controller(first, tiers(first), latency, [s], "fixed", 0.0, window=WINDOW)
        for d, s in zip(OFFSETS, settings)}
static = pd.DataFrame([{"delta_offset": d, **scores(r, 0.0),
                        "window_hit_rate_sd": float(r.hit_rate.iloc[1:].std())}
                       for d, r in held.items()])
TARGET = round(float((static.hit_rate.iloc[0] + static.hit_rate.iloc[-1]) / 2), 3)
LATENCY_FALLS_WITH_HITS = bool(static.sort_values("hit_rate").mean_latency_ms
                               .is_monotonic_decreasing)
print(f"hit-rate target: {TARGET}; mean latency falls as the hit rate rises over the held "
      f"settings: {LATENCY_FALLS_WITH_HITS}")
static[["delta_offset", "hit_rate", "error_rate", "mean_latency_ms", "p99_latency_ms",
        "window_hit_rate_sd"]]

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
# The last column is the spread of one held setting's hit rate from window to window (sessions,
# bursts and the drift make it): when it is several points, "within ±1 point of the target for
# good" cannot happen window by window for any controller, and settling then equals the run's
# length; read the steady-state error (the last 10% of windows' mean) instead.

# %% [markdown]
# ## Gains: chosen on seed 0's first half, shown on a grid
#
# Procedure: each controller's gains minimise the tracking error (mean |hit rate − target| over
# windows) on the first half of seed 0's stream only; they are then run unchanged on all seeds'
# whole streams. λ's scale: false-hit rate per unit of hit rate; `lam_max` = `LAM_MAX`, above the
# λ at which the loosest setting wins (the first pass's error/hit slopes). I keeps the seed's
# schedule (lr 0.05 → 0.001) for the reported row; its lr grid is shown for comparison.

# %%
tune = head(workload(SEEDS[0]), N_QUERIES // 2)
half_windows = len(tune) // WINDOW
common = dict(window=WINDOW)
pi_grid = grid(tune, tiers(tune), latency, settings, "PI", TARGET, PI_GRID,
               fixed={"lam_max": LAM_MAX}, **common)
pid_grid = grid(tune, tiers(tune), latency, settings, "PID", TARGET, PI_GRID,
                fixed={"lam_max": LAM_MAX, "kd": PID_KD}, **common)
i_grid = grid(tune, tiers(tune), latency, settings, "I", TARGET, {"lr_start": I_LR_GRID},
              fixed={"horizon": half_windows}, **common)
pi_best, pid_best = best(pi_grid), best(pid_grid)
PARAMS = {"fixed": None,  # the best fixed λ in hindsight, set below
          "I": {"horizon": WINDOWS},
          "PI": {"kp": pi_best["kp"], "ki": pi_best["ki"], "lam_max": LAM_MAX},
          "PID": {"kp": pid_best["kp"], "ki": pid_best["ki"], "kd": PID_KD, "lam_max": LAM_MAX}}
print("chosen gains:", {k: v for k, v in PARAMS.items() if k in ("PI", "PID")})
for name, table_, chosen in (("PI", pi_grid, pi_best), ("PID", pid_grid, pid_best)):
    edge = [k for k in PI_GRID if chosen[k] in (min(PI_GRID[k]), max(PI_GRID[k]))]
    print(f"{name}: violation area over the grid {table_.violation_area.min():.2f}–"
          f"{table_.violation_area.max():.2f}, mean latency {table_.mean_latency_ms.min():.0f}–"
          f"{table_.mean_latency_ms.max():.0f} ms; chosen gains on the grid's edge in {edge}")

fig, axes = plt.subplots(2, 2, figsize=(10, 7))
for row, (name, table) in enumerate((("PI", pi_grid), ("PID", pid_grid))):
    for col, metric in enumerate(("violation_area", "mean_latency_ms")):
        sns.heatmap(table.pivot(index="kp", columns="ki", values=metric), annot=True,
                    fmt=".3g", ax=axes[row, col], cbar=False)
        axes[row, col].set_title(f"{name} (kd={PID_KD if name == 'PID' else 0}): {metric}")
fig.tight_layout()
save_figure(fig, "04_gain_grid", {**provenance, "tuned_on": "seed 0, first half"})
i_grid[["lr_start", "violation_area", "mean_latency_ms", "tracking_error"]]

# %% [markdown]
# ## The fixed-λ sweep and the best fixed λ in hindsight

# %%
streams = {seed: workload(seed) for seed in SEEDS}
sweep = pd.DataFrame([{"seed": seed, "lam": lam, **scores(run_controller(
    s, tiers(s), latency, settings, "fixed", TARGET, window=WINDOW, params={"lam": lam},
    seed=seed), TARGET)} for seed, s in streams.items() for lam in FIXED_LAMBDAS])
BEST_FIXED = hindsight_fixed(sweep, TARGET)
PARAMS["fixed"] = {"lam": BEST_FIXED}
print(f"best fixed λ in hindsight: {BEST_FIXED}")
sweep.groupby("lam")[["hit_rate", "error_rate", "violation_area", "mean_latency_ms"]].mean()

# %% [markdown]
# ## The four controllers on every seed

# %%
runs = {(name, seed): run_controller(s, tiers(s), latency, settings, name, TARGET,
                                     window=WINDOW, params=params, seed=seed)
        for name, params in PARAMS.items() for seed, s in streams.items()}
per_seed = pd.DataFrame([{"controller": name, "seed": seed, **scores(r, TARGET)}
                         for (name, seed), r in runs.items()])
settled = {name: [settle_after_shifts(runs[name, seed], TARGET) for seed in SEEDS]
           for name in PARAMS}
table = per_seed.groupby("controller", sort=False).mean(numeric_only=True).drop(columns="seed")
table["lambda_step_sd"] = [np.mean([runs[name, seed].lam.diff().std() for seed in SEEDS])
                           for name in table.index]  # λ's window-to-window chatter
table[["violation_area", "overshoot", "settling_windows", "steady_state_error", "hit_rate",
       "error_rate", "mean_latency_ms", "p99_latency_ms", "lambda_step_sd"]]

# %%
series = pd.concat([r.assign(controller=name, seed=seed) for (name, seed), r in runs.items()])
fig, axes = plt.subplots(3, 1, figsize=(11, 9), sharex=True)
for ax, (column, label) in zip(axes, (("hit_rate", "hit rate"),
                                      ("mean_latency_ms", "mean latency (ms)"),
                                      ("lam", "λ"))):
    sns.lineplot(series, x="window", y=column, hue="controller", errorbar=("pi", 100), ax=ax)
    ax.axvline(WINDOWS // 2, c="grey", ls=":", lw=1)
    ax.set_ylabel(label)
axes[0].axhline(TARGET, c="k", ls="--", lw=1)
axes[1].set_yscale("log")
axes[2].set_xlabel(f"window of {WINDOW} requests (dotted: load and popularity shift; "
                   "bands: min–max over seeds)")
save_figure(fig, "04_controllers_over_time", provenance)

# %%
mean = table.to_dict("index")
ratio_pi, ratio_pid = (mean[c]["violation_area"] / max(mean["I"]["violation_area"], 1e-12)
                       for c in ("PI", "PID"))
bar_area = any(mean[c]["violation_area"] <= 0.5 * mean["I"]["violation_area"] and
               mean[c]["mean_latency_ms"] <= 1.05 * mean["I"]["mean_latency_ms"]
               for c in ("PI", "PID"))
REACHES_92 = bool(static.hit_rate.max() >= 0.92)
bar_settle = all(s["within_band"] for c in ("I", "PI", "PID") for s in settled[c])
display(Markdown(f"""
**Quality bars** (means over seeds {SEEDS}):

* PI or PID cuts the violation area by at least half against I at ≤ 5% higher mean latency:
  **{'holds' if bar_area else 'does not hold'}** (PI/I area = {ratio_pi:.2f}, PID/I = {ratio_pid:.2f};
  mean latency I {mean['I']['mean_latency_ms']:.0f} ms, PI {mean['PI']['mean_latency_ms']:.0f} ms,
  PID {mean['PID']['mean_latency_ms']:.0f} ms).
* Every adaptive controller ends within 1 point of the target before and after the shift, on every
  seed: **{'holds' if bar_settle else 'does not hold'}**
  ({ {c: [round(s['before_shift'], 3) for s in settled[c]] for c in ('I', 'PI', 'PID')} } before,
  { {c: [round(s['at_end'], 3) for s in settled[c]] for c in ('I', 'PI', 'PID')} } at the end).

λ's window-to-window chatter (std of its step): { {c: round(mean[c]['lambda_step_sd'], 3) for c in PARAMS} }
— the derivative term acts on a window hit rate whose spread from one window to the next is
{static.window_hit_rate_sd.mean():.1%} for a held setting.

**The seed's claim** (38.7 ms at 92.4% hit rate against fixed weights' 42.3 ms / 89.1%):
{'its 92% target is reachable here' if REACHES_92 else 'not reproduced here: no setting reaches a 92% hit rate'}
(the first pass's loosest setting gets {static.hit_rate.max():.1%}); latency is set by inference
misses queueing for {SERVERS} servers (an assumed inference cost): the controllers' means
are {min(mean[c]['mean_latency_ms'] for c in PARAMS):.0f}–{max(mean[c]['mean_latency_ms'] for c in PARAMS):.0f} ms
against the seed's tens of ms. In kind: the
fixed λ={BEST_FIXED} (best in hindsight) gets {mean['fixed']['hit_rate']:.1%} at
{mean['fixed']['mean_latency_ms']:.0f} ms; I {mean['I']['hit_rate']:.1%} at
{mean['I']['mean_latency_ms']:.0f} ms; PI {mean['PI']['hit_rate']:.1%} at
{mean['PI']['mean_latency_ms']:.0f} ms; PID {mean['PID']['hit_rate']:.1%} at
{mean['PID']['mean_latency_ms']:.0f} ms (target {TARGET:.1%}).
"""))

# %%
FIELDS = ("violation_area", "overshoot", "settling_windows", "steady_state_error",
          "mean_latency_ms", "p99_latency_ms", "hit_rate")
metrics = {
    "controllers": {name: {k: float(mean[name][k]) for k in (*FIELDS, "error_rate",
                                                              "lambda_step_sd")}
                    for name in PARAMS},
    "best_fixed_lambda": BEST_FIXED,
    "target": TARGET, "windows": WINDOWS, "seeds": SEEDS,
    "gains": PARAMS, "static_settings": static.to_dict("records"),
    "settled": settled, "seed_target_reachable": REACHES_92,
    "latency_falls_with_hits": LATENCY_FALLS_WITH_HITS,
    "quality_bars": {"violation_area_halved_vs_I": bool(bar_area),
                     "adaptive_within_1pt_after_each_shift": bool(bar_settle)},
    "provenance": provenance,
}
write_metrics(metrics, NOTEBOOK, SMOKE)
