"""Projection heads: each rung of the ladder learns a known map; bad input is rejected."""

from __future__ import annotations

import numpy as np
import pytest

from mmcache.encoders.heads import HEADS, InfoNCEHead, make_head, normalise
from mmcache.errors import ConfigError, InvalidEmbeddingError, NotFittedError

FAST = {"linear": {"steps": 150}, "mlp": {"steps": 150, "hidden": 64}}


def _paired(seed: int = 0, n: int = 300, d_in: int = 24, d_out: int = 16, classes: int = 30,
            noise: float = 0.3):
    rng = np.random.default_rng(seed)
    targets = rng.standard_normal((classes, d_out))
    mixing = rng.standard_normal((d_out, d_in))
    labels = rng.integers(0, classes, n)
    x = targets[labels] @ mixing + noise * rng.standard_normal((n, d_in))
    return x, targets[labels], labels, targets


@pytest.mark.parametrize("name", list(HEADS))
def test_head_beats_chance_on_held_out_rows(name: str) -> None:
    x, y, labels, targets = _paired()
    head = make_head(name, **FAST.get(name, {})).fit(x[:200], y[:200])
    out = head.transform(x[200:])
    assert out.shape == (100, 16) and np.allclose(np.linalg.norm(out, axis=1), 1, atol=1e-5)
    accuracy = ((out @ normalise(targets).T).argmax(axis=1) == labels[200:]).mean()
    assert accuracy > 0.5  # chance is 1/30


def test_procrustes_recovers_a_rotation() -> None:
    rng = np.random.default_rng(3)
    q, _ = np.linalg.qr(rng.standard_normal((8, 8)))
    x = normalise(rng.standard_normal((200, 8)))
    head = make_head("procrustes").fit(x, x @ q)
    assert np.mean(np.sum(head.transform(x) * normalise(x @ q), axis=1)) > 0.95


def test_fixed_temperature_stays_and_learnt_one_moves() -> None:
    x, y, _, _ = _paired(n=120)
    fixed = InfoNCEHead(temperature=0.2, learn_temperature=False, steps=30).fit(x, y)
    learnt = InfoNCEHead(temperature=0.2, learn_temperature=True, steps=30, lr=3e-2).fit(x, y)
    assert fixed.final_temperature == pytest.approx(0.2, rel=1e-5)
    assert learnt.final_temperature != pytest.approx(0.2, rel=1e-3)


def test_infonce_training_is_seeded_and_loss_falls() -> None:
    x, y, _, _ = _paired(n=120)
    a = InfoNCEHead(steps=40, seed=1).fit(x, y)
    b = InfoNCEHead(steps=40, seed=1).fit(x, y)
    assert np.allclose(a.transform(x), b.transform(x))
    assert np.mean(a.losses[-5:]) < np.mean(a.losses[:5])


@pytest.mark.parametrize("name", list(HEADS))
def test_bad_embeddings_and_unfitted_heads(name: str) -> None:
    x, y, _, _ = _paired(n=20)
    head = make_head(name, **FAST.get(name, {}))
    with pytest.raises(NotFittedError):
        head.transform(x)
    bad = x.copy()
    bad[0, 0] = np.nan
    for args in [(bad, y), (x, y[:10]), (x[:1], y[:1]), (x[:, 0], y)]:
        with pytest.raises(InvalidEmbeddingError):
            head.fit(*args)
    head.fit(x, y)
    with pytest.raises(InvalidEmbeddingError):
        head.transform(x[:, :5])


def test_unknown_head_and_bad_settings() -> None:
    with pytest.raises(ConfigError):
        make_head("transformer")
    with pytest.raises(ConfigError):
        InfoNCEHead(temperature=0)
