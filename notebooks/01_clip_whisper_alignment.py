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
# # 01 · Does speech land in the text/image space? Whisper → MiniLM / CLIP alignment
#
# Seed 002 §2.3 asks to project Whisper audio embeddings and CLIP embeddings into one space. We
# keep every encoder **frozen** — Whisper tiny.en (pooled encoder states), MiniLM (text) and the
# workbench's offline CLIP (LiT-style image tower against MiniLM, so images live in MiniLM's
# space) — and learn only a projection head from audio into that space. We measure retrieval on
# **held-out** items for the ladder chance · ridge · Procrustes · linear InfoNCE · MLP ·
# ASR→text (Whisper transcript → MiniLM) · fused (projected audio + transcript), with bootstrap
# 95% CIs, on **real** speech (Asterisk prompts) and **synthetic** speech (espeak-ng) separately:
#
# * **real, audio→text** — 509 recorded Asterisk prompts (one speaker), each with a unique
#   transcript; held-out 20% of prompts; gallery = held-out transcripts; several splits;
# * **synthetic, compositional scenes** (headline) — 150 scenes (shape × colour × position),
#   4 paraphrased captions each, the first `SCENE_PARAPHRASES` of them spoken by espeak-ng. Held
#   out: *unseen scenes* spoken by an *unseen voice*; gallery = all 600 captions / all 150 scene
#   images, so a hit must single out a composition the head never saw among 149 near-duplicates;
# * **synthetic, Fashion-MNIST class captions** — a sanity check (10 classes, unseen voice).
#
# **Study size.** The grid below was sized so that `make figures` (every notebook, two at a time
# on 2 cores) fits in 20 minutes: 2 real-speech splits, 2 spoken paraphrases per scene, 2 caption
# templates per Fashion class, 3 fixed temperatures and 3 pair sizes. Each is a subset of the
# earlier grid (5 splits, 4 paraphrases, 4 templates, temperatures 0.01–1.0 at 6 points, 5 pair
# sizes 25–350), which the parameters cell restores. Whisper transcribes only the real prompts
# that some split holds out (a training prompt's transcript is never scored).

# %% tags=["parameters"]
NOTEBOOK = "01_clip_whisper_alignment"  # this notebook: metrics go to runs/<NOTEBOOK>[-smoke]/
SMOKE = False
SEED = 0
# sizes below are set for the 20-minute `make figures` budget; the earlier, larger study was
# SPLIT_SEEDS [0..4], SCENE_PARAPHRASES 4, FASHION_TEMPLATES 4,
# TEMPERATURES [0.01, 0.03, 0.07, 0.2, 0.5, 1.0], PAIR_SIZES [25, 50, 100, 200, 350]
SPLIT_SEEDS = [0, 1]                # real-speech splits (the learned map varies with the split)
SCENE_VOICES_TRAIN = 2              # espeak voices for training scenes; one more voice is held out
SCENE_PARAPHRASES = 2               # spoken captions per scene (of 4; the gallery keeps all 4)
FASHION_TEMPLATES = 2               # spoken caption templates per Fashion-MNIST class (of 4)
N_BOOT = 1000
LINEAR_STEPS = 400
TEMPERATURES = [0.01, 0.07, 1.0]
PAIR_SIZES = [25, 100, 350]

# %%
if SMOKE:  # a handful of clips: checks the whole pipeline in well under a minute
    SPLIT_SEEDS, N_BOOT, LINEAR_STEPS = [0], 200, 120
    SCENE_PARAPHRASES, FASHION_TEMPLATES = min(SCENE_PARAPHRASES, 2), 1
    TEMPERATURES, PAIR_SIZES = [0.03, 0.5], [8, 24]

# %%
import numpy as np
import pandas as pd
import matplotlib.pyplot as plt
import seaborn as sns
from sklearn.manifold import TSNE

from mmcache.studies import alignment
from mmcache.studies.alignment import AlignmentTask, evaluate_ladder
from mmcache.datasets import (FASHION_CLASSES, all_scenes, fashion_captions, load_asterisk_prompts,
                              load_fashion_mnist, make_scenes, speak, split_of)
from mmcache.datasets.speech import VOICES
from mmcache.encoders import get_encoder
from mmcache.encoders.store import EmbeddingStore
from mmcache.errors import OfflineAssetError
from mmcache.lab.plotting import save_figure
from mmcache.studies.retrieval import fuse, ranks
from mmcache.lab.runbook import write_metrics

HEAD_KW = {"linear": {"steps": LINEAR_STEPS}, "mlp": {"steps": LINEAR_STEPS, "hidden": 512}}
store = EmbeddingStore()
whisper = get_encoder("whisper")
minilm = get_encoder("minilm")
try:
    clip, clip_text = get_encoder("clip"), get_encoder("clip", modality="text")
except (OfflineAssetError, ModuleNotFoundError, ImportError) as err:
    clip = clip_text = None
    print(f"no offline CLIP available ({err}); image tasks are skipped, not faked")
weights = {"audio": whisper.encoder_id, "text": minilm.encoder_id,
           "image": clip.encoder_id if clip is not None else "unavailable",
           "clip_text": clip_text.encoder_id if clip_text is not None else "unavailable"}
weights

# %%
def embed_audio(clips):
    return store.encode(whisper, [c.audio for c in clips])


def embed_text(texts):
    return store.encode(minilm, list(texts))


def embed_images(images):
    return store.encode(clip, list(images))


def asr_embeddings(clips, rows):
    """MiniLM of Whisper's transcript for ``rows`` (zeros elsewhere: those rows are never scored by ASR)."""
    out = np.zeros((len(clips), minilm.dim), np.float32)
    texts = alignment.transcribe(whisper.model, [clips[i].audio for i in rows])
    out[rows] = embed_text(texts)
    return out, dict(zip(rows, texts))

# %% [markdown]
# ## Real speech: Asterisk prompts → transcripts
# The prompts longer than Whisper's 30 s window (3 menus) are dropped. Smoke mode keeps 30
# short prompts. Transcripts are made only for the prompts that some split of `SPLIT_SEEDS` holds
# out (validation picks the fusion weight, test is scored); the other rows stay zero, unscored.

# %%
prompts = load_asterisk_prompts(max_seconds=30)
if SMOKE:
    prompts = [c for c in prompts if c.seconds < 1.5][:30]
real_audio = embed_audio(prompts)
real_text = embed_text([c.text for c in prompts])
held_any = [i for i, c in enumerate(prompts)
            if any(split_of(c.clip_id, seed=s) != "train" for s in SPLIT_SEEDS)]
real_asr, real_transcripts = asr_embeddings(prompts, held_any)
print(f"{len(prompts)} prompts, {sum(c.seconds for c in prompts) / 60:.1f} min of real speech; "
      f"{len(held_any)} held out by some split, transcribed")

# %%
real_tables = []
for split_seed in SPLIT_SEEDS:
    splits = np.array([split_of(c.clip_id, seed=split_seed) for c in prompts])
    task = AlignmentTask(f"real audio→text (split {split_seed})", real_audio, real_text,
                         np.arange(len(prompts)), splits, direct={"asr→minilm": real_asr})
    table = evaluate_ladder(task, head_kw=HEAD_KW, n_boot=N_BOOT, seed=SEED)
    real_tables.append(table.assign(split_seed=split_seed))
real = pd.concat(real_tables, ignore_index=True)
real_summary = real.groupby("method", sort=False).agg(
    R1_mean=("R@1", "mean"), R1_min=("R@1", "min"), R1_max=("R@1", "max"),
    R5_mean=("R@5", "mean"), R10_mean=("R@10", "mean"), median_rank=("median_rank", "mean"),
    n_queries=("n_queries", "mean"))
real_summary.round(3)

# %%
first = real[real.split_seed == SPLIT_SEEDS[0]].set_index("method")
first[["R@1", "R@1_ci", "R@5", "R@10", "median_rank", "median_rank_ci", "n_queries",
       "n_gallery"]].round(3)

# %% [markdown]
# Where does ASR go wrong on real speech? Held-out prompts of split 0 whose transcript did not
# retrieve its own text first:

# %%
test0 = np.flatnonzero(np.array([split_of(c.clip_id, seed=SPLIT_SEEDS[0]) for c in prompts]) == "test")
sim0 = real_asr[test0] @ real_text[test0].T
wrong = [i for k, i in enumerate(test0) if sim0[k].argmax() != k]
pd.DataFrame({"prompt": [prompts[i].text for i in wrong],
              "whisper heard": [real_transcripts[i] for i in wrong]}).head(12)

# %% [markdown]
# ## Synthetic speech: compositional scenes (headline) and Fashion-MNIST captions
# The first `SCENE_PARAPHRASES` captions of every scene are spoken by espeak-ng. Training scenes
# use the first voices; validation and test scenes are spoken by a held-out voice only. Smoke
# mode keeps 12 scenes.

# %%
scenes = all_scenes()
scene_split = np.array([split_of(s.scene_id, seed=SEED) for s in scenes])
keep = np.arange(len(scenes)) if not SMOKE else np.sort(np.concatenate(
    [np.flatnonzero(scene_split == s)[:n] for s, n in (("train", 8), ("val", 2), ("test", 2))]))
train_voices, held_voice = VOICES[:SCENE_VOICES_TRAIN], VOICES[SCENE_VOICES_TRAIN]
scene_clips, scene_labels, scene_rows_split = [], [], []
for label in keep:
    voices = train_voices if scene_split[label] == "train" else (held_voice,)
    paraphrases = scenes[label].captions()[:SCENE_PARAPHRASES]
    for clip_ in speak(paraphrases, voices=voices):
        scene_clips.append(clip_)
        scene_labels.append(label)
        scene_rows_split.append(scene_split[label])
scene_labels, scene_rows_split = np.array(scene_labels), np.array(scene_rows_split)
scene_audio = embed_audio(scene_clips)
scene_text = embed_text([c.text for c in scene_clips])
held_rows = np.flatnonzero(scene_rows_split != "train")
scene_asr, scene_transcripts = asr_embeddings(scene_clips, held_rows)
all_captions = [(label, cap) for label in keep for cap in scenes[label].captions()]
caption_gallery = embed_text([cap for _, cap in all_captions])
caption_labels = np.array([label for label, _ in all_captions])
print(f"{len(scene_clips)} synthetic clips of {len(keep)} scenes "
      f"({(scene_rows_split == 'train').sum()} train, voices {train_voices} + held-out {held_voice})")

# %%
scene_audio_text = AlignmentTask("synthetic scenes audio→text", scene_audio, scene_text,
                                 scene_labels, scene_rows_split, gallery=caption_gallery,
                                 gallery_labels=caption_labels, direct={"asr→minilm": scene_asr})
scene_tables = [evaluate_ladder(scene_audio_text, head_kw=HEAD_KW, n_boot=N_BOOT, seed=SEED)]

# %% [markdown]
# Scene images go through the offline CLIP image tower (LiT: its space is MiniLM's). That CLIP
# was trained on Fashion-MNIST and on other renderings of this notebook's *training-split*
# scenes (same `split_of(scene_id, SEED)` split; see its model card), so held-out scenes are
# compositions the image tower never saw either. Heads for audio→image are trained onto the CLIP
# embedding of the spoken scene's image; text→image is scored zero-shot (MiniLM caption vs CLIP
# image, no head) and with heads from MiniLM to CLIP.

# %%
if clip is not None:
    scene_images = make_scenes(images_per_scene=1, size=64, seed=SEED)
    image_emb = embed_images(scene_images.images[keep])
    image_of = dict(zip(keep, image_emb))
    audio_image = AlignmentTask("synthetic scenes audio→image", scene_audio,
                                np.stack([image_of[y] for y in scene_labels]), scene_labels,
                                scene_rows_split, gallery=image_emb, gallery_labels=keep)
    caption_split = np.array([scene_split[y] for y in caption_labels])
    text_image = AlignmentTask("synthetic scenes text→image", caption_gallery,
                               np.stack([image_of[y] for y in caption_labels]), caption_labels,
                               caption_split, gallery=image_emb, gallery_labels=keep,
                               direct={"clip zero-shot": store.encode(
                                   clip_text, [cap for _, cap in all_captions])})
    scene_tables += [evaluate_ladder(audio_image, head_kw=HEAD_KW, n_boot=N_BOOT, seed=SEED),
                     evaluate_ladder(text_image, head_kw=HEAD_KW, n_boot=N_BOOT, seed=SEED,
                                     fuse_head=None)]
synthetic = pd.concat(scene_tables, ignore_index=True)
synthetic.set_index(["task", "method"])[["R@1", "R@1_ci", "R@5", "R@10", "median_rank"]].round(3)

# %%
fashion_voices = VOICES[:3] if SMOKE else VOICES
fashion_templates = FASHION_TEMPLATES
f_clips, f_labels, f_split = [], [], []
for label in range(len(FASHION_CLASSES)):
    captions = fashion_captions(label)[:fashion_templates]
    for clip_ in speak(captions, voices=fashion_voices):
        f_clips.append(clip_)
        f_labels.append(label)
        f_split.append({fashion_voices[-1]: "test", fashion_voices[-2]: "val"}.get(clip_.speaker,
                                                                                  "train"))
f_labels, f_split = np.array(f_labels), np.array(f_split)
f_audio = embed_audio(f_clips)
f_text = embed_text([c.text for c in f_clips])
fashion = [evaluate_ladder(AlignmentTask("fashion audio→text", f_audio, f_text, f_labels, f_split),
                           head_kw=HEAD_KW, n_boot=N_BOOT, seed=SEED)]
if clip is not None:
    f_test = load_fashion_mnist("test", limit=100 if SMOKE else 500, seed=SEED)
    f_train = load_fashion_mnist("train", limit=100 if SMOKE else 1000, seed=SEED)
    f_train_emb = embed_images(f_train.images)
    prototypes = np.stack([f_train_emb[f_train.labels == y].mean(0) for y in range(10)])
    fashion.append(evaluate_ladder(
        AlignmentTask("fashion audio→image", f_audio, prototypes[f_labels], f_labels, f_split,
                      gallery=embed_images(f_test.images), gallery_labels=f_test.labels),
        head_kw=HEAD_KW, n_boot=N_BOOT, seed=SEED, fuse_head=None))
fashion = pd.concat(fashion, ignore_index=True)
fashion.set_index(["task", "method"])[["R@1", "R@1_ci", "R@5", "median_rank"]].round(3)

# %% [markdown]
# ## The ladder at a glance

# %%
real_plot = real.assign(task="real audio→text")
ladder = pd.concat([real_plot, synthetic, fashion], ignore_index=True)
fig, ax = plt.subplots(figsize=(11, 4.5))
sns.barplot(data=ladder, x="method", y="R@1", hue="task", errorbar=("pi", 100), ax=ax)
ax.set(ylabel="R@1 on held-out items", xlabel="",
       title="Speech → text / image retrieval ladder (real: mean and range over splits)")
ax.tick_params(axis="x", rotation=25)
ax.legend(fontsize=8, loc="upper left")
provenance = {"weights": weights, "data": {
    "real": "Asterisk core sounds en (CC-BY-SA-3.0), Debian asterisk-core-sounds-en-wav",
    "synthetic": "espeak-ng renderings of mmcache scene captions and Fashion-MNIST class captions",
    "images": "mmcache rendered scenes; Fashion-MNIST (MIT)"},
    "smoke": SMOKE, "split_seeds": SPLIT_SEEDS}
save_figure(fig, "01_alignment_ladder", provenance)

# %% [markdown]
# ## How many pairs does the linear head need? Which temperature?
# On real speech (split 0) and on the scene captions.

# %%
real_task0 = AlignmentTask("real audio→text", real_audio, real_text, np.arange(len(prompts)),
                           np.array([split_of(c.clip_id, seed=SPLIT_SEEDS[0]) for c in prompts]))
curves = pd.concat([alignment.recall_vs_pairs(t, PAIR_SIZES, seed=SEED, steps=LINEAR_STEPS)
                    for t in (real_task0, scene_audio_text)], ignore_index=True)
sweep = pd.concat([alignment.temperature_sweep(t, TEMPERATURES, seed=SEED, steps=LINEAR_STEPS)
                   for t in (real_task0, scene_audio_text)], ignore_index=True)
fig, axes = plt.subplots(1, 2, figsize=(11, 4))
sns.lineplot(data=curves, x="train_pairs", y="R@1", hue="task", marker="o", ax=axes[0])
axes[0].set(xscale="log", title="linear InfoNCE head: R@1 vs training pairs")
fixed = sweep[~sweep.learnt]
sns.lineplot(data=fixed, x="temperature", y="R@1", hue="task", marker="o", ax=axes[1])
learnt = sweep[sweep.learnt]
axes[1].scatter(learnt.temperature, learnt["R@1"], marker="*", s=160, c="k", label="learnt τ")
axes[1].set(xscale="log", title="fixed temperature sweep (★ = learnt)")
axes[1].legend(fontsize=8)
save_figure(fig, "01_alignment_pairs_temperature", provenance)
sweep.round(3)

# %% [markdown]
# ## The joint space
# Held-out scenes: projected speech (linear head), caption text and — with CLIP — scene images,
# all in MiniLM's space; t-SNE coloured by shape, marker by modality.

# %%
head = alignment.fit_head(scene_audio_text, "linear", steps=LINEAR_STEPS)
test_rows = scene_audio_text.rows("test")
points = [head.transform(scene_audio[test_rows]), scene_text[test_rows]]
kinds = ["speech (projected)"] * len(test_rows) + ["caption text"] * len(test_rows)
shapes = [scenes[y].shape for y in scene_labels[test_rows]] * 2
if clip is not None:
    test_scenes = np.unique(scene_labels[test_rows])
    points.append(np.stack([image_of[y] for y in test_scenes]))
    kinds += ["image (CLIP)"] * len(test_scenes)
    shapes += [scenes[y].shape for y in test_scenes]
joint = np.concatenate(points)
xy = TSNE(n_components=2, perplexity=min(30, len(joint) // 4), random_state=SEED,
          init="pca").fit_transform(joint)
fig, ax = plt.subplots(figsize=(7, 6))
sns.scatterplot(x=xy[:, 0], y=xy[:, 1], hue=shapes, style=kinds, s=50, ax=ax)
ax.set(title="Held-out scenes in the shared space (t-SNE)", xticks=[], yticks=[])
save_figure(fig, "01_alignment_joint_space", provenance)

# %% [markdown]
# ## Verdict

# %%
means = real_summary["R1_mean"]
learned = ["ridge", "procrustes", "linear", "mlp"]
best_head = means[learned].idxmax()
fused_name = next(m for m in means.index if m.startswith("fused"))
winner = means.idxmax()
print(f"Real speech (Asterisk, {len(SPLIT_SEEDS)} splits): best learned head {best_head} "
      f"R@1 {means[best_head]:.3f}; ASR→MiniLM {means['asr→minilm']:.3f}; "
      f"{fused_name} {means[fused_name]:.3f} → winner: {winner}")
print("fusion weight on the head per split:",
      real.loc[real.method == fused_name, "fusion_weight"].round(2).tolist())

# %% [markdown]
# Two diagnostics behind the verdict, on split 0: (1) the linear head on the prompts it was
# trained on versus held-out prompts (does it learn *speech → meaning* or memorise sentences?);
# (2) per held-out prompt, where ASR and the fused scorer disagree.

# %%
task0 = AlignmentTask("real", real_audio, real_text, np.arange(len(prompts)), np.array(
    [split_of(c.clip_id, seed=SPLIT_SEEDS[0]) for c in prompts]), direct={"asr": real_asr})
head0 = alignment.fit_head(task0, "linear", **HEAD_KW["linear"])
seen_r1 = alignment.score(task0, alignment.head_similarity(task0, head0, "train"), "train",
                          n_boot=200)["R@1"]
unseen_r1 = alignment.score(task0, alignment.head_similarity(task0, head0, "test"), n_boot=200)["R@1"]
w0 = alignment.fusion_weight(task0, head0, "asr")
gallery_labels0 = task0.gallery_for("test")[1]
asr_rank = ranks(alignment.direct_similarity(task0, "asr"), task0.labels[test0], gallery_labels0)
fused_rank = ranks(fuse([alignment.head_similarity(task0, head0),
                         alignment.direct_similarity(task0, "asr")], [w0, 1 - w0]),
                   task0.labels[test0], gallery_labels0)
diagnostics = {"linear_R@1_seen_prompts": seen_r1, "linear_R@1_unseen_prompts": unseen_r1,
               "fusion_weight": w0,
               "fused_right_asr_wrong": int(((fused_rank == 1) & (asr_rank > 1)).sum()),
               "asr_right_fused_wrong": int(((asr_rank == 1) & (fused_rank > 1)).sum()),
               "n_test": int(len(test0))}
diagnostics

# %% [markdown]
# **Reading the verdict** (the printed numbers are the evidence; this is what they showed in the
# full run when this notebook was written — re-check them after any change):
#
# * *Real speech:* the transcript route beats every learned head by a wide margin. Every
#   held-out prompt is a sentence the head never saw; the head scores its training prompts far
#   better than unseen ones (diagnostic 1), so it has learnt a lookup of seen sentences more than
#   a speech→meaning map, from ~350 pairs of one speaker. Whisper's decoder already turns audio
#   into words, and MiniLM compares words. ASR fails on what reads differently from how it is
#   written — ordinals and numbers ("nineteenth" → "19."), single letters ("h" → "Age."),
#   acronyms — and this is where the fused scorer recovers some prompts (diagnostic 2). The fused
#   scorer is the best method on average, but by less than the split-to-split spread, and the
#   validation-chosen weight (from ~50 prompts) varies between splits: call it a small, not a
#   settled, gain (the sized-down study has 2 splits; with 5 it beat ASR on 3 of them).
# * *Synthetic speech:* the order flips. Whisper tiny.en garbles espeak voices, so ASR→MiniLM
#   is weak, while a linear head maps unseen scene compositions spoken by an unseen voice to the
#   right caption almost always — the scene captions reuse a small vocabulary, so a linear map of
#   pooled acoustics generalises compositionally. The MLP is a little ahead of the linear head
#   (within their CIs: 62 held-out clips with 2 spoken paraphrases per scene).
# * *Images:* the offline CLIP's image tower learnt Fashion-MNIST and the training-split scenes
#   (other renderings). The cell below prints, from this run, how CLIP's zero-shot text→image
#   and the audio→image heads do on held-out scenes against chance, next to the model card's
#   own scene numbers; audio→image needs both the speech side and CLIP to generalise to unseen
#   compositions, so it is bounded by CLIP's zero-shot text→image.

# %%
image_summary = {}
if clip is not None:
    t2i, a2i = (synthetic[synthetic.task == f"synthetic scenes {k}"].set_index("method")["R@1"]
                for k in ("text→image", "audio→image"))
    card_scene = clip.card.get("scene_text_to_image_R@1", {})
    image_summary = {"text→image_zero_shot": float(t2i["clip zero-shot"]),
                     "text→image_chance": float(t2i["chance"]),
                     "audio→image_best_head": a2i[learned].idxmax(),
                     "audio→image_best_R@1": float(a2i[learned].max()),
                     "audio→image_chance": float(a2i["chance"]),
                     "clip_card_scene_R@1": card_scene}
    print(f"held-out scenes: CLIP zero-shot text→image R@1 {t2i['clip zero-shot']:.3f} "
          f"(chance {t2i['chance']:.3f}); best audio→image head {image_summary['audio→image_best_head']} "
          f"{a2i[learned].max():.3f} (chance {a2i['chance']:.3f}); CLIP card: {card_scene}")
image_summary

# %%
metrics = {
    "smoke": SMOKE, "weights": weights, "split_seeds": SPLIT_SEEDS,
    "study_size": {"split_seeds": SPLIT_SEEDS, "scene_paraphrases": SCENE_PARAPHRASES,
                   "scene_voices_train": SCENE_VOICES_TRAIN, "fashion_templates": FASHION_TEMPLATES,
                   "temperatures": TEMPERATURES, "pair_sizes": PAIR_SIZES,
                   "real_prompts_transcribed": len(held_any)},
    "real": {"n_prompts": len(prompts), "winner": winner, "best_head": best_head,
             "R@1_mean": {m: float(v) for m, v in means.items()},
             "R@1_per_split": real.groupby("method", sort=False)["R@1"].apply(list).to_dict(),
             "first_split": first[["R@1", "R@1_ci", "R@5", "R@10", "median_rank",
                                   "median_rank_ci", "n_queries"]].to_dict(orient="index")},
    "synthetic": {t: g.set_index("method")[["R@1", "R@1_ci", "R@5", "R@10", "median_rank",
                                            "n_queries", "n_gallery"]].to_dict(orient="index")
                  for t, g in synthetic.groupby("task")},
    "fashion": {t: g.set_index("method")[["R@1", "R@1_ci", "R@5"]].to_dict(orient="index")
                for t, g in fashion.groupby("task")},
    "recall_vs_pairs": curves[["task", "train_pairs", "R@1"]].to_dict(orient="records"),
    "temperature_sweep": sweep[["task", "temperature", "learnt", "R@1"]].to_dict(orient="records"),
    "n_synthetic_clips": len(scene_clips) + len(f_clips),
    "real_diagnostics_split0": diagnostics,
    "image_summary": image_summary,
}
write_metrics(metrics, NOTEBOOK, SMOKE)
