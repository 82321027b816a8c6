"""``CacheConfig``: every setting of a :class:`mmcache.TieredCache`, loadable from dict or YAML.

Unknown keys and bad values raise :class:`mmcache.errors.ConfigError` naming the
key (``"l2.max_entries must be a positive integer or null, got 0"``).

The schema is the dataclasses below; :data:`KEY_HELP` says what each key means. The
configuration reference (``docs/configuration.md``, every key with its type, default and
meaning) is generated from them by :mod:`mmcache.lab.config_reference`;
:data:`EXAMPLE_YAML` is its example (a test loads it).
"""

from __future__ import annotations

import dataclasses
import fnmatch
import math
import os
import re
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

import yaml

from mmcache.encoders import ENCODERS
from mmcache.errors import ConfigError
from mmcache.policies import POLICIES, make_policy
from mmcache.thresholds import RULES
from mmcache.thresholds.base import MAX_SCOPES
from mmcache.thresholds.budget import PARTS
from mmcache.types import CHANNELS, MODALITIES, Limits, modality_set_channels, redacted_url
from mmcache.verify import VERIFIERS

STORE_BACKENDS = ("sqlite", "redis")
INDEX_KINDS = ("auto", "flat")
SYNCHRONOUS = ("OFF", "NORMAL", "FULL", "EXTRA")
#: Policies that need the future (``next_access``): replay only, never a live tier.
ORACLE_POLICIES = ("belady", "belady-bypass")
#: ``route`` values: every tier serves what its ``modality_sets`` say, or seed 002 §3.1's
#: video route on top (clips only in the last enabled tier).
ROUTES = ("all", "video-to-last")
#: The longest lifetime, and the longest stale window, in seconds (ten years): longer ones
#: overflow what stores can expire (Redis PEXPIRE) and mean "forever" anyway (``ttl: null``).
MAX_LIFETIME_S = 10 * 365 * 86400.0
#: ``l3.on_error`` values: a failing store degrades the cache, or its error is raised.
STORE_ERROR_MODES = ("degrade", "raise")
#: ``l3.options`` each backend takes, with a check of its value; the tier's name, capacity,
#: policy and index come from the rest of ``l3``.
STORE_OPTIONS = {
    "sqlite": ("max_staleness",),
    "redis": ("max_staleness", "prefix", "socket_timeout", "cluster", "skew_window"),
}
#: Embedding dimensions ``l2.ann_factory`` is tried at when ``dims`` names none.
PROBE_DIMS = (384, 512, 768, 1024)


@dataclass
class MemoryTierConfig:
    """L1: exact matches in process memory.

    Each tier's ``policy`` names one of :data:`mmcache.policies.POLICIES` and
    ``policy_options`` go to its constructor. In a TieredCache the policies' ``now`` is the
    cache's clock in **seconds**, so time parameters are seconds: ``{policy:
    hotness-freshness, policy_options: {window: 600}}`` makes an entry's freshness decay over
    ten minutes without a hit (in trace replay the same ``window`` counts requests).
    Cost- and entropy-aware policies (``value-per-byte``, ``entropy-retention``) read the
    ``hints`` given to ``TieredCache.put``."""

    enabled: bool = True
    max_entries: int | None = 10_000
    max_bytes: int | None = 256 << 20
    policy: str = "lru"
    policy_options: dict[str, Any] = field(default_factory=dict)
    modality_sets: list[str] | None = None


@dataclass
class SemanticTierConfig:
    """L2: in-memory entries with one FAISS index per (scope, modality set, modality).

    ``index: flat`` is exact inner-product search at every size ("exact flat"); ``index:
    auto`` is exact below ``ann_min_size`` vectors per index and ``ann_factory`` above."""

    enabled: bool = True
    max_entries: int | None = 1_000_000
    max_bytes: int | None = 1 << 30
    policy: str = "lru"
    policy_options: dict[str, Any] = field(default_factory=dict)
    modality_sets: list[str] | None = None
    index: str = "auto"
    ann_factory: str = "IVF{nlist}(SQfp16),SQfp16"
    ann_min_size: int = 10_000
    ef_search: int = 128
    ef_construction: int = 64
    candidates: int = 8


@dataclass
class StoreTierConfig:
    """L3: persistent (``sqlite``, needs ``path``) or remote (``redis``, needs ``url``); off
    when ``backend`` is null. Every process on one shared store sees one coherent cache."""

    backend: str | None = None
    path: str | None = None
    url: str | None = field(default=None, repr=False)  # its password must not reach a display
    max_entries: int | None = None
    max_bytes: int | None = None
    policy: str = "lru"
    policy_options: dict[str, Any] = field(default_factory=dict)
    modality_sets: list[str] | None = None
    synchronous: str = "NORMAL"
    shared: bool = False
    on_error: str = "degrade"
    options: dict[str, Any] = field(default_factory=dict)


@dataclass
class ThresholdConfig:
    """δ-neighbour rule (:mod:`mmcache.thresholds`), its verifier stage and the context channel.

    Scale: cosine of unit embeddings; a static δ means a hit needs cosine ≥ 1 − δ (δ = 0:
    exact only; δ = 2: every candidate). ``rule`` picks one of
    :data:`mmcache.thresholds.RULES`; each reads the keys its constructor names:

    - ``static``: ``delta``;
    - ``percentile`` (seed 000 §3.1): ``delta`` (start), ``percentile``, ``window``,
      ``min_samples``, ``delta_min``, ``delta_max``;
    - ``calibrated``: ``level``, ``calibration``, ``prior``;
    - ``error-budget``: ``budget``, ``prior``, ``max_risk``, ``tail``, ``credit``,
      ``search_floor``, ``parts``;
    - ``vcache`` (vCache's per-entry rule from its paper; it explores): ``budget``,
      ``search_floor``, ``seed``.

    Both probabilistic rules read the prior's channel conditioned on ``verifier`` when one
    is named.
    """

    rule: str = "static"
    delta: dict[str, float] = field(default_factory=lambda: {m: 0.1 for m in MODALITIES})
    percentile: float = 85.0
    window: int = 1000
    min_samples: int = 50
    delta_min: float = 0.01
    delta_max: float = 0.5
    level: float = 0.9
    calibration: str = "isotonic"
    prior: str | None = None
    budget: float = 0.02
    max_risk: float = 0.5
    tail: float = 0.05
    parts: str = "both"
    credit: float = 10.0
    search_floor: float = 0.5
    seed: int = 0
    verifier: str = "none"
    verifier_band: float = 2.0
    verifier_min: float = 0.5
    context_delta: float = 0.15
    max_scopes: int = MAX_SCOPES


@dataclass
class FreshnessConfig:
    """TTL and the seed 001 §3.3 stale rules, in seconds; ``ttl_factors`` scale lifetimes by
    scope (seed 000 §3.3: the finer a token's permissions, the shorter its answers live)."""

    ttl: float | None = None
    stale_while_revalidate: float = 0.0
    stale_if_error: float = 0.0
    bypass_tokens: list[str] = field(default_factory=lambda: ["freshness:strict"])
    ttl_factors: dict[str, float] = field(default_factory=dict)

    def ttl_factor(self, scope: str) -> float:
        """The lifetime factor of ``scope``: the smallest of its matching ``ttl_factors``
        (1.0 when none matches)."""
        return min((f for pattern, f in self.ttl_factors.items()
                    if fnmatch.fnmatchcase(scope, pattern)), default=1.0)

    @classmethod
    def from_header(cls, header: str) -> "FreshnessConfig":
        """Read an ``X-Cache-Strategy`` / ``Cache-Control`` style value (seed 001 §3.3), e.g.
        ``"stale-while-revalidate; max-age=300; stale-if-error=86400"``.

        ``max-age`` becomes ``ttl``; a bare ``stale-while-revalidate`` (no ``=seconds``)
        allows stale answers for one more ``max-age``. Unknown directives raise ConfigError.
        """
        values: dict[str, float | None] = {}
        for part in filter(None, (p.strip() for p in header.replace(",", ";").split(";"))):
            name, _, number = part.partition("=")
            name = name.strip().lower()
            if name not in ("max-age", "stale-while-revalidate", "stale-if-error"):
                raise ConfigError(f"cache strategy directive {name!r} is not supported")
            try:
                values[name] = float(number) if number.strip() else None
            except ValueError:
                raise ConfigError(f"cache strategy {name} needs seconds, got {number!r}") from None
        ttl = values.get("max-age")
        swr = values.get("stale-while-revalidate", 0.0)
        return cls(ttl=ttl, stale_while_revalidate=(ttl or 0.0) if swr is None else swr,
                   stale_if_error=values.get("stale-if-error") or 0.0)


@dataclass
class GuardConfig:
    """Penetration guard: Bloom filter over exact keys + spherical-cap pre-check of ANN search."""

    enabled: bool = True
    expected_items: int = 1_000_000
    error_rate: float = 0.01


@dataclass
class CacheConfig:
    """Every setting of a TieredCache. Build with :meth:`load` (dict, YAML path or instance)."""

    l1: MemoryTierConfig = field(default_factory=MemoryTierConfig)
    l2: SemanticTierConfig = field(default_factory=SemanticTierConfig)
    l3: StoreTierConfig = field(default_factory=StoreTierConfig)
    thresholds: ThresholdConfig = field(default_factory=ThresholdConfig)
    freshness: FreshnessConfig = field(default_factory=FreshnessConfig)
    guard: GuardConfig = field(default_factory=GuardConfig)
    limits: Limits = field(default_factory=Limits)
    dims: dict[str, int] = field(default_factory=dict)
    encoders: dict[str, str] = field(default_factory=dict)
    route: str = "all"

    def __post_init__(self) -> None:
        _validate(self)

    @classmethod
    def load(cls, source: "CacheConfig | Mapping[str, Any] | str | Path | None") -> "CacheConfig":
        """A validated config from an instance, a dict, or a YAML file path (None = defaults)."""
        if source is None:
            return cls()
        if isinstance(source, CacheConfig):
            _validate(source)
            return source
        if isinstance(source, (str, Path)):
            return cls.from_yaml(source)
        if isinstance(source, Mapping):
            return cls.from_dict(source)
        raise ConfigError(f"config must be a CacheConfig, dict or YAML path, not "
                          f"{type(source).__name__}")

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "CacheConfig":
        """Build from nested dicts; unknown keys and bad values raise ConfigError."""
        return _build(cls, data, "")

    @classmethod
    def from_yaml(cls, path: str | Path) -> "CacheConfig":
        """Build from a YAML file."""
        try:
            data = yaml.safe_load(Path(path).read_text())
        except (OSError, ValueError, yaml.YAMLError) as exc:  # ValueError: a NUL in the path
            raise ConfigError(f"cannot read config {path}: {exc}") from None
        return cls.from_dict(data or {})

    def to_dict(self) -> dict[str, Any]:
        """Plain nested dicts (for provenance in metrics and figures), the store URL's
        password redacted."""
        data = dataclasses.asdict(self)
        if data["l3"]["url"] is not None:
            data["l3"]["url"] = redacted_url(data["l3"]["url"])
        return data


# -- what each key means ------------------------------------------------------------------
_POLICY_HELP = {
    "policy": "Eviction policy: one of `mmcache.policies.POLICIES` (not the offline oracles "
              "`belady`, `belady-bypass`). ARC, ARC-paper, LIRS and S3-FIFO need `max_bytes`.",
    "policy_options": "Constructor parameters of `policy`; time parameters are seconds of the "
                      "cache's clock (hotness-freshness `window: 600`: freshness decays over ten "
                      "minutes without a hit).",
    "modality_sets": "The modality sets this tier serves (`text`, `text+image`, `video` (a clip: "
                     "keyframes + track), `text+video`, ..., as `mmcache.types.modality_set_name` "
                     "writes them); null: every set. A query of a set a tier does not serve is "
                     "neither looked up nor stored nor promoted there.",
}

#: Per schema class, what each of its keys means: the configuration reference prints it
#: (``mmcache.lab.config_reference``; a test checks that every key has one).
KEY_HELP: dict[type, dict[str, str]] = {
    MemoryTierConfig: {
        "enabled": "Use this tier.",
        "max_entries": "Most entries held (null: no limit).",
        "max_bytes": "Most bytes held (null: no limit; default 256 MiB, so that large values "
                     "cannot exhaust memory); at most the machine's physical memory.",
        **_POLICY_HELP,
    },
    SemanticTierConfig: {
        "enabled": "Use this tier.",
        "max_entries": "Most entries held (null: no limit).",
        "max_bytes": "Most bytes held (null: no limit; default 1 GiB, about 500,000 entries of "
                     "512-d text with short answers); at most the machine's physical memory, "
                     "and at least one entry's vectors (4 bytes × the sum of `dims`).",
        **_POLICY_HELP,
        "index": "`auto`: exact inner-product search below `ann_min_size` vectors per (scope, "
                 "modality set, modality) index, `ann_factory` above; `flat`: exact at every "
                 "size.",
        "ann_factory": "The faiss factory string of the ANN index (`index: auto`); `{nlist}` "
                       "stands for the inverted lists, about 8 x sqrt(n) for the n vectors it "
                       "is trained on, trained again once it holds 4x as many. Checked when "
                       "the config is loaded, at every dimension of `dims`.",
        "ann_min_size": "Vectors an index holds before it becomes `ann_factory`.",
        "ef_search": "HNSW `efSearch`, or an inverted file's lists probed x 4: how much of the "
                     "index a search explores (higher: closer to exact, slower).",
        "ef_construction": "HNSW `efConstruction`: candidates explored per insertion while the "
                           "graph is built.",
        "candidates": "Nearest neighbours fetched per search of a modality's index, before the "
                      "other modalities and the rule judge them.",
    },
    StoreTierConfig: {
        "backend": "`sqlite` (persistent, needs `path`), `redis` (remote, needs `url`), or null: "
                   "no L3.",
        "path": "The SQLite file (`backend: sqlite`).",
        "url": "The Redis URL (`backend: redis`; for a cluster, any node's).",
        "max_entries": "Most entries held (null: no limit). A shared store records its "
                       "capacity when it is created; a cache asking for another one gets a "
                       "ConfigError.",
        "max_bytes": "Most bytes held (null: no limit); recorded like `max_entries`.",
        **_POLICY_HELP,
        "synchronous": "SQLite `PRAGMA synchronous`: `OFF`, `NORMAL` (survives a killed "
                       "process, not power loss), `FULL` or `EXTRA`.",
        "shared": "Let several caches open one SQLite file (Redis is always shared); without it "
                  "a second open of the file is refused.",
        "on_error": "What a store failure (unreachable, timed out, full) does: `degrade` (a "
                    "`get` is a miss, a `put` stores nothing and returns None, each counted in "
                    "`metrics.errors` and logged once per outage; the cache recovers by itself "
                    "when the store answers again) or `raise` (a StorageError). `invalidate` "
                    "always raises, since an invalidation the store missed would go unseen.",
        "options": "Backend settings, checked by name and value: `max_staleness` (seconds a "
                   "shared store's view may be old when private copies are revalidated, default "
                   "0); Redis `prefix`, `socket_timeout` (seconds a request may wait, default 1, "
                   "at most 60), `cluster: true` for a Redis Cluster and `skew_window`, the "
                   "requests per window of its skew watch. Any other key is a ConfigError.",
    },
    ThresholdConfig: {
        "rule": "The δ-neighbour rule: one of `mmcache.thresholds.RULES` (`static`, "
                "`percentile`, `calibrated`, `error-budget`, `vcache`).",
        "delta": "δ per modality: a hit needs cosine ≥ 1 − δ (`static`; the start of "
                 "`percentile`).",
        "percentile": "`percentile`: δ = 1 − this percentile of the window of nearest "
                      "similarities (every lookup, hit or miss, per scope and modality).",
        "window": "`percentile`: lookups in the window.",
        "min_samples": "`percentile`: lookups before a scope leaves the static `delta`.",
        "delta_min": "`percentile`: the smallest δ.",
        "delta_max": "`percentile`: the largest δ (the cache searches down to 1 − `delta_max`).",
        "level": "`calibrated`: hit when P(same answer) ≥ `level`.",
        "calibration": "`calibrated`: the similarity → probability curve per (modality, "
                       "encoder), `isotonic` or `platt`.",
        "prior": "`calibrated`, `error-budget`: a priors JSON file (null: the shipped priors, "
                 "refitted by `make priors`).",
        "budget": "`error-budget`, `vcache`: the most expected wrong answers ÷ lookups.",
        "max_risk": "`error-budget`: the most P(wrong) of one hit.",
        "tail": "`error-budget`: the most P(wrong) of a hit served when the allowance could not "
                "absorb it being wrong.",
        "parts": "`error-budget`: which of its checks decide, for ablations: `both` (the "
                 "scope's ledger, `max_risk` and `tail`), `ledger` (the ledger alone) or "
                 "`curves` (each hit's P(wrong) ≤ `budget` on its own, no ledger).",
        "credit": "`error-budget`: the first `credit` lookups of a scope share the allowance of "
                  "`credit` lookups, an advance repaid by the lookups after them.",
        "search_floor": "`error-budget`, `vcache`: the least cosine searched.",
        "seed": "`vcache`: seeds its exploration draws (the same seed, the same run).",
        "verifier": "One of `mmcache.verify.VERIFIERS` (`none`: no verifier stage).",
        "verifier_band": "The verifier is called on accepted candidates less than this (cosine) "
                         "above the rule's threshold; 2 (the default): on every one.",
        "verifier_min": "Below this verifier score the hit is vetoed.",
        "context_delta": "A candidate needs context-vector cosine ≥ 1 − `context_delta` "
                         "(`mmcache.context`: the conversation's last turns).",
        "max_scopes": "`percentile`, `error-budget`: scopes whose windows or ledgers are kept; "
                      "past it the scope used least recently is forgotten and starts again as "
                      "a new one (`percentile`: at `delta`; `error-budget`: with its `credit`).",
    },
    FreshnessConfig: {
        "ttl": "Seconds an entry is fresh (null: never expires), at most ten years "
               "(`MAX_LIFETIME_S`, also the bound of each stale window); a `ttl` given to `put` "
               "overrides it.",
        "stale_while_revalidate": "After expiry, serve the entry this many seconds more, marked "
                                  "`stale-while-revalidate`.",
        "stale_if_error": "When the caller says the origin failed, serve the entry up to this "
                          "many seconds after expiry, marked `stale-if-error`.",
        "bypass_tokens": "A query whose text contains one of these skips the cache.",
        "ttl_factors": "Shell-style scope patterns → lifetime factors, e.g. `{\"demo*\": 0.3, "
                       "\"*:admin\": 0.6}`; the smallest matching factor wins. It scales `ttl` and "
                       "a `ttl` given to `put`; entries that never expire are not affected.",
    },
    GuardConfig: {
        "enabled": "Use the penetration guard: a Bloom filter over exact keys and a "
                   "spherical-cap pre-check of the vector search (a guaranteed miss skips it).",
        "expected_items": "Keys the Bloom filter is sized for.",
        "error_rate": "The Bloom filter's false-positive rate at `expected_items`.",
    },
    Limits: {
        "text_chars": "Longest query text, in characters.",
        "image_pixels": "Most pixels of one image or keyframe (width × height), checked from "
                        "the header before an encoded image is decoded.",
        "audio_seconds": "Longest audio (a query's, or a clip's track), in seconds.",
        "audio_rate": "Highest declared `audio_rate`, in Hz (resampling costs grow with it).",
        "video_frames": "Most keyframes of one clip.",
        "context_chars": "Most characters over a query's conversation turns.",
        "value_bytes": "Largest stored value, encoded, in bytes.",
    },
    CacheConfig: {
        "l1": "L1: exact matches in process memory.",
        "l2": "L2: semantic matches, FAISS indexes in process memory.",
        "l3": "L3: a persistent or remote store.",
        "thresholds": "When a semantic candidate is a hit.",
        "freshness": "How long answers live.",
        "guard": "The penetration guard.",
        "limits": "The largest inputs and values a cache accepts (larger: InvalidInputError).",
        "dims": "Expected embedding dimension per modality (else fixed by the encoder or the "
                "first vector).",
        "encoders": "Encoder name per modality (`minilm`, `clip`, `whisper`, `asr-minilm`, ...), "
                    "resolved lazily with `mmcache.encoders.get_encoder`; a clip's keyframes go "
                    "through the image encoder.",
        "route": "`all`: every tier serves what its `modality_sets` say; `video-to-last`: seed "
                 "002 §3.1's `routeByModality` for video on top, clips only in the last enabled "
                 "tier (the central one).",
    },
}

#: A config with most sections set: the configuration reference's example (a test loads it).
EXAMPLE_YAML = """\
l1: {max_entries: 10000, policy: lru}
l2: {max_entries: 200000, index: auto, ann_factory: "IVF{nlist}(SQfp16),SQfp16", ef_search: 128}
l3: {backend: sqlite, path: runs/cache.db, synchronous: NORMAL}
# l3: {backend: redis, url: "redis://127.0.0.1:6379/0"}   # remote tier instead
# l3: {backend: redis, url: "redis://127.0.0.1:7000", options: {cluster: true}}
thresholds: {rule: static, delta: {text: 0.1, image: 0.15}}
freshness: {ttl: 300, stale_while_revalidate: 60, stale_if_error: 86400,
            ttl_factors: {"demo*": 0.3}}   # demo tenants' answers live 90 s
encoders: {text: minilm}        # resolved lazily by mmcache.encoders.get_encoder
"""


# -- parsing -------------------------------------------------------------------------------
def _build(cls: type, data: Any, prefix: str) -> Any:
    if not isinstance(data, Mapping):
        raise ConfigError(f"{prefix.rstrip('.') or 'config'} must be a mapping, got "
                          f"{type(data).__name__}")
    hints = typing.get_type_hints(cls)
    names = {f.name for f in dataclasses.fields(cls)}
    kwargs = {}
    for key, value in data.items():
        if key not in names:
            raise ConfigError(f"unknown config key {prefix + str(key)!r}; known keys here: "
                              f"{sorted(names)}")
        hint = hints[key]
        if dataclasses.is_dataclass(hint):
            kwargs[key] = _build(hint, value, f"{prefix}{key}.")
        else:
            _check_type(value, hint, prefix + key)
            kwargs[key] = dict(value) if isinstance(value, Mapping) else \
                list(value) if isinstance(value, list) else value
    return cls(**kwargs)


def _check_type(value: Any, hint: Any, key: str) -> None:
    if not _matches(value, hint):
        raise ConfigError(f"{key} must be {_describe(hint)}, got {value!r}")


def _matches(value: Any, hint: Any) -> bool:
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if hint is Any:
        return True
    if origin in (typing.Union, types.UnionType):
        return any(_matches(value, a) for a in args)
    if hint is type(None):
        return value is None
    if hint is bool:
        return isinstance(value, bool)
    if hint is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if hint is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if hint is str:
        return isinstance(value, str)
    if origin is dict:
        return isinstance(value, Mapping) and all(
            _matches(k, args[0]) and _matches(v, args[1]) for k, v in value.items())
    if origin is list:
        return isinstance(value, list) and all(_matches(v, args[0]) for v in value)
    return isinstance(value, hint)


def _describe(hint: Any) -> str:
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        return " or ".join(_describe(a) for a in args)
    if hint is type(None):
        return "null"
    if origin is dict:
        return f"a mapping of {_describe(args[0])} to {_describe(args[1])}"
    if origin is list:
        return f"a list of {_describe(args[0])}"
    return {int: "an integer", float: "a number", str: "a string", bool: "true or false"}.get(
        hint, getattr(hint, "__name__", str(hint)))


# -- validation ----------------------------------------------------------------------------
def _validate(cfg: CacheConfig) -> None:
    for name in ("l1", "l2", "l3"):
        tier = getattr(cfg, name)
        _positive_or_none(tier.max_entries, f"{name}.max_entries")
        _positive_or_none(tier.max_bytes, f"{name}.max_bytes")
        _policy(tier.policy, tier.policy_options, tier.max_bytes, f"{name}.policy")
        _modality_sets(tier.modality_sets, f"{name}.modality_sets")
    _choice(cfg.route, ROUTES, "route")
    ram = _physical_memory()
    for name in ("l1", "l2"):
        tier = getattr(cfg, name)
        if ram and tier.max_bytes is not None and tier.max_bytes > ram:
            raise ConfigError(f"{name}.max_bytes={tier.max_bytes} exceeds this machine's "
                              f"physical memory ({ram} bytes): an in-memory tier cannot hold it")
    vector_bytes = 4 * sum(cfg.dims.values())
    if cfg.l2.max_bytes is not None and cfg.l2.max_bytes < vector_bytes:
        raise ConfigError(f"l2.max_bytes={cfg.l2.max_bytes} cannot hold one entry's vectors "
                          f"({vector_bytes} bytes for dims {cfg.dims})")
    l2 = cfg.l2
    _choice(l2.index, INDEX_KINDS, "l2.index")
    for key in ("ann_min_size", "ef_search", "ef_construction", "candidates"):
        _positive(getattr(l2, key), f"l2.{key}")
    if not l2.ann_factory.strip():
        raise ConfigError("l2.ann_factory must be a faiss factory string such as "
                          "'IVF{nlist}(SQfp16),SQfp16' or 'HNSW32'")
    l3 = cfg.l3
    if l3.backend is not None:
        _choice(l3.backend, STORE_BACKENDS, "l3.backend")
        if l3.backend == "sqlite" and not l3.path:
            raise ConfigError("l3.path is required when l3.backend is 'sqlite'")
        if l3.backend == "redis" and not l3.url:
            raise ConfigError("l3.url is required when l3.backend is 'redis'")
        _store_options(l3.options, l3.backend)
    _choice(l3.synchronous.upper(), SYNCHRONOUS, "l3.synchronous")
    _choice(l3.on_error, STORE_ERROR_MODES, "l3.on_error")
    th = cfg.thresholds
    _choice(th.rule, tuple(RULES), "thresholds.rule")
    for modality, delta in th.delta.items():
        _modality(modality, f"thresholds.delta.{modality}", CHANNELS)
        _in_range(delta, 0.0, 2.0, f"thresholds.delta.{modality}")
    _in_range(th.percentile, 0.0, 100.0, "thresholds.percentile")
    _positive(th.window, "thresholds.window")
    _positive(th.min_samples, "thresholds.min_samples")
    _positive(th.max_scopes, "thresholds.max_scopes")
    _in_range(th.delta_min, 0.0, 2.0, "thresholds.delta_min", low_open=True)
    _in_range(th.delta_max, th.delta_min, 2.0, "thresholds.delta_max")
    _check_rule_settings(th)
    fr = cfg.freshness
    if fr.ttl is not None:
        _in_range(fr.ttl, 0.0, MAX_LIFETIME_S, "freshness.ttl (seconds, or null for no expiry)",
                  low_open=True)
    for key in ("stale_while_revalidate", "stale_if_error"):
        _in_range(getattr(fr, key), 0.0, MAX_LIFETIME_S, f"freshness.{key} (seconds)")
    if any(not t for t in fr.bypass_tokens):
        raise ConfigError("freshness.bypass_tokens must not contain empty strings")
    for pattern, factor in fr.ttl_factors.items():
        if not pattern:
            raise ConfigError("freshness.ttl_factors: a scope pattern must not be empty")
        _in_range(factor, 0.0, math.inf, f"freshness.ttl_factors[{pattern!r}]", low_open=True,
                  high_open=True)
    for f in dataclasses.fields(Limits):
        limit = getattr(cfg.limits, f.name)
        if f.name == "audio_seconds":
            _in_range(limit, 0.0, math.inf, "limits.audio_seconds", low_open=True,
                      high_open=True)
        else:
            _positive(limit, f"limits.{f.name}")
    _positive(cfg.guard.expected_items, "guard.expected_items")
    _in_range(cfg.guard.error_rate, 0.0, 1.0, "guard.error_rate", low_open=True, high_open=True)
    for modality, dim in cfg.dims.items():
        _modality(modality, f"dims.{modality}", CHANNELS)
        _positive(dim, f"dims.{modality}")
    check_ann_factory(l2, cfg.dims)
    for modality, name in cfg.encoders.items():
        _modality(modality, f"encoders.{modality}")
        _encoder_name(name, f"encoders.{modality}")


def _check_rule_settings(th: ThresholdConfig) -> None:
    """The settings of the probabilistic rules, the verifier stage and the context channel."""

    _in_range(th.level, 0.0, 1.0, "thresholds.level", low_open=True)
    _choice(th.calibration, ("isotonic", "platt"), "thresholds.calibration")
    if th.prior is not None and not th.prior.strip():
        raise ConfigError("thresholds.prior must be a path to a priors JSON file or null "
                          "(the shipped mmcache/resources/threshold_priors.json)")
    _in_range(th.budget, 0.0, 1.0, "thresholds.budget", low_open=True, high_open=True)
    _in_range(th.max_risk, 0.0, 1.0, "thresholds.max_risk", low_open=True)
    _in_range(th.tail, 0.0, 1.0, "thresholds.tail")
    _choice(th.parts, PARTS, "thresholds.parts")
    _in_range(th.credit, 0.0, math.inf, "thresholds.credit", high_open=True)
    _in_range(th.search_floor, -1.0, 1.0, "thresholds.search_floor")
    _non_negative_int(th.seed, "thresholds.seed")
    _choice(th.verifier, tuple(VERIFIERS), "thresholds.verifier")
    _in_range(th.verifier_band, 0.0, 2.0, "thresholds.verifier_band")
    _in_range(th.verifier_min, 0.0, 1.0, "thresholds.verifier_min")
    _in_range(th.context_delta, 0.0, 2.0, "thresholds.context_delta")


def _positive_or_none(value: Any, key: str) -> None:
    if value is not None and not (isinstance(value, int) and not isinstance(value, bool)
                                  and value > 0):
        raise ConfigError(f"{key} must be a positive integer or null, got {value!r}")


def _positive(value: Any, key: str) -> None:
    if not (isinstance(value, int) and not isinstance(value, bool) and value > 0):
        raise ConfigError(f"{key} must be a positive integer, got {value!r}")


def _non_negative_int(value: Any, key: str) -> None:
    if not (isinstance(value, int) and not isinstance(value, bool) and value >= 0):
        raise ConfigError(f"{key} must be a whole number >= 0, got {value!r}")


def _in_range(value: Any, low: float, high: float, key: str, low_open: bool = False,
              high_open: bool = False) -> None:
    above = value > low if low_open else value >= low
    below = value < high if high_open else value <= high
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and above and below
    if not ok:
        raise ConfigError(f"{key} must be in {'(' if low_open else '['}{low}, {high}"
                          f"{')' if high_open else ']'}, got {value!r}")


def _store_options(options: dict[str, Any], backend: str) -> None:
    """``l3.options`` hold only what ``backend`` takes, each of the right kind."""
    known = STORE_OPTIONS[backend]
    for key, value in options.items():
        if key not in known:
            raise ConfigError(f"unknown config key 'l3.options.{key}' for backend {backend!r}; "
                              f"known keys here: {list(known)}")
        where = f"l3.options.{key}"
        if key == "max_staleness":
            _in_range(value, 0.0, MAX_LIFETIME_S, f"{where} (seconds)")
        elif key == "socket_timeout":
            _in_range(value, 0.0, 60.0, f"{where} (seconds)", low_open=True)
        elif key == "skew_window":
            _positive(value, where)
        elif key == "cluster" and not isinstance(value, bool):
            raise ConfigError(f"{where} must be true or false, got {value!r}")
        elif key == "prefix" and not (isinstance(value, str) and value.strip()):
            raise ConfigError(f"{where} must be a non-empty string, got {value!r}")


def _choice(value: Any, choices: tuple[str, ...], key: str) -> None:
    if value not in choices:
        raise ConfigError(f"{key} must be one of {list(choices)}, got {value!r}")


def _modality(name: str, key: str, known: tuple[str, ...] = MODALITIES) -> None:
    if name not in known:
        raise ConfigError(f"{key}: unknown modality {name!r}; known: {list(known)}")


def _modality_sets(names: list[str] | None, key: str) -> None:
    if names is None:
        return
    if not names:
        raise ConfigError(f"{key} must name at least one modality set, or be null (every set)")
    for name in names:
        try:
            modality_set_channels(name)
        except ValueError as exc:
            raise ConfigError(f"{key}: {exc}") from None


def _policy(name: Any, options: dict[str, Any], max_bytes: int | None, key: str) -> None:
    if not isinstance(name, str) or name.lower() not in POLICIES:
        raise ConfigError(f"{key}: unknown eviction policy {name!r}; choose one of "
                          f"{sorted(POLICIES)}")
    if name.lower() in ORACLE_POLICIES:
        raise ConfigError(f"{key}: {name!r} is an offline oracle (it needs future requests); "
                          "use it in mmcache.sim.replay.simulate, not in a live cache tier")
    if POLICIES[name.lower()].needs_capacity and max_bytes is None and "capacity" not in options:
        tier = key.rsplit(".", 1)[0]
        raise ConfigError(f"{key} {name!r} needs {tier}.max_bytes (the tier's size in bytes)")
    try:
        make_policy(name, **{"capacity": max_bytes, **options})
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"{key}_options {options!r} do not fit policy {name!r}: {exc}") from None


def check_ann_factory(l2: SemanticTierConfig, dims: Mapping[str, int]) -> None:
    """ConfigError unless faiss builds ``l2.ann_factory`` at every dimension of ``dims`` (at
    one of :data:`PROBE_DIMS` when ``dims`` is empty) where ``l2.index`` is ``auto``, so a bad
    string fails when the config is loaded or a put brings a new dimension, not at the put
    that first fills an index to ``ann_min_size``."""
    if l2.index != "auto":
        return
    import faiss  # here, not at the top: only this check of a config needs faiss

    factory, errors = l2.ann_factory, {}
    for dim in sorted(set(dims.values())) or PROBE_DIMS:
        try:
            faiss.index_factory(dim, factory.replace("{nlist}", "1"), faiss.METRIC_INNER_PRODUCT)
        except RuntimeError as exc:
            errors[dim] = re.sub(r"^Error in .*? at \S+:\d+: ", "", str(exc))
    if errors and (dims or len(errors) == len(PROBE_DIMS)):
        dim, error = next(iter(errors.items()))
        raise ConfigError(f"l2.ann_factory {factory!r} is not a faiss factory string for "
                          f"{dim}-d vectors: {error}; use one such as 'IVF{{nlist}}(SQfp16),SQfp16' "
                          "or set l2.index: flat")


def _encoder_name(name: str, key: str) -> None:
    if not name or name not in ENCODERS:
        raise ConfigError(f"{key}: unknown encoder {name!r}; known: {list(ENCODERS)}")


def _physical_memory() -> int | None:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return None
