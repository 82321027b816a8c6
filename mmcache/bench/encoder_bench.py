"""Encoder benchmark: trimmed vs full Whisper context, and the embedding store's second pass.

``python -m mmcache.bench.encoder_bench`` prints two ratios, each against a
baseline measured side by side in the same run:

1. Whisper tiny.en encoder on real Asterisk prompts (< 10 s, 8 kHz → 16 kHz):
   seconds per clip with the full 30 s context ÷ with the trimmed context (the
   default), alternating in small chunks so machine load hits both alike; plus
   how close the pooled embeddings are (cosine) and whether each trimmed
   embedding retrieves its own full-context twin first (R@1).
2. The embedding store: first pass (MiniLM encodes every caption) ÷ second pass
   (all read from disk), on Fashion-MNIST and scene captions.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np

ASTERISK_DIR = Path("/usr/share/asterisk/sounds/en")
CHUNK = 4


def asterisk_clips(n: int, max_seconds: float = 10.0) -> list[np.ndarray]:
    """The first ``n`` Asterisk prompts shorter than ``max_seconds``, as 16 kHz float32."""
    from scipy.io import wavfile

    from ..encoders.whisper import to_model_rate

    clips = []
    for path in sorted(ASTERISK_DIR.glob("*.wav")):
        rate, pcm = wavfile.read(path)
        if rate == 8000 and pcm.ndim == 1 and pcm.size < max_seconds * rate:
            clips.append(to_model_rate(pcm.astype(np.float32) / 32768, rate))
        if len(clips) == n:
            break
    return clips


def whisper_context(n_clips: int) -> None:
    """Ratio 1: full-context ÷ trimmed-context encoder time per clip, and equivalence."""
    from ..encoders.whisper import WhisperEncoder, load_whisper

    model = load_whisper()
    trimmed, full = WhisperEncoder(model=model), WhisperEncoder(model=model, trim=False)
    clips = asterisk_clips(n_clips)
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


def store_second_pass(n_texts: int) -> None:
    """Ratio 2: first pass (encode + store) ÷ second pass (read back) through the store."""
    from ..datasets.images import FASHION_CLASSES, FASHION_TEMPLATES
    from ..encoders import get_encoder
    from ..encoders.store import EmbeddingStore

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


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="a small run")
    args = parser.parse_args(argv)
    import torch

    torch.set_num_threads(1)
    whisper_context(8 if args.quick else 48)
    store_second_pass(200 if args.quick else 2000)


if __name__ == "__main__":
    main()
