"""Real inputs and real vectors for a workload's queries (``generate(vectors="real")``).

Each intent gets real sources, one per modality:

* text: its own ShareGPT prompt (no licence stated); variant 0 is the prompt, the
  others are the meaning-preserving rewrites of :func:`mmcache.datasets.pairs.paraphrase`
  (WordNet synonyms, a polite prefix, sentence reordering);
* image: a Fashion-MNIST test photo or a scikit-image photo (real); variants are the
  crops / brightness / resizes of :func:`mmcache.datasets.variants.image_variant`;
* audio: for the first intents, a real recorded Asterisk prompt (variants: gain and
  speed changes of the recording); for the rest, the first words of the intent's
  prompt spoken by espeak-ng (**synthetic** speech; variants: the voices and rates of
  :func:`mmcache.datasets.variants.speech_variant`);
* video: **synthetic** clips built from those offline inputs: the keyframes are a short pan
  across the intent's photo (:func:`mmcache.datasets.variants.video_keyframes`; variants are other
  pans), embedded by the image encoder one frame at a time and mean-pooled
  (:class:`mmcache.encoders.KeyframeMeanEncoder`, as the cache embeds clips); the audio
  track is the intent's speech, the audio modality's own input and vector.

A *trap* (``Workload.trap_of``) is a novel intent whose inputs are edited from the
intent it imitates, as the threshold study's pairs do (:mod:`mmcache.datasets.pairs`):
its text is :func:`~mmcache.datasets.pairs.make_trap` of that prompt (negation, entity,
number, date or scope change), its photo another photo of the same Fashion-MNIST
class, its speech the trapped sentence by espeak-ng (also for an Asterisk intent). Where no edit applies the trap keeps its own source.

The inputs encoded are a bounded pool (:class:`RealPool`), so a 50k-query stream costs
minutes of encoding, not hours of Whisper: each intent has at most ``variants`` real
variants per modality (variant v carries the input of variant ``v % variants``, a labelled
stand-in for a distinct paraphrase), and only ``audio_intents`` intents get real speech;
the other queries drop their audio rather than carry a vector that is no real encoding (a
video clip of such an intent becomes a query of its photo).

Every distinct (intent, pooled variant) input is embedded once per encoder through the
:class:`mmcache.encoders.EmbeddingStore`; speech is keyed by its *spec* (source,
voice, rate) so a cached clip is not even re-synthesised, a video clip by its stacked keyframes
(cheap to render), and a rerun costs seconds.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from functools import lru_cache
from typing import TYPE_CHECKING, Any, Mapping, Sequence

import numpy as np

from mmcache.errors import ConfigError, InvalidInputError
from mmcache.types import MODALITIES, Query

if TYPE_CHECKING:
    from mmcache.encoders import EmbeddingStore, Encoder
    from mmcache.sim.workload.stream import Workload
from mmcache.datasets.images import load_fashion_mnist, load_skimage_photos
from mmcache.datasets.pairs import TRAP_KINDS, make_trap, paraphrase
from mmcache.datasets.prompts import load_prompts
from mmcache.datasets.speech import load_asterisk_prompts, synthesize
from mmcache.datasets.variants import (
    apply_image_variant,
    clip_keyframes,
    image_variant,
    speech_variant,
)
from mmcache.encoders import KeyframeMeanEncoder, get_encoder
from mmcache.sim.workload.queries import (
    MODALITY_SETS,
    SET_CHANNELS,
    TEXT_STORE_BATCH,
    RealEmbeddings,
    encode_checked,
    modality_set_index,
    query_image,
    stream_query,
)
from mmcache.types import CHANNELS, VIDEO

#: The encoders :func:`embed_workload` uses by default, per modality (:func:`get_encoder` names).
DEFAULT_ENCODERS: Mapping[str, str] = {"text": "minilm", "image": "clip", "audio": "whisper"}
#: Words of an intent's prompt that espeak-ng speaks (short clips bound Whisper's cost).
SPOKEN_WORDS = 8
_PARAPHRASES = ("polite", "synonym", "reorder")
MEDIA_PROVENANCE = (
    "text: ShareGPT prompts (real; no licence stated) with mmcache.datasets.pairs rewrites; "
    "image: Fashion-MNIST test photos (MIT) and scikit-image photos (real) with crops / "
    "brightness / resizes; audio: Asterisk core sounds (real, CC-BY-SA-3.0) with gain / speed "
    "changes, and espeak-ng speech of the prompts' first words (synthetic); video: synthetic "
    "clips built from those photos (keyframe pans) and that speech (the track); traps made by "
    "mmcache.datasets.pairs edits")


@dataclass(frozen=True)
class RealPool:
    """The bounded set of distinct real inputs that ``generate(vectors="real")`` encodes.

    ``variants``: real variants per intent and modality; a query's variant ``v`` carries the
    real input of variant ``v % variants`` (a **stand-in** for a distinct paraphrase: variants
    ``v`` and ``v + variants`` of one intent carry the identical input). ``audio_intents``:
    how many intents get real speech, those with the most audio-carrying queries (ties: the
    lower id), plus every trap that imitates one of them; a query of any other intent drops
    its audio (speech alone becomes text, the modality its speech is read from; a video clip
    becomes its photo), so every vector stays a real encoding of a real input.

    The defaults bound notebook 06's full stream (50k queries, ~9,200 distinct speech inputs
    unpooled) to at most ``variants * audio_intents`` Whisper clips plus their traps', so a
    first run encodes for minutes and a rerun reads the store.
    """

    variants: int = 2
    audio_intents: int = 200

    def __post_init__(self) -> None:
        if not (isinstance(self.variants, int) and self.variants >= 1):
            raise ConfigError(f"RealPool.variants must be an int >= 1, got {self.variants!r}")
        if not (isinstance(self.audio_intents, int) and self.audio_intents >= 0):
            raise ConfigError("RealPool.audio_intents must be an int >= 0, "
                              f"got {self.audio_intents!r}")

    def variant(self, variant: int) -> int:
        """The real variant a query's ``variant`` carries."""
        return variant % self.variants

    def describe(self) -> str:
        """One line saying what the pool shares (printed with the vectors' kinds)."""
        return (f"pool: variant v carries real input v mod {self.variants} (stand-in for "
                f"distinct paraphrases); real speech for the {self.audio_intents} most "
                "audio-requested intents and their traps")


@dataclass(frozen=True, eq=False)
class MediaSources:
    """The real source of every intent id: prompts, photos (with class labels, -1 for none)
    and recorded prompts, each intent at its ``slot`` (a dense rank of the stream's intents,
    so no two intents share a prompt while the prompts last); ``seed`` seeds the rewrites;
    ``pool`` maps a query's variant onto the real one. Every text and clip is a pure function
    of its key (seeded rewrites, crops, espeak-ng), so each is made once and kept (``_made``):
    a replay asks for the same pooled inputs again and again."""

    prompts: tuple[str, ...]
    photos: np.ndarray
    photo_labels: np.ndarray
    recordings: tuple[np.ndarray, ...]
    trap_of: Mapping[int, int]
    slot: Mapping[int, int]
    pool: RealPool = RealPool()
    seed: int = 0
    _made: dict[tuple, Any] = field(default_factory=dict, init=False, repr=False)

    def prompt(self, intent: int) -> str:
        """The real prompt at ``intent``'s slot (before any trap edit or rewrite)."""
        return self.prompts[self._slot(intent) % len(self.prompts)]

    def text(self, intent: int, variant: int) -> str:
        """The text of (intent, variant): its (trapped) prompt, rewritten for variant > 0."""
        return self._made_once(("text", intent, variant), self._make_text, intent, variant)

    def _make_text(self, intent: int, variant: int) -> str:
        base = self._base_text(intent)
        if variant == 0:
            return base

        rng = np.random.default_rng([self.seed, 5, intent, variant])
        how = _PARAPHRASES[(variant - 1) % len(_PARAPHRASES)]
        return paraphrase(base, how, rng) or paraphrase(base, "polite", rng)

    def image(self, intent: int, variant: int) -> np.ndarray:
        """The photo of (intent, variant)."""
        return apply_image_variant(self.photos[self._photo(intent)], image_variant(variant))

    def keyframes(self, intent: int, variant: int) -> np.ndarray:
        """The keyframes of (intent, variant)'s clip, stacked (frames × H × W × C)."""
        return clip_keyframes(self.photos[self._photo(intent)], variant)

    def speech_spec(self, intent: int, variant: int) -> str:
        """A string naming (intent, variant)'s clip exactly (the embedding store's key)."""
        spec = speech_variant(variant)
        if intent not in self.trap_of and intent < len(self.recordings):
            return f"asterisk|{intent}|{spec.rate_wpm}|{variant}"
        words = " ".join(self._base_text(intent, spoken=True).split()[:SPOKEN_WORDS])
        return f"espeak|{spec.voice}|{spec.rate_wpm}|{words}"

    def speech(self, spec: str) -> np.ndarray:
        """The 16 kHz clip a :meth:`speech_spec` names (one array per spec: do not modify it)."""
        return self._made_once(("speech", spec), self._make_speech, spec)

    def _make_speech(self, spec: str) -> np.ndarray:
        kind, a, b, rest = spec.split("|", 3)
        if kind == "asterisk":
            return _vary_recording(self.recordings[int(a)], int(b), int(rest))

        return synthesize(rest, voice=a, rate=int(b)).audio

    def _made_once(self, key: tuple, make: Any, *args: Any) -> Any:
        """``make(*args)``, made on the first call with ``key`` and kept."""
        if key not in self._made:
            self._made[key] = make(*args)
        return self._made[key]

    def query(self, workload: Workload, i: int, scope: str) -> Query:
        """Query ``i`` of ``workload`` with its real inputs and vectors."""
        mods = workload.modalities(i)
        intent, variant = int(workload.intent[i]), self.pool.variant(int(workload.variant[i]))
        return stream_query(
            workload, i, text=self.text(intent, variant) if "text" in mods else None,
            image=self.query_photo(intent, int(workload.modality_set[i]), variant)
            if "image" in mods else None,
            audio=self.speech(self.speech_spec(intent, variant)) if "audio" in mods else None,
            scope=scope)

    def query_photo(self, intent: int, modality_set: int, variant: int) -> np.ndarray:
        """The image a query of (intent, modality set, variant) carries (one array per key:
        do not modify it)."""
        return self._made_once(("photo", intent, modality_set, variant), query_image,
                               self.photos[self._photo(intent)], modality_set, variant)

    def _base_text(self, intent: int, spoken: bool = False) -> str:
        return self._made_once(("base", intent, spoken), self._make_base_text, intent, spoken)

    def _make_base_text(self, intent: int, spoken: bool) -> str:
        target = self.trap_of.get(intent)
        if target is None:
            return self.prompt(intent)

        prompt = self.prompt(target)
        if spoken:
            prompt = " ".join(prompt.split()[:SPOKEN_WORDS])
        rng = np.random.default_rng([self.seed, 6, intent])
        for kind in rng.permutation(TRAP_KINDS):
            trap = make_trap(prompt, str(kind), rng)
            if trap is not None and trap[0] != prompt:
                return trap[0]
        return self.prompt(intent)

    def _slot(self, intent: int) -> int:
        if intent not in self.slot:
            raise InvalidInputError(f"intent {intent} is not one of this stream's intents")
        return self.slot[intent]

    def _photo(self, intent: int) -> int:
        n = len(self.photos)
        own, target = self._slot(intent) % n, self.trap_of.get(intent)
        if target is None or self.photo_labels[self._slot(target) % n] < 0:
            return own
        same = np.flatnonzero(self.photo_labels == self.photo_labels[self._slot(target) % n])
        same = same[same != self._slot(target) % n]
        return int(same[own % len(same)]) if len(same) else own


def load_media_sources(workload: Workload, *, n_recordings: int | None = None,
                       pool: RealPool | None = None) -> MediaSources:
    """Real sources for every intent of ``workload`` and every intent a trap imitates (one
    prompt each; photos cycle when there are more intents than photos). ``n_recordings``
    caps the Asterisk prompts used (default: all with ≤ 10 s of speech)."""

    fashion, photos = load_fashion_mnist("test"), load_skimage_photos(28)
    grey = np.repeat(fashion.images[..., None], 3, axis=-1)
    traps = {int(i): int(t) for i, t in zip(workload.intent, workload.trap_of) if t >= 0} \
        if workload.trap_of is not None else {}
    ids = np.union1d(workload.intent, np.fromiter(traps.values(), np.int64, len(traps)))
    return MediaSources(
        prompts=tuple(load_prompts(len(ids), min_chars=20, max_chars=300)),
        photos=np.concatenate([photos.images, grey]),
        photo_labels=np.concatenate([np.full(len(photos), -1), fashion.labels]),
        recordings=_recordings(n_recordings), trap_of=traps,
        slot={int(i): k for k, i in enumerate(ids)}, pool=pool or RealPool(),
        seed=workload.config.seed)


@lru_cache(maxsize=2)
def _recordings(limit: int | None) -> tuple[np.ndarray, ...]:

    return tuple(c.audio for c in load_asterisk_prompts(limit, max_seconds=10.0))


def _vary_recording(audio: np.ndarray, rate_wpm: int, variant: int) -> np.ndarray:
    """A recording played ``rate_wpm`` / 150 times as fast with a variant-seeded gain."""
    # deferred: scipy only for resampling
    from scipy.signal import resample_poly

    out = audio if rate_wpm == 150 else resample_poly(audio, 150, rate_wpm).astype(np.float32)
    gain = 1.0 if variant == 0 else float(np.random.default_rng([9, variant]).uniform(0.6, 1.4))
    return np.clip(out * gain, -1.0, 1.0).astype(np.float32)


class SpeechSpecEncoder:
    """Embeds speech given by :meth:`MediaSources.speech_spec`: renders each clip, then
    ``encoder`` embeds it. Its ``encoder_id`` names both, so the store's key is the spec."""

    modality = "audio"

    def __init__(self, encoder: Encoder, sources: MediaSources) -> None:
        self.encoder, self.sources = encoder, sources
        self.dim = encoder.dim
        self.encoder_id = f"{encoder.encoder_id}/of-speech-spec-v1"

    def encode(self, inputs: Sequence[str]) -> np.ndarray:
        return self.encoder.encode([self.sources.speech(s) for s in inputs])


def embed_workload(workload: Workload, *, store: EmbeddingStore | None = None,
                   encoders: Mapping[str, Encoder] | None = None,
                   pool: RealPool | None = None) -> Workload:
    """``workload`` with every modality's vectors from the real encoders on a bounded
    ``pool`` of real inputs (default :class:`RealPool`).

    ``encoders`` overrides :data:`DEFAULT_ENCODERS` per modality (a test may pass named
    stand-ins). Queries of intents outside the pool's speech drop their audio (the returned
    stream's ``modality_set``). Each distinct (intent, pooled variant) input is encoded once,
    through ``store``. The seconds each modality took (rendering and encoding) are in its
    ``kind``, with the pool's sharing.
    """

    pool = pool or RealPool()
    sets, dropped = audio_capped_sets(workload, pool)
    workload = workload.with_real({}, modality_set=sets)
    sources = load_media_sources(workload, pool=pool)
    chosen = {m: (encoders or {}).get(m) or get_encoder(DEFAULT_ENCODERS[m])
              for m in MODALITIES}
    chosen[VIDEO] = chosen["image"]
    real = {}
    for m in CHANNELS:
        asked = _pairs_carrying(workload, m)
        pairs = sorted({(i, pool.variant(v)) for i, v in asked})
        if not pairs:
            continue
        enc = chosen[m]
        started = time.perf_counter()
        if m == "text":
            inputs: list[Any] = [sources.text(*p) for p in pairs]
            order = np.argsort([len(t) for t in inputs], kind="stable")
            pairs, inputs = [pairs[k] for k in order], [inputs[k] for k in order]  # pad little
        elif m == "image":
            inputs = [sources.image(*p) for p in pairs]
        elif m == VIDEO:
            inputs, enc = [sources.keyframes(*p) for p in pairs], KeyframeMeanEncoder(enc)
        else:
            inputs, enc = [sources.speech_spec(*p) for p in pairs], SpeechSpecEncoder(enc, sources)
        vectors = encode_checked(enc, inputs, store,
                                 TEXT_STORE_BATCH if m == "text" else 256)
        seconds = time.perf_counter() - started
        row = {p: k for k, p in enumerate(pairs)}
        note = f"; {dropped:,} queries of other intents dropped their audio" if m == "audio" else ""
        encoder_id = enc.encoder_id if m == VIDEO else chosen[m].encoder_id
        what = "synthetic video clips" if m == VIDEO else f"real {m} inputs"
        real[m] = RealEmbeddings(
            encoder_id=encoder_id,
            kind=f"{encoder_id} on {len(pairs):,} {what} "
                 f"({_SOURCE_OF[m]}; {seconds:.1f} s to build and encode, store hits included; "
                 f"{pool.describe()}{note})",
            prompts=sources.prompts if m == "text" else (),
            rows={(i, v): row[(i, pool.variant(v))] for i, v in asked}, vectors=vectors)
    return workload.with_real(real, media=sources)


def audio_capped_sets(workload: Workload, pool: RealPool) -> tuple[np.ndarray, int]:
    """``(modality_set, dropped)``: the stream's modality sets with audio dropped (speech
    alone becomes text) from every query whose intent gets no real speech under ``pool``,
    and how many queries that changed."""
    audio_sets = [k for k, ms in enumerate(MODALITY_SETS) if "audio" in ms]
    has = np.isin(workload.modality_set, audio_sets)
    ids, counts = np.unique(workload.intent[has], return_counts=True)
    top = ids[np.lexsort((ids, -counts))[:pool.audio_intents]]
    keep = np.isin(workload.intent, top)
    if workload.trap_of is not None:
        keep |= np.isin(workload.trap_of, top)
    drop = has & ~keep
    sets = workload.modality_set.copy()
    for k in audio_sets:
        rest = [m for m in MODALITY_SETS[k] if m != "audio"] or ["text"]
        sets[drop & (workload.modality_set == k)] = modality_set_index("+".join(rest))
    return sets, int(drop.sum())


_SOURCE_OF = {"text": "ShareGPT prompts and pairs.paraphrase rewrites",
              "image": "Fashion-MNIST / scikit-image photos, crops / brightness / resizes",
              "audio": "Asterisk recordings (real) and espeak-ng speech (synthetic)",
              VIDEO: "synthetic clips: keyframe pans across the Fashion-MNIST / scikit-image "
                       "photos, mean of the frames' vectors; their track is the intent's speech, "
                       "embedded as the audio inputs"}


def _pairs_carrying(workload: Workload, channel: str) -> list[tuple[int, int]]:
    """The distinct (intent, variant) of the queries that carry ``channel`` (a modality, or
    ``"video"``: a clip's keyframes), sorted."""
    c = CHANNELS.index(channel)
    sets = [k for k, cs in enumerate(SET_CHANNELS) if c in cs]
    has = np.isin(workload.modality_set, sets)
    return sorted(set(zip(workload.intent[has].tolist(), workload.variant[has].tolist())))
