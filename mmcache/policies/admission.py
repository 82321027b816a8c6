"""The one admission step of the policy protocol, shared by trace replay, CacheBench-MM
and the cache tiers (the numba kernels inline their own).

On a miss the policy is asked first (``on_miss``: it may decline, adapt its ghosts or
drop keys), then victims are evicted until the newcomer fits (a policy that ranks the
newcomer among the victims may answer None: it lost, and is not inserted), then it is
inserted. The caller owns the bytes: ``overfull(size)`` says whether ``size`` more
bytes break its capacity, ``keep(key, size)`` records the admitted key and ``drop(keys)``
frees the keys the policy evicted or dropped, in the order they left.
"""

from __future__ import annotations

from typing import Any, Callable, Hashable, Iterable

from mmcache.policies.base import EvictionPolicy


def admit_miss(policy: EvictionPolicy, key: Hashable, size: int, *,
               overfull: Callable[[int], bool], keep: Callable[[Hashable, int], None],
               drop: Callable[[Iterable[Hashable]], None], fits: bool = True,
               **hints: Any) -> bool:
    """Admit ``key`` (``size`` bytes, not resident) as the protocol says; whether it was.

    ``fits`` False (e.g. larger than the cache) still tells the policy of the miss but
    never inserts. ``hints`` go to ``on_miss`` and ``insert``.
    """
    admitted = policy.on_miss(key, size, **hints) and fits
    drop(policy.take_dropped())
    while admitted and overfull(size):
        victim = policy.evict()
        if victim is None:  # the incoming key itself lost (GDSF)
            admitted = False
        else:
            drop([victim, *policy.take_dropped()])
    if admitted:
        policy.insert(key, size, **hints)
        keep(key, size)
    drop(policy.take_dropped())
    return admitted
