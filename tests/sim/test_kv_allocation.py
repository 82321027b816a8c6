"""mmcache.sim.kv_allocation: hand-counted reservations, fragmentation, re-allocations and copies
for each strategy; block strategies never copy and waste less than a block; bad parameters are
refused; a run over real ShareGPT conversations gives finite numbers."""

from __future__ import annotations

import math
from itertools import islice

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mmcache.datasets.prompts import iter_sharegpt_conversations
from mmcache.errors import ConfigError, InvalidInputError
from mmcache.sim.kv_allocation import (DEFAULT_BYTES_PER_TOKEN, DEFAULT_STRATEGIES, AllocationSpec,
                                       aligned, compare, fixed_blocks, geometric,
                                       kv_bytes_per_token, paged, per_turn, run_sharegpt,
                                       sharegpt_turn_tokens, simulate_conversation, summarize)

TINY = [100, 300]  # used: 100 then 400 tokens

conversations = st.lists(st.integers(0, 3_000), min_size=1, max_size=30)


@pytest.mark.parametrize("spec, reserved, reallocations, copied", [
    (fixed_blocks(256), [256, 512], [0, 0], [0, 0]),
    (geometric(1.3, initial=256), [256, 433], [0, 1], [0, 100]),  # ceil(256 × 1.3) = 333 < 400
    (aligned(64), [128, 448], [0, 1], [0, 100]),
    (paged(16), [112, 400], [0, 0], [0, 0]),
])
def test_tiny_conversation_by_hand(spec, reserved, reallocations, copied):
    run = simulate_conversation(TINY, spec)
    assert run.used.tolist() == [100, 400]
    assert run.reserved.tolist() == reserved
    assert run.reallocations.tolist() == reallocations
    assert run.copied.tolist() == copied
    by_hand = [(r - u) / r for r, u in zip(reserved, [100, 400])]
    np.testing.assert_allclose(run.fragmentation, by_hand)


def test_fixed_256_fragmentation_by_hand():
    run = simulate_conversation(TINY, fixed_blocks(256))
    np.testing.assert_allclose(run.fragmentation, [156 / 256, 112 / 512])


def test_geometric_reallocations_and_copies_by_hand():
    # 100 slots; 160 tokens -> 150 -> 225 (copy 100); 260 tokens -> ceil(337.5) = 338 (copy 160)
    run = simulate_conversation([100, 60, 100], AllocationSpec("g", growth=1.5, initial=100))
    assert run.reserved.tolist() == [100, 225, 338]
    assert run.reallocations.tolist() == [0, 1, 1]
    assert run.copied.tolist() == [0, 100, 160]


def test_geometric_jump_over_several_sizes_is_one_reallocation():
    # 10 tokens in 100 slots; 510 tokens -> 200 -> 400 -> 800 in one move of the 10 held
    run = simulate_conversation([10, 500], geometric(2.0, initial=100))
    assert run.reserved.tolist() == [100, 800]
    assert run.reallocations.tolist() == [0, 1]
    assert run.copied.tolist() == [0, 10]


def test_first_turn_larger_than_the_initial_reservation_is_no_reallocation():
    run = simulate_conversation([300], geometric(1.3, initial=256))
    assert run.reserved.tolist() == [333]
    assert run.reallocations.tolist() == [0] and run.copied.tolist() == [0]


def test_summary_by_hand():
    runs = [simulate_conversation(c, fixed_blocks(256)) for c in (TINY, [256])]
    res = summarize(fixed_blocks(256), runs, bytes_per_token=2)
    assert (res.conversations, res.turns) == (2, 3)
    assert res.fragmentation_mean == pytest.approx((156 / 256 + 112 / 512 + 0) / 3)
    assert res.fragmentation_end == pytest.approx((112 / 512 + 0) / 2)
    assert res.wasted_bytes_mean == pytest.approx(((156 + 112) / 2 + 0) / 2 * 2)
    assert res.wasted_bytes_end == pytest.approx((112 + 0) / 2 * 2)
    assert res.first_turn_reserved == 256
    assert res.reallocations_per_turn == 0 and res.copied_tokens_per_turn == 0
    geo = summarize(geometric(), [simulate_conversation(TINY, geometric())])
    assert geo.reallocations_per_turn == 0.5 and geo.copied_tokens_per_turn == 50


def test_default_bytes_per_token_is_llama3_8b_fp16():
    assert DEFAULT_BYTES_PER_TOKEN == kv_bytes_per_token(32, 8, 128, 2) == 2 * 32 * 8 * 128 * 2


@settings(max_examples=80, deadline=None)
@given(conversations)
def test_paged_never_copies_and_wastes_less_than_a_block(turns):
    run = simulate_conversation(turns, paged(16))
    assert run.reallocations.sum() == 0 and run.copied.sum() == 0
    assert ((run.reserved - run.used) < 16).all() and (run.reserved >= run.used).all()
    assert (run.reserved % 16 == 0).all()


@settings(max_examples=80, deadline=None)
@given(conversations)
def test_aligned_wastes_less_than_64_and_copies_what_it_held(turns):
    run = simulate_conversation(turns, aligned(64))
    assert ((run.reserved - run.used) < 64).all() and (run.reserved >= run.used).all()
    # a growth from nothing (after empty turns) is the first allocation, not a re-allocation
    grew = np.flatnonzero((np.diff(run.reserved) > 0) & (run.reserved[:-1] > 0)) + 1
    assert run.reallocations[grew].tolist() == [1] * len(grew) == [1] * int(run.reallocations.sum())
    assert run.copied[grew].tolist() == run.used[grew - 1].tolist()


@settings(max_examples=80, deadline=None)
@given(conversations, st.sampled_from(DEFAULT_STRATEGIES))
def test_every_strategy_holds_the_cache_and_never_shrinks(turns, spec):
    run = simulate_conversation(turns, spec)
    assert (run.reserved >= run.used).all()
    assert (np.diff(run.reserved) >= 0).all()
    assert ((0 <= run.fragmentation) & (run.fragmentation < 1)).all()


@pytest.mark.parametrize("make, match", [
    (lambda: fixed_blocks(0), "block/alignment size must be a positive integer"),
    (lambda: paged(-16), "block/alignment size must be a positive integer"),
    (lambda: aligned(0), "block/alignment size must be a positive integer"),
    (lambda: geometric(1.0), r"growth factor must be a finite number > 1, got 1.0"),
    (lambda: geometric(0.5), r"growth factor must be a finite number > 1"),
    (lambda: geometric(math.nan), r"growth factor must be a finite number > 1"),
    (lambda: geometric(1.3, initial=0), "initial reservation of geometric growth"),
    (lambda: AllocationSpec("x", granule=16, initial=32), "parameter of geometric growth only"),
    (lambda: kv_bytes_per_token(32, 0, 128, 2), "kv_heads must be a positive integer"),
])
def test_invalid_parameters_raise_config_error(make, match):
    with pytest.raises(ConfigError, match=match):
        make()


@pytest.mark.parametrize("turns, match", [
    ([100, -5], r"must be >= 0; turn 1 has -5"),
    ([], "non-empty list"),
    ([1.5, 2.0], "must be integers"),
])
def test_invalid_turns_raise_invalid_input_error(turns, match):
    with pytest.raises(InvalidInputError, match=match):
        simulate_conversation(turns, paged())


def test_invalid_bytes_per_token_and_empty_inputs_are_refused():
    with pytest.raises(ConfigError, match="bytes_per_token must be a positive integer"):
        compare([TINY], bytes_per_token=0)
    with pytest.raises(InvalidInputError, match="at least one conversation"):
        compare([])
    with pytest.raises(InvalidInputError, match="n must be a positive integer"):
        sharegpt_turn_tokens(0)
    with pytest.raises(ConfigError, match="tokenizer must be"):
        sharegpt_turn_tokens(1, tokenizer="gpt")


def test_compare_gives_one_row_per_strategy():
    table = compare([TINY, [5, 5, 5]])
    assert table["strategy"].tolist() == [s.name for s in DEFAULT_STRATEGIES]
    assert (table["turns"] == 5).all()


def test_real_sharegpt_conversations_smoke():
    turns = sharegpt_turn_tokens(20)
    assert len(turns) == 20 and all(len(c) >= 1 for c in turns) and sum(map(sum, turns)) > 0
    table = run_sharegpt(20).set_index("strategy")
    numeric = table.to_numpy(dtype=float)
    assert np.isfinite(numeric).all()
    assert (table["conversations"] == 20).all()
    assert table.loc["paged-16", "fragmentation_mean"] < table.loc["fixed-256", "fragmentation_mean"]
    assert table.loc["paged-16", "fragmentation_end"] < table.loc["fixed-256", "fragmentation_end"]
    assert table.loc["paged-16", "copied_tokens_per_turn"] == 0
    assert table.loc["geometric-x1.3", "reallocations_per_turn"] > 0


def test_words_approximation_counts_words_times_1_3():
    raw = [t for _, t in islice(((i, t) for i, t in iter_sharegpt_conversations() if t), 3)]
    by_hand = [[math.ceil(len(m["content"].split()) * 1.3) for m in conv] for conv in raw]
    assert sharegpt_turn_tokens(3, tokenizer="words") == by_hand


def test_per_turn_by_hand_and_against_summarize():
    """Two conversations: [100, 300] (used 100, 400) and [50]; fixed-256 reserves 256, 512 and
    256; turn 1 is reached by one conversation only."""
    convs = [TINY, [50]]
    table = per_turn(convs, [fixed_blocks(256)], bytes_per_token=2 ** 20).set_index("turn")
    assert table.conversations.tolist() == [2, 1]
    np.testing.assert_allclose(table.fragmentation, [(156 / 256 + 206 / 256) / 2, 112 / 512])
    np.testing.assert_allclose(table.wasted_mib, [(156 + 206) / 2, 112])  # 1 MiB per token
    assert table.reallocations.tolist() == [0, 0] and table.copied_tokens.tolist() == [0, 0]
    for spec in DEFAULT_STRATEGIES:
        rows = per_turn(convs, [spec])
        pooled = (rows.fragmentation * rows.conversations).sum() / rows.conversations.sum()
        assert pooled == pytest.approx(summarize(spec, [simulate_conversation(c, spec)
                                                        for c in convs]).fragmentation_mean)
    assert per_turn(convs, [aligned(64)]).copied_tokens.tolist() == [0, 100]  # conv 0 grows
    assert per_turn(convs, max_turns=1).turn.max() == 0
    with pytest.raises(InvalidInputError):
        per_turn([])
    with pytest.raises(ConfigError):
        per_turn(convs, bytes_per_token=0)
