"""Lazily-deleted heaps: a re-ranked key leaves its old item behind until it is popped or a
compaction drops it, so a heap holds at most ``GROWTH`` items per live key plus ``SLACK``."""

from __future__ import annotations

import heapq
from typing import Callable

#: A heap is compacted once it holds more than ``GROWTH * live + SLACK`` items.
GROWTH = 2
SLACK = 32


def push(heap: list[tuple], item: tuple, live: int, is_live: Callable[[tuple], bool]) -> None:
    """``heapq.heappush(heap, item)``, then drop every stale item (``is_live`` False) once
    the heap outgrows ``live`` (the number of its keys still resident) as above.

    Compacting keeps exactly the live items, so pops come out in the same order; its cost
    is at most twice the stale items it drops, which earlier pushes left: O(1) amortised.
    """
    heapq.heappush(heap, item)
    if len(heap) > GROWTH * live + SLACK:
        heap[:] = [entry for entry in heap if is_live(entry)]
        heapq.heapify(heap)
