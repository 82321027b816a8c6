"""Seeded generators of cache workloads: multimodal query streams and Zipf object traces.

:func:`generate` draws a multimodal query stream: Zipf popularity over *intents*
(one intent = one answer), each asked through paraphrase *variants* per modality
(text rewrites; image crops / brightness / resizes of one photo; speech of one
sentence by different voices and rates), a share of *novel* queries that match
no earlier intent, *bursts* (an intent suddenly trends, and its queries arrive
faster), *drift* (every ``drift_period`` queries popularity ranks reshuffle, new
intents appear and the ones they replace fade) and *sessions* (a user re-asks the
intent that opened the session; assigned last, so a session keeps one intent and
a novel query is a session of its own). The intent id travels with every query
as ground truth, so false hits are measurable. A share of queries
(``multimodal_mix``) carries several modalities (text + image, speech + image,
text + speech, or all three; :data:`MODALITY_SETS`), one vector per modality, or is a
*video* clip (seed 002 §3.1): its keyframes (an image-space vector of their own, not a still
photo's) and its audio track (the intent's speech, the audio modality's vector), a modality
set of its own (``"video"``) that never matches a still image + audio query.

Vectors are **synthetic** (labelled so in :data:`EMBEDDING_KIND`): per modality,
intents cluster in topics; two variants of one intent have cosine about
``paraphrase_cos`` (each intent its own value within ± ``paraphrase_spread``);
variants of sibling intents (same topic) about ``paraphrase_cos * sibling_cos``;
unrelated ones about 0 (± 1/sqrt(dim)). Timing
is synthetic too: Poisson arrivals at ``qps`` modulated by a daily cycle
(amplitude ``cycle_amplitude``, one cycle per ``cycle_s`` seconds, by default one
compressed "day" over the stream) and ``burst_speedup`` times faster for burst queries
(both off by default, so a default stream keeps v1's homogeneous Poisson timing).
Real text comes from ShareGPT prompts when the caller passes them (see
:mod:`mmcache.datasets.prompts`), and
:meth:`Workload.with_text_encoder` swaps the synthetic text vectors for a real
encoder's embeddings of exactly those texts (image and audio stay synthetic,
the labelled stand-in for CLIP / Whisper vectors; :meth:`Workload.embedding_kinds`
says which is which).

:func:`zipf_trace` draws an object trace (ids + sizes) in the same
:class:`mmcache.sim.trace.Trace` layout that :func:`mmcache.sim.trace.read_oracle_general` returns.
"""

from mmcache.sim.workload.queries import (
    MODALITY_SETS, MODALITY_SET_NAMES, RealEmbeddings, SET_CHANNELS, TEXT_STORE_BATCH, TRACE_KEYS,
    VIDEO_SET, encode_checked, first_modality, modality_set_index, query_image, stream_query)
from mmcache.sim.workload.stream import (
    EMBEDDING_KIND, TIMING_KIND, VECTOR_KINDS, VIDEO_KIND, Workload, WorkloadConfig,
    catalogue_size, generate, zipf_trace)
from mmcache.sim.workload.media import (
    DEFAULT_ENCODERS, MEDIA_PROVENANCE, MediaSources, RealPool, SPOKEN_WORDS, SpeechSpecEncoder,
    audio_capped_sets, embed_workload, load_media_sources)

__all__ = [
    "DEFAULT_ENCODERS", "EMBEDDING_KIND", "MEDIA_PROVENANCE", "MODALITY_SETS",
    "MODALITY_SET_NAMES", "MediaSources", "RealEmbeddings", "RealPool", "SET_CHANNELS",
    "SPOKEN_WORDS", "SpeechSpecEncoder", "TEXT_STORE_BATCH", "TIMING_KIND", "TRACE_KEYS",
    "VECTOR_KINDS", "VIDEO_KIND", "VIDEO_SET", "Workload", "WorkloadConfig", "audio_capped_sets",
    "catalogue_size", "embed_workload", "encode_checked", "first_modality", "generate",
    "load_media_sources", "modality_set_index", "query_image", "stream_query", "zipf_trace"]
