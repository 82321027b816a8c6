"""The fixed torch state training runs under."""

from __future__ import annotations

import pytest
import torch

from mmcache.encoders.base import fixed_torch_state


def flushes() -> bool:
    """Whether a float32 product that should be subnormal comes out as zero."""
    return torch.tensor([1e-30]).mul(1e-10).item() == 0.0


def test_fixed_torch_state_sets_and_restores_threads_flushing_and_determinism():
    before = torch.get_num_threads()
    torch.set_num_threads(before + 1)
    can_flush = torch.set_flush_denormal(True)  # False on CPUs without FTZ/DAZ
    try:
        with pytest.raises(RuntimeError), fixed_torch_state():
            assert torch.get_num_threads() == 1 and not flushes()
            assert torch.are_deterministic_algorithms_enabled()
            assert torch.is_deterministic_algorithms_warn_only_enabled()
            raise RuntimeError("the state comes back on an error too")
        assert torch.get_num_threads() == before + 1 and flushes() == can_flush
        assert not torch.are_deterministic_algorithms_enabled()
        torch.set_flush_denormal(False)
        with fixed_torch_state(threads=2, flush_denormal=True):
            assert torch.get_num_threads() == 2 and flushes() == can_flush
        assert not flushes()
    finally:
        torch.set_num_threads(before)
        torch.set_flush_denormal(False)
