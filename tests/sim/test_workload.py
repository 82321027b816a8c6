"""Workload generators: determinism, the knobs do what they say, Zipf traces, media variants."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mmcache.encoders import EmbeddingStore, HashingTestEncoder
from mmcache.errors import ConfigError, InvalidEmbeddingError, InvalidInputError
from mmcache.types import MODALITIES
from mmcache.sim.workload import EMBEDDING_KIND, WorkloadConfig, generate, zipf_trace
from mmcache.datasets.variants import (ImageVariant, apply_image_variant, image_variant,
                                       speech_variant, text_variant)


@pytest.fixture(scope="module")
def stream():
    return generate(n_queries=6_000, n_intents=500, seed=3)


def test_same_seed_same_stream_other_seed_differs(stream):
    again = generate(n_queries=6_000, n_intents=500, seed=3)
    other = generate(n_queries=6_000, n_intents=500, seed=4)
    for col in ("intent", "modality", "variant", "size", "time"):
        assert np.array_equal(getattr(stream, col), getattr(again, col))
    assert not np.array_equal(stream.intent, other.intent)
    assert np.array_equal(stream.embedding(17), again.embedding(17))


def test_novel_queries_are_unique_and_near_their_share(stream):
    novel = stream.intent[stream.novel]
    assert np.unique(novel).size == novel.size
    assert abs(stream.novel.mean() - 0.1) < 0.02
    assert not np.isin(novel, stream.intent[~stream.novel]).any()


def test_modality_mix_is_respected(stream):
    shares = [float((stream.modality == k).mean()) for k in range(len(MODALITIES))]
    assert shares == pytest.approx([0.5, 0.3, 0.2], abs=0.03)
    text_only = generate(n_queries=500, modality_mix={"text": 1.0})
    assert set(text_only.modality.tolist()) == {MODALITIES.index("text")}


def test_every_intent_answer_has_one_size(stream):
    for intent in np.unique(stream.intent)[:50]:
        assert np.unique(stream.size[stream.intent == intent]).size == 1


def test_embedding_similarity_is_calibrated():
    w = generate(n_queries=4_000, n_intents=300, dim=256, paraphrase_cos=0.9,
                 paraphrase_spread=0.0, sibling_cos=0.8, seed=1)
    emb = w.embeddings(range(2_000))
    assert np.allclose(np.linalg.norm(emb, axis=1), 1.0, atol=1e-5)
    pairs = w.pair_similarities(2_000)
    assert pairs["paraphrase"].mean() == pytest.approx(0.9, abs=0.02)
    assert pairs["sibling"].mean() == pytest.approx(0.72, abs=0.03)
    assert abs(pairs["unrelated"].mean()) < 0.02
    i, m = w.intent[:2_000], w.modality[:2_000]
    cross = (m[:, None] != m[None]) & (i[:, None] == i[None])
    assert abs((emb @ emb.T)[cross].mean()) < 0.05  # each modality lives in its own space


def test_pair_similarities_of_one_channel_are_that_channels_pairs():
    w = generate(n_queries=3_000, n_intents=200, seed=2)
    every = w.pair_similarities(1_500)
    per = {m: w.pair_similarities(1_500, channel=m) for m in ("text", "image", "audio")}
    for kind in every:
        assert sum(p[kind].size for p in per.values()) == every[kind].size
        np.testing.assert_array_equal(np.sort(np.concatenate([p[kind] for p in per.values()])),
                                      np.sort(every[kind]))
    assert all(p["paraphrase"].size for p in per.values())
    with pytest.raises(ConfigError, match="channel"):
        w.pair_similarities(100, channel="smell")


def test_drift_moves_popularity():
    def top(w, lo, hi):
        ids, counts = np.unique(w.intent[lo:hi][~w.novel[lo:hi]], return_counts=True)
        return set(ids[np.argsort(-counts)[:30]].tolist())

    kw = dict(n_queries=20_000, n_intents=1_000, zipf_alpha=1.1, session_continue=0.0,
              burst_rate=0.0, drift_period=10_000, seed=5)
    still = generate(drift_fraction=0.0, **kw)
    moving = generate(drift_fraction=0.9, **kw)
    assert len(top(still, 0, 10_000) & top(still, 10_000, 20_000)) >= 20
    assert len(top(moving, 0, 10_000) & top(moving, 10_000, 20_000)) <= 10


def test_sessions_and_bursts_repeat_intents():
    kw = dict(n_queries=10_000, n_intents=5_000, zipf_alpha=0.0, novel_share=0.0, seed=2)
    none = generate(session_continue=0.0, burst_rate=0.0, **kw)
    sessions = generate(session_continue=0.6, burst_rate=0.0, **kw)
    repeat = lambda w: float((w.intent[1:] == w.intent[:-1]).mean())  # noqa: E731
    assert repeat(none) < 0.01 and repeat(sessions) == pytest.approx(0.6, abs=0.03)
    bursty = generate(session_continue=0.0, burst_rate=0.002, burst_len=100,
                      burst_intensity=0.8, **kw)
    assert bursty.burst.any() and not none.burst.any()
    first = np.flatnonzero(bursty.burst)[0]
    window = bursty.intent[first:first + 100][bursty.burst[first:first + 100]]
    assert np.bincount(window).max() >= 0.9 * window.size


@settings(max_examples=25, deadline=None)
@given(st.integers(1, 400), st.integers(1, 50), st.integers(1, 12), st.integers(0, 10**6))
def test_exact_keys_identify_intent_modality_variant(n, intents, variants, seed):
    w = generate(n_queries=n, n_intents=intents, n_variants=variants, seed=seed)
    keys = w.exact_keys()
    triples = set(zip(w.intent.tolist(), w.modality.tolist(), w.variant.tolist()))
    assert np.unique(keys).size == len(triples)
    trace = w.to_trace("intent")
    assert trace.n_req == n and trace.n_obj == np.unique(w.intent).size


@pytest.mark.parametrize("bad", [dict(n_queries=0), dict(novel_share=1.0),
                                 dict(modality_mix={"smell": 1.0}), dict(paraphrase_cos=1.0),
                                 dict(modality_mix={"text": 0.0}), dict(qps=0)])
def test_bad_config_is_a_config_error(bad):
    with pytest.raises(ConfigError):
        WorkloadConfig(**bad)
    with pytest.raises(ConfigError):
        generate(**bad)


def test_unknown_parameter_is_named():
    with pytest.raises(ConfigError, match="n_querys"):
        generate(n_querys=10)


def test_query_carries_embedding_ground_truth_and_real_text():
    w = generate(n_queries=200, modality_mix={"text": 1.0}, seed=0)
    q = w.query(5, prompts=["What is a cache?"], scope="t")
    assert q.ground_truth == int(w.intent[5]) and q.scope == "t"
    assert q.text == text_variant("What is a cache?", int(w.variant[5]))
    assert np.array_equal(q.embeddings["text"], w.embedding(5))


def test_zipf_trace_follows_its_exponent():
    trace = zipf_trace(200_000, 10_000, alpha=1.0, seed=0)
    assert trace.n_req == 200_000 and set(trace.obj_size.tolist()) == {4096}
    counts = np.sort(np.bincount(trace.dense_ids()[0]))[::-1][:200]
    slope = np.polyfit(np.log(np.arange(1, 201)), np.log(counts), 1)[0]
    assert slope == pytest.approx(-1.0, abs=0.1)
    varied = zipf_trace(5_000, 300, alpha=0.8, seed=1, obj_size=None)
    for obj in np.unique(varied.obj_id)[:30]:
        assert np.unique(varied.obj_size[varied.obj_id == obj]).size == 1
    with pytest.raises(ConfigError):
        zipf_trace(0, 10)


@settings(max_examples=30, deadline=None)
@given(st.integers(1, 40), st.integers(1, 40), st.sampled_from([None, 3]), st.integers(0, 50))
def test_image_variants_keep_a_valid_image(h, w, channels, variant):
    img = np.full((h, w) if channels is None else (h, w, channels), 100, dtype=np.uint8)
    spec = image_variant(variant)
    out = apply_image_variant(img, spec)
    assert out.dtype == np.uint8 and out.ndim == img.ndim and min(out.shape[:2]) >= 1
    assert np.all(out == min(255, int(100 * spec.brightness)))


def test_variant_zero_is_the_original():
    img = np.arange(48, dtype=np.uint8).reshape(6, 8)
    assert np.array_equal(apply_image_variant(img, image_variant(0)), img)
    assert text_variant("Hello there.", 0) == "Hello there."
    assert apply_image_variant(img, ImageVariant(0.5, 1.0, 2.0)).shape == (6, 8)
    assert speech_variant(0) != speech_variant(1)


def test_queries_carry_real_photo_and_speech_variants():
    from mmcache.datasets import load_skimage_photos
    from mmcache.datasets.speech import synthesize

    photos = load_skimage_photos(size=32)
    w = generate(n_queries=300, modality_mix={"image": 0.5, "audio": 0.5}, seed=6)
    img_i = int(np.flatnonzero((w.modality == MODALITIES.index("image")) & (w.variant > 0))[0])
    q = w.query(img_i, images=lambda intent: photos.images[intent % len(photos)])
    expected = apply_image_variant(photos.images[int(w.intent[img_i]) % len(photos)],
                                   image_variant(int(w.variant[img_i])))
    assert q.image is not None and np.array_equal(q.image, expected)
    audio_i = int(np.flatnonzero(w.modality == MODALITIES.index("audio"))[0])
    said = w.query(audio_i, speech=lambda intent, v: synthesize(
        f"intent number {intent}", v.voice, v.rate_wpm).audio)
    assert said.audio is not None and said.audio.dtype == np.float32 and said.audio.size > 8000
    assert said.modalities() == ("audio",) and said.ground_truth == int(w.intent[audio_i])


class RecordingTextStandIn(HashingTestEncoder):
    """Test stand-in text encoder: the hashing stand-in, recording every text it encodes."""

    def __init__(self, dim: int = 48) -> None:
        super().__init__("text", dim)
        self.seen: list[str] = []

    def encode(self, inputs):
        self.seen.extend(inputs)
        return super().encode(inputs)


# Unpunctuated prompts make some rewrites coincide ("as written" == "punctuation stripped"), and
# fewer prompts than intents make intents share texts: both must share one vector.
PROMPTS = ["what is a cache", "How do I reset my password?", "explain FAISS", "hello there"]


@pytest.fixture(scope="module")
def mixed():
    return generate(n_queries=500, n_intents=40, modality_mix={"text": 0.7, "image": 0.3}, seed=8)


def test_real_text_vectors_are_the_encoders_vectors_of_the_query_texts(mixed):
    encoder = RecordingTextStandIn()
    real = mixed.with_text_encoder(encoder, PROMPTS, source="test prompts")
    text_rows = np.flatnonzero(mixed.modality == MODALITIES.index("text"))
    texts = [real.query(int(i)).text for i in text_rows]
    assert texts == [text_variant(PROMPTS[int(mixed.intent[i]) % 4], int(mixed.variant[i]))
                     for i in text_rows]
    assert sorted(encoder.seen) == sorted(set(texts))  # each distinct text encoded once
    vectors = {}
    for i, text in zip(text_rows, texts):
        vec = real.embedding(int(i))
        assert np.array_equal(vec, vectors.setdefault(text, vec))
        assert np.array_equal(real.query(int(i)).embeddings["text"], vec)
    assert len(vectors) < len(set(zip(mixed.intent[text_rows], mixed.variant[text_rows])))
    fresh = HashingTestEncoder("text", 48)
    np.testing.assert_allclose(np.stack(list(vectors.values())),
                               fresh.encode(list(vectors)), atol=1e-6)
    image = int(np.flatnonzero(mixed.modality == MODALITIES.index("image"))[0])
    assert np.array_equal(real.embedding(image), mixed.embedding(image))


def test_provenance_names_the_encoder_and_keeps_other_modalities_synthetic(mixed):
    encoder = RecordingTextStandIn()
    real = mixed.with_text_encoder(encoder, PROMPTS)
    kinds = real.embedding_kinds()
    assert kinds["text"] == f"{encoder.encoder_id} on real ShareGPT prompts with templated rewrites"
    assert kinds["image"] == kinds["audio"] == EMBEDDING_KIND
    assert real.describe()["embeddings"] == kinds
    assert real.dim("text") == 48 and real.dim("image") == mixed.config.dim == 128
    assert mixed.real_text is None and set(mixed.embedding_kinds().values()) == {EMBEDDING_KIND}
    assert mixed.dim("text") == 128


def test_store_encodes_each_text_once_across_calls(mixed, tmp_path):
    first, second = RecordingTextStandIn(), RecordingTextStandIn()
    store = EmbeddingStore(tmp_path)
    a = mixed.with_text_encoder(first, PROMPTS, store=store)
    b = mixed.with_text_encoder(second, PROMPTS, store=EmbeddingStore(tmp_path))
    assert first.seen and len(first.seen) == len(set(first.seen)) and second.seen == []
    assert np.array_equal(a.real_text.vectors, b.real_text.vectors)


def test_mixed_dims_stack_per_modality_only(mixed):
    real = mixed.with_text_encoder(RecordingTextStandIn(), PROMPTS)
    with pytest.raises(ConfigError, match="different dims"):
        real.embeddings()
    text_rows = np.flatnonzero(real.modality == MODALITIES.index("text"))[:20]
    assert real.embeddings(text_rows).shape == (20, 48)
    pairs = real.pair_similarities(300)  # within each modality, each in its own dim
    assert np.isclose(pairs["paraphrase"], 1.0, atol=1e-5).any()  # rewrites that coincide


class WrongDimStandIn(RecordingTextStandIn):
    """Test stand-in that says 48-d but returns 47-d vectors."""

    def encode(self, inputs):
        return super().encode(inputs)[:, :47]


@pytest.mark.parametrize("encoder, prompts, error", [
    (HashingTestEncoder("image", 48), PROMPTS, ConfigError),
    (RecordingTextStandIn(), [], InvalidInputError),
    (RecordingTextStandIn(), ["fine", "  "], InvalidInputError),
    (RecordingTextStandIn(), "one string", InvalidInputError),
    (WrongDimStandIn(), PROMPTS, InvalidEmbeddingError),
])
def test_bad_encoder_or_prompts_raise_and_leave_the_workload_synthetic(mixed, encoder, prompts,
                                                                       error):
    with pytest.raises(error):
        mixed.with_text_encoder(encoder, prompts)
    assert mixed.real_text is None


def test_queries_of_a_real_text_workload_refuse_other_prompts(mixed):
    real = mixed.with_text_encoder(RecordingTextStandIn(), PROMPTS)
    i = int(np.flatnonzero(mixed.modality == MODALITIES.index("text"))[0])
    assert real.query(i, prompts=list(PROMPTS)).text == real.query(i).text
    with pytest.raises(ConfigError, match="own prompts"):
        real.query(i, prompts=["something else"])


def test_minilm_on_sharegpt_prompts():
    from mmcache.datasets.prompts import load_prompts
    from mmcache.encoders import get_encoder

    w = generate(n_queries=60, n_intents=20, modality_mix={"text": 1.0}, seed=1)
    minilm = get_encoder("minilm")
    real = w.with_text_encoder(minilm, load_prompts(int(w.intent.max()) + 1))
    assert real.dim("text") == 384 and "minilm:all-MiniLM-L6-v2/" in real.embedding_kinds()["text"]
    pairs = real.pair_similarities()
    assert pairs["paraphrase"].size and pairs["unrelated"].size
    assert np.median(pairs["paraphrase"]) > 0.8 > np.median(pairs["unrelated"]) + 0.3
    i = int(np.flatnonzero(w.variant > 0)[0])
    np.testing.assert_allclose(real.embedding(i), minilm.encode([real.query(i).text])[0],
                               atol=1e-5)


def test_a_session_keeps_one_intent_and_novel_queries_stand_alone():
    w = generate(n_queries=20_000, n_intents=2_000, session_continue=0.5, novel_share=0.1,
                 burst_rate=0.002, seed=8)
    same_session = w.session[1:] == w.session[:-1]
    assert same_session.mean() > 0.3
    assert (w.intent[1:][same_session] == w.intent[:-1][same_session]).mean() == 1.0
    sizes = np.bincount(w.session)
    assert (sizes[w.session[w.novel]] == 1).all()  # a novel query is a session of its own
    assert abs(w.novel.mean() - 0.1) < 0.02


def test_arrivals_follow_a_daily_cycle_and_speed_up_in_bursts():
    kw = dict(n_queries=40_000, n_intents=1_000, qps=50.0, seed=9)
    flat = generate(cycle_amplitude=0.0, burst_rate=0.0, **kw)
    cycle = generate(cycle_amplitude=0.8, burst_rate=0.0, **kw)
    gaps = lambda w, part: np.diff(w.time)[part]  # noqa: E731
    assert np.diff(flat.time).mean() == pytest.approx(1 / 50.0, rel=0.03)
    half = np.arange(len(cycle) - 1) < len(cycle) // 2
    assert gaps(cycle, half).mean() < 0.6 * gaps(cycle, ~half).mean()  # the day's peak, then night
    bursty = generate(cycle_amplitude=0.0, burst_rate=0.002, burst_speedup=4.0, **kw)
    in_burst = bursty.burst[1:]
    assert gaps(bursty, in_burst).mean() == pytest.approx(gaps(bursty, ~in_burst).mean() / 4,
                                                          rel=0.15)
    assert (np.diff(bursty.time) > 0).all()


def test_drift_brings_new_intents_and_old_ones_fade():
    kw = dict(n_queries=30_000, n_intents=1_000, zipf_alpha=0.8, session_continue=0.0,
              burst_rate=0.0, novel_share=0.0, drift_period=10_000, seed=6)
    w = generate(drift_new_fraction=0.3, **kw)
    first, last = set(w.intent[:10_000].tolist()), set(w.intent[20_000:].tolist())
    new = {i for i in last if i >= 1_000}
    assert len(new) > 200 and not new & first  # new intents appear
    assert len(first - last) > 200  # old ones fade
    assert not w.novel.any()
    still = generate(drift_new_fraction=0.0, **kw)
    assert still.intent.max() < 1_000


@pytest.mark.parametrize("bad", [dict(cycle_amplitude=1.0), dict(burst_speedup=0.5),
                                 dict(cycle_s=0.0), dict(drift_new_fraction=-0.1)])
def test_bad_timing_or_drift_is_a_config_error(bad):
    with pytest.raises(ConfigError):
        generate(n_queries=10, **bad)


def test_multimodal_queries_carry_every_modality():
    from mmcache.sim.workload import MODALITY_SET_NAMES, MODALITY_SETS, modality_set_index

    mix = {"text+image": 0.2, "audio+image": 0.1, "text+audio": 0.1}
    w = generate(n_queries=8_000, n_intents=500, multimodal_mix=mix, seed=4)
    for name, share in mix.items():  # "audio+image" names the set "image+audio"
        assert (w.modality_set == modality_set_index(name)).mean() == \
            pytest.approx(share, abs=0.02)
    assert (w.modality_set < 3).mean() == pytest.approx(0.6, abs=0.02)
    i = int(np.flatnonzero(w.modality_set == MODALITY_SET_NAMES.index("image+audio"))[0])
    assert w.modalities(i) == ("image", "audio") == MODALITY_SETS[w.modality_set[i]]
    q = w.query(i)
    assert set(q.embeddings) == {"image", "audio"}
    assert MODALITIES[w.modality[i]] == "image"
    keys = w.exact_keys()
    sets = set(zip(w.intent.tolist(), w.modality_set.tolist(), w.variant.tolist()))
    assert np.unique(keys).size == len(sets)
    assert w.describe()["per_modality_set"]["text+image"] > 0


def test_the_workload_index_uses_the_one_modality_set_vocabulary():
    """The index keeps its order (simulated results depend on it); its names are
    mmcache.types' names of each set's channels, and the video set's index is not types.VIDEO."""
    from mmcache import types
    from mmcache.sim.workload import (MODALITY_SET_NAMES, MODALITY_SETS, SET_CHANNELS, VIDEO_SET,
                                      modality_set_index)

    assert MODALITY_SET_NAMES == ("text", "image", "audio", "text+image", "text+audio",
                                  "image+audio", "text+image+audio", "video")
    assert MODALITY_SETS == (("text",), ("image",), ("audio",), ("text", "image"),
                             ("text", "audio"), ("image", "audio"), ("text", "image", "audio"),
                             ("image", "audio"))
    assert SET_CHANNELS == ((0,), (1,), (2,), (0, 1), (0, 2), (1, 2), (0, 1, 2), (3, 2))
    assert VIDEO_SET == 7 and types.VIDEO == "video" == MODALITY_SET_NAMES[VIDEO_SET]
    assert set(MODALITY_SET_NAMES) <= set(types.SET_NAMES)
    for k, name in enumerate(MODALITY_SET_NAMES):
        channels = {types.CHANNELS[c] for c in SET_CHANNELS[k]}
        assert types.modality_set_channels(name) == channels
        assert types.modality_set_name(channels) == name and modality_set_index(name) == k


@pytest.mark.parametrize("bad", [{"text+smell": 0.1}, {"text": 0.1}, {"text+image": 1.0},
                                 {"text+image": -0.1}])
def test_bad_multimodal_mix_is_a_config_error(bad):
    with pytest.raises(ConfigError):
        generate(n_queries=10, multimodal_mix=bad)


def test_modality_vectors_stack_what_vectors_gives():
    from mmcache.sim.workload import MODALITY_SETS

    workload = generate(n_queries=400, n_intents=50, seed=4,
                        multimodal_mix={"text+image": 0.3, "text+image+audio": 0.2})
    for m, names in enumerate(MODALITY_SETS):
        rows = np.flatnonzero(workload.modality_set == m)
        for j, name in enumerate(names):
            want = [workload.vectors(int(i))[j] for i in rows]
            got = workload.modality_vectors(rows, name)
            assert got.shape == (rows.size, workload.dim(name))
            np.testing.assert_array_equal(got, np.stack(want) if want else got)


# --- video clips (seed 002 §3.1): keyframes + audio track, a modality set of their own ---

def _stream_digest(w) -> str:
    """A digest of a stream's columns and of every 97th query's vectors."""
    import hashlib

    h = hashlib.sha256()
    for name in ("intent", "modality", "variant", "topic", "session", "burst", "time", "size",
                 "modality_set"):
        h.update(np.ascontiguousarray(getattr(w, name)).tobytes())
    for i in range(0, len(w), 97):
        for v in w.vectors(i):
            h.update(v.tobytes())
    return h.hexdigest()


def test_streams_without_video_are_as_before_video_existed():
    """Digests made by the code before video was added (commit 3a31bc8)."""
    from mmcache.sim.workload import VIDEO_SET

    plain = generate(n_queries=3000, n_intents=300, seed=3)
    multi = generate(n_queries=3000, n_intents=300, seed=4,
                     multimodal_mix={"text+image": 0.2, "image+audio": 0.1})
    assert not (plain.modality_set == VIDEO_SET).any()
    assert not (multi.modality_set == VIDEO_SET).any()
    assert "video" not in plain.embedding_kinds()
    assert _stream_digest(plain) == \
        "44b3828da3b84f148d9f87a80bb1eaaab8e7c854b5f7100001a4b7ac500201b4"
    assert _stream_digest(multi) == \
        "7233abfc32c0474fdb317e38f720956f63d14c3474603cdd760f9c1c2904994b"


@settings(max_examples=15, deadline=None)
@given(share=st.floats(0.01, 0.5), seed=st.integers(0, 2**16))
def test_the_video_share_is_honoured_within_sampling_error(share, seed):
    from mmcache.sim.workload import VIDEO_SET

    n = 4000
    w = generate(n_queries=n, n_intents=100, seed=seed,
                 multimodal_mix={"video": share, "text+image": 0.1})
    observed = (w.modality_set == VIDEO_SET).mean()
    assert abs(observed - share) <= 5 * np.sqrt(share * (1 - share) / n)
    assert w.describe()["per_modality_set"]["video"] == int((w.modality_set == VIDEO_SET).sum())


def test_video_is_its_own_set_with_keyframes_of_its_own_and_the_speech_track():
    from mmcache.sim.workload import (MODALITY_SET_NAMES, MODALITY_SETS, VIDEO_KIND, VIDEO_SET,
                                      modality_set_index)

    assert MODALITY_SET_NAMES[VIDEO_SET] == "video"
    assert MODALITY_SETS[VIDEO_SET] == ("image", "audio")
    assert modality_set_index("video") == VIDEO_SET
    assert modality_set_index("audio+image") == MODALITY_SET_NAMES.index("image+audio") != VIDEO_SET
    w = generate(n_queries=3000, n_intents=50, seed=5,
                 multimodal_mix={"video": 0.3, "image+audio": 0.3})
    assert w.embedding_kinds()["video"] == VIDEO_KIND
    video = np.flatnonzero(w.modality_set == VIDEO_SET)
    still = np.flatnonzero(w.modality_set == modality_set_index("image+audio"))
    pair = next((a, b) for a in video.tolist() for b in still.tolist()
                if w.intent[a] == w.intent[b] and w.variant[a] == w.variant[b])
    clip, photo = w.vectors(pair[0]), w.vectors(pair[1])
    assert w.modalities(pair[0]) == ("image", "audio") and w.modality[pair[0]] == 1
    assert np.array_equal(clip[1], photo[1])  # the track is the intent's speech
    assert abs(float(clip[0] @ photo[0])) < 0.5  # keyframes are not the still photo's vector
    assert np.array_equal(w.embedding(pair[0]), clip[0])
    # keyframes of one intent are paraphrases of each other, as any modality's variants
    same = [i for i in video.tolist() if w.intent[i] == w.intent[pair[0]]
            and w.variant[i] != w.variant[pair[0]]]
    assert same and float(w.vectors(same[0])[0] @ clip[0]) > 0.6
    got = w.set_vectors(video[:20], VIDEO_SET)
    for j, mat in enumerate(got):
        assert np.array_equal(mat, np.stack([w.vectors(i)[j] for i in video[:20]]))
    assert w.set_dims(VIDEO_SET) == (w.config.dim, w.config.dim)
    q = w.query(pair[0], images=lambda intent: np.full((28, 28, 3), 9, np.uint8))
    assert q.video is None and q.image is None and set(q.embeddings) == {"video", "audio"}


def test_a_clip_query_is_a_video_clip_the_live_cache_keeps_apart_from_stills():
    from mmcache import TieredCache
    from mmcache.datasets.variants import KEYFRAMES, speech_variant
    from mmcache.sim.workload import VIDEO_SET, modality_set_index

    w = generate(n_queries=3000, n_intents=50, seed=5,
                 multimodal_mix={"video": 0.3, "image+audio": 0.3})
    photo = (np.arange(32 * 32 * 3) % 251).astype(np.uint8).reshape(32, 32, 3)
    inputs = {"images": lambda intent: photo,
              "speech": lambda intent, spec: np.full(1600, 0.01 * (1 + spec.rate_wpm % 7),
                                                     np.float32)}
    video = np.flatnonzero(w.modality_set == VIDEO_SET)
    still = np.flatnonzero(w.modality_set == modality_set_index("image+audio"))
    a = int(video[0])
    q = w.query(a, **inputs)
    assert q.image is None and q.audio is None and set(q.embeddings) == {"video", "audio"}
    assert len(q.video.frames) == KEYFRAMES and q.video.frames[0].shape[2] == 3
    np.testing.assert_array_equal(q.video.audio,
                                  inputs["speech"](0, speech_variant(int(w.variant[a]))))
    np.testing.assert_array_equal(q.embeddings["video"], w.vectors(a)[0])
    same_intent_still = next(int(i) for i in still if w.intent[i] == w.intent[a])
    with TieredCache({"l2": {"index": "flat"}}) as cache:
        cache.put(w.query(a, scope="s"), "clip")  # embeddings only, as a replay puts them
        assert cache.get(w.query(a, scope="s")).value == "clip"
        assert cache.get(w.query(same_intent_still, scope="s")) is None  # a still never matches


def test_video_keyframes_are_a_pan_at_one_crop_and_a_centred_variant_is_unchanged():
    from mmcache.datasets.variants import KEYFRAMES, video_keyframes

    photo = np.arange(40 * 40 * 3, dtype=np.uint8).reshape(40, 40, 3)
    for variant in range(4):
        specs = video_keyframes(variant)
        assert len(specs) == KEYFRAMES and len({s.crop for s in specs}) == 1
        frames = [apply_image_variant(photo, s) for s in specs]
        assert len({f.shape for f in frames}) == 1
        assert not np.array_equal(frames[0], frames[-1])
    assert video_keyframes(1) != video_keyframes(2)
    centred = ImageVariant(0.8, 1.0, 1.0)
    assert np.array_equal(apply_image_variant(photo, centred),
                          apply_image_variant(photo, ImageVariant(0.8, 1.0, 1.0, (0.0, 0.0))))
    assert np.array_equal(apply_image_variant(photo, centred), photo[4:36, 4:36])


def test_unknown_modality_sets_are_config_errors_naming_them():
    with pytest.raises(ConfigError, match="vidoe"):
        WorkloadConfig(multimodal_mix={"vidoe": 0.1})
