"""Undoable-budget benchmark: what SQLite and Redis tiers pay on the successful path for
being able to roll a failed write back exactly (``Budget(undoable=True)``), side by side.

``python -m mmcache.lab.bench.budget [--quick]`` drives two budgets of one policy and
capacity, one plain and one undoable, with the same stream (a ``begin`` and an ``admit``
per put, a ``touch`` per get; keys cycle over twice the capacity, so every put evicts once
the budget is full), in alternating chunks, and prints per policy and capacity the mean
time per put+get of each and their ratio. The ratio staying flat as the capacity grows is
the O(1)-amortised claim; a per-put copy of the state would grow with the capacity.
"""

from __future__ import annotations

import argparse
import time

from mmcache.tiers.base import Budget, Capacity

CHUNK = 500


def run(policy: str, capacity: int, puts: int) -> dict[str, float]:
    """Mean seconds per put+get of a plain and an undoable budget over the same stream."""
    budgets = {name: Budget(Capacity(max_entries=capacity, max_bytes=capacity * 100), policy,
                            undoable=name == "undoable") for name in ("plain", "undoable")}
    seconds = dict.fromkeys(budgets, 0.0)
    for start in range(0, puts, CHUNK):
        for name, budget in budgets.items():
            began = time.perf_counter()
            for i in range(start, min(start + CHUNK, puts)):
                budget.begin()
                budget.admit(f"k{i % (2 * capacity)}", 100, now=float(i))
                budget.touch(f"k{(i // 2) % (2 * capacity)}", now=float(i))
            seconds[name] += time.perf_counter() - began
    return {name: s / puts for name, s in seconds.items()}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes (seconds)")
    parser.add_argument("--policies", nargs="+", default=["lru", "gdsf", "arc"])
    args = parser.parse_args(argv)
    capacities = (1_000, 10_000) if args.quick else (1_000, 10_000, 100_000)
    print("plain vs undoable Budget, same stream of begin+admit (put) and touch (get)")
    for policy in args.policies:
        for capacity in capacities:
            r = run(policy, capacity, 3 * capacity)
            print(f"{policy:6s} capacity={capacity:7d} plain={r['plain'] * 1e6:6.1f}us "
                  f"undoable={r['undoable'] * 1e6:6.1f}us "
                  f"undoable/plain={r['undoable'] / r['plain']:.2f}", flush=True)


if __name__ == "__main__":
    main()
