"""The seeded query stream: :class:`WorkloadConfig`, :class:`Workload` and :func:`generate`
(popularity, variants, novelty, bursts, drift, sessions, modality sets, synthetic vectors and
timing), and :func:`zipf_trace` for object traces. The package doc says what each part models.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace
from itertools import repeat
from typing import TYPE_CHECKING, Any, Callable, Mapping, Sequence

import numpy as np

from mmcache.encoders import EmbeddingStore
from mmcache.errors import ConfigError, InvalidInputError
from mmcache.sim.trace import make_trace
from mmcache.sim.workload.media import RealPool, embed_workload
from mmcache.types import CHANNELS, MODALITIES, VIDEO, Query

if TYPE_CHECKING:
    from mmcache.encoders import Encoder
from mmcache.datasets.variants import SpeechVariant, speech_variant, text_variant
from mmcache.sim.workload.queries import (
    MODALITY_SET_NAMES,
    MODALITY_SETS,
    SET_CHANNELS,
    TEXT_STORE_BATCH,
    TRACE_KEYS,
    VIDEO_SET,
    RealEmbeddings,
    encode_checked,
    first_modality,
    modality_set_index,
    query_image,
    stream_query,
)

#: How the workload's vectors were made; print it next to results that use them.
EMBEDDING_KIND = "synthetic (seeded random vectors with controlled paraphrase similarity)"


#: How the workload's arrival times were made.
TIMING_KIND = ("synthetic (Poisson arrivals with a daily cycle, faster in bursts; sessions and "
               "bursts drawn by the generator)")


#: How synthetic video vectors were made (a stream with video prints it beside the others).
VIDEO_KIND = ("synthetic clips: keyframes as their own seeded vectors in the image space, "
              "the audio track as the intent's synthetic speech vector")


@dataclass(frozen=True)
class WorkloadConfig:
    """Parameters of :func:`generate` (all sizes in queries / bytes)."""

    n_queries: int = 20_000
    n_intents: int = 2_000
    zipf_alpha: float = 0.9
    modality_mix: Mapping[str, float] = field(
        default_factory=lambda: {"text": 0.5, "image": 0.3, "audio": 0.2})
    multimodal_mix: Mapping[str, float] = field(default_factory=dict)
    n_variants: int = 8
    variant_alpha: float = 1.0
    novel_share: float = 0.1
    session_continue: float = 0.3
    burst_rate: float = 0.001
    burst_len: int = 200
    burst_intensity: float = 0.5
    drift_period: int = 5_000
    drift_fraction: float = 0.2
    drift_new_fraction: float = 0.05
    qps: float = 100.0
    cycle_amplitude: float = 0.0
    cycle_s: float | None = None
    burst_speedup: float = 1.0
    trap_share: float = 0.0
    dim: int = 128
    paraphrase_cos: float = 0.88
    paraphrase_spread: float = 0.06
    sibling_cos: float = 0.9
    intents_per_topic: int = 5
    value_bytes_median: float = 4096.0
    value_bytes_sigma: float = 1.0
    seed: int = 0

    def __post_init__(self) -> None:
        _check(self.n_queries >= 1 and self.n_intents >= 1 and self.n_variants >= 1,
               "n_queries, n_intents and n_variants must be >= 1")
        _check(self.dim >= 2 and self.intents_per_topic >= 1, "dim >= 2, intents_per_topic >= 1")
        for name in ("novel_share", "session_continue", "burst_rate", "burst_intensity",
                     "drift_fraction", "drift_new_fraction", "cycle_amplitude", "trap_share"):
            _check(0.0 <= getattr(self, name) < 1.0, f"{name} must be in [0, 1)")
        for name in ("paraphrase_cos", "sibling_cos"):
            _check(0.0 < getattr(self, name) < 1.0, f"{name} must be in (0, 1)")
        _check(0.0 <= self.paraphrase_spread < min(self.paraphrase_cos, 1 - self.paraphrase_cos),
               "paraphrase_spread must be >= 0 and keep paraphrase_cos ± spread inside (0, 1)")
        _check(self.zipf_alpha >= 0 and self.variant_alpha >= 0, "Zipf exponents must be >= 0")
        _check(self.qps > 0 and self.value_bytes_median >= 1 and self.value_bytes_sigma >= 0,
               "qps > 0, value_bytes_median >= 1, value_bytes_sigma >= 0")
        _check(self.drift_period >= 0 and self.burst_len >= 1, "drift_period >= 0, burst_len >= 1")
        _check(self.burst_speedup >= 1 and (self.cycle_s is None or self.cycle_s > 0),
               "burst_speedup >= 1 and cycle_s > 0 (or None)")
        unknown = set(self.modality_mix) - set(MODALITIES)
        _check(not unknown, f"unknown modalities {sorted(unknown)}; known: {MODALITIES}")
        weights = list(self.modality_mix.values())
        _check(bool(weights) and min(weights) >= 0 and sum(weights) > 0,
               "modality_mix needs non-negative weights with a positive sum")
        unknown = [k for k in self.multimodal_mix if modality_set_index(k) < len(MODALITIES)]
        _check(not unknown, f"unknown modality sets {sorted(unknown)}; known: "
                            f"{MODALITY_SET_NAMES[len(MODALITIES):]} (any order)")
        shares = list(self.multimodal_mix.values())
        _check(all(v >= 0 for v in shares) and sum(shares) < 1,
               "multimodal_mix needs non-negative shares summing to less than 1")


@dataclass(frozen=True, eq=False)
class Workload:
    """A generated query stream, one row per query (columns are numpy arrays).

    ``intent`` is the ground truth (ids >= ``config.n_intents`` are novel, each
    unique); ``modality`` indexes :data:`mmcache.types.MODALITIES` (a multimodal
    query's first modality); ``modality_set`` indexes :data:`MODALITY_SETS`, every
    modality the query carries (one variant index for all of them); ``variant``
    is the paraphrase variant; ``size`` is the byte size of the answer (one per
    intent); ``time`` is the synthetic arrival time in seconds; ``real_text``
    holds real text vectors (see :meth:`with_text_encoder`), ``None`` for synthetic.
    ``trap_of`` is, for a *trap* (a novel query made to look like another intent: its
    own answer, an input edited from that intent's), the intent it imitates, else -1.
    ``real`` holds every modality's real vectors and ``media`` the real inputs behind
    them (:meth:`with_real_vectors`).
    """

    config: WorkloadConfig
    intent: np.ndarray
    modality: np.ndarray
    variant: np.ndarray
    topic: np.ndarray
    session: np.ndarray
    burst: np.ndarray
    time: np.ndarray
    size: np.ndarray
    modality_set: np.ndarray
    trap_of: np.ndarray | None = None
    real: Mapping[str, RealEmbeddings] = field(default_factory=dict, repr=False)
    media: Any = field(default=None, repr=False)
    _vectors: dict = field(default_factory=dict, repr=False)

    @property
    def real_text(self) -> RealEmbeddings | None:
        """The real text vectors, None while text is synthetic."""
        return self.real.get("text")

    @property
    def traps(self) -> np.ndarray:
        """True for trap queries (see ``trap_of``)."""
        return self.trap_of >= 0 if self.trap_of is not None else np.zeros(len(self), bool)

    def __len__(self) -> int:
        return int(self.intent.shape[0])

    @property
    def novel(self) -> np.ndarray:
        """True for queries whose intent never occurs elsewhere in the stream."""
        return self.intent >= catalogue_size(self.config)

    def modalities(self, i: int) -> tuple[str, ...]:
        """The modalities query ``i`` carries."""
        return MODALITY_SETS[int(self.modality_set[i])]

    def exact_keys(self) -> np.ndarray:
        """Exact-match key per query: (intent, modality set, variant) as one uint64."""
        per_intent = len(MODALITY_SETS) * self.config.n_variants
        return (self.intent.astype(np.uint64) * np.uint64(per_intent)
                + self.modality_set.astype(np.uint64) * np.uint64(self.config.n_variants)
                + self.variant.astype(np.uint64))

    def to_trace(self, key: str = "exact"):
        """The stream as a :class:`mmcache.sim.trace.Trace` keyed by ``"exact"`` key, ``"intent"``
        or ``"intent-modality"``.

        The intent-keyed trace is the *cross-modal oracle semantic cache*: every
        paraphrase, in any modality, of an intent hits its answer, and nothing else
        does; keyed by intent and modality (set) it is the oracle of a cache that matches
        within a modality set only (no cross-modal retrieval).
        """

        if key not in TRACE_KEYS:
            raise ConfigError(f"key must be one of {TRACE_KEYS}, got {key!r}")
        if key == "exact":
            ids = self.exact_keys()
        elif key == "intent":
            ids = self.intent.astype(np.uint64)
        else:
            ids = (self.intent.astype(np.uint64) * np.uint64(len(MODALITY_SETS))
                   + self.modality_set.astype(np.uint64))
        return make_trace(ids, self.size, np.floor(self.time).astype(np.int64))

    def with_text_encoder(self, encoder: Encoder, prompts: Sequence[str], *,
                          store: EmbeddingStore | None = None,
                          source: str = "real ShareGPT prompts") -> Workload:
        """This stream with real text vectors: ``encoder``'s embedding of each text query's text.

        A text query's text is what :meth:`query` gives it,
        ``text_variant(prompts[intent % len(prompts)], variant)``; each distinct
        text is encoded once (batched), through ``store`` when given. Image and
        audio vectors stay synthetic. ``source`` names the prompts in the
        provenance (:meth:`embedding_kinds`). Raises :class:`ConfigError` for a
        non-text encoder, :class:`InvalidInputError` for no prompts or a blank one,
        :class:`InvalidEmbeddingError` when the encoder returns no unit vectors of its dim.
        """
        if getattr(encoder, "modality", None) != "text":
            raise ConfigError(f"with_text_encoder needs a text encoder, got modality "
                              f"{getattr(encoder, 'modality', None)!r}")
        prompts = _checked_prompts(prompts)
        is_text = np.isin(self.modality_set, [k for k, ms in enumerate(MODALITY_SETS)
                                              if "text" in ms])
        pairs = sorted(set(zip(self.intent[is_text].tolist(), self.variant[is_text].tolist())))
        texts = [text_variant(prompts[intent % len(prompts)], v) for intent, v in pairs]
        distinct = sorted(set(texts), key=lambda t: (len(t), t))  # similar lengths pad little
        row = {t: k for k, t in enumerate(distinct)}
        real = RealEmbeddings(
            encoder_id=encoder.encoder_id,
            kind=f"{encoder.encoder_id} on {source} with templated rewrites",
            prompts=prompts, rows={pair: row[t] for pair, t in zip(pairs, texts)},
            vectors=encode_checked(encoder, distinct, store, TEXT_STORE_BATCH))
        return self.with_real({"text": real})

    def with_real(self, real: Mapping[str, RealEmbeddings], media: Any = None,
                  modality_set: np.ndarray | None = None) -> Workload:
        """This stream with ``real`` vectors for those modalities (and ``media``, their inputs);
        ``modality_set`` replaces the queries' modality sets (same intents, times, sizes)."""
        sets = self.modality_set if modality_set is None else np.asarray(modality_set, np.int8)
        _check(sets.shape == self.modality_set.shape, "one modality set per query")
        return replace(self, real={**self.real, **real}, media=media or self.media,
                       modality_set=sets, modality=first_modality(sets),
                       _vectors=dict(self._vectors))

    def with_real_vectors(self, *, store: EmbeddingStore | None = None,
                          encoders: Mapping[str, Encoder] | None = None,
                          pool: RealPool | None = None) -> Workload:
        """This stream with every modality embedded by the real encoders from a bounded
        ``pool`` of real inputs (see :func:`mmcache.sim.workload.media.embed_workload`; cached
        through ``store``)."""
        return embed_workload(self, store=store, encoders=encoders, pool=pool)

    def embedding_kinds(self) -> dict[str, str]:
        """How each modality's vectors were made (synthetic, or which encoder on which texts)."""
        kinds = dict.fromkeys(MODALITIES, EMBEDDING_KIND)
        if (self.modality_set == VIDEO_SET).any():
            kinds[VIDEO] = VIDEO_KIND
        kinds.update({m: r.kind for m, r in self.real.items()})
        return kinds

    def dim(self, modality: str) -> int:
        """The vector dimension of ``modality``'s queries."""
        if modality not in MODALITIES:
            raise ConfigError(f"unknown modality {modality!r}; known: {MODALITIES}")
        if modality in self.real:
            return int(self.real[modality].vectors.shape[1])
        return self.config.dim

    def set_dims(self, modality_set: int) -> tuple[int, ...]:
        """The vector dimension of each modality of :data:`MODALITY_SETS` ``[modality_set]``."""
        return tuple(self._channel_dim(c) for c in SET_CHANNELS[modality_set])

    def _channel_dim(self, c: int) -> int:
        if CHANNELS[c] in self.real:
            return int(self.real[CHANNELS[c]].vectors.shape[1])
        return self.dim(MODALITY_SETS[VIDEO_SET][0]) if CHANNELS[c] == VIDEO else \
            self.dim(CHANNELS[c])

    def embedding(self, i: int) -> np.ndarray:
        """Query ``i``'s unit vector (float32) of its first modality (a clip's: its keyframes').

        Equal for queries with the same (intent, modality set, variant); synthetic
        ones are kept once computed.
        """
        return self._vector(i, SET_CHANNELS[int(self.modality_set[i])][0])

    def vectors(self, i: int) -> tuple[np.ndarray, ...]:
        """Query ``i``'s unit vectors, one per modality of :meth:`modalities`, in that order."""
        return tuple(self._vector(i, c) for c in SET_CHANNELS[int(self.modality_set[i])])

    def modality_vectors(self, indices: np.ndarray, modality: str) -> np.ndarray:
        """The stacked unit vectors (float32) of queries ``indices`` in ``modality`` (each
        carries it, none is a video clip), as :meth:`vectors` gives them."""
        return self._stacked(indices, MODALITIES.index(modality))

    def set_vectors(self, indices: np.ndarray, modality_set: int) -> list[np.ndarray]:
        """Per modality of :data:`MODALITY_SETS` ``[modality_set]``, the stacked unit vectors
        (float32) of queries ``indices`` (each of that set), as :meth:`vectors` gives them."""
        return [self._stacked(indices, c) for c in SET_CHANNELS[modality_set]]

    def _stacked(self, indices: np.ndarray, c: int) -> np.ndarray:
        if not len(indices):
            return np.zeros((0, self._channel_dim(c)), np.float32)
        intents, variants = self.intent[indices].tolist(), self.variant[indices].tolist()
        if CHANNELS[c] in self.real:  # one gather from the real rows
            real = self.real[CHANNELS[c]]
            return real.vectors[list(map(real.rows.__getitem__, zip(intents, variants)))]
        vecs = list(map(self._vectors.get, zip(intents, repeat(c), variants)))
        for k in (k for k, vec in enumerate(vecs) if vec is None):
            vecs[k] = self._drawn(c, intents[k], int(self.topic[indices[k]]), variants[k])
        return np.concatenate(vecs).reshape(len(vecs), -1)

    def _vector(self, i: int, c: int) -> np.ndarray:
        return self._drawn(c, int(self.intent[i]), int(self.topic[i]), int(self.variant[i]))

    def _drawn(self, m: int, intent: int, topic: int, variant: int) -> np.ndarray:
        """The vector of channel ``m`` (:data:`CHANNELS`) of (intent, variant)."""
        if CHANNELS[m] in self.real:
            return self.real[CHANNELS[m]].vector(intent, variant)
        key = (intent, m, variant)
        if key not in self._vectors:
            self._vectors[key] = self._draw_embedding(m, intent, topic, variant)
        return self._vectors[key]

    def _draw_embedding(self, m: int, intent: int, topic: int, variant: int) -> np.ndarray:
        cfg = self.config
        centre = _unit(np.random.default_rng([cfg.seed, 1, m, topic]).standard_normal(cfg.dim))
        beta = np.sqrt((1 - cfg.sibling_cos) / cfg.sibling_cos)
        rng = np.random.default_rng([cfg.seed, 2, m, intent])
        cos = cfg.paraphrase_cos + cfg.paraphrase_spread * (2 * rng.random() - 1)
        gamma = np.sqrt((1 - cos) / cos)
        noise = rng.standard_normal(cfg.dim)
        intent_vec = _unit(centre + beta * noise / np.sqrt(cfg.dim))
        noise = np.random.default_rng([cfg.seed, 3, m, intent, variant]).standard_normal(cfg.dim)
        vec = _unit(intent_vec + gamma * noise / np.sqrt(cfg.dim)).astype(np.float32)
        vec.flags.writeable = False
        return vec

    def embeddings(self, indices: Sequence[int] | None = None) -> np.ndarray:
        """Stacked vectors of the given queries (all by default), float32.

        Raises :class:`ConfigError` when their modalities have different dims.
        """
        idx = np.arange(len(self)) if indices is None else np.asarray(indices, dtype=np.int64)
        dims = {self.set_dims(k)[0] for k in np.unique(self.modality_set[idx]).tolist()}
        _check(len(dims) <= 1, f"these queries' modalities have different dims {sorted(dims)}; "
                               "stack one modality at a time")
        return np.stack([self.embedding(int(i)) for i in idx]) if len(idx) else \
            np.zeros((0, dims.pop() if dims else self.config.dim), np.float32)

    def pair_similarities(self, sample: int = 2_000, channel: str | None = None
                          ) -> dict[str, np.ndarray]:
        """Cosines between pairs of :meth:`embedding` s of one channel (a modality, or video
        keyframes; only ``channel``'s, of :data:`CHANNELS`, when given) among the first
        ``sample`` queries, by kind: ``paraphrase`` (same intent, other variant), ``sibling``
        (other intent, same topic) and ``unrelated`` (other topic). Topics are the generator's;
        real vectors ignore them (``sibling`` and ``unrelated`` together are the other-intent
        pairs)."""
        if channel is not None and channel not in CHANNELS:
            raise ConfigError(f"unknown channel {channel!r}; known: {CHANNELS}")
        n = min(sample, len(self))
        out: dict[str, list[np.ndarray]] = {"paraphrase": [], "sibling": [], "unrelated": []}
        channel_of = np.array([cs[0] for cs in SET_CHANNELS])[self.modality_set[:n]]
        for k in np.unique(channel_of):
            if channel is not None and CHANNELS[k] != channel:
                continue
            idx = np.flatnonzero(channel_of == k)
            emb = self.embeddings(idx)
            sims = emb @ emb.T
            i, v, t = self.intent[idx], self.variant[idx], self.topic[idx]
            upper = np.triu(np.ones((idx.size, idx.size), dtype=bool), 1)
            same = i[:, None] == i[None]
            out["paraphrase"].append(sims[upper & same & (v[:, None] != v[None])])
            out["sibling"].append(sims[upper & ~same & (t[:, None] == t[None])])
            out["unrelated"].append(sims[upper & (t[:, None] != t[None])])
        return {kind: np.concatenate(parts) if parts else np.zeros(0, np.float32)
                for kind, parts in out.items()}

    def query(self, i: int, *, prompts: Sequence[str] | None = None, scope: str = "bench",
              images: Callable[[int], np.ndarray] | None = None,
              speech: Callable[[int, SpeechVariant], np.ndarray] | None = None) -> Query:
        """Query ``i`` as an :class:`mmcache.types.Query` with the embedding of every modality
        it carries.

        Text queries get a templated rewrite of ``prompts[intent % len(prompts)]``
        when ``prompts`` is given (pass one per intent id, novel ones included, for
        distinct texts; a workload from :meth:`with_text_encoder` uses its own
        prompts and raises :class:`ConfigError` for others); image queries get the
        variant of photo ``images(intent)`` when ``images`` (a photo loader) is
        given; audio queries get ``speech(intent, speech_variant(variant))`` (16 kHz
        float32, e.g. espeak-ng through :func:`mmcache.datasets.speech.synthesize`); a video
        clip's query is a :class:`~mmcache.types.VideoClip` of the photo's keyframes and that
        speech (:func:`stream_query`). ``ground_truth`` is the intent id.
        """
        mods = self.modalities(i)
        intent, variant = int(self.intent[i]), int(self.variant[i])
        if self.real_text is not None:
            if prompts is not None and tuple(prompts) != self.real_text.prompts:
                raise ConfigError("this workload's text vectors embed its own prompts; "
                                  "pass no prompts (or the same ones)")
            prompts = self.real_text.prompts
        if self.media is not None:
            return self.media.query(self, i, scope)
        text = image = audio = None
        if "text" in mods and prompts:
            text = text_variant(prompts[intent % len(prompts)], variant)
        if "image" in mods and images is not None:
            image = query_image(images(intent), int(self.modality_set[i]), variant)
        if "audio" in mods and speech is not None:
            audio = np.asarray(speech(intent, speech_variant(variant)), dtype=np.float32)
        return stream_query(self, i, text=text, image=image, audio=audio, scope=scope)

    def describe(self) -> dict:
        """Parameters and summary counts, for provenance sidecars and metrics."""
        mods = {m: int((self.modality == k).sum()) for k, m in enumerate(MODALITIES)}
        return {"config": {**asdict(self.config), "modality_mix": dict(self.config.modality_mix),
                           "multimodal_mix": dict(self.config.multimodal_mix)},
                "n_queries": len(self), "n_distinct_intents": int(np.unique(self.intent).size),
                "novel_share": float(self.novel.mean()), "per_modality": mods,
                "per_modality_set": {name: int((self.modality_set == k).sum())
                                     for k, name in enumerate(MODALITY_SET_NAMES)
                                     if (self.modality_set == k).any()},
                "n_traps": int(self.traps.sum()),
                "embeddings": self.embedding_kinds(), "timing": TIMING_KIND}


#: What :func:`generate`'s ``vectors`` option accepts.
VECTOR_KINDS = ("synthetic", "real")


def generate(config: WorkloadConfig | None = None, *, vectors: str = "synthetic",
             store: EmbeddingStore | None = None, pool: RealPool | None = None,
             **overrides) -> Workload:
    """Draw a seeded multimodal query stream; ``overrides`` replace config fields.

    ``vectors="real"`` embeds every query with the real encoders from a bounded ``pool`` of
    real inputs (:meth:`Workload.with_real_vectors`, through ``store``; the default store
    under ``data/embeddings/`` when None; the default :class:`~mmcache.sim.workload.media.RealPool`
    when ``pool`` is None); ``"synthetic"`` keeps the seeded stand-in vectors.
    """
    _check(pool is None or vectors == "real", "a RealPool applies only to vectors='real'")
    _check(vectors in VECTOR_KINDS, f"vectors must be one of {VECTOR_KINDS}, got {vectors!r}")
    unknown = set(overrides) - set(WorkloadConfig.__dataclass_fields__)
    _check(not unknown, f"unknown workload parameters {sorted(unknown)}")
    cfg = WorkloadConfig(**{**asdict(config or WorkloadConfig()), **overrides})
    rng = np.random.default_rng(cfg.seed)
    n = cfg.n_queries
    intent = _drifting_zipf(rng, cfg)
    burst = _bursts(rng, intent, cfg)
    starts, novel = _session_starts(rng, n, cfg.session_continue, cfg.novel_share)
    intent[novel] = catalogue_size(cfg) + np.arange(int(novel.sum()))
    session = np.cumsum(starts) - 1
    first = np.flatnonzero(starts)[session]
    intent, burst = intent[first], burst[first]  # a session keeps the intent that opened it
    n_topics = -(-catalogue_size(cfg) // cfg.intents_per_topic)
    topic = np.where(novel, rng.integers(0, n_topics, n), intent // cfg.intents_per_topic)
    trap_of = _traps(cfg, novel)
    topic = np.where(trap_of >= 0, trap_of // cfg.intents_per_topic, topic)  # a trap looks alike
    mix = np.array([cfg.modality_mix.get(m, 0.0) for m in MODALITIES], dtype=float)
    modality = rng.choice(len(MODALITIES), size=n, p=mix / mix.sum()).astype(np.int8)
    modality_set = _modality_sets(rng, cfg, modality)
    modality = first_modality(modality_set)
    variant = rng.choice(cfg.n_variants, size=n, p=_zipf_probs(cfg.n_variants, cfg.variant_alpha))
    time = _arrivals(rng, cfg, burst)
    intent_bytes = np.maximum(1, rng.lognormal(np.log(cfg.value_bytes_median),
                                               cfg.value_bytes_sigma, int(intent.max()) + 1))
    stream = Workload(cfg, intent.astype(np.int64), modality, variant.astype(np.int32),
                      topic.astype(np.int64), session.astype(np.int64), burst, time,
                      intent_bytes.astype(np.int64)[intent], modality_set, trap_of)
    if vectors == "real":
        stream = stream.with_real_vectors(store=store or EmbeddingStore(), pool=pool)
    return stream


def _traps(cfg: WorkloadConfig, novel: np.ndarray) -> np.ndarray:
    """Per query, the recurring intent a trap imitates (-1: not a trap): ``trap_share`` of the
    novel queries, each of a uniform intent among the first ``n_intents``. Drawn from its own
    seeded stream, so ``trap_share=0`` leaves every other draw as it was."""
    rng = np.random.default_rng([cfg.seed, 11])
    pick = novel & (rng.random(novel.shape[0]) < cfg.trap_share)
    return np.where(pick, rng.integers(0, cfg.n_intents, novel.shape[0]), -1).astype(np.int64)


def zipf_trace(n_req: int, n_obj: int, alpha: float = 1.0, seed: int = 0, *,
               obj_size: int | None = 4096, size_sigma: float = 1.0):
    """A Zipf(``alpha``) request trace over ``n_obj`` objects as a :class:`mmcache.sim.trace.Trace`.

    Popularity ranks are shuffled over the ids. Every object has ``obj_size``
    bytes, or (``obj_size=None``) its own log-normal size around 4 KiB with
    ``size_sigma``. Sizes are fixed per object, as in a real trace.
    """

    _check(n_req >= 1 and n_obj >= 1, "n_req and n_obj must be >= 1")
    _check(alpha >= 0 and size_sigma >= 0, "alpha and size_sigma must be >= 0")
    rng = np.random.default_rng(seed)
    ranks = rng.choice(n_obj, size=n_req, p=_zipf_probs(n_obj, alpha))
    ids = rng.permutation(n_obj)[ranks].astype(np.uint64)
    if obj_size is None:
        sizes = np.maximum(1, rng.lognormal(np.log(4096), size_sigma, n_obj)).astype(np.int64)
    else:
        _check(obj_size >= 1, "obj_size must be >= 1")
        sizes = np.full(n_obj, obj_size, dtype=np.int64)
    return make_trace(ids, sizes[ids.astype(np.int64)])


def _checked_prompts(prompts: Sequence[str]) -> tuple[str, ...]:
    """The prompts as a tuple; raises InvalidInputError for none or a blank / non-string one."""
    if isinstance(prompts, str):
        raise InvalidInputError("prompts must be a sequence of texts, not one string")
    out = tuple(prompts)
    if not out:
        raise InvalidInputError("prompts must not be empty")
    for k, p in enumerate(out):
        if not isinstance(p, str) or not p.strip():
            raise InvalidInputError(f"prompt #{k} is {p!r}; expected a non-empty string")
    return out


def catalogue_size(cfg: WorkloadConfig) -> int:
    """How many recurring intent ids a stream of ``cfg`` can draw: the first ``n_intents`` and
    those drift brings in (ids from here on are novel queries)."""
    period = cfg.drift_period or cfg.n_queries
    periods = -(-cfg.n_queries // period)
    return cfg.n_intents + (periods - 1) * int(cfg.drift_new_fraction * cfg.n_intents)


def _drifting_zipf(rng: np.random.Generator, cfg: WorkloadConfig) -> np.ndarray:
    """Intent per query: Zipf over ranks; every ``drift_period`` queries ``drift_fraction`` of
    the ranks are reshuffled and ``drift_new_fraction`` of them go to new intents (the intents
    they held fade out)."""
    probs = _zipf_probs(cfg.n_intents, cfg.zipf_alpha)
    perm = rng.permutation(cfg.n_intents)
    period = cfg.drift_period or cfg.n_queries
    fresh, n_new = cfg.n_intents, int(cfg.drift_new_fraction * cfg.n_intents)
    out = []
    for start in range(0, cfg.n_queries, period):
        if start:
            moved = rng.choice(cfg.n_intents, size=int(cfg.drift_fraction * cfg.n_intents),
                               replace=False)
            perm[moved] = perm[rng.permutation(moved)]
            perm[rng.choice(cfg.n_intents, size=n_new, replace=False)] = \
                fresh + np.arange(n_new)
            fresh += n_new
        count = min(period, cfg.n_queries - start)
        out.append(perm[rng.choice(cfg.n_intents, size=count, p=probs)])
    return np.concatenate(out)


def _session_starts(rng: np.random.Generator, n: int, p_continue: float,
                    novel_share: float) -> tuple[np.ndarray, np.ndarray]:
    """Which queries open a session (a query continues one with probability ``p_continue``)
    and which are novel: only an opening query is, about ``novel_share`` of all, and the query
    after it opens a new session (a novel query is never re-asked)."""
    starts = np.r_[True, rng.random(n - 1) >= p_continue]
    # P(novel | start) so that novel queries are novel_share of all, starts forced included
    novel = starts & (rng.random(n) < novel_share / (1 - p_continue + novel_share * p_continue))
    starts[1:] |= novel[:-1]
    return starts, novel


def _modality_sets(rng: np.random.Generator, cfg: WorkloadConfig,
                   modality: np.ndarray) -> np.ndarray:
    """Index into :data:`MODALITY_SETS` per query: ``multimodal_mix`` of them carry a set, the
    rest their single ``modality``."""
    out = modality.astype(np.int8)
    if cfg.multimodal_mix:
        names = list(cfg.multimodal_mix)
        pick = np.searchsorted(np.cumsum([cfg.multimodal_mix[k] for k in names]),
                               rng.random(modality.shape[0]), side="right")
        multi = pick < len(names)
        out[multi] = np.array([modality_set_index(k) for k in names], np.int8)[pick[multi]]
    return out


def _arrivals(rng: np.random.Generator, cfg: WorkloadConfig, burst: np.ndarray) -> np.ndarray:
    """Arrival seconds: Poisson at ``qps`` × the daily cycle at the query's nominal time
    (× ``burst_speedup`` for burst queries)."""
    n = cfg.n_queries
    cycle_s = cfg.cycle_s or n / cfg.qps
    nominal = np.arange(n) / cfg.qps
    rate = cfg.qps * (1 + cfg.cycle_amplitude * np.sin(2 * np.pi * nominal / cycle_s))
    rate = np.where(burst, cfg.burst_speedup * rate, rate)
    return np.cumsum(rng.exponential(1.0, n) / rate)


def _bursts(rng: np.random.Generator, intent: np.ndarray, cfg: WorkloadConfig) -> np.ndarray:
    """Overwrite ``burst_intensity`` of each burst window with one trending intent; marks them."""
    n = intent.shape[0]
    marked = np.zeros(n, dtype=bool)
    for start in np.flatnonzero(rng.random(n) < cfg.burst_rate):
        window = np.arange(start, min(n, start + cfg.burst_len))
        chosen = window[rng.random(window.shape[0]) < cfg.burst_intensity]
        intent[chosen] = rng.integers(0, cfg.n_intents)
        marked[chosen] = True
    return marked


def _zipf_probs(n: int, alpha: float) -> np.ndarray:
    weights = np.arange(1, n + 1, dtype=float) ** -alpha
    return weights / weights.sum()


def _unit(v: np.ndarray) -> np.ndarray:
    return v / np.linalg.norm(v)


def _check(ok: bool, message: str) -> None:
    if not ok:
        raise ConfigError(message)
