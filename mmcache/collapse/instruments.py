"""Per-head, per-step instruments of a cross-attention block during training.

The pure functions measure one thing each on tensors; :class:`StepRecorder`
attaches them to a :class:`~mmcache.collapse.model.CrossModalMatcher` and its
Adam optimiser and keeps one row per training step. Nothing is computed or
stored unless a recorder is attached.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Sequence

import numpy as np
import torch

from ..errors import InvalidInputError
from .model import AttentionRecord, CrossModalMatcher

ENTROPY_EPS = 1e-6  # inside the log, as Zhai et al. (2023) compute attention entropy


def attention_entropy(probs: torch.Tensor) -> torch.Tensor:
    """Per-head entropy ``(H,)``: mean over queries (and batch) of ``-sum_k A log(A + 1e-6)``.

    ``probs`` is ``(..., H, queries, keys)`` with rows summing to one.
    """
    _check_attention(probs)
    per_query = -(probs * torch.log(probs + ENTROPY_EPS)).sum(-1)       # (..., H, Lq)
    return per_query.movedim(-2, 0).reshape(probs.shape[-3], -1).mean(-1)


def max_logit(logits: torch.Tensor) -> torch.Tensor:
    """Per-head maximum attention logit ``(H,)`` over batch, queries and keys."""
    _check_attention(logits)
    return logits.movedim(-3, 0).reshape(logits.shape[-3], -1).amax(-1)


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
    """Per-head spectral norm ``(H,)`` of ``W_Q^h (W_K^h)^T`` as a ``d_model x d_model`` bilinear form.

    ``w_q``/``w_k`` are ``(d_model, d_model)`` nn.Linear weights whose output rows
    are split evenly among heads; head ``h``'s logits are ``x (W_Q^h)^T W_K^h y^T``.
    """
    if w_q.shape != w_k.shape or w_q.shape[0] % n_heads:
        raise InvalidInputError(f"Q/K weights {tuple(w_q.shape)}, {tuple(w_k.shape)} "
                                f"do not split into {n_heads} heads")
    d_head = w_q.shape[0] // n_heads
    q = w_q.reshape(n_heads, d_head, -1)
    k = w_k.reshape(n_heads, d_head, -1)
    return torch.linalg.matrix_norm(q.transpose(1, 2) @ k, ord=2)


def head_grad_norms(weight: torch.Tensor, slices: Sequence[slice]) -> torch.Tensor:
    """L2 norm ``(H,)`` of each head's rows of ``weight.grad`` (zeros when there is no grad)."""
    if weight.grad is None:
        return torch.zeros(len(slices))
    return torch.stack([weight.grad[s].norm() for s in slices])


def adam_update_stats(optimizer: torch.optim.Optimizer, weight: torch.Tensor,
                      slices: Sequence[slice]) -> dict[str, torch.Tensor]:
    """Per-head Adam statistics of ``weight`` after a step.

    ``sqrtv_over_eps``: median of ``sqrt(v_hat) / eps`` (≲ 1 means eps dominates
    the denominator and shrinks the update); ``update_rms``: RMS of the
    normalised update ``m_hat / (sqrt(v_hat) + eps)`` (1 for a sign-like update).
    """
    state = optimizer.state.get(weight)
    group = next(g for g in optimizer.param_groups if any(p is weight for p in g["params"]))
    if not state:
        nan = torch.full((len(slices),), float("nan"))
        return {"sqrtv_over_eps": nan, "update_rms": nan}
    (b1, b2), eps, t = group["betas"], group["eps"], float(state["step"])
    m_hat = state["exp_avg"] / (1 - b1 ** t)
    sqrt_v = (state["exp_avg_sq"] / (1 - b2 ** t)).sqrt()
    update = m_hat / (sqrt_v + eps)
    return {"sqrtv_over_eps": torch.stack([(sqrt_v[s] / eps).median() for s in slices]),
            "update_rms": torch.stack([update[s].pow(2).mean().sqrt() for s in slices])}


class StepRecorder:
    """Records every instrument, per head, once per training step.

    Call :meth:`after_backward` after ``loss.backward()`` and :meth:`after_step`
    after ``optimizer.step()``; :meth:`close` removes the attention hook.
    """

    def __init__(self, model: CrossModalMatcher, optimizer: torch.optim.Optimizer) -> None:
        self.model, self.optimizer = model, optimizer
        self.rows: dict[str, list[np.ndarray]] = defaultdict(list)
        self._row: dict[str, np.ndarray] = {}
        self._remove = model.register_attention_hook(self._on_attention)

    def _on_attention(self, record: AttentionRecord) -> None:
        self._row["entropy"] = _np(attention_entropy(record.probs))
        self._row["max_logit"] = _np(max_logit(record.logits))
        for name, mass in modality_mass(record.probs, record.segments).items():
            self._row[f"mass_{name}"] = _np(mass)

    @torch.no_grad()
    def after_backward(self, loss: torch.Tensor) -> None:
        """Loss and per-head gradient norms of the Q, K and V weights."""
        m = self.model
        slices = m.head_slices()
        self._row["loss"] = np.asarray([loss.item()])
        for name in ("q", "k", "v"):
            self._row[f"grad_{name}"] = _np(head_grad_norms(getattr(m, name).weight, slices))
        self._row["qk_spectral"] = _np(qk_spectral_norms(*m.qk_weights(), m.cfg.n_heads))

    @torch.no_grad()
    def after_step(self) -> None:
        """Adam statistics of the Q and K weights; closes this step's row."""
        slices = self.model.head_slices()
        for name in ("q", "k"):
            stats = adam_update_stats(self.optimizer, getattr(self.model, name).weight, slices)
            for stat, value in stats.items():
                self._row[f"adam_{stat}_{name}"] = _np(value)
        for key, value in self._row.items():
            self.rows[key].append(value)
        self._row = {}

    def close(self) -> None:
        """Stop recording (remove the attention hook)."""
        self._remove()

    def arrays(self) -> dict[str, np.ndarray]:
        """Each instrument as a ``(steps, heads)`` array (``loss`` is ``(steps, 1)``)."""
        return {k: np.stack(v) for k, v in self.rows.items()}


def _np(t: torch.Tensor) -> np.ndarray:
    return t.detach().cpu().numpy().astype(np.float32)


def _check_attention(t: torch.Tensor) -> None:
    if t.dim() < 3:
        raise InvalidInputError(f"attention tensors are (..., heads, queries, keys); got {tuple(t.shape)}")
