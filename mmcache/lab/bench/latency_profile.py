"""Measure CacheBench-MM's latency profile on this machine and write ``mmcache/resources/latency_profile.json``.

``python -m mmcache.lab.bench.latency_profile`` (``make latency-profile``) times, one
query at a time as the cache encodes them (torch on one thread):

* ``encode.text`` — MiniLM on real ShareGPT prompts;
* ``encode.audio`` — Whisper tiny.en (trimmed context) on real Asterisk prompts;
* ``encode.image`` — the offline CLIP's image tower on Fashion-MNIST photos (the
  trained one from ``make models`` when present, else the same architecture
  untrained: its time does not depend on the weights' values; the entry says which);
* ``infer.audio`` — a miss's model call for speech: Whisper tiny.en transcribing one
  real Asterisk prompt (:meth:`mmcache.encoders.whisper.WhisperEncoder.transcribe`:
  greedy, temperature 0);
* ``infer.image`` — a miss's model call for images: the trained offline CLIP's
  zero-shot classification of one Fashion-MNIST photo (image tower, then the
  nearest of the ten class prompts embedded once by its text tower); needs
  ``make models``;
* ``<tier>.exact`` / ``<tier>.semantic`` and ``get`` — a :class:`mmcache.TieredCache`
  (memory L1, flat FAISS L2, SQLite L3) filled from a synthetic workload, read back
  from the cache's own latency histograms (:mod:`mmcache.metrics`).

Each entry is a log-normal fit (median, σ) with the samples' own p50 / p95 / p99
and a ``source`` naming what was timed; the document names the machine, date and
command. Text inference is not measured: no language model is served here (see
:data:`mmcache.sim.latency.ASSUMED_TEXT_INFERENCE`).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import tempfile
import time
from pathlib import Path
from typing import Any, Callable, Sequence

from mmcache import TieredCache
from mmcache.datasets import load_asterisk_prompts, load_fashion_mnist
from mmcache.datasets.prompts import load_prompts
from mmcache.encoders import get_encoder
from mmcache.encoders.clip import load_clip_encoder, offline_preprocess
from mmcache.encoders.clip_arch import TrainConfig, build_image_tower
from mmcache.errors import OfflineAssetError
from mmcache.lab.clip_training import class_text_embeddings, prompt_classifier
from mmcache.sim.cachebench import three_tier_cache_config
from mmcache.sim.latency import PROFILE_PATH, fit_histogram, fit_samples, profile_entry
from mmcache.sim.workload import generate

COMMAND = "python -m mmcache.lab.bench.latency_profile"


def time_calls(call: Callable[[Any], Any], inputs: Sequence[Any], warmup: int = 2) -> list[float]:
    """Milliseconds of ``call(x)`` for every input, after ``warmup`` untimed calls."""
    for x in inputs[:warmup]:
        call(x)
    out = []
    for x in inputs:
        start = time.perf_counter()
        call(x)
        out.append(1e3 * (time.perf_counter() - start))
    return out


def text_encoder(n: int) -> dict[str, Any]:
    """``encode.text``: MiniLM, one ShareGPT prompt per call."""

    encoder = get_encoder("minilm")
    samples = time_calls(lambda p: encoder.encode([p]), load_prompts(n))
    return profile_entry(fit_samples(samples, f"{encoder.encoder_id}, one ShareGPT prompt per "
                                              f"call, {n} prompts"), samples)


def audio_encoder(n: int) -> dict[str, Any]:
    """``encode.audio``: Whisper tiny.en (trimmed context), one Asterisk clip per call."""

    encoder = get_encoder("whisper")
    clips = [p.audio for p in load_asterisk_prompts(max_seconds=10.0)[:n]]
    samples = time_calls(lambda c: encoder.encode([c]), clips)
    return profile_entry(fit_samples(samples, f"{encoder.encoder_id}, one real Asterisk prompt "
                                              f"(< 10 s) per call, {n} clips"), samples)


def image_encoder(n: int) -> dict[str, Any]:
    """``encode.image``: the offline CLIP image tower, one Fashion-MNIST photo per call."""
    # deferred: Pillow only where an image is decoded
    from PIL import Image

    photos = [Image.fromarray(im) for im in load_fashion_mnist("test", limit=n).images]
    try:
        encoder = get_encoder("clip")
        call, what = (lambda im: encoder.encode([im])), f"{encoder.encoder_id} (trained)"
    except OfflineAssetError:
        # deferred: model libraries load only where a model runs
        import torch

        visual, _ = build_image_tower(TrainConfig())
        visual.eval()

        def call(im):
            with torch.inference_mode():
                return visual(offline_preprocess(im)[None])
        what = ("the offline CLIP's image-tower architecture, untrained (`make models` not run; "
                "time does not depend on the weights' values)")
    samples = time_calls(call, photos)
    return profile_entry(fit_samples(samples, f"{what}, one Fashion-MNIST photo per call "
                                              f"incl. preprocessing, {n} photos"), samples)


def audio_inference(n: int) -> dict[str, Any]:
    """``infer.audio``: a Whisper tiny.en transcription, one Asterisk clip per call."""

    whisper = get_encoder("whisper")
    clips = [p.audio for p in load_asterisk_prompts(max_seconds=10.0)[:n]]
    samples = time_calls(whisper.transcribe, clips)
    return profile_entry(fit_samples(samples, f"{whisper.model.weights_id} transcription "
                                              "(WhisperEncoder.transcribe: greedy, temperature 0, "
                                              "30 s window), one real Asterisk prompt (< 10 s) "
                                              f"per call, {n} clips"), samples)


def image_inference(n: int) -> dict[str, Any]:
    """``infer.image``: the trained offline CLIP's zero-shot classification of one
    Fashion-MNIST photo (class prompts embedded once, before timing)."""
    # deferred: Pillow only where an image is decoded
    from PIL import Image

    images, texts = load_clip_encoder(modality="image"), load_clip_encoder(modality="text")
    classes = prompt_classifier(class_text_embeddings(texts))
    photos = [Image.fromarray(im) for im in load_fashion_mnist("test", limit=n).images]
    samples = time_calls(lambda im: int((images.encode([im]) @ classes.T).argmax()), photos)
    return profile_entry(fit_samples(samples, f"{images.encoder_id} zero-shot classification "
                                              "(image tower incl. preprocessing, then the nearest "
                                              f"of {len(classes)} Fashion-MNIST class prompts), one "
                                              f"Fashion-MNIST test photo per call, {n} photos"),
                         samples)


def cache_tiers(n_entries: int, n_gets: int) -> dict[str, dict[str, Any]]:
    """Per-stage lookups of a filled TieredCache, from its own latency histograms."""

    stream = generate(n_queries=n_entries + n_gets, n_intents=n_entries, seed=0)
    l3_bytes = 2 * int(stream.size[:n_entries].sum())  # L3 keeps every answer, L1 and L2 some
    with tempfile.TemporaryDirectory() as tmp, TieredCache(
            three_tier_cache_config(l3_bytes, f"{tmp}/l3.db", threshold=0.85)) as cache:
        for i in range(n_entries):
            cache.put(stream.query(i), f"{int(stream.intent[i])}:" + "x" * int(stream.size[i]))
        cache.metrics.reset()
        for i in range(n_entries, n_entries + n_gets):
            cache.get(stream.query(i))
        hists = cache.metrics.snapshot().latency
    setup = (f"mmcache.TieredCache (three_tier_cache_config: memory L1, flat FAISS L2, SQLite "
             f"L3 in a temp dir, L3 {l3_bytes} bytes), "
             f"{n_entries} entries of a synthetic workload (generate(seed=0)), {n_gets} gets")
    return {stage: profile_entry(fit_histogram(h, f"{stage} stage histogram of {setup} "
                                                  f"({h.count} observations)"))
            for stage, h in sorted(hists.items()) if stage != "encode" and h.count >= 2}


def machine() -> dict[str, Any]:
    """What this machine is, for the profile's provenance."""
    # deferred: model libraries load only where a model runs
    import torch

    return {"node": platform.node(), "platform": platform.platform(),
            "processor": platform.processor() or platform.machine(),
            "cpus": os.cpu_count(), "python": platform.python_version(),
            "torch": torch.__version__, "torch_threads": torch.get_num_threads()}


def measure(n_text: int, n_audio: int, n_image: int, n_entries: int, n_gets: int,
            n_transcribe: int, n_classify: int) -> dict[str, Any]:
    """The profile document: machine, date, command and every measured entry."""
    # deferred: model libraries load only where a model runs
    import torch

    torch.set_num_threads(1)
    entries = {"encode.text": text_encoder(n_text), "encode.audio": audio_encoder(n_audio),
               "encode.image": image_encoder(n_image),
               "infer.audio": audio_inference(n_transcribe),
               "infer.image": image_inference(n_classify), **cache_tiers(n_entries, n_gets)}
    return {"command": COMMAND, "date": dt.datetime.now(dt.timezone.utc).isoformat(
        timespec="seconds"), "machine": machine(), "units": "milliseconds", "entries": entries}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, default=PROFILE_PATH)
    parser.add_argument("--quick", action="store_true", help="a small run (not for committing)")
    args = parser.parse_args(argv)
    sizes = ((10, 4, 10, 200, 300, 4, 10) if args.quick else
             (100, 30, 100, 2000, 3000, 30, 100))
    doc = measure(*sizes)
    args.out.write_text(json.dumps(doc, indent=2) + "\n")
    for name, e in doc["entries"].items():
        print(f"{name:14s} median {e['median_ms']:9.3f} ms  sigma {e['sigma']:.2f}  "
              f"{e.get('n', '')}")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
