"""Per-head, per-step instruments of a cross-attention block during training.

The pure functions measure one thing each on tensors; :class:`StepRecorder`
attaches them to a :class:`~mmcache.studies.collapse.model.CrossModalMatcher` and its
Adam optimiser and keeps one row per training step. Nothing is computed or
stored unless a recorder is attached.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Sequence

import numpy as np
import torch

from mmcache.errors import InvalidInputError
from mmcache.studies.collapse.model import AttentionRecord, CrossModalMatcher

ENTROPY_EPS = 1e-6  # inside the log, as Zhai et al. (2023) compute attention entropy


def attention_entropy(probs: torch.Tensor) -> torch.Tensor:
    """Per-head entropy ``(H,)``: mean over queries (and batch) of ``-sum_k A log(A + 1e-6)``.

    ``probs`` is ``(..., H, queries, keys)`` with rows summing to one.
    """
    _check_attention(probs)
    per_query = -(probs + ENTROPY_EPS).log_().mul_(probs).sum(-1)       # (..., H, Lq)
    return per_query.movedim(-2, 0).reshape(probs.shape[-3], -1).mean(-1)


def max_logit(logits: torch.Tensor) -> torch.Tensor:
    """Per-head maximum attention logit ``(H,)`` over batch, queries and keys."""
    _check_attention(logits)
    return logits.amax([d for d in range(logits.dim()) if d != logits.dim() - 3])


def modality_mass(probs: torch.Tensor, segments: Sequence[tuple[str, int]]) -> dict[str, torch.Tensor]:
    """Per-head mean attention mass ``(H,)`` on each key modality (segments in key order)."""
    _check_attention(probs)
    if sum(n for _, n in segments) != probs.shape[-1]:
        raise InvalidInputError(f"segments {list(segments)} do not cover {probs.shape[-1]} keys")
    out, start = {}, 0
    for name, n in segments:
        mass = probs[..., start:start + n].sum(-1)                       # (..., H, Lq)
        out[name] = mass.movedim(-2, 0).reshape(probs.shape[-3], -1).mean(-1)
        start += n
    return out


def qk_spectral_norms(w_q: torch.Tensor, w_k: torch.Tensor, n_heads: int) -> torch.Tensor:
    """Per-head spectral norm ``(..., H)`` of ``W_Q^h (W_K^h)^T`` as a ``d_model x d_model`` bilinear form.

    ``w_q``/``w_k`` are ``(..., d_model, d_model)`` nn.Linear weights (leading axes: a
    batch, e.g. training steps) whose output rows are split evenly among heads; head
    ``h``'s logits are ``x (W_Q^h)^T W_K^h y^T``.
    """
    if w_q.shape != w_k.shape or w_q.dim() < 2 or w_q.shape[-2] % n_heads:
        raise InvalidInputError(f"Q/K weights {tuple(w_q.shape)}, {tuple(w_k.shape)} "
                                f"do not split into {n_heads} heads")
    heads = (*w_q.shape[:-2], n_heads, w_q.shape[-2] // n_heads, w_q.shape[-1])
    q, k = w_q.reshape(heads), w_k.reshape(heads)
    return torch.linalg.matrix_norm(q.transpose(-1, -2) @ k, ord=2)


def head_grad_norms(weight: torch.Tensor, n_heads: int) -> torch.Tensor:
    """L2 norm ``(H,)`` of each head's rows of ``weight.grad`` (zeros when there is no grad);
    head ``h`` owns the ``h``-th of ``n_heads`` equal blocks of rows."""
    if weight.grad is None:
        return torch.zeros(n_heads)
    return _by_head(weight.grad, n_heads).norm(dim=-1)


def adam_update_stats(optimizer: torch.optim.Optimizer, weight: torch.Tensor,
                      n_heads: int) -> dict[str, torch.Tensor]:
    """Per-head Adam statistics of ``weight`` after a step (heads: equal blocks of rows).

    ``sqrtv_over_eps``: median of ``sqrt(v_hat) / eps`` (≲ 1 means eps dominates
    the denominator and shrinks the update); ``update_rms``: RMS of the
    normalised update ``m_hat / (sqrt(v_hat) + eps)`` (1 for a sign-like update).
    """
    state = optimizer.state.get(weight)
    group = next(g for g in optimizer.param_groups if any(p is weight for p in g["params"]))
    if not state:
        nan = torch.full((n_heads,), float("nan"))
        return {"sqrtv_over_eps": nan, "update_rms": nan}
    (b1, b2), eps, t = group["betas"], group["eps"], float(state["step"])
    m_hat = state["exp_avg"] / (1 - b1 ** t)
    sqrt_v = (state["exp_avg_sq"] / (1 - b2 ** t)).sqrt()
    update = m_hat / (sqrt_v + eps)
    return {"sqrtv_over_eps": _by_head(sqrt_v / eps, n_heads).median(-1).values,
            "update_rms": _by_head(update, n_heads).pow(2).mean(-1).sqrt()}


def _by_head(t: torch.Tensor, n_heads: int) -> torch.Tensor:
    """``(H, rows/H * cols)``: each head's block of rows, flattened."""
    if t.shape[0] % n_heads:
        raise InvalidInputError(f"{t.shape[0]} rows do not split into {n_heads} heads")
    return t.reshape(n_heads, -1)


class StepRecorder:
    """Records every instrument, per head, once per training step.

    Call :meth:`after_backward` after ``loss.backward()`` and :meth:`after_step`
    after ``optimizer.step()``; :meth:`close` removes the attention hook. Values stay
    tensors until :meth:`arrays`, which also computes every step's Q/K spectral norms
    in one batch (from the effective Q/K weights kept at each :meth:`after_backward`).
    """

    def __init__(self, model: CrossModalMatcher, optimizer: torch.optim.Optimizer) -> None:
        self.model, self.optimizer = model, optimizer
        self.n_heads = model.cfg.n_heads
        self.rows: dict[str, list[torch.Tensor]] = defaultdict(list)
        self.losses: list[float] = []
        self._qk: list[torch.Tensor] = []  # per step: the effective Q/K weights (2, d, d)
        self._row: dict[str, torch.Tensor] = {}
        self._remove = model.register_attention_hook(self._on_attention)

    def _on_attention(self, record: AttentionRecord) -> None:
        self._row["entropy"] = attention_entropy(record.probs)
        self._row["max_logit"] = max_logit(record.logits)
        for name, mass in modality_mass(record.probs, record.segments).items():
            self._row[f"mass_{name}"] = mass

    @torch.no_grad()
    def after_backward(self, loss: float) -> None:
        """Loss (a float), per-head gradient norms of the Q, K and V weights, the Q/K weights."""
        m = self.model
        self.losses.append(loss)
        for name in ("q", "k", "v"):
            self._row[f"grad_{name}"] = head_grad_norms(getattr(m, name).weight, self.n_heads)
        self._qk.append(torch.stack(m.qk_weights()))

    @torch.no_grad()
    def after_step(self) -> None:
        """Adam statistics of the Q and K weights; closes this step's row."""
        for name in ("q", "k"):
            stats = adam_update_stats(self.optimizer, getattr(self.model, name).weight, self.n_heads)
            for stat, value in stats.items():
                self._row[f"adam_{stat}_{name}"] = value
        for key, value in self._row.items():
            self.rows[key].append(value)
        self._row = {}

    def close(self) -> None:
        """Stop recording (remove the attention hook)."""
        self._remove()

    def arrays(self) -> dict[str, np.ndarray]:
        """Each instrument as a float32 ``(steps, heads)`` array (``loss``: float64 ``(steps, 1)``)."""
        out = {"loss": np.asarray(self.losses, dtype=np.float64)[:, None]}
        out.update({k: torch.stack(v).numpy() for k, v in self.rows.items()})
        if self._qk:
            qk = torch.stack(self._qk)
            out["qk_spectral"] = qk_spectral_norms(qk[:, 0], qk[:, 1], self.n_heads).numpy()
        return out


def _check_attention(t: torch.Tensor) -> None:
    if t.dim() < 3:
        raise InvalidInputError(f"attention tensors are (..., heads, queries, keys); got {tuple(t.shape)}")
