"""Budget.rollback: a failed write leaves every policy's order exactly as it was, and the
successful path pays O(1) amortised for being undoable."""

from __future__ import annotations

import copy

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mmcache.config import ORACLE_POLICIES
from mmcache.policies import POLICIES
from mmcache.tiers import Budget, Capacity
from mmcache.tiers import base

LIVE_POLICIES = sorted(set(POLICIES) - set(ORACLE_POLICIES))
CAPACITY = Capacity(max_entries=6, max_bytes=2_000)

steps = st.lists(st.tuples(st.sampled_from(["admit", "admit", "touch", "remove"]),
                           st.integers(0, 11), st.integers(1, 20)), max_size=60)


def run(budget: Budget, ops, start: int = 0) -> list:
    """Apply ``ops``; return what the budget said (victims, dropped keys)."""
    said = []
    for t, (op, key, size) in enumerate(ops, start):
        hints = {"now": float(t), "cost": float(size), "entropy": size / 10}
        if op == "admit":
            said.append(budget.admit(f"k{key}", size, **hints))
        elif op == "touch":
            said.append(budget.touch(f"k{key}", **hints))
        else:
            said.append(budget.remove(f"k{key}"))
    return said


def order(budget: Budget) -> list:
    """Every resident key in the order the policy would evict them (on a copy)."""
    budget = copy.deepcopy(budget)
    return [budget.pick_victim() for _ in range(len(budget.sizes))]


@pytest.mark.parametrize("name", LIVE_POLICIES)
@settings(max_examples=40, deadline=None)
@given(before=steps, failed=steps, after=steps)
def test_rollback_restores_the_policy_exactly(name, before, failed, after):
    budget = Budget(CAPACITY, name, undoable=True)
    run(budget, before)
    reference = copy.deepcopy(budget)
    budget.begin()
    run(budget, failed, len(before))
    budget.rollback()
    assert (budget.sizes, budget.nbytes) == (reference.sizes, reference.nbytes)
    assert order(budget) == order(reference)
    t = len(before) + len(failed)
    assert run(budget, after, t) == run(reference, after, t)   # and it goes on the same way


def test_an_undoable_budget_copies_o1_per_call_amortised(monkeypatch):
    copied = []
    state = Budget._state

    def counting(self):
        copied.append(len(self.sizes))
        return state(self)

    monkeypatch.setattr(Budget, "_state", counting)
    budget = Budget(Capacity(max_entries=2_000), "lru", undoable=True)
    for i in range(6_000):
        budget.begin()
        budget.admit(f"k{i}", 1)
    assert sum(copied) <= 2 * 6_000
    assert len(budget._log) <= max(base.COPY_AFTER_CALLS, 2_000) + 1


def test_rollback_needs_an_undoable_budget():
    with pytest.raises(TypeError, match="undoable"):
        Budget(CAPACITY, "lru").rollback()


def test_a_budget_that_only_follows_other_writers_keeps_a_bounded_log():
    # a reader's L3 adopts and forgets what other processes write, and never begins a write
    budget = Budget(Capacity(max_entries=500), "lru", undoable=True)
    for i in range(20_000):
        budget.adopt(f"k{i}", 10)
        if i >= 300:
            budget.remove(f"k{i - 300}")
    assert len(budget.sizes) == 300
    assert len(budget._log) <= base.COPY_AFTER_CALLS


def test_a_committed_write_is_not_undone_and_later_calls_are_copied_away():
    budget = Budget(CAPACITY, "lru", undoable=True)
    budget.begin()
    budget.admit("a", 10)
    budget.end()
    budget.commit()
    with pytest.raises(RuntimeError, match="begin"):
        budget.rollback()
    for i in range(2_000):
        budget.touch("a", now=float(i))
    assert "a" in budget and len(budget._log) <= base.COPY_AFTER_CALLS
