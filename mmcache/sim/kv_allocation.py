"""A model of KV-cache pre-allocation over multi-turn conversations (no GPU is used).

This is a model, not a measurement: it counts token slots from stated parameters only.
A conversation is a list of per-turn token counts (a user prompt, then the assistant's
answer, then the next prompt, ...). Its KV cache grows by each turn's tokens and is kept for
the whole conversation. After every turn the allocator must hold at least the conversation's
tokens so far; a strategy decides how many slots it reserves and whether growing moves
(copies) the cache.

Modelling assumptions, stated once:

* a turn's tokens are appended in one step (the allocator is consulted at turn boundaries, as
  for a prefill; token-by-token decoding would give the contiguous strategies more
  re-allocations, never fewer);
* a re-allocation of a contiguous reservation copies every token held before the turn;
* block strategies (fixed blocks, paged) add blocks through a block table and never copy;
* the first reservation of a conversation is an allocation, not a re-allocation.

The strategies are data (:class:`AllocationSpec`): :func:`fixed_blocks`, :func:`geometric`,
:func:`aligned` and :func:`paged` build the four compared here (:data:`DEFAULT_STRATEGIES`);
:func:`simulate_conversation` is the one loop they share; :func:`summarize` turns a
strategy's runs into an :class:`AllocationResult`; :func:`compare` tabulates every strategy
over a set of conversations; :func:`sharegpt_turn_tokens` gives real conversation lengths
from ShareGPT, and :func:`run_sharegpt` runs the comparison on them.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Literal, Sequence

import numpy as np

from mmcache.datasets.prompts import iter_sharegpt_conversations
from mmcache.errors import ConfigError, InvalidInputError, check_number

if TYPE_CHECKING:
    import pandas as pd

#: The model shape behind :data:`DEFAULT_BYTES_PER_TOKEN` (an assumption): Llama-3-8B,
#: 32 layers, 8 KV heads (grouped-query attention), head dimension 128, fp16/bf16 (2 bytes).
LLAMA3_8B_SHAPE = {"layers": 32, "kv_heads": 8, "head_dim": 128, "dtype_bytes": 2}


def kv_bytes_per_token(layers: int, kv_heads: int, head_dim: int, dtype_bytes: int) -> int:
    """Bytes of KV cache one token occupies: 2 (K and V) × layers × KV heads × head dim ×
    bytes per element."""
    for name, value in (("layers", layers), ("kv_heads", kv_heads), ("head_dim", head_dim),
                        ("dtype_bytes", dtype_bytes)):
        if not (isinstance(value, (int, np.integer)) and value > 0):
            raise ConfigError(f"{name} must be a positive integer, got {value!r}")
    return 2 * layers * kv_heads * head_dim * dtype_bytes


#: Bytes per token of Llama-3-8B in fp16: 2 × 32 × 8 × 128 × 2 = 131,072 (128 KiB).
DEFAULT_BYTES_PER_TOKEN = kv_bytes_per_token(**LLAMA3_8B_SHAPE)


@dataclass(frozen=True)
class AllocationSpec:
    """One allocation strategy.

    ``granule``: reservations are multiples of this many token slots. ``growth``: ``None``
    reserves just what the tokens need, rounded up to the granule; a factor > 1 grows the
    reservation geometrically (×``growth`` per step, starting from ``initial`` slots, a
    parameter of geometric growth only) until the tokens fit. ``contiguous``: the reservation
    is one region, so growing it re-allocates and copies the cache; otherwise blocks are
    added and nothing moves.
    """

    name: str
    granule: int = 1
    growth: float | None = None
    initial: int = 0
    contiguous: bool = True

    def __post_init__(self) -> None:
        if not self.name.strip():
            raise ConfigError("an allocation strategy needs a name")
        if not (isinstance(self.granule, (int, np.integer)) and self.granule >= 1):
            raise ConfigError(f"{self.name}: block/alignment size must be a positive integer "
                              f"number of tokens, got {self.granule!r}")
        if self.growth is not None:
            check_number(self.growth, f"{self.name}: geometric growth factor", 1)
        if self.growth is not None and not (isinstance(self.initial, (int, np.integer))
                                            and self.initial >= 1):
            raise ConfigError(f"{self.name}: the initial reservation of geometric growth must be "
                              f"a positive integer number of tokens, got {self.initial!r}")
        if self.growth is None and self.initial != 0:
            raise ConfigError(f"{self.name}: an initial reservation is a parameter of geometric "
                              f"growth only, got initial={self.initial!r} without a growth factor")


def fixed_blocks(block: int = 256) -> AllocationSpec:
    """Whole blocks of ``block`` tokens added as the cache grows (a block table; no copying)."""
    return AllocationSpec(f"fixed-{block}", granule=block, contiguous=False)


def geometric(growth: float = 1.3, initial: int = 256) -> AllocationSpec:
    """One contiguous region of ``initial`` slots, re-allocated to ×``growth`` (rounded up)
    as often as needed whenever the cache outgrows it."""
    return AllocationSpec(f"geometric-x{growth:g}", growth=growth, initial=initial)


def aligned(alignment: int = 64) -> AllocationSpec:
    """One contiguous region of exactly the tokens needed rounded up to ``alignment``,
    re-allocated on every growth past it."""
    return AllocationSpec(f"aligned-{alignment}", granule=alignment)


def paged(block: int = 16) -> AllocationSpec:
    """PagedAttention's scheme (vLLM's default block of 16 tokens): non-contiguous blocks
    added as needed, never copied."""
    return AllocationSpec(f"paged-{block}", granule=block, contiguous=False)


#: The four compared strategies with their default parameters.
DEFAULT_STRATEGIES: tuple[AllocationSpec, ...] = (fixed_blocks(), geometric(), aligned(), paged())


def capacity_for(spec: AllocationSpec, capacity: int, needed: int) -> int:
    """The slots ``spec`` holds for ``needed`` tokens when it holds ``capacity`` now."""
    if needed <= capacity:
        return capacity
    if spec.growth is None:
        return -(-needed // spec.granule) * spec.granule
    size = max(capacity, spec.initial)
    while size < needed:
        size = math.ceil(size * spec.growth)
    return -(-size // spec.granule) * spec.granule


@dataclass(frozen=True)
class ConversationRun:
    """One conversation under one strategy, per turn: tokens held (``used``), slots reserved,
    re-allocations and tokens copied during that turn."""

    used: np.ndarray
    reserved: np.ndarray
    reallocations: np.ndarray
    copied: np.ndarray

    @property
    def fragmentation(self) -> np.ndarray:
        """Per turn, reserved but unused slots / reserved slots (0 where nothing is reserved)."""
        unused = (self.reserved - self.used).astype(float)
        return np.divide(unused, self.reserved, out=np.zeros_like(unused), where=self.reserved > 0)


def check_turns(turns: Sequence[int]) -> np.ndarray:
    """The turn token counts as an int64 array; refuses an empty, negative or non-integer one."""
    arr = np.asarray(turns)
    if arr.ndim != 1 or arr.size == 0:
        raise InvalidInputError(f"a conversation must be a non-empty list of per-turn token "
                                f"counts, got {turns!r}")
    if not np.issubdtype(arr.dtype, np.integer):
        raise InvalidInputError(f"per-turn token counts must be integers, got {turns!r}")
    if (arr < 0).any():
        raise InvalidInputError(f"per-turn token counts must be >= 0; turn "
                                f"{int(np.argmax(arr < 0))} has {int(arr[arr < 0][0])}")
    return arr.astype(np.int64)


def simulate_conversation(turns: Sequence[int], spec: AllocationSpec) -> ConversationRun:
    """Reservations of ``spec`` after each turn of one conversation."""
    used = np.cumsum(check_turns(turns))
    reserved = np.zeros_like(used)
    reallocations = np.zeros_like(used)
    copied = np.zeros_like(used)
    capacity, held = 0, 0
    for t, needed in enumerate(used.tolist()):
        new = capacity_for(spec, capacity, needed)
        if new > capacity and capacity > 0 and spec.contiguous:
            reallocations[t], copied[t] = 1, held
        capacity, held = new, needed
        reserved[t] = capacity
    return ConversationRun(used, reserved, reallocations, copied)


@dataclass(frozen=True)
class AllocationResult:
    """One strategy over a set of conversations (``bytes_per_token`` prices the slots).

    ``fragmentation_mean``: unused / reserved slots averaged over every turn of every
    conversation; ``fragmentation_end``: the same at each conversation's last turn, averaged
    over conversations; ``wasted_bytes_mean`` / ``wasted_bytes_end``: unused slots × bytes
    per token, per conversation, averaged over turns / at the end; ``reallocations_per_turn``
    and ``copied_tokens_per_turn``: totals over all turns; ``first_turn_reserved``: slots
    reserved after a conversation's first turn, averaged over conversations.
    """

    strategy: str
    conversations: int
    turns: int
    fragmentation_mean: float
    fragmentation_end: float
    wasted_bytes_mean: float
    wasted_bytes_end: float
    reallocations_per_turn: float
    copied_tokens_per_turn: float
    first_turn_reserved: float
    bytes_per_token: int


def summarize(spec: AllocationSpec, runs: Sequence[ConversationRun],
              bytes_per_token: int = DEFAULT_BYTES_PER_TOKEN) -> AllocationResult:
    """The :class:`AllocationResult` of ``spec``'s ``runs``."""
    if not runs:
        raise InvalidInputError("summarize needs at least one conversation run")
    if not (isinstance(bytes_per_token, (int, np.integer)) and bytes_per_token > 0):
        raise ConfigError(f"bytes_per_token must be a positive integer, got {bytes_per_token!r}")
    unused = np.concatenate([r.reserved - r.used for r in runs])
    end_unused = np.array([r.reserved[-1] - r.used[-1] for r in runs])
    turns = int(unused.size)
    return AllocationResult(
        strategy=spec.name, conversations=len(runs), turns=turns,
        fragmentation_mean=float(np.concatenate([r.fragmentation for r in runs]).mean()),
        fragmentation_end=float(np.mean([r.fragmentation[-1] for r in runs])),
        wasted_bytes_mean=float(np.mean([(r.reserved - r.used).mean() for r in runs])
                                * bytes_per_token),
        wasted_bytes_end=float(end_unused.mean() * bytes_per_token),
        reallocations_per_turn=float(sum(int(r.reallocations.sum()) for r in runs) / turns),
        copied_tokens_per_turn=float(sum(int(r.copied.sum()) for r in runs) / turns),
        first_turn_reserved=float(np.mean([r.reserved[0] for r in runs])),
        bytes_per_token=int(bytes_per_token))


def compare(conversations: Sequence[Sequence[int]],
            strategies: Sequence[AllocationSpec] = DEFAULT_STRATEGIES,
            bytes_per_token: int = DEFAULT_BYTES_PER_TOKEN) -> pd.DataFrame:
    """One row per strategy (the fields of :class:`AllocationResult`) over ``conversations``."""
    # deferred: pandas only for this table
    import pandas as pd

    if not conversations:
        raise InvalidInputError("compare needs at least one conversation")
    rows = [asdict(summarize(spec, [simulate_conversation(c, spec) for c in conversations],
                             bytes_per_token)) for spec in strategies]
    return pd.DataFrame(rows)


def per_turn(conversations: Sequence[Sequence[int]],
             strategies: Sequence[AllocationSpec] = DEFAULT_STRATEGIES,
             bytes_per_token: int = DEFAULT_BYTES_PER_TOKEN, max_turns: int | None = None
             ) -> pd.DataFrame:
    """Per strategy and turn index (0-based, up to ``max_turns``): ``conversations`` that
    reach that turn, their mean ``fragmentation`` and mean ``wasted_mib`` (unused slots ×
    ``bytes_per_token`` / 2**20) after it, and ``reallocations`` and ``copied_tokens`` per
    conversation in it."""
    # deferred: pandas only for this table
    import pandas as pd

    if not conversations:
        raise InvalidInputError("per_turn needs at least one conversation")
    if not (isinstance(bytes_per_token, (int, np.integer)) and bytes_per_token > 0):
        raise ConfigError(f"bytes_per_token must be a positive integer, got {bytes_per_token!r}")
    frames = []
    for spec in strategies:
        runs = [simulate_conversation(c, spec) for c in conversations]
        frames.append(pd.DataFrame({
            "strategy": spec.name,
            "turn": np.concatenate([np.arange(r.used.size) for r in runs]),
            "fragmentation": np.concatenate([r.fragmentation for r in runs]),
            "wasted_mib": np.concatenate([r.reserved - r.used for r in runs])
            * bytes_per_token / 2 ** 20,
            "reallocations": np.concatenate([r.reallocations for r in runs]),
            "copied_tokens": np.concatenate([r.copied for r in runs])}))
    rows = pd.concat(frames, ignore_index=True)
    if max_turns is not None:
        rows = rows[rows.turn < max_turns]
    out = rows.groupby(["strategy", "turn"], sort=False).agg(
        conversations=("fragmentation", "size"), fragmentation=("fragmentation", "mean"),
        wasted_mib=("wasted_mib", "mean"), reallocations=("reallocations", "mean"),
        copied_tokens=("copied_tokens", "mean"))
    return out.reset_index()


def _word_tokens(texts: Sequence[str]) -> list[int]:
    """Approximate token counts: whitespace words × 1.3, rounded up."""
    return [math.ceil(len(t.split()) * 1.3) for t in texts]


def _minilm_tokens(texts: Sequence[str]) -> list[int]:
    """Token counts from all-MiniLM-L6-v2's WordPiece tokenizer, special tokens excluded."""
    # deferred: the encoder (transformers, the weights package) loads only when asked for
    from mmcache.encoders import get_encoder

    tokenizer = get_encoder("minilm").tokenizer
    ids = tokenizer(list(texts), add_special_tokens=False, verbose=False)["input_ids"]
    return [len(row) for row in ids]


def sharegpt_turn_tokens(n: int, tokenizer: Literal["minilm", "words"] = "minilm"
                         ) -> list[list[int]]:
    """Per-turn token counts (every user and assistant message in order) of the first ``n``
    ShareGPT conversations that have at least one message.

    ``tokenizer="minilm"`` counts with all-MiniLM-L6-v2's tokenizer (BERT WordPiece, uncased;
    fast and offline, but a stand-in: an LLM's own tokenizer counts differently); ``"words"``
    approximates whitespace words × 1.3. Chat-template tokens are not counted.
    """
    if not (isinstance(n, int) and n > 0):
        raise InvalidInputError(f"n must be a positive integer, got {n!r}")
    count = {"minilm": _minilm_tokens, "words": _word_tokens}.get(tokenizer)
    if count is None:
        raise ConfigError(f"tokenizer must be 'minilm' or 'words', got {tokenizer!r}")
    convs = [[t["content"] for t in turns] for _, turns in
             itertools.islice(((i, t) for i, t in iter_sharegpt_conversations() if t), n)]
    if len(convs) < n:
        raise InvalidInputError(f"ShareGPT holds only {len(convs)} conversations; asked for {n}")
    counts = iter(count([text for conv in convs for text in conv]))
    return [[next(counts) for _ in conv] for conv in convs]


def run_sharegpt(n: int = 20, tokenizer: Literal["minilm", "words"] = "minilm",
                 strategies: Sequence[AllocationSpec] = DEFAULT_STRATEGIES,
                 bytes_per_token: int = DEFAULT_BYTES_PER_TOKEN) -> pd.DataFrame:
    """:func:`compare` over the first ``n`` ShareGPT conversations (see
    :func:`sharegpt_turn_tokens`)."""
    return compare(sharegpt_turn_tokens(n, tokenizer), strategies, bytes_per_token)
