"""Encoder benchmark: trimmed vs full Whisper context, and the embedding store's second pass.

``python -m mmcache.lab.bench.encoders`` prints two ratios, each against a
baseline measured side by side in the same run, and records them in the benchmark ledger
(``runs/bench/encoders.json``):

1. Whisper tiny.en encoder on real Asterisk prompts (< 10 s, 8 kHz → 16 kHz):
   seconds per clip with the full 30 s context ÷ with the trimmed context (the
   default), alternating in small chunks so machine load hits both alike; plus
   how close the pooled embeddings are (cosine), whether each trimmed embedding
   retrieves its own full-context twin first (R@1), and audio→transcript R@1 of
   a ridge map to MiniLM trained on each kind of embedding (same quality?).
2. The embedding store: first pass (MiniLM encodes every caption) ÷ second pass
   (all read from disk), on Fashion-MNIST and scene captions.
"""

from __future__ import annotations

import argparse
import tempfile
import time

import numpy as np

from mmcache.datasets import load_asterisk_prompts
from mmcache.datasets.images import FASHION_CLASSES, FASHION_TEMPLATES
from mmcache.encoders import get_encoder
from mmcache.encoders.store import EmbeddingStore
from mmcache.encoders.whisper import WhisperEncoder, load_whisper
from mmcache.lab.bench.ledger import Ratio, machine, record

CHUNK = 4


def asterisk_prompts(n: int, max_seconds: float = 10.0) -> tuple[list[np.ndarray], list[str]]:
    """The first ``n`` Asterisk prompts under ``max_seconds`` (unique transcripts): 16 kHz clips, texts."""

    prompts = load_asterisk_prompts(max_seconds=max_seconds)[:n]
    return [p.audio for p in prompts], [p.text for p in prompts]


def ridge_r_at_1(audio: np.ndarray, text: np.ndarray, seeds: int = 5, lam: float = 0.1) -> float:
    """Mean audio→transcript R@1 of a ridge map audio→text over seeded 80/20 splits."""
    scores = []
    for seed in range(seeds):
        order = np.random.default_rng(seed).permutation(len(audio))
        test, train = order[:len(audio) // 5], order[len(audio) // 5:]
        x, y = audio[train], text[train]
        w = np.linalg.solve(x.T @ x + lam * np.eye(x.shape[1]), x.T @ y)
        pred = audio[test] @ w
        scores.append(float(((pred @ text[test].T).argmax(1) == np.arange(len(test))).mean()))
    return float(np.mean(scores))


def whisper_context(n_clips: int) -> list[Ratio]:
    """Ratio 1: full-context ÷ trimmed-context encoder time per clip, and equivalence."""

    model = load_whisper()
    trimmed, full = WhisperEncoder(model=model), WhisperEncoder(model=model, trim=False)
    clips, texts = asterisk_prompts(n_clips)
    seconds = {"trimmed": 0.0, "full": 0.0}
    out: dict[str, list[np.ndarray]] = {"trimmed": [], "full": []}
    for i in range(0, len(clips), CHUNK):
        for name, enc in (("trimmed", trimmed), ("full", full)):
            t0 = time.perf_counter()
            out[name].append(enc.encode(clips[i:i + CHUNK]))
            seconds[name] += time.perf_counter() - t0
    a, b = np.concatenate(out["trimmed"]), np.concatenate(out["full"])
    cos = (a * b).sum(1)
    r1 = float(((a @ b.T).argmax(1) == np.arange(len(a))).mean())
    lengths = [c.size / 16_000 for c in clips]
    print(f"whisper tiny.en, {len(clips)} Asterisk prompts ({min(lengths):.1f}-{max(lengths):.1f} s)")
    print(f"  full context {seconds['full'] / len(clips) * 1e3:.0f} ms/clip, trimmed "
          f"{seconds['trimmed'] / len(clips) * 1e3:.0f} ms/clip")
    print(f"RATIO whisper full/trimmed time: {seconds['full'] / seconds['trimmed']:.1f}x  "
          f"(cosine trimmed vs full: min {cos.min():.3f}, mean {cos.mean():.3f}; "
          f"twin R@1 {r1:.2f})")
    full_context = "the full 30 s context"
    ratios = [Ratio("Whisper encoder time per clip, full over trimmed context",
                    seconds["full"] / seconds["trimmed"], "trimmed context (the default)"),
              Ratio("cosine of trimmed and full embeddings, min", float(cos.min()), full_context,
                    unit="cosine"),
              Ratio("cosine of trimmed and full embeddings, mean", float(cos.mean()),
                    full_context, unit="cosine"),
              Ratio("trimmed embeddings retrieving their full twin first", r1, full_context,
                    unit="fraction", at_least=1.0)]
    if len(clips) >= 50:
        text = get_encoder("minilm").encode(texts)
        r_trimmed, r_full = ridge_r_at_1(a, text), ridge_r_at_1(b, text)
        print(f"  audio→transcript R@1, ridge to MiniLM, 5 splits of {len(clips)} prompts "
              f"(chance {5 / len(clips):.2f}): trimmed {r_trimmed:.2f}, full {r_full:.2f}")
        ratios.append(Ratio("audio→transcript R@1 (ridge to MiniLM), trimmed over full",
                            r_trimmed / r_full, "full context"))
    return ratios


def store_second_pass(n_texts: int) -> list[Ratio]:
    """Ratio 2: first pass (encode + store) ÷ second pass (read back) through the store."""

    texts = [f"{FASHION_TEMPLATES[i % len(FASHION_TEMPLATES)].format(FASHION_CLASSES[i % 10])} "
             f"#{i}" for i in range(n_texts)]
    encoder = get_encoder("minilm")
    with tempfile.TemporaryDirectory() as root:
        t0 = time.perf_counter()
        first = EmbeddingStore(root).encode(encoder, texts)
        t1 = time.perf_counter()
        second = EmbeddingStore(root).encode(encoder, texts)
        t2 = time.perf_counter()
    assert np.array_equal(first, second)
    print(f"embedding store, {len(texts)} captions, MiniLM: first pass {t1 - t0:.2f} s, "
          f"second pass {t2 - t1:.3f} s")
    print(f"RATIO store first/second pass: {(t1 - t0) / (t2 - t1):.0f}x")
    return [Ratio(f"embedding store, {len(texts):,} captions: first pass over second",
                  (t1 - t0) / (t2 - t1), "the second pass (read from disk)")]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="a small run")
    args = parser.parse_args(argv)
    # deferred: model libraries load only where a model runs
    import torch

    torch.set_num_threads(1)
    started = machine()
    ratios = whisper_context(8 if args.quick else 150)
    ratios += store_second_pass(200 if args.quick else 2000)
    record("encoders", ratios, vars(args), started=started)


if __name__ == "__main__":
    main()
