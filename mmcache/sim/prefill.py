"""Modality-weighted prefill (seed 001 §4.1, seed 002 §3.3) in the CacheBench-MM
replay.

Seed 001 §4.1 prefills a cache from a user-behaviour graph whose scores are fused with
per-user modality weights (α text, β image, γ sequence; summing to 1, set by attention over the
user's recent modality preference). Here:

* **Modality weights.** :class:`ModalityAttention` reads a session's last ``history`` requests
  (their modality sets, :data:`mmcache.sim.workload.MODALITY_SETS` indices, and their recency:
  0 = the request just served) as learned embeddings, pools them with additive attention (a
  learned query scores each, softmax over the valid ones) and maps the pooled vector to one
  weight per modality set (softmax over the sets the training prefix has: the weights sum to
  1, the other sets weigh 0). It is trained (full-batch Adam,
  cross-entropy, under :func:`mmcache.encoders.base.fixed_torch_state`) on a training prefix
  of the stream to predict the modality set of the session's next request. Plain torch: the
  attention runs over one session's sequence, not over a graph, and torch_geometric is not a
  dependency of the workbench.
* **Prefetch scores.** From the same prefix, the intent-level reference graph: edge weights
  ``exp(-Δt / τ)`` summed over consecutive request pairs (as :mod:`mmcache.sim.cachebench.
  prefetch`'s node graph, one node per intent), each row normalised to a distribution over
  the next intent; an intent with no outgoing edge falls back to the intents' PageRank mass.
* **Fusion.** After each served request (intent ``I``), every candidate node (intent ``I'``
  among the ``candidates`` most likely after ``I``, modality set ``m`` seen in the prefix)
  scores ``P(I' | I) · w_m``; the ``budget`` best that are not resident and have a stored
  answer to copy (the node's last request seen so far, causal) are prefilled
  (:meth:`mmcache.sim.cachebench.engine.Replayer.prefill`).

:func:`compare_prefill` replays requests ``[train_end, n)`` from a cold cache through the same
tiers with: no prefetch (``none``); PageRank prefetch (``pagerank``: the node graph's PageRank
of :func:`mmcache.sim.cachebench.prefetch.pagerank`, after each request the ``budget`` most
central non-resident nodes among the ``candidates`` × sets-in-use most central, as many
candidates as the fused prefill scores); the fused prefill with the prefix's modality-set
frequencies as weights (``graph-prior``, the ablation without attention); and with the
attention's weights (``modality-weighted``). Every prefetching method stores at most ``budget``
answers after each request. The generator draws each query's modality set independently, so on its streams the
weights can only learn the marginal frequencies (a labelled property of the synthetic
workload); :func:`session_preference` makes a stream whose sessions prefer some modalities
(Dirichlet per session) and :func:`session_switches` one whose sessions switch modality by a
fixed rule, the case where a session's recent modalities predict one it has not asked yet.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any, Sequence

import numpy as np
import torch

from mmcache.encoders.base import fixed_torch_state
from mmcache.errors import ConfigError
from mmcache.sim.cachebench.engine import Replayer
from mmcache.sim.cachebench.prefetch import TAU_S, node_ids, pagerank, reference_graph
from mmcache.sim.workload import MODALITY_SETS, Workload

#: The methods :func:`compare_prefill` replays, in order.
METHODS = ("none", "pagerank", "graph-prior", "modality-weighted")

_N_SETS = len(MODALITY_SETS)
_PAD = _N_SETS  # the modality-set index of an empty history slot


@dataclass(frozen=True)
class PrefillConfig:
    """Settings of the weights model and of the prefill (sizes in requests)."""

    history: int = 4  # the session's last requests the attention reads
    dim: int = 16  # embedding width
    epochs: int = 150  # full-batch Adam steps
    lr: float = 0.05
    budget: int = 1  # answers prefilled after each request, at most
    candidates: int = 4  # next intents scored after each request
    train_share: float = 0.5  # the prefix trained on; the rest is measured
    tau_s: float = TAU_S
    seed: int = 0
    threads: int = 1

    def __post_init__(self) -> None:
        for name in ("history", "dim", "epochs", "budget", "candidates", "threads"):
            value = getattr(self, name)
            if not isinstance(value, (int, np.integer)) or isinstance(value, bool) or value < 1:
                raise ConfigError(f"{name} must be an integer >= 1, got {value!r}")
        if not (isinstance(self.lr, (int, float)) and math.isfinite(self.lr) and self.lr > 0):
            raise ConfigError(f"lr must be a finite positive number, got {self.lr!r}")
        if not 0 < self.train_share < 1:
            raise ConfigError(f"train_share must be in (0, 1), got {self.train_share!r}")
        if not self.tau_s > 0:
            raise ConfigError(f"tau_s must be positive, got {self.tau_s!r}")


def histories(workload: Workload, history: int) -> np.ndarray:
    """``(n, history)`` modality sets of each request's session, the request itself first, then
    the session's earlier requests, most recent first (:data:`_PAD` past the session's start)."""
    if history < 1:
        raise ConfigError(f"history must be >= 1, got {history!r}")
    n = len(workload)
    out = np.full((n, history), _PAD, np.int64)
    sets, session = workload.modality_set.astype(np.int64), workload.session
    for lag in range(history):
        idx = np.arange(lag, n)
        same = session[idx - lag] == session[idx]
        out[idx[same], lag] = sets[idx[same] - lag]
    return out


class ModalityAttention(torch.nn.Module):
    """Additive attention over a session's recent modality sets (+ recency) → one weight per
    modality set of :data:`MODALITY_SETS`, summing to 1."""

    def __init__(self, history: int, dim: int) -> None:
        super().__init__()
        self.sets = torch.nn.Embedding(_N_SETS + 1, dim, padding_idx=_PAD)
        self.recency = torch.nn.Embedding(history, dim)
        self.key = torch.nn.Linear(dim, dim)
        self.query = torch.nn.Parameter(torch.zeros(dim))
        self.out = torch.nn.Linear(dim, _N_SETS)

    def forward(self, hist: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Logits over modality sets ``(b, sets)`` and attention ``(b, history)`` of ``hist``
        ``(b, history)`` (modality-set indices, :data:`_PAD` for none; slot 0 never empty)."""
        emb = self.sets(hist) + self.recency.weight[None, : hist.shape[1]]
        scores = torch.tanh(self.key(emb)) @ self.query
        scores = scores.masked_fill(hist == _PAD, float("-inf"))
        attention = torch.softmax(scores, dim=1)
        pooled = (attention[..., None] * emb).sum(dim=1)
        return self.out(pooled), attention


@dataclass
class ModalityWeights:
    """A trained :class:`ModalityAttention` and what it was trained on."""

    model: ModalityAttention
    config: PrefillConfig
    train_end: int
    examples: int
    seen: np.ndarray  # per modality set, whether the prefix has it (the others weigh 0)
    losses: list[float] = field(repr=False)

    def weights(self, hist: np.ndarray) -> np.ndarray:
        """``(b, sets)`` weights of histories ``hist`` ``(b, history)``: each row sums to 1 over
        the sets the training prefix has, 0 on the others."""
        hist = np.asarray(hist, np.int64)
        if hist.ndim != 2 or hist.shape[1] != self.config.history:
            raise ConfigError(f"histories must be (b, {self.config.history}), got {hist.shape}")
        if ((hist < 0) | (hist > _PAD)).any() or (hist[:, 0] == _PAD).any():
            raise ConfigError("history slots are modality-set indices (or the pad, never first)")
        with fixed_torch_state(self.config.threads), torch.no_grad():
            logits, _ = self.model(torch.from_numpy(hist))
            return _masked_softmax(logits.double(), torch.from_numpy(self.seen)).numpy()


def fit_weights(workload: Workload, train_end: int,
                config: PrefillConfig | None = None) -> ModalityWeights:
    """Train :class:`ModalityAttention` on requests ``[0, train_end)``: each request whose
    session goes on within the prefix is an example (its history → the next one's modality
    set). Seeded and run under :func:`fixed_torch_state`: one seed, one set of weights."""
    cfg = config or PrefillConfig()
    if not 2 <= train_end <= len(workload):
        raise ConfigError(f"train_end must be in [2, {len(workload)}], got {train_end!r}")
    hist = histories(workload, cfg.history)[: train_end - 1]
    goes_on = workload.session[1:train_end] == workload.session[: train_end - 1]
    if not goes_on.any():
        raise ConfigError("the training prefix has no session of two requests or more")
    x = torch.from_numpy(hist[goes_on])
    y = torch.from_numpy(workload.modality_set[1:train_end][goes_on].astype(np.int64))
    seen = np.bincount(workload.modality_set[:train_end], minlength=_N_SETS) > 0
    unseen = torch.from_numpy(~seen)
    with fixed_torch_state(cfg.threads), torch.random.fork_rng(devices=[]):
        torch.manual_seed(cfg.seed)
        model = ModalityAttention(cfg.history, cfg.dim)
        optimiser = torch.optim.Adam(model.parameters(), lr=cfg.lr)
        losses = []
        for _ in range(cfg.epochs):
            optimiser.zero_grad()
            logits = model(x)[0].masked_fill(unseen, float("-inf"))
            loss = torch.nn.functional.cross_entropy(logits, y)
            loss.backward()
            optimiser.step()
            losses.append(float(loss.detach()))
    model.eval()
    return ModalityWeights(model, cfg, train_end, int(goes_on.sum()), seen, losses)


def _masked_softmax(logits: torch.Tensor, allowed: torch.Tensor) -> torch.Tensor:
    """Softmax over the ``allowed`` columns, exactly 0 elsewhere."""
    return torch.softmax(logits.masked_fill(~allowed, float("-inf")), dim=1)


def next_intents(workload: Workload, train_end: int, candidates: int,
                 tau_s: float = TAU_S) -> tuple[dict[int, tuple[np.ndarray, np.ndarray]],
                                                  tuple[np.ndarray, np.ndarray]]:
    """Per intent of the prefix, its ``candidates`` likeliest next intents and their
    probabilities (the intent-level reference graph's normalised row); and the fallback for an
    intent without one: the intents with the most PageRank mass (node PageRank summed)."""
    if not 2 <= train_end <= len(workload):
        raise ConfigError(f"train_end must be in [2, {len(workload)}], got {train_end!r}")
    intent = workload.intent[:train_end]
    w = np.exp(-np.diff(workload.time[:train_end]) / tau_s)
    pairs, inverse = np.unique(np.stack([intent[:-1], intent[1:]], axis=1), axis=0,
                               return_inverse=True)
    sums = np.bincount(inverse.ravel(), weights=w)
    table: dict[int, tuple[np.ndarray, np.ndarray]] = {}
    cuts = np.flatnonzero(np.r_[True, pairs[1:, 0] != pairs[:-1, 0], True])
    for a, b in zip(cuts[:-1], cuts[1:]):
        dst, s = pairs[a:b, 1], sums[a:b]
        top = np.lexsort((dst, -s))[:candidates]
        table[int(pairs[a, 0])] = (dst[top], s[top] / s.sum())
    ranks = pagerank(reference_graph(workload, train_end, tau_s))
    mass: dict[int, float] = {}
    for node, score in ranks.items():
        mass[node // _N_SETS] = mass.get(node // _N_SETS, 0.0) + score
    best = sorted(mass, key=lambda i: (-mass[i], i))[:candidates]
    return table, (np.array(best, np.int64), np.array([mass[i] for i in best]))


@dataclass
class PrefillRun:
    """One method's replay of requests ``[train_end, n)``."""

    method: str
    hit_ratio: float
    prefilled: int  # answers stored by the prefetcher
    max_per_step: int  # the most it stored after one request (<= budget)
    hits: np.ndarray = field(repr=False)


def _serve_with_prefill(replayer: Replayer, workload: Workload, train_end: int, method: str,
                        budget: int, pick: Any) -> PrefillRun:
    """Serve ``[train_end, n)``; after each request ``pick(t, resident, known)`` yields nodes in
    preference order and the first ``budget`` resident-free, known ones are prefilled."""
    nodes = node_ids(workload).tolist()
    keys, intents = replayer.keys.tolist(), workload.intent.tolist()
    last: dict[int, int] = {}  # node -> the request whose stored answer stands for it
    for j in range(train_end):
        last[nodes[j]] = j
    stored: dict[int, int] = {}  # exact key -> the request that stored it
    tiers = replayer.state

    def resident(node: int) -> bool:
        key = keys[last[node]]
        return any(key in t.entries for t in tiers)

    prefilled, most = 0, 0
    for t in range(train_end, len(workload)):
        replayer.serve(t)
        hit_key = int(replayer.hit_key[t])
        if hit_key >= 0 and hit_key in stored and intents[stored[hit_key]] == intents[t]:
            last[nodes[t]] = stored[hit_key]
        else:
            last[nodes[t]] = t
            stored[keys[t]] = t
        if method == "none":
            continue
        done = 0
        for node in pick(t):
            if done == budget:
                break
            if node in last and not resident(node):
                j = last[node]
                replayer.prefill(j)
                stored[keys[j]] = j
                done += 1
        prefilled += done
        most = max(most, done)
    hits = replayer.hit_tier[train_end:] >= 0
    return PrefillRun(method, float(hits.mean()), prefilled, most, hits.copy())


@dataclass
class PrefillComparison:
    """What :func:`compare_prefill` measured on one stream."""

    train_end: int
    config: PrefillConfig
    runs: dict[str, PrefillRun]
    weights: ModalityWeights = field(repr=False)
    prior: np.ndarray = field(repr=False)  # the prefix's modality-set frequencies

    def hit_ratios(self) -> dict[str, float]:
        """Hit ratio of the measured requests, per method."""
        return {name: run.hit_ratio for name, run in self.runs.items()}

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready summary."""
        return {"train_end": self.train_end, "config": asdict(self.config),
                "runs": {n: {"hit_ratio": r.hit_ratio, "prefilled": r.prefilled,
                             "max_per_step": r.max_per_step} for n, r in self.runs.items()}}


def compare_prefill(workload: Workload, tiers: Sequence[Any], config: PrefillConfig | None = None,
                    *, latency: Any = None, methods: Sequence[str] = METHODS,
                    table: Any = None) -> PrefillComparison:
    """Replay requests ``[train_end, n)`` (``train_end`` = ``train_share`` of the stream) from a
    cold cache through ``tiers`` with each of ``methods`` (:data:`METHODS`); the weights, the
    graph and the PageRank come from ``[0, train_end)`` only. ``table``: a neighbour table of
    ``workload`` shared by the replays (built once otherwise)."""
    cfg = config or PrefillConfig()
    unknown = [m for m in methods if m not in METHODS]
    if unknown or not methods:
        raise ConfigError(f"methods must be among {METHODS}, got {list(methods)!r}")
    train_end = int(cfg.train_share * len(workload))
    if not 2 <= train_end < len(workload):
        raise ConfigError(f"the stream of {len(workload)} requests leaves no prefix or no rest")
    model = fit_weights(workload, train_end, cfg)
    follow, fallback = next_intents(workload, train_end, cfg.candidates, cfg.tau_s)
    seen = np.bincount(workload.modality_set[:train_end], minlength=_N_SETS).astype(float)
    prior = seen / seen.sum()
    in_use = np.flatnonzero(seen > 0)
    ranks = pagerank(reference_graph(workload, train_end, cfg.tau_s))
    central = sorted(ranks, key=lambda v: (-ranks[v], v))[: cfg.candidates * in_use.size]
    hist = histories(workload, cfg.history)
    attention = model.weights(hist[train_end:])
    intents = workload.intent.tolist()

    def fused(weights_of: Any) -> Any:
        def pick(t: int) -> list[int]:
            dst, p = follow.get(intents[t], fallback)
            own = (dst == intents[t])[:, None]  # the session going on: its own weights
            w = np.where(own, weights_of(t)[in_use][None, :], prior[in_use][None, :])
            score = p[:, None] * w
            order = np.lexsort((np.arange(score.size), -score.ravel()))
            nodes = dst[:, None] * _N_SETS + in_use[None, :]
            return nodes.ravel()[order].tolist()
        return pick

    picks = {"none": lambda t: [], "pagerank": lambda t: central,
             "graph-prior": fused(lambda t: prior),
             "modality-weighted": fused(lambda t: attention[t - train_end])}
    runs = {}
    for method in methods:
        replayer = Replayer(workload, tiers, latency, table=table)
        table = replayer.table if table is None else table
        runs[method] = _serve_with_prefill(replayer, workload, train_end, method, cfg.budget,
                                           picks[method])
    return PrefillComparison(train_end, cfg, runs, model, prior)


def session_preference(workload: Workload, concentration: float, seed: int = 0) -> Workload:
    """``workload`` with each session's modality sets drawn from a preference of its own: a
    Dirichlet(``concentration``) distribution over the sets the stream uses (small
    concentration: a session keeps to one or two), each query's set drawn from its session's.
    Intents, variants, times and sizes stay."""
    if not (math.isfinite(concentration) and concentration > 0):
        raise ConfigError(f"concentration must be a finite positive number, got {concentration!r}")
    rng = np.random.default_rng([seed, 30, 4])
    in_use = np.flatnonzero(np.bincount(workload.modality_set, minlength=_N_SETS))
    n_sessions = int(workload.session.max()) + 1
    prefs = rng.dirichlet(np.full(in_use.size, concentration), size=n_sessions)
    cum = np.cumsum(prefs[workload.session], axis=1)
    pick = (rng.random(len(workload))[:, None] > cum).sum(axis=1)
    sets = in_use[np.minimum(pick, in_use.size - 1)].astype(np.int8)
    return workload.with_real({}, modality_set=sets)


def session_switches(workload: Workload, switch: float, seed: int = 0) -> Workload:
    """``workload`` whose sessions switch modality by a fixed rule: the sets the stream uses in a
    seeded cycle, each request after a session's first takes the set after its predecessor's in
    the cycle with probability ``switch``, else its predecessor's again (a session's first
    request keeps its own). Intents, variants, times and sizes stay. :func:`switch_cycle` gives
    the rule."""
    if not 0 <= switch <= 1:
        raise ConfigError(f"switch must be in [0, 1], got {switch!r}")
    nxt = switch_cycle(workload, seed)
    rng = np.random.default_rng([seed, 30, 4, 1])
    sets, session = workload.modality_set.tolist(), workload.session.tolist()
    moves = (rng.random(len(workload)) < switch).tolist()
    for t in range(1, len(sets)):
        if session[t] == session[t - 1]:
            sets[t] = nxt[sets[t - 1]] if moves[t] else sets[t - 1]
    return workload.with_real({}, modality_set=np.array(sets, np.int8))


def switch_cycle(workload: Workload, seed: int = 0) -> dict[int, int]:
    """The rule :func:`session_switches` applies: each set the stream uses → the next one in a
    seeded cycle through them."""
    in_use = np.flatnonzero(np.bincount(workload.modality_set, minlength=_N_SETS))
    cycle = np.random.default_rng([seed, 30, 4, 2]).permutation(in_use).tolist()
    return {a: cycle[(k + 1) % len(cycle)] for k, a in enumerate(cycle)}


def mean_interval(values: Sequence[float], level: float = 0.95) -> tuple[float, float, float]:
    """Mean and Student-t ``level`` interval of ``values`` (one per seed)."""
    from scipy import stats  # deferred: only the summaries need it

    x = np.asarray(values, float)
    if x.size < 2:
        raise ConfigError(f"an interval needs two values or more, got {x.size}")
    half = float(stats.t.ppf(0.5 + level / 2, x.size - 1) * x.std(ddof=1) / math.sqrt(x.size))
    return float(x.mean()), float(x.mean() - half), float(x.mean() + half)


def claim_verdict(low: float, high: float, floor: float = 0.20) -> str:
    """Seed 002's +23.7% against a relative gain's interval, by the criterion stated before the
    run: ``reproduced`` if the interval lies at or above ``floor`` (20%), ``not reproduced`` if
    it lies below it, else ``inconclusive``."""
    if low >= floor:
        return "reproduced"
    if high < floor:
        return "not reproduced"
    return "inconclusive"
