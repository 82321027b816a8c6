"""A small multi-head cross-modal attention block trained as a text-image matcher.

Text word embeddings are the queries; keys and values are image patch tokens,
optionally followed by the caption's own word tokens (a second key modality,
so the attention mass can be split by modality). With ``query_dim`` set the
queries are instead frozen encoder token states through a trained linear
projection, and with ``audio_dim`` set each candidate image brings audio-frame
keys as well (projected the same way), after its patches. The matching score of a
caption and an image is the mean over caption tokens of a bilinear read-out of
the attended value. Remedies that change the block itself (initialisation,
QK-layernorm, σReparam) are switches of :class:`BlockConfig`.

Attention hooks cost nothing when none is registered: the forward pass then
computes no statistic and keeps no attention map.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Protocol

import torch
from torch import nn
from torch.nn import functional as F

from mmcache.errors import ConfigError, InvalidInputError

INITS = ("default", "xavier", "xavier_0.1")


@dataclass(frozen=True)
class BlockConfig:
    """Shape and stabilising switches of the matcher."""

    vocab_size: int
    patch_dim: int
    n_patches: int
    d_model: int = 64
    n_heads: int = 4
    text_keys: bool = True  # caption tokens appended to the keys (second key modality)
    qk_init: str = "default"  # "default" (PyTorch), "xavier", "xavier_0.1" (Xavier x 0.1)
    qk_layernorm: bool = False
    sigma_reparam: bool = False
    query_dim: int | None = None  # frozen query token states of this dim (None: learned words)
    audio_dim: int | None = None  # candidate audio-frame keys of this dim (None: none)
    n_audio: int = 0              # audio-frame keys per candidate

    def __post_init__(self) -> None:
        if (self.audio_dim is None) != (self.n_audio == 0):
            raise ConfigError(f"audio_dim {self.audio_dim} and n_audio {self.n_audio} "
                              "must be set together")
        if self.qk_init not in INITS:
            raise ConfigError(f"unknown qk_init {self.qk_init!r}; known: {INITS}")
        if self.d_model % self.n_heads:
            raise ConfigError(f"d_model {self.d_model} is not divisible by n_heads {self.n_heads}")


@dataclass(frozen=True)
class AttentionRecord:
    """What an attention hook sees: probabilities and logits ``(..., heads, queries, keys)``.

    ``segments`` names the key modalities and how many keys each has, in order.
    """

    probs: torch.Tensor
    logits: torch.Tensor
    segments: tuple[tuple[str, int], ...]


class AttentionHook(Protocol):
    def __call__(self, record: AttentionRecord) -> None: ...


class SigmaReparamLinear(nn.Module):
    """Linear map with σReparam (Zhai et al. 2023): ``W_hat = gamma / sigma(W) * W``.

    ``sigma`` is estimated by one power iteration per training forward pass
    (exact SVD at construction); ``gamma`` is learnable and starts at 1.
    """

    def __init__(self, d_in: int, d_out: int, bias: bool = True) -> None:
        super().__init__()
        base = nn.Linear(d_in, d_out, bias=bias)
        self.weight = base.weight
        self.bias = base.bias
        self.gamma = nn.Parameter(torch.ones(()))
        self.register_buffer("u", torch.empty(d_out))
        self.register_buffer("v", torch.empty(d_in))
        self.reset_singular_vectors()

    @torch.no_grad()
    def reset_singular_vectors(self) -> None:
        """Exact top singular vectors of the current weight (after any re-initialisation)."""
        u, _, vh = torch.linalg.svd(self.weight, full_matrices=False)
        self.u.copy_(u[:, 0])
        self.v.copy_(vh[0])

    def effective_weight(self) -> torch.Tensor:
        """The reparametrised weight, with the current estimate of sigma (no power iteration)."""
        sigma = torch.dot(self.u, self.weight @ self.v)
        return self.gamma / sigma * self.weight

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.training:
            with torch.no_grad():
                self.v.copy_(F.normalize(self.weight.T @ self.u, dim=0))
                self.u.copy_(F.normalize(self.weight @ self.v, dim=0))
        return F.linear(x, self.effective_weight(), self.bias)


def _linear(cfg: BlockConfig, d_in: int, d_out: int) -> nn.Module:
    return SigmaReparamLinear(d_in, d_out) if cfg.sigma_reparam else nn.Linear(d_in, d_out)


def _weight(layer: nn.Module) -> torch.Tensor:
    return layer.effective_weight() if isinstance(layer, SigmaReparamLinear) else layer.weight


class CrossModalMatcher(nn.Module):
    """Scores every (caption, image) pair of a batch with one cross-attention block."""

    def __init__(self, cfg: BlockConfig) -> None:
        super().__init__()
        self.cfg = cfg
        d = cfg.d_model
        self.word = nn.Embedding(cfg.vocab_size, d) if cfg.query_dim is None \
            else nn.Linear(cfg.query_dim, d)
        self.patch = nn.Linear(cfg.patch_dim, d)
        self.patch_pos = nn.Parameter(torch.randn(cfg.n_patches, d) * 0.02)
        self.word_pos = nn.Parameter(torch.randn(8, d) * 0.02)
        self.norm_q, self.norm_kv = nn.LayerNorm(d), nn.LayerNorm(d)
        self.q, self.k, self.v = _linear(cfg, d, d), _linear(cfg, d, d), _linear(cfg, d, d)
        self.o = _linear(cfg, d, d)
        self.readout = nn.Linear(d, d, bias=False)
        d_head = d // cfg.n_heads
        self.q_ln = nn.LayerNorm(d_head) if cfg.qk_layernorm else None
        self.k_ln = nn.LayerNorm(d_head) if cfg.qk_layernorm else None
        if cfg.audio_dim is not None:  # created last: the other parameters' init is unchanged
            self.audio = nn.Linear(cfg.audio_dim, d)
            self.audio_pos = nn.Parameter(torch.randn(cfg.n_audio, d) * 0.02)
        self._hooks: dict[int, AttentionHook] = {}
        self._next_hook = 0
        self._init_qk()

    def _init_qk(self) -> None:
        if self.cfg.qk_init == "default":
            return
        gain = 0.1 if self.cfg.qk_init == "xavier_0.1" else 1.0
        with torch.no_grad():
            for layer in (self.q, self.k):
                nn.init.xavier_uniform_(layer.weight)
                layer.weight.mul_(gain)
                if isinstance(layer, SigmaReparamLinear):
                    layer.reset_singular_vectors()

    # -- hooks ---------------------------------------------------------------------------
    def register_attention_hook(self, hook: AttentionHook) -> Callable[[], None]:
        """Call ``hook(AttentionRecord)`` on every forward pass; returns a function that removes it."""
        key = self._next_hook
        self._next_hook += 1
        self._hooks[key] = hook
        return lambda: self._hooks.pop(key, None)

    @property
    def hooked(self) -> bool:
        """Whether any attention hook is registered."""
        return bool(self._hooks)

    # -- weights the instruments read ----------------------------------------------------
    def qk_weights(self) -> tuple[torch.Tensor, torch.Tensor]:
        """The effective query and key weights ``(d_model, d_model)`` (σReparam applied)."""
        return _weight(self.q), _weight(self.k)

    # -- forward -------------------------------------------------------------------------
    def forward(self, patches: torch.Tensor, tokens: torch.Tensor,
                audio: torch.Tensor | None = None) -> torch.Tensor:
        """Scores ``(n_captions, n_images)`` for captions ``tokens`` against images ``patches``.

        ``tokens`` are word ids ``(B, Lq)``, or token states ``(B, Lq, query_dim)`` when
        ``query_dim`` is set; ``audio`` ``(B, n_audio, audio_dim)`` goes with the images.
        """
        cfg = self.cfg
        d_head = cfg.d_model // cfg.n_heads
        text = self.word(tokens) + self.word_pos[: tokens.shape[1]]          # (B, Lq, d)
        image = self.patch(patches) + self.patch_pos                          # (B, P, d)
        segments: tuple[tuple[str, int], ...] = (("image", patches.shape[1]),)
        if (audio is None) != (cfg.audio_dim is None):
            raise InvalidInputError(f"audio given: {audio is not None}; the matcher's audio_dim "
                                    f"is {cfg.audio_dim}")
        if audio is not None:  # a candidate's keys: its patches, then its audio frames
            image = torch.cat([image, self.audio(audio) + self.audio_pos], 1)
            segments += (("audio", audio.shape[1]),)
        n_i, n_j, n_p = tokens.shape[0], patches.shape[0], image.shape[1]
        kv_in = self.norm_kv(torch.cat([image, text], 1) if cfg.text_keys else image)
        q = self._heads(self.q(self.norm_q(text)), self.q_ln)                 # (B, H, Lq, dh)
        k = self._heads(self.k(kv_in), self.k_ln)                             # (B, H, P[+Lq], dh)
        v = self._heads(self.v(kv_in), None)
        scale = 1.0 / math.sqrt(d_head)
        # caption i attends to image j's patches: (Bi, Bj, H, Lq, P)
        logits = torch.einsum("ihqd,jhpd->ijhqp", q, k[:, :, :n_p]) * scale
        values = v[:, :, :n_p].unsqueeze(0).expand(n_i, -1, -1, -1, -1)      # (Bi, Bj, H, P, dh)
        if cfg.text_keys:  # ... and to its own caption's tokens
            self_logits = torch.einsum("ihqd,ihkd->ihqk", q, k[:, :, n_p:]) * scale
            logits = torch.cat([logits, self_logits.unsqueeze(1).expand(-1, n_j, -1, -1, -1)], -1)
            values = torch.cat([values, v[:, :, n_p:].unsqueeze(1).expand(-1, n_j, -1, -1, -1)], -2)
            segments += (("text", tokens.shape[1]),)
        probs = logits.softmax(-1)
        if self._hooks:
            record = AttentionRecord(probs.detach(), logits.detach(), segments)
            for hook in list(self._hooks.values()):
                hook(record)
        attended = probs @ values                                             # (Bi, Bj, H, Lq, dh)
        attended = attended.transpose(2, 3).reshape(n_i, n_j, tokens.shape[1], cfg.d_model)
        out = self.o(attended)
        return torch.einsum("iqd,ijqd->ij", self.readout(text), out) / tokens.shape[1]

    def _heads(self, x: torch.Tensor, ln: nn.Module | None) -> torch.Tensor:
        b, n, _ = x.shape
        x = x.view(b, n, self.cfg.n_heads, -1).transpose(1, 2)
        return ln(x) if ln is not None else x


def matching_loss(scores: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
    """Symmetric InfoNCE over a batch; images whose caption is identical count as positives."""
    same = (tokens.unsqueeze(1) == tokens.unsqueeze(0)).all(-1).float()
    target = same / same.sum(-1, keepdim=True)  # symmetric: equal captions form classes
    return 0.5 * (F.cross_entropy(scores, target) + F.cross_entropy(scores.T, target))
