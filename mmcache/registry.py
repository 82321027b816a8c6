"""One registry shape for every extension point: name -> factory.

Eviction policies (:data:`mmcache.policies.POLICIES`), δ-neighbour rules
(:data:`mmcache.thresholds.RULES`), verifiers (:data:`mmcache.verify.VERIFIERS`) and encoders
(:data:`mmcache.encoders.ENCODERS`) are each a :class:`Registry`: a read-only mapping from a name
to the factory that builds the component (a class, or a function), in registration order. A
user adds one with :meth:`Registry.register`; from then on a cache config may name it::

    from mmcache.policies import POLICIES
    POLICIES.register("my-lru", MyLRU)          # or @POLICIES.register("my-lru") on the class
    TieredCache({"l1": {"policy": "my-lru"}})

:meth:`Registry.lookup` raises the registry's own typed error (e.g.
:class:`~mmcache.errors.UnknownPolicyError`) naming the known names; ``registry[name]`` raises
``KeyError`` as any mapping does.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Callable, Generic, TypeVar, overload

from mmcache.errors import ConfigError

F = TypeVar("F")
_DECORATE = object()  # register() called without a factory: return a decorator


class Registry(Mapping[str, F], Generic[F]):
    """Name -> factory of one kind of extension (``kind`` names it in messages: ``"eviction
    policy"``); ``error`` is the :class:`ConfigError` subclass :meth:`lookup` raises for an
    unknown name. ``allow_none`` lets a name map to None (a registry where a name means "no
    component", as the verifier ``"none"``)."""

    def __init__(self, kind: str, entries: Mapping[str, F] | None = None, *,
                 error: type[ConfigError] = ConfigError, allow_none: bool = False) -> None:
        self.kind = kind
        self.error = error
        self._allow_none = allow_none
        self._entries: dict[str, F] = {}
        for name, factory in (entries or {}).items():
            self.register(name, factory)

    # -- the read-only Mapping ---------------------------------------------------------------
    def __getitem__(self, name: str) -> F:
        return self._entries[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._entries)

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, name: object) -> bool:
        return name in self._entries

    def __repr__(self) -> str:
        return f"Registry({self.kind!r}, names={list(self._entries)})"

    # -- listing, looking up, registering -----------------------------------------------------
    def names(self) -> tuple[str, ...]:
        """The registered names, in registration order."""
        return tuple(self._entries)

    def lookup(self, name: str) -> F:
        """The factory registered as ``name``; the registry's typed error naming the known
        names if there is none."""
        try:
            return self._entries[name]
        except (KeyError, TypeError):  # TypeError: an unhashable name
            raise self.error(f"unknown {self.kind} {name!r}; known: "
                             f"{sorted(self._entries)}") from None

    @overload
    def register(self, name: str, *, replace: bool = False) -> Callable[[F], F]: ...

    @overload
    def register(self, name: str, factory: F, *, replace: bool = False) -> F: ...

    def register(self, name, factory=_DECORATE, *, replace=False):
        """Register ``factory`` as ``name`` and return it; with no ``factory``, a decorator that
        registers what it decorates. A name already registered is refused
        (:class:`~mmcache.errors.ConfigError`) unless ``replace=True``, which keeps its place in
        the order."""
        if factory is _DECORATE:
            return lambda f: self.register(name, f, replace=replace)
        if not isinstance(name, str) or not name:
            raise ConfigError(f"a {self.kind} name must be a non-empty string, got {name!r}")
        if not (callable(factory) or (factory is None and self._allow_none)):
            raise ConfigError(f"{self.kind} {name!r}: a factory must be callable, got "
                              f"{factory!r}")
        if name in self._entries and not replace:
            raise ConfigError(f"{self.kind} {name!r} is already registered; pass replace=True "
                              "to replace it")
        self._entries[name] = factory
        return factory


__all__ = ["Registry"]
