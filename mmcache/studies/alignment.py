"""The CLIP–Whisper alignment experiment as reusable pieces (notebook 01 drives them).

An :class:`AlignmentTask` holds frozen query embeddings (e.g. pooled Whisper
states), the target each should land on (e.g. the MiniLM embedding of what was
said, or the CLIP embedding of the pictured scene), a meaning label per row and
a fixed split. :func:`evaluate_ladder` fits every projection head on the
training rows and scores the held-out rows against a gallery, next to chance,
scorers that need no head (ASR → text encoder) and a fused scorer whose
weight is chosen on the validation rows. :func:`recall_vs_pairs` and
:func:`temperature_sweep` vary one knob of the linear InfoNCE head.

:func:`transcribe` runs Whisper ASR in length-sorted batches (greedy,
temperature 0) and caches transcripts on disk by audio content and weights.
"""

from __future__ import annotations

import json
import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import pandas as pd

from mmcache.encoders.heads import InfoNCEHead, make_head
from mmcache.encoders.store import content_hash
from mmcache.encoders.whisper import check_audio, log_mel
from mmcache.errors import InvalidInputError
from mmcache.metrics import progress_bar
from mmcache.paths import DATA_DIR
from mmcache.studies.retrieval import (
    best_fusion_weight,
    cosine_similarity,
    evaluate,
    fuse,
)

#: The learned rungs of the ladder, simplest first.
LADDER_HEADS: tuple[str, ...] = ("ridge", "procrustes", "linear", "mlp")
TRANSCRIPT_DIR = DATA_DIR / "generated" / "transcripts"


@dataclass
class AlignmentTask:
    """Paired rows for one retrieval direction (e.g. Asterisk audio → transcript text).

    ``queries[i]`` (frozen source embedding) should retrieve gallery items with
    label ``labels[i]``; ``targets[i]`` is what a head is trained to map it to.
    With ``gallery=None`` the gallery of a split is that split's own targets
    (one per label); otherwise a fixed gallery (e.g. all scenes) is used.
    ``direct`` holds query embeddings already in the target space (e.g. MiniLM
    of the ASR transcript), scored without a head.
    """

    name: str
    queries: np.ndarray
    targets: np.ndarray
    labels: np.ndarray
    splits: np.ndarray
    gallery: np.ndarray | None = None
    gallery_labels: np.ndarray | None = None
    direct: dict[str, np.ndarray] = field(default_factory=dict)

    def __post_init__(self) -> None:
        n = len(self.queries)
        sizes = {len(self.targets), len(self.labels), len(self.splits),
                 *(len(v) for v in self.direct.values())}
        if sizes != {n}:
            raise InvalidInputError(f"task {self.name!r}: rows disagree in length ({sizes | {n}})")
        self.labels, self.splits = np.asarray(self.labels), np.asarray(self.splits)
        for split in ("train", "test"):
            if not (self.splits == split).any():
                raise InvalidInputError(f"task {self.name!r} has no {split} rows")

    def rows(self, split: str) -> np.ndarray:
        """Indices of the rows in ``split``."""
        return np.flatnonzero(self.splits == split)

    def gallery_for(self, split: str) -> tuple[np.ndarray, np.ndarray]:
        """``(gallery embeddings, gallery labels)`` used to score the rows of ``split``."""
        if self.gallery is not None:
            return self.gallery, np.asarray(self.gallery_labels)
        rows = self.rows(split)
        _, first = np.unique(self.labels[rows], return_index=True)
        return self.targets[rows[first]], self.labels[rows[first]]


def fit_head(task: AlignmentTask, name: str, rows: np.ndarray | None = None, **kw: Any):
    """A head called ``name`` fitted on the task's training rows (or ``rows``)."""
    rows = task.rows("train") if rows is None else rows
    return make_head(name, **kw).fit(task.queries[rows], task.targets[rows], task.labels[rows])


def score(task: AlignmentTask, similarity: np.ndarray, split: str = "test", n_boot: int = 1000,
          seed: int = 0) -> dict[str, Any]:
    """R@1/5/10, median rank, CIs and chance for a similarity matrix of ``split``'s rows."""
    _, gallery_labels = task.gallery_for(split)
    return evaluate(similarity, task.labels[task.rows(split)], gallery_labels,
                    n_boot=n_boot, seed=seed).as_dict()


def head_similarity(task: AlignmentTask, head: Any, split: str = "test") -> np.ndarray:
    """Cosine similarity of ``split``'s projected queries to its gallery."""
    gallery, _ = task.gallery_for(split)
    return cosine_similarity(head.transform(task.queries[task.rows(split)]), gallery)


def direct_similarity(task: AlignmentTask, key: str, split: str = "test") -> np.ndarray:
    """Cosine similarity of ``split``'s ``direct[key]`` embeddings to its gallery."""
    gallery, _ = task.gallery_for(split)
    return cosine_similarity(task.direct[key][task.rows(split)], gallery)


def evaluate_ladder(task: AlignmentTask, heads: Sequence[str] = LADDER_HEADS,
                    head_kw: dict[str, dict[str, Any]] | None = None,
                    fuse_head: str | None = "linear", n_boot: int = 1000,
                    seed: int = 0) -> pd.DataFrame:
    """One row per method: chance, each head, each direct scorer, fused head + direct.

    A fused scorer ``w·sim(head) + (1−w)·sim(direct)`` is added for every
    direct scorer when ``fuse_head`` is among ``heads``; ``w`` is chosen on the
    validation rows (or 0.5 without any).
    """
    head_kw = head_kw or {}
    if not heads and not task.direct:
        raise InvalidInputError(f"task {task.name!r}: nothing to evaluate")
    rows: list[dict[str, Any]] = []
    fitted = {}
    for name in heads:
        fitted[name] = fit_head(task, name, **head_kw.get(name, {}))
        rows.append({"method": name, **score(task, head_similarity(task, fitted[name]),
                                             n_boot=n_boot, seed=seed)})
    for key in task.direct:
        rows.append({"method": key, **score(task, direct_similarity(task, key),
                                            n_boot=n_boot, seed=seed)})
        if fuse_head in fitted:
            w = fusion_weight(task, fitted[fuse_head], key)
            sim = fuse([head_similarity(task, fitted[fuse_head]), direct_similarity(task, key)],
                       [w, 1 - w])
            rows.append({"method": f"fused({fuse_head}+{key})", "fusion_weight": w,
                         **score(task, sim, n_boot=n_boot, seed=seed)})
    chance = {"method": "chance", **{k.removesuffix("_chance"): v for k, v in rows[0].items()
                                     if k.endswith("_chance")}}
    table = pd.DataFrame([chance, *rows])
    table.insert(0, "task", task.name)
    return table


def fusion_weight(task: AlignmentTask, head: Any, key: str) -> float:
    """The head's weight in the fused scorer, chosen on the validation rows (0.5 without any)."""
    if not (task.splits == "val").any():
        return 0.5
    _, gallery_labels = task.gallery_for("val")
    return best_fusion_weight(head_similarity(task, head, "val"), direct_similarity(task, key, "val"),
                              task.labels[task.rows("val")], gallery_labels)


def recall_vs_pairs(task: AlignmentTask, sizes: Sequence[int], head: str = "linear",
                    seed: int = 0, **kw: Any) -> pd.DataFrame:
    """Test R@1/R@5 of ``head`` trained on seeded subsets of ``sizes`` training pairs."""
    train = task.rows("train")
    order = np.random.default_rng(seed).permutation(train)
    out = []
    for n in sizes:
        if n > len(train) or n < 2:
            continue
        fitted = fit_head(task, head, rows=np.sort(order[:n]), **kw)
        s = score(task, head_similarity(task, fitted), n_boot=200, seed=seed)
        out.append({"task": task.name, "head": head, "train_pairs": n, "R@1": s["R@1"],
                    "R@1_ci": s["R@1_ci"], "R@5": s["R@5"]})
    return pd.DataFrame(out)


def temperature_sweep(task: AlignmentTask, temperatures: Sequence[float], seed: int = 0,
                      **kw: Any) -> pd.DataFrame:
    """Test R@1 of the linear InfoNCE head at fixed temperatures, and with a learnt one."""
    out = []
    for t in [*temperatures, None]:
        head = InfoNCEHead(temperature=t or 0.07, learn_temperature=t is None, seed=seed, **kw)
        head.fit(task.queries[task.rows("train")], task.targets[task.rows("train")],
                 task.labels[task.rows("train")])
        s = score(task, head_similarity(task, head), n_boot=200, seed=seed)
        out.append({"task": task.name, "temperature": head.final_temperature,
                    "learnt": t is None, "R@1": s["R@1"], "R@1_ci": s["R@1_ci"]})
    return pd.DataFrame(out)


def transcribe(model: Any, audios: Sequence[np.ndarray], batch_size: int = 8,
               cache_dir: str | Path = TRANSCRIPT_DIR) -> list[str]:
    """Whisper transcripts (greedy, temperature 0, full 30 s context), cached on disk.

    Clips are decoded in batches of similar length; each batch may emit at most
    ``12 + 6·seconds`` tokens (≤ 224), which stops repetition loops early. The
    cache file is keyed by ``model.weights_id`` and every clip by its content hash.
    """
    # deferred: model libraries load only where a model runs
    import torch
    import whisper

    clips = [check_audio(a, i) for i, a in enumerate(audios)]
    path = Path(cache_dir) / f"{content_hash(str(model.weights_id))[:16]}.json"
    cache = json.loads(path.read_text()) if path.exists() else {}
    keys = [content_hash(c) for c in clips]
    todo = sorted({k: i for i, k in enumerate(keys) if k not in cache}.values(),
                  key=lambda i: clips[i].size)
    with progress_bar(len(todo), "transcribing", unit="clip", progress=None if todo else False) \
            as bar:
        for start in range(0, len(todo), batch_size):
            batch = todo[start:start + batch_size]
            seconds = max(clips[i].size for i in batch) / 16_000
            options = whisper.DecodingOptions(language="en", temperature=0.0, fp16=False,
                                              without_timestamps=True,
                                              sample_len=int(min(224, 12 + 6 * seconds)))
            mel = torch.stack([log_mel(clips[i]) for i in batch])
            for i, result in zip(batch, whisper.decode(model, mel, options)):
                cache[keys[i]] = result.text.strip()
            bar.update(len(batch))
        _write_json(path, cache)  # after every batch: an interrupted run keeps its work
    return [cache[k] for k in keys]


def _write_json(path: Path, data: dict[str, str]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name + ".", suffix=".tmp")
    with os.fdopen(fd, "w") as fh:  # a file of this process's own: concurrent saves do not collide
        fh.write(json.dumps(data, indent=0, sort_keys=True))
    os.replace(tmp, path)
