"""Projection heads: map frozen encoder embeddings (e.g. Whisper audio) into a target space.

Every head learns ``f: R^d_in -> R^d_out`` from paired rows ``(X[i], Y[i])`` —
typically a pooled Whisper embedding and the MiniLM or CLIP embedding of what
was said — and :meth:`transform` returns L2-normalised vectors comparable by
cosine with the (normalised) targets. The encoders stay frozen; only the head learns.

The ladder, simplest first:

* :class:`RidgeHead` — closed-form ridge regression onto the targets;
* :class:`ProcrustesHead` — orthogonal Procrustes (a rotation, closed form);
* :class:`InfoNCEHead` — linear map trained with the symmetric InfoNCE
  (CLIP) loss, temperature learnable (init 1/0.07) or fixed;
  ``hidden=...`` makes it an MLP.

Inputs are standardised with training statistics first. Rows with identical
targets (several clips of one caption) count as positives of each other in
the contrastive loss rather than as negatives.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, Protocol

import numpy as np

from mmcache.encoders.base import fixed_torch_state
from mmcache.errors import ConfigError, InvalidEmbeddingError, NotFittedError


class ProjectionHead(Protocol):
    """A learned map from one embedding space into another."""

    name: str

    def fit(self, x: np.ndarray, y: np.ndarray, labels: np.ndarray | None = None
            ) -> "ProjectionHead": ...

    def transform(self, x: np.ndarray) -> np.ndarray: ...


def normalise(v: np.ndarray) -> np.ndarray:
    """Rows scaled to unit L2 norm (zero rows stay zero)."""
    norms = np.linalg.norm(v, axis=-1, keepdims=True)
    return (v / np.maximum(norms, 1e-12)).astype(np.float32)


@dataclass
class _Standardiser:
    mean: np.ndarray | None = None
    scale: np.ndarray | None = None

    def fit(self, x: np.ndarray) -> "_Standardiser":
        self.mean = x.mean(axis=0)
        self.scale = x.std(axis=0) + 1e-6
        return self

    def __call__(self, x: np.ndarray) -> np.ndarray:
        if self.mean is None:
            raise NotFittedError("projection head used before fit()")
        if x.shape[1] != self.mean.shape[0]:
            raise InvalidEmbeddingError(
                f"head was fitted on {self.mean.shape[0]}-d inputs, got {x.shape[1]}-d")
        return (x - self.mean) / self.scale


@dataclass
class RidgeHead:
    """Closed-form ridge regression ``W = (XᵀX + αI)⁻¹ XᵀY`` onto unit-norm targets."""

    alpha: float = 10.0
    name: str = "ridge"
    _std: _Standardiser = field(default_factory=_Standardiser, repr=False)
    _w: np.ndarray | None = field(default=None, repr=False)

    def fit(self, x: np.ndarray, y: np.ndarray, labels: np.ndarray | None = None) -> "RidgeHead":
        x, y = check_pairs(x, y)
        if self.alpha < 0:
            raise ConfigError(f"ridge alpha must be ≥ 0, got {self.alpha}")
        xs = self._std.fit(x)(x)
        gram = xs.T @ xs + self.alpha * np.eye(xs.shape[1])
        self._w = np.linalg.solve(gram, xs.T @ normalise(y))
        return self

    def transform(self, x: np.ndarray) -> np.ndarray:
        x = check_matrix(x, "x")
        if self._w is None:
            raise NotFittedError("RidgeHead used before fit()")
        return normalise(self._std(x) @ self._w)


@dataclass
class ProcrustesHead:
    """Orthogonal Procrustes: the (semi-)orthogonal ``W`` minimising ‖XW − Y‖ (closed form).

    Rows are centred and unit-normalised first; when the dimensions differ,
    ``W`` is a partial isometry of rank ``min(d_in, d_out)``.
    """

    name: str = "procrustes"
    _mx: np.ndarray | None = field(default=None, repr=False)
    _my: np.ndarray | None = field(default=None, repr=False)
    _w: np.ndarray | None = field(default=None, repr=False)

    def fit(self, x: np.ndarray, y: np.ndarray,
            labels: np.ndarray | None = None) -> "ProcrustesHead":
        x, y = check_pairs(x, y)
        x, y = normalise(x), normalise(y)
        self._mx, self._my = x.mean(axis=0), y.mean(axis=0)
        u, _, vt = np.linalg.svd(normalise(x - self._mx).T @ normalise(y - self._my),
                                 full_matrices=False)
        self._w = u @ vt
        return self

    def transform(self, x: np.ndarray) -> np.ndarray:
        x = check_matrix(x, "x")
        if self._w is None:
            raise NotFittedError("ProcrustesHead used before fit()")
        if x.shape[1] != self._w.shape[0]:
            raise InvalidEmbeddingError(
                f"head was fitted on {self._w.shape[0]}-d inputs, got {x.shape[1]}-d")
        return normalise(normalise(normalise(x) - self._mx) @ self._w + self._my)


@dataclass
class InfoNCEHead:
    """Linear (or MLP, with ``hidden``) head trained with symmetric InfoNCE.

    ``temperature`` is the initial (or, with ``learn_temperature=False``, the
    fixed) softmax temperature; a learnt one is clamped to ≥ 0.01. Trains for
    ``steps`` AdamW steps on shuffled mini-batches of ``batch_size`` (full batch
    when the data fit); seeded, on one thread (small matrices: more threads only contend).
    """

    temperature: float = 0.07
    learn_temperature: bool = True
    hidden: int | None = None
    steps: int = 300
    lr: float = 3e-3
    weight_decay: float = 1e-4
    batch_size: int = 512
    dropout: float = 0.1
    seed: int = 0
    name: str = "linear-infonce"
    _std: _Standardiser = field(default_factory=_Standardiser, repr=False)
    _net: Any = field(default=None, repr=False)
    losses: list[float] = field(default_factory=list, repr=False)

    def __post_init__(self) -> None:
        if self.temperature <= 0 or self.steps < 1 or self.batch_size < 2:
            raise ConfigError(f"bad InfoNCE settings: temperature={self.temperature}, "
                              f"steps={self.steps}, batch_size={self.batch_size}")
        if self.hidden is not None and self.name == "linear-infonce":
            self.name = "mlp-infonce"

    @property
    def final_temperature(self) -> float:
        """The temperature after training (equal to ``temperature`` when fixed)."""
        if self._net is None:
            raise NotFittedError("InfoNCEHead used before fit()")
        return float(1.0 / self._net.logit_scale.detach().exp())

    def fit(self, x: np.ndarray, y: np.ndarray, labels: np.ndarray | None = None) -> "InfoNCEHead":
        # deferred: model libraries load only where a model runs
        import torch

        x, y = check_pairs(x, y)
        labels = _target_labels(y) if labels is None else np.asarray(labels)
        if labels.shape != (len(x),):
            raise InvalidEmbeddingError(f"labels must have shape ({len(x)},), got {labels.shape}")
        gen = torch.Generator().manual_seed(self.seed)
        torch.manual_seed(self.seed)
        xs = torch.as_tensor(self._std.fit(x)(x), dtype=torch.float32)
        ys = torch.as_tensor(normalise(y))
        lab = torch.as_tensor(np.unique(labels, return_inverse=True)[1])
        net = _build_net(x.shape[1], y.shape[1], self.hidden, self.dropout, self.temperature,
                         self.learn_temperature)
        opt = torch.optim.AdamW(net.parameters(), lr=self.lr, weight_decay=self.weight_decay)
        self.losses = []
        net.train()
        with fixed_torch_state():
            for batch in _batches(len(xs), self.batch_size, self.steps, gen):
                loss = _symmetric_infonce(net, xs[batch], ys[batch], lab[batch])
                opt.zero_grad()
                loss.backward()
                opt.step()
                self.losses.append(loss.item())
        self._net = net.eval()
        return self

    def transform(self, x: np.ndarray) -> np.ndarray:
        # deferred: model libraries load only where a model runs
        import torch

        x = check_matrix(x, "x")
        if self._net is None:
            raise NotFittedError("InfoNCEHead used before fit()")
        with torch.inference_mode(), fixed_torch_state():
            out = self._net(torch.as_tensor(self._std(x), dtype=torch.float32))
        return normalise(out.numpy())


def _batches(n: int, size: int, steps: int, gen: Any) -> Iterator[Any]:
    # deferred: model libraries load only where a model runs
    import torch

    done = 0
    while True:
        for batch in torch.randperm(n, generator=gen).split(size):
            if done == steps:
                return
            if len(batch) >= 2:
                done += 1
                yield batch


def _build_net(d_in: int, d_out: int, hidden: int | None, dropout: float, temperature: float,
               learn_temperature: bool) -> Any:
    """The head as a torch module (torch is imported only when a head is trained)."""
    # deferred: model libraries load only where a model runs
    import torch
    from torch import nn

    class Net(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.body = nn.Linear(d_in, d_out) if hidden is None else nn.Sequential(
                nn.Linear(d_in, hidden), nn.GELU(), nn.Dropout(dropout), nn.Linear(hidden, d_out))
            scale = torch.tensor(float(np.log(1.0 / temperature)))
            self.logit_scale = nn.Parameter(scale, requires_grad=learn_temperature)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return nn.functional.normalize(self.body(x), dim=-1)

    return Net()


def _symmetric_infonce(net: Any, x: Any, y: Any, labels: Any) -> Any:
    # deferred: model libraries load only where a model runs
    import torch

    scale = net.logit_scale.clamp(max=float(np.log(100.0))).exp()
    logits = scale * net(x) @ y.T
    positive = (labels[:, None] == labels[None, :]).float()
    target = positive / positive.sum(dim=1, keepdim=True)
    loss_xy = -(target * torch.log_softmax(logits, dim=1)).sum(dim=1).mean()
    loss_yx = -(target * torch.log_softmax(logits.T, dim=1)).sum(dim=1).mean()
    return (loss_xy + loss_yx) / 2


def _target_labels(y: np.ndarray) -> np.ndarray:
    return np.unique(y, axis=0, return_inverse=True)[1].reshape(-1)


def check_matrix(x: np.ndarray, name: str) -> np.ndarray:
    """``x`` as a finite 2-D float64 array with at least one row, else InvalidEmbeddingError."""
    x = np.asarray(x)
    if x.ndim != 2 or x.shape[0] == 0 or x.shape[1] == 0:
        raise InvalidEmbeddingError(f"{name} must be a non-empty 2-D array, got shape {x.shape}")
    if not np.issubdtype(x.dtype, np.number) or not np.isfinite(x).all():
        raise InvalidEmbeddingError(f"{name} holds NaN, infinite or non-numeric values")
    return x.astype(np.float64)


def check_pairs(x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Validated training pairs: same number of rows, at least two."""
    x, y = check_matrix(x, "x"), check_matrix(y, "y")
    if len(x) != len(y) or len(x) < 2:
        raise InvalidEmbeddingError(f"need ≥ 2 paired rows, got {len(x)} inputs and {len(y)} targets")
    return x, y


HEADS: dict[str, Callable[..., ProjectionHead]] = {
    "ridge": RidgeHead,
    "procrustes": ProcrustesHead,
    "linear": InfoNCEHead,
    "mlp": lambda **kw: InfoNCEHead(**{"hidden": 512, **kw}),
}


def make_head(name: str, **kw: Any) -> ProjectionHead:
    """A fresh head by name: ``ridge``, ``procrustes``, ``linear`` (InfoNCE) or ``mlp``."""
    if name not in HEADS:
        raise ConfigError(f"unknown projection head {name!r}; known: {', '.join(HEADS)}")
    return HEADS[name](**kw)
