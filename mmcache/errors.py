"""Typed errors. Every error mmcache raises derives from :class:`MMCacheError`.

Errors caused by bad input also derive from :class:`ValueError`, so callers that
already catch ``ValueError`` keep working. A call that raises leaves the cache,
its files and its runs exactly as they were.

An error raised because the cache detected a mismatch between processes sharing a store
(another encoder, another store schema) carries that failure's ``code``, one of
:data:`mmcache.metrics.FAILURE_CODES`; the cache reports it as a failure event before raising.

:func:`check_number` and :func:`check_count` are the shared checks of a numeric parameter:
they raise :class:`ConfigError` (or the error given) with a message naming the value.
"""

from __future__ import annotations

import math
import numbers


class MMCacheError(Exception):
    """Base class of every mmcache error; ``code``: the failure code of a detected mismatch
    (:data:`mmcache.metrics.FAILURE_CODES`), None for every other error."""

    code: str | None = None

    def __init__(self, *args: object, code: str | None = None) -> None:
        super().__init__(*args)
        if code is not None:
            self.code = code


class InvalidInputError(MMCacheError, ValueError):
    """An argument is malformed (bad embedding, empty text, corrupt image, ...)."""


class InvalidEmbeddingError(InvalidInputError):
    """An embedding is NaN/inf, zero-norm, of the wrong dimension or dtype."""


class InvalidMediaError(InvalidInputError):
    """Image or audio bytes/arrays that cannot be decoded or are empty."""


class UnknownModalityError(InvalidInputError):
    """A modality name that mmcache does not know."""


class MissingScopeError(InvalidInputError):
    """A query without a scope: scopes are required, never shared."""


class SerializationError(InvalidInputError):
    """A value that cannot be stored (not str, bytes or JSON-able)."""


class ConfigError(MMCacheError, ValueError):
    """A configuration with an unknown key or an impossible value."""


class StaleProfileError(ConfigError):
    """The latency profile lacks an entry a model needs (written by an older command); the
    message names ``make latency-profile``, which re-measures it."""


class UnknownPolicyError(ConfigError):
    """An eviction policy name that is not in the registry."""


class OfflineAssetError(MMCacheError, RuntimeError):
    """A model weight or data set is not installed locally; mmcache never downloads.

    The message names the pip or apt package that provides the asset.
    """


class StorageError(MMCacheError, RuntimeError):
    """A persistent or remote tier failed (I/O error, integrity failure, lost server)."""


class VerifierError(MMCacheError, RuntimeError):
    """A verifier could not judge a candidate (its judge server failed, timed out, could not
    be reached or gave an answer that is not a verdict); the message says what to check."""


class StoreFullError(StorageError):
    """A store has no room left (a full disk, SQLite's ``max_page_count``, Redis's
    ``maxmemory``); nothing of the failed write was kept."""


class TraceFormatError(InvalidInputError):
    """A cache trace file that does not match its declared record format."""


class PairsFileError(InvalidInputError):
    """A labelled-pairs file (:mod:`mmcache.datasets.pairs_file`) with a line that breaks its
    format; the message names the line."""


class NotFittedError(MMCacheError, RuntimeError):
    """A learned component (projection head, calibrator) used before it was fitted."""


class ConvexityError(ConfigError):
    """Model parameters or a domain that make a convex program non-convex (not DCP).

    The message names the term, the value that breaks its convexity, and the fix.
    """


class SolverError(MMCacheError, RuntimeError):
    """A convex solver returned without an optimal solution (infeasible, unbounded, inaccurate)."""


class PriorFileError(ConfigError):
    """A threshold prior / calibration file that is missing or malformed.

    The message names the file and how to regenerate it (``make priors``).
    """


class UnknownHitError(InvalidInputError):
    """Feedback on something that is not a hit this cache served (another cache's, a copy)."""


# -- numeric parameter checks ------------------------------------------------------------------
def check_number(value: object, name: str, low: float | None = None, *, strict: bool = True,
                 error: type[Exception] = ConfigError) -> float:
    """``value`` as a float if it is a real number (a NumPy scalar too, not a bool), finite
    and, given ``low``, above it (``strict``) or at least it; otherwise ``error``:
    "{name} must be a finite number[ > low | >= low], got {value!r}"."""
    ok = isinstance(value, numbers.Real) and not isinstance(value, bool) and math.isfinite(value)
    if ok and low is not None:
        ok = value > low if strict else value >= low
    if not ok:
        bound = "" if low is None else f" {'>' if strict else '>='} {low}"
        raise error(f"{name} must be a finite number{bound}, got {value!r}")
    return float(value)  # type: ignore[arg-type]


def check_count(value: object, name: str, low: int = 1, *,
                error: type[Exception] = ConfigError) -> int:
    """``value`` as an int if it is an integer (a NumPy integer too, not a bool) >= ``low``;
    otherwise ``error``: "{name} must be an integer >= {low}, got {value!r}"."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < low:
        raise error(f"{name} must be an integer >= {low}, got {value!r}")
    return int(value)
