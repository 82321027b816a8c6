"""The numba settings of the package's compiled loops."""

from __future__ import annotations

from numba import njit

#: ``njit`` (cached) without numba's reference counting (NRT), for loops over arrays their
#: caller allocated: with it, numba increments and decrements every array handed to an
#: inlined helper on every pass of the loop, which took most of an LRU replay's time. A
#: function compiled so must not create arrays (views and slices are fine).
array_loop = njit(cache=True, _nrt=False)
