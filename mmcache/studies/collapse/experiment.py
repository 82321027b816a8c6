"""Training runs, the collapse criterion and the remedy x learning-rate sweep.

A *remedy* is a set of switches (Q/K initialisation, gradient clipping, warmup,
QK-layernorm, σReparam); an *arm* is a named remedy. :func:`train_run` trains
one matcher with the instruments attached and returns its curves and verdicts;
:func:`sweep` runs arms x learning rates x seeds serially on one thread.
"""

from __future__ import annotations

import math
import multiprocessing
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, fields, replace
from typing import Any, Iterable, Mapping, Sequence

import numpy as np
import pandas as pd
import torch
from scipy.stats import fisher_exact

from mmcache.encoders.base import fixed_torch_state
from mmcache.errors import ConfigError
from mmcache.studies.collapse import data
from mmcache.studies.collapse.features import FROZEN, LEARNED, FrozenFeatures, load_features
from mmcache.studies.collapse.instruments import StepRecorder
from mmcache.studies.collapse.model import BlockConfig, CrossModalMatcher, matching_loss
from mmcache.studies.verdicts import Verdict, sign_test


@dataclass(frozen=True)
class Remedy:
    """Stabilising switches; the defaults are the baseline (PyTorch init, nothing else)."""

    qk_init: str = "default"
    clip_norm: float | None = None
    warmup_steps: int = 0
    qk_layernorm: bool = False
    sigma_reparam: bool = False

    def __add__(self, other: "Remedy") -> "Remedy":
        """Both remedies at once; two different non-default initialisations conflict."""
        merged = {}
        for f in fields(self):
            mine, theirs, default = getattr(self, f.name), getattr(other, f.name), f.default
            if mine != default and theirs != default and mine != theirs:
                raise ConfigError(f"remedies conflict on {f.name}: {mine!r} vs {theirs!r}")
            merged[f.name] = mine if mine != default else theirs
        return Remedy(**merged)


def single_remedies(warmup_steps: int) -> dict[str, Remedy]:
    """The baseline and each remedy alone, by arm name."""
    return {
        "baseline": Remedy(),
        "xavier": Remedy(qk_init="xavier"),
        "xavier_0.1": Remedy(qk_init="xavier_0.1"),
        "clip_1.0": Remedy(clip_norm=1.0),
        "warmup": Remedy(warmup_steps=warmup_steps),
        "qk_layernorm": Remedy(qk_layernorm=True),
        "sigma_reparam": Remedy(sigma_reparam=True),
    }


SEED_COMBO = "seed_combo (xavier_0.1+clip_1.0)"


@dataclass(frozen=True)
class TrainConfig:
    """One training run's budget and optimiser; ``lr`` is the peak learning rate."""

    lr: float = 1e-3
    steps: int = 300
    batch: int = 32
    seed: int = 0
    d_model: int = 64
    n_heads: int = 4
    text_keys: bool = True
    adam_eps: float = 1e-8
    train_images_per_scene: int = 14  # x 150 scenes, seeded by the run's seed
    eval_images_per_scene: int = 2   # x 150 scenes, one fixed held-out rendering seed
    frozen_features: str | None = None  # a features.frozen_features .npz; None: learned words
    flush_subnormals: bool = True  # CPU flush-to-zero during the run (see train_run)

    @property
    def features(self) -> str:
        """The feature source's label: :data:`~.features.LEARNED` or :data:`~.features.FROZEN`."""
        return LEARNED if self.frozen_features is None else FROZEN


@dataclass(frozen=True)
class CollapseCriterion:
    """Collapse: mean-over-heads attention entropy below ``fraction`` x its step-0 value for
    ``patience`` consecutive steps. Vanishing gradients: the Q/K gradient norm below
    ``grad_fraction`` x its maximum over the first ``patience`` steps, for ``patience`` steps."""

    fraction: float = 0.1
    patience: int = 20
    grad_fraction: float = 0.01


@dataclass
class RunResult:
    """Curves (``(steps, heads)`` per instrument) and end-of-run numbers of one run."""

    arm: str
    lr: float
    seed: int
    curves: dict[str, np.ndarray]
    final_loss: float
    final_acc: float
    diverged: bool
    collapse_step: int | None
    grad_vanish_step: int | None
    seconds: float
    features: str = LEARNED

    @property
    def collapsed(self) -> bool:
        return self.collapse_step is not None


def first_sustained_run(mask: np.ndarray, patience: int) -> int | None:
    """First index where ``mask`` holds for ``patience`` consecutive entries, else None."""
    count = 0
    for i, flag in enumerate(np.asarray(mask, dtype=bool)):
        count = count + 1 if flag else 0
        if count >= patience:
            return i - patience + 1
    return None


def collapse_step(entropy: np.ndarray, crit: CollapseCriterion) -> int | None:
    """Step at which the run collapses by ``crit`` (``entropy`` per step, mean over heads)."""
    entropy = np.asarray(entropy, dtype=float)
    return first_sustained_run(entropy < crit.fraction * entropy[0], crit.patience)


def grad_vanish_step(grad_qk: np.ndarray, crit: CollapseCriterion) -> int | None:
    """Step at which the Q/K gradient norm (per step) has vanished by ``crit``."""
    grad_qk = np.asarray(grad_qk, dtype=float)
    early_peak = np.nanmax(grad_qk[: crit.patience])
    return first_sustained_run(grad_qk < crit.grad_fraction * early_peak, crit.patience)


def build_model(remedy: Remedy, cfg: TrainConfig) -> CrossModalMatcher:
    """A freshly initialised matcher for scenes, seeded by ``cfg.seed``."""
    torch.manual_seed(cfg.seed)
    frozen = {}
    if cfg.frozen_features is not None:
        feats = load_features(cfg.frozen_features)
        frozen = {"query_dim": feats.text.shape[2], "audio_dim": feats.audio.shape[2],
                  "n_audio": feats.audio.shape[1]}
    block = BlockConfig(vocab_size=len(data.VOCAB), patch_dim=data.PATCH_DIM,
                        n_patches=data.N_PATCHES, d_model=cfg.d_model,
                        n_heads=cfg.n_heads, text_keys=cfg.text_keys, qk_init=remedy.qk_init,
                        qk_layernorm=remedy.qk_layernorm, sigma_reparam=remedy.sigma_reparam,
                        **frozen)
    return CrossModalMatcher(block)


class ModelInputs:
    """A scene pool as the matcher's inputs: learned word ids, or frozen token states and
    audio frames looked up by caption; caption ids always (they define the loss's positives)."""

    def __init__(self, pool: data.SceneBatch, cfg: TrainConfig) -> None:
        self.patches, self.tokens = torch.from_numpy(pool.patches), torch.from_numpy(pool.tokens)
        self.frozen: FrozenFeatures | None = None
        if cfg.frozen_features is not None:
            self.frozen = load_features(cfg.frozen_features)
            self.rows = torch.from_numpy(self.frozen.rows(pool.captions))
            self.text = torch.from_numpy(self.frozen.text)
            self.audio = torch.from_numpy(self.frozen.audio)

    def __len__(self) -> int:
        return len(self.tokens)

    def __call__(self, idx: torch.Tensor | slice) -> tuple[torch.Tensor, ...]:
        """Matcher arguments for the items ``idx``."""
        if self.frozen is None:
            return self.patches[idx], self.tokens[idx]
        rows = self.rows[idx]
        return self.patches[idx], self.text[rows], self.audio[rows]


def train_run(arm: str, remedy: Remedy, cfg: TrainConfig,
              crit: CollapseCriterion = CollapseCriterion()) -> RunResult:
    """Train one matcher with Adam (constant lr after any warmup), instruments on, on one torch
    thread with deterministic algorithms, whatever the process set before (see
    :func:`~mmcache.encoders.base.fixed_torch_state`).

    ``cfg.flush_subnormals`` (the default) makes CPU float ops flush subnormal results and
    inputs to zero (FTZ/DAZ) during the run. Near-collapsed attention fills softmax and its
    backward with subnormal floats (|x| < 1.2e-38 in float32), which x86 CPUs compute many
    times slower; flushed, a collapsing run takes a half to a third of the time. A subnormal
    term is normally lost in the rounding of the normal-sized terms it is added to: in nine of
    ten full-length runs checked training stayed bit-for-bit the same (an instrument value that
    was itself subnormal read 0), and in notebook 03's full run one final loss moved by 2e-6
    relative (xavier at 32x) while every collapse, vanishing and divergence verdict stayed the
    same. ``TrainConfig(flush_subnormals=False)`` keeps IEEE subnormals.
    """
    with fixed_torch_state(threads=1, flush_denormal=cfg.flush_subnormals):
        return _train_run(arm, remedy, cfg, crit)


def _train_run(arm: str, remedy: Remedy, cfg: TrainConfig, crit: CollapseCriterion) -> RunResult:
    start = time.perf_counter()
    model = build_model(remedy, cfg)
    optimizer = torch.optim.Adam(model.parameters(), lr=cfg.lr, eps=cfg.adam_eps)
    warm = max(remedy.warmup_steps, 0)
    schedule = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda step: min(1.0, (step + 1) / warm) if warm else 1.0)
    inputs = ModelInputs(data.scene_tokens(cfg.train_images_per_scene, 1000 + cfg.seed), cfg)
    rng = torch.Generator().manual_seed(cfg.seed)
    recorder = StepRecorder(model, optimizer)
    diverged = False
    try:
        for _ in range(cfg.steps):
            idx = torch.randint(0, len(inputs), (cfg.batch,), generator=rng)
            loss = matching_loss(model(*inputs(idx)), inputs.tokens[idx])
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            loss_value = loss.item()
            recorder.after_backward(loss_value)
            if not math.isfinite(loss_value):
                diverged = True
                recorder.after_step()
                break
            if remedy.clip_norm is not None:
                torch.nn.utils.clip_grad_norm_(model.parameters(), remedy.clip_norm)
            optimizer.step()
            schedule.step()
            recorder.after_step()
    finally:
        recorder.close()
    curves = recorder.arrays()
    final_loss, final_acc = (math.nan, math.nan) if diverged else evaluate(model, cfg)
    entropy = curves["entropy"].mean(1)
    grad_qk = np.sqrt(curves["grad_q"] ** 2 + curves["grad_k"] ** 2).sum(1)
    return RunResult(arm, cfg.lr, cfg.seed, curves, final_loss, final_acc, diverged,
                     collapse_step(entropy, crit), grad_vanish_step(grad_qk, crit),
                     time.perf_counter() - start, cfg.features)


@torch.no_grad()
def evaluate(model: CrossModalMatcher, cfg: TrainConfig) -> tuple[float, float]:
    """Held-out matching loss and caption->image top-1 accuracy, in batches of ``cfg.batch``
    (in-batch negatives; an image of the same scene counts as correct)."""
    model.eval()
    inputs = ModelInputs(data.scene_tokens(cfg.eval_images_per_scene, 10_000), cfg)
    losses, hits = [], []
    for s in range(0, len(inputs) - cfg.batch + 1, cfg.batch):
        t = inputs.tokens[s:s + cfg.batch]
        scores = model(*inputs(slice(s, s + cfg.batch)))
        losses.append(matching_loss(scores, t).item())
        same = (t.unsqueeze(1) == t.unsqueeze(0)).all(-1)
        hits.append(same[torch.arange(len(t)), scores.argmax(1)].float().mean().item())
    model.train()
    return float(np.mean(losses)), float(np.mean(hits))


def sweep(arms: Mapping[str, Remedy], lrs: Sequence[float], seeds: Iterable[int],
          base: TrainConfig, crit: CollapseCriterion = CollapseCriterion(),
          n_jobs: int = 1) -> list[RunResult]:
    """Every arm at every learning rate over every seed, in that order.

    Each run uses one torch thread; ``n_jobs > 1`` runs them in that many
    spawned worker processes.
    """
    tasks = [(arm, remedy, replace(base, lr=lr, seed=seed), crit)
             for arm, remedy in arms.items() for lr in lrs for seed in seeds]
    if n_jobs <= 1:
        return [train_run(*task) for task in tasks]
    ctx = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(n_jobs, mp_context=ctx) as pool:
        return list(pool.map(_train_task, tasks))


def _train_task(task: tuple[str, Remedy, TrainConfig, CollapseCriterion]) -> RunResult:
    return train_run(*task)


def runs_table(results: Sequence[RunResult]) -> pd.DataFrame:
    """One row per run: arm, lr, seed, verdicts and end-of-run numbers."""
    return pd.DataFrame([{
        "arm": r.arm, "lr": r.lr, "seed": r.seed, "features": r.features, "final_loss": r.final_loss,
        "final_acc": r.final_acc, "diverged": r.diverged, "collapsed": r.collapsed,
        "collapse_step": r.collapse_step, "grad_vanished": r.grad_vanish_step is not None,
        "entropy_init": float(r.curves["entropy"][0].mean()),
        "entropy_min": float(np.nanmin(r.curves["entropy"].mean(1))),
        "entropy_final": float(r.curves["entropy"][-1].mean()),
        "max_logit_final": float(r.curves["max_logit"][-1].max()),
        "seconds": r.seconds,
    } for r in results])


def curves_table(results: Sequence[RunResult]) -> pd.DataFrame:
    """Long table of per-step curves (head-aggregated) for plotting with seed bands."""
    frames = []
    for r in results:
        c = r.curves
        frame = {
            "step": np.arange(len(c["loss"])), "loss": c["loss"][:, 0],
            "entropy": c["entropy"].mean(1), "entropy_min_head": c["entropy"].min(1),
            "max_logit": c["max_logit"].max(1), "qk_spectral": c["qk_spectral"].max(1),
            "grad_qk": np.sqrt(c["grad_q"] ** 2 + c["grad_k"] ** 2).sum(1),
            "grad_v": c["grad_v"].sum(1),
            "adam_sqrtv_over_eps_q": c["adam_sqrtv_over_eps_q"].min(1),
            "adam_update_rms_q": c["adam_update_rms_q"].mean(1),
        }
        frame.update({k: c[k].mean(1) for k in c if k.startswith("mass_")})
        df = pd.DataFrame(frame)
        df["arm"], df["lr"], df["seed"] = r.arm, r.lr, r.seed
        frames.append(df)
    return pd.concat(frames, ignore_index=True)


def summarise(runs: pd.DataFrame) -> pd.DataFrame:
    """Per arm and learning rate: collapse rate (with a 95% Wilson interval), vanishing and
    divergence rates, final loss."""
    g = runs.groupby(["arm", "lr"], sort=False)
    out = g.agg(n=("seed", "size"), collapses=("collapsed", "sum"), collapse_rate=("collapsed", "mean"),
                 grad_vanish_rate=("grad_vanished", "mean"), diverged_rate=("diverged", "mean"),
                 final_loss=("final_loss", "mean"), final_loss_sd=("final_loss", "std"),
                 final_acc=("final_acc", "mean"), entropy_init=("entropy_init", "mean"),
                 entropy_min=("entropy_min", "mean")).reset_index()
    ci = [wilson_interval(int(k), int(n)) for k, n in zip(out["collapses"], out["n"])]
    out["collapse_ci_low"], out["collapse_ci_high"] = [c[0] for c in ci], [c[1] for c in ci]
    return out


def sweep_tables(results: Sequence[RunResult], lr_mult: Mapping[float, float]
                 ) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """:func:`runs_table`, :func:`summarise` and :func:`curves_table` of one sweep, each with
    an ``lr_mult`` column (``lr_mult[lr]``: the rate as a multiple of the tuned one)."""
    runs = runs_table(results)
    summary = summarise(runs)
    curves = curves_table(results)
    for table in (runs, summary, curves):
        table["lr_mult"] = table["lr"].map(lr_mult)
    return runs, summary, curves


def rank_arms(summary: pd.DataFrame) -> pd.DataFrame:
    """Arms ranked by collapse rate, then divergence, then final loss (diverged counts as
    worst), each averaged over learning rates."""
    s = summary.assign(loss_or_inf=summary["final_loss"].fillna(np.inf))
    ranked = s.groupby("arm", sort=False).agg(collapse_rate=("collapse_rate", "mean"),
                                              diverged_rate=("diverged_rate", "mean"),
                                              final_loss=("loss_or_inf", "mean"))
    return ranked.sort_values(["collapse_rate", "diverged_rate", "final_loss"]).reset_index()


def best_pair(ranking: pd.DataFrame, singles: Mapping[str, Remedy],
              exclude: Iterable[Remedy] = ()) -> tuple[str, str]:
    """The compatible pair of single remedies ranked highest (by the sum of their ranks),
    skipping the baseline and any pair equal to a remedy in ``exclude``."""
    order = [a for a in ranking["arm"] if a in singles and a != "baseline"]
    excluded = list(exclude)
    candidates = []
    for i, a in enumerate(order):
        for j in range(i + 1, len(order)):
            b = order[j]
            try:
                combo = singles[a] + singles[b]
            except ConfigError:
                continue
            if combo not in excluded:
                candidates.append((i + j, a, b))
    if not candidates:
        raise ConfigError("no compatible pair of remedies to combine")
    _, a, b = min(candidates)
    return a, b


def wilson_interval(successes: int, n: int, z: float = 1.96) -> tuple[float, float]:
    """Wilson score interval (95% by default) of a rate ``successes / n``."""
    if n <= 0:
        return (math.nan, math.nan)
    p = successes / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return (max(0.0, centre - half), min(1.0, centre + half))


def remedy_effect(summary: pd.DataFrame, arm: str, baseline: str = "baseline") -> dict[str, object]:
    """How often ``arm`` and ``baseline`` collapse at the learning rates both ran, and their
    mean final loss over those rates (a diverged run counts as infinite): the numbers, no
    verdict (:func:`remedy_verdicts` gives those). Collapses are pooled over the rates where the
    baseline collapsed, with 95% Wilson intervals and a one-sided Fisher exact test
    (``p_fewer``: the arm collapses less often).
    """
    cols = ["lr", "collapses", "n", "collapse_rate", "final_loss"]
    a = summary.loc[summary["arm"] == arm, cols].set_index("lr")
    b = summary.loc[summary["arm"] == baseline, cols].set_index("lr")
    lrs = [lr for lr in b.index if lr in a.index]
    a, b = a.loc[lrs], b.loc[lrs]
    collapsing = b["collapse_rate"] > 0
    loss_a, loss_b = a["final_loss"].fillna(np.inf).mean(), b["final_loss"].fillna(np.inf).mean()
    ka, na = int(a["collapses"][collapsing].sum()), int(a["n"][collapsing].sum())
    kb, nb = int(b["collapses"][collapsing].sum()), int(b["n"][collapsing].sum())
    p_fewer = (float(fisher_exact([[ka, na - ka], [kb, nb - kb]], alternative="less").pvalue)
               if na and nb else math.nan)
    return {"baseline_collapses_anywhere": bool(collapsing.any()),
            "collapse_rate": a["collapse_rate"].tolist(),
            "baseline_collapse_rate": b["collapse_rate"].tolist(),
            "pooled_collapses": [ka, na], "pooled_ci": list(wilson_interval(ka, na)),
            "baseline_pooled_collapses": [kb, nb],
            "baseline_pooled_ci": list(wilson_interval(kb, nb)), "p_fewer": p_fewer,
            "mean_final_loss": float(loss_a), "baseline_mean_final_loss": float(loss_b)}


#: What :func:`remedy_verdicts` pairs: one run of each arm per seed and learning rate.
PAIRS = "paired runs (seed × learning rate)"


def remedy_verdicts(runs: pd.DataFrame, arm: str, baseline: str = "baseline"
                    ) -> dict[str, Verdict]:
    """Sign tests of ``arm`` against ``baseline`` over their paired runs (the same seed at the
    same learning rate, every rate both ran): ``helps``, it collapses less often (effect: the
    difference of the two collapse rates); ``lower_loss``, its final held-out loss is lower (a
    diverged run's counts as infinite; effect: the mean sign of the difference)."""
    cols = ["lr", "seed", "collapsed", "final_loss"]
    pairs = runs.loc[runs["arm"] == arm, cols].merge(
        runs.loc[runs["arm"] == baseline, cols], on=["lr", "seed"], suffixes=("", "_base"))
    return {"helps": sign_test(pairs["collapsed"].astype(float),
                               pairs["collapsed_base"].astype(float), claim="below", pairs=PAIRS),
            "lower_loss": sign_test(pairs["final_loss"].fillna(np.inf),
                                    pairs["final_loss_base"].fillna(np.inf), claim="below",
                                    pairs=PAIRS)}


def tuned_lr(runs: pd.DataFrame, tolerance: float = 0.1) -> float:
    """The largest learning rate whose mean held-out loss is within ``tolerance`` (relative) of
    the best one's; a learning rate with any diverged run is never chosen."""
    by_lr = runs.groupby("lr").agg(loss=("final_loss", "mean"), diverged=("diverged", "any"))
    ok = by_lr[~by_lr["diverged"] & np.isfinite(by_lr["loss"])]
    if ok.empty:
        raise ConfigError("every learning rate in the tuning grid diverged")
    return float(ok.index[ok["loss"] <= ok["loss"].min() * (1 + tolerance)].max())


def tuning_check(runs: pd.DataFrame, recorded_lr: float, tolerance: float = 0.1) -> dict[str, Any]:
    """Compare a recorded learning rate with what :func:`tuned_lr` would choose from ``runs``.

    Returns the rate the tuning would choose, whether it ``agrees`` with ``recorded_lr``,
    each rate's relative held-out loss gap to the best rate, and ``margin``: how far the
    closest gap lies from the ``tolerance`` edge (a small margin means a knife-edge choice).
    """
    by_lr = runs.groupby("lr")["final_loss"].mean()
    if recorded_lr not in by_lr.index:
        raise ConfigError(f"recorded learning rate {recorded_lr:g} is not in the tuning grid "
                          f"{sorted(by_lr.index)}")
    choice = tuned_lr(runs, tolerance)
    gaps = by_lr / by_lr.min() - 1
    finite = gaps[np.isfinite(gaps)]
    return {"recorded_lr": float(recorded_lr), "would_choose": choice,
            "agrees": bool(math.isclose(choice, recorded_lr)), "tolerance": float(tolerance),
            "relative_gap": {f"{lr:g}": float(g) for lr, g in gaps.items()},
            "margin": float((finite - tolerance).abs().min())}
