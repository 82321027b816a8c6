"""Loaders for the offline data sets (nothing is downloaded).

Images: :func:`load_fashion_mnist`, :func:`load_skimage_photos` (real photos with
captions) and :func:`make_scenes` (rendered shape × colour × position scenes
with paraphrased captions). Speech: :mod:`mmcache.datasets.speech` (espeak-ng
renderings, labelled synthetic; Asterisk prompts and LibriVox clips, real).
Splits: :func:`split_of` / :func:`assign_splits` (fixed, seeded, per key). Labelled
hit / no-hit query pairs for threshold studies: :mod:`mmcache.datasets.pairs` (ours) and
:mod:`mmcache.datasets.pairs_file` (yours, from a JSONL file).
"""

from __future__ import annotations

from mmcache.datasets.images import (FASHION_CLASSES, FASHION_TEMPLATES, CaptionedImages, fashion_captions,
                     load_fashion_mnist, load_skimage_photos)
from mmcache.datasets.scenes import Scene, all_scenes, make_scenes, render_scene, scene_captions
from mmcache.datasets.speech import (SpeechClip, load_asterisk_prompts, load_librivox, read_wav, speak,
                     synthesize)
from mmcache.datasets.splits import SPLITS, assign_splits, split_of

__all__ = ["FASHION_CLASSES", "FASHION_TEMPLATES", "SPLITS", "CaptionedImages", "Scene",
           "all_scenes", "assign_splits", "fashion_captions", "load_fashion_mnist",
           "load_asterisk_prompts", "load_librivox", "load_skimage_photos", "make_scenes", "read_wav",
           "render_scene", "scene_captions", "speak", "split_of", "synthesize", "SpeechClip"]
