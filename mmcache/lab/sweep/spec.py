"""The sweep spec: what to run (a notebook or a function), over which points, with what.

A spec is a YAML mapping::

    name: replay_grid                      # optional; default: the file's stem
    function: mmcache.lab.sweep.tasks:replay   # or  notebook: ../06_eviction_replay.py
                                           # or  notebooks: [../00_quickstart.py, ...]
    parameters: {trace: data/x.bin}        # fixed, passed to every point
    grid: {policy: [lru, fifo], cache_size: [1048576, 4194304]}   # cartesian product, or
    points: [{policy: lru}, {policy: fifo}]                        # an explicit list
                                           # (`notebooks` may give neither: one point each)
    seeds: [0, 1]                          # optional; every point runs once per seed
    seed_parameter: seed                   # the parameter the seed is passed as
    smoke: true                            # notebooks only: papermill's SMOKE
    resources: {cpus: 1, gpus: 0, memory_mb: 512}   # per point
    figure: {x: cache_size, y: miss_ratio, hue: policy, logx: true}

With ``notebooks``, every point runs once per notebook (in the listed order, which
is the order a pool starts them in). An entry may name a prerequisite, a function run
once (in a worker) before the first point that needs it, while other points run::

    notebooks:
      - ../03_cold_start_collapse.py
      - {path: ../01_clip_whisper_alignment.py, needs: mmcache.lab.clip_training:ensure_trained}

Each point is content-addressed: its id hashes its notebook's source (or the source of the
function's module) with the point's parameters, so a changed notebook or function re-runs and
an unchanged one is skipped.
"""

from __future__ import annotations

import hashlib
import importlib
import inspect
import itertools
import json
import re
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, Mapping

import yaml

from mmcache.errors import ConfigError

FIELDS = ("name", "function", "notebook", "notebooks", "parameters", "grid", "points", "seeds",
          "seed_parameter", "smoke", "resources", "figure")
RESOURCE_FIELDS = ("cpus", "gpus", "memory_mb")
NOTEBOOK_ENTRY_FIELDS = ("path", "needs")
FIGURE_FIELDS = ("x", "y", "hue", "logx", "logy")
_IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


@dataclass(frozen=True)
class Resources:
    """What one point needs: CPU cores, GPUs and memory (Ray reserves all three)."""

    cpus: float = 1.0
    gpus: float = 0.0
    memory_mb: float | None = None


@dataclass(frozen=True)
class Point:
    """One run of the sweep: its content-addressed id, full parameters and what it runs."""

    id: str
    params: dict[str, Any]
    target: str               # "module:function" or the notebook source's absolute path
    source_sha256: str
    needs: str | None = None  # a prerequisite "module:function", run before the point starts


@dataclass(frozen=True)
class SweepSpec:
    """A validated sweep: what it runs, its points, resources and figure."""

    name: str
    kind: str                 # "function" or "notebook"
    points: tuple[Point, ...]
    resources: Resources = field(default_factory=Resources)
    figure: dict[str, Any] | None = None

    @property
    def targets(self) -> dict[str, str]:
        """Every target the points run (in order), with the sha256 of its source."""
        return {p.target: p.source_sha256 for p in self.points}


def load_spec(path: str | Path) -> SweepSpec:
    """Read and validate a sweep spec file; raises :class:`ConfigError` naming the bad field."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"sweep spec {path} does not exist")
    try:
        raw = yaml.safe_load(path.read_text())
    except yaml.YAMLError as err:
        raise ConfigError(f"sweep spec {path} is not valid YAML: {err}") from err
    return parse_spec(raw, base_dir=path.parent, default_name=path.stem)


def parse_spec(raw: Any, base_dir: str | Path = ".", default_name: str = "sweep") -> SweepSpec:
    """Validate a spec mapping; relative notebook paths are taken from ``base_dir``."""
    if not isinstance(raw, Mapping):
        raise ConfigError(f"a sweep spec is a mapping of {list(FIELDS)}, got {type(raw).__name__}")
    unknown = sorted(set(raw) - set(FIELDS))
    if unknown:
        raise ConfigError(f"unknown sweep spec field(s) {unknown}; the fields are {list(FIELDS)}")
    name = raw.get("name", default_name)
    if not isinstance(name, str) or not re.fullmatch(r"[A-Za-z0-9_.-]+", name):
        raise ConfigError(f"field `name` must be letters, digits, '_', '.' or '-', got {name!r}")
    kind, targets = _targets(raw, Path(base_dir))
    smoke = raw.get("smoke", False)
    if not isinstance(smoke, bool):
        raise ConfigError(f"field `smoke` must be true or false, got {smoke!r}")
    if smoke and kind != "notebook":
        raise ConfigError("field `smoke` applies to notebooks only; remove it for a function")
    params = _points(raw, allow_none=("notebooks" in raw))
    seed_parameter = raw.get("seed_parameter", "seed")
    if not isinstance(seed_parameter, str) or not _IDENTIFIER.match(seed_parameter):
        raise ConfigError(f"field `seed_parameter` must be an identifier, got {seed_parameter!r}")
    seeds = _seeds(raw.get("seeds"))
    if seeds is not None:
        if any(seed_parameter in p for p in params):
            raise ConfigError(f"parameter `{seed_parameter}` is set by `seeds`; remove it from "
                              "`parameters`/`grid`/`points` or set another `seed_parameter`")
        params = [{**p, seed_parameter: s} for p in params for s in seeds]
    if kind == "notebook":
        if any("SMOKE" in p for p in params):
            raise ConfigError("parameter `SMOKE` is set by the field `smoke`; remove it from "
                              "`parameters`/`grid`/`points`")
        params = [{**p, "SMOKE": smoke} for p in params]
    fixed = set(raw.get("parameters", {})) | {"SMOKE"}
    points = tuple(_point(kind, target, source, p, fixed, named="notebooks" in raw, needs=needs)
                   for target, source, needs in targets for p in params)
    spec = SweepSpec(name, kind, points, _resources(raw.get("resources", {})))
    return replace(spec, figure=_figure(raw.get("figure"), spec))


def resolve_function(target: str) -> Callable[..., Any]:
    """Import ``module:function`` and return the callable."""
    module_name, _, attr = target.partition(":")
    module = importlib.import_module(module_name)
    func = getattr(module, attr, None)
    if not callable(func):
        raise ConfigError(f"field `function`: {module_name} has no callable {attr!r}")
    return func


def _targets(raw: Mapping[str, Any],
             base_dir: Path) -> tuple[str, list[tuple[str, str, str | None]]]:
    """(kind, [(target, sha256 of its source, prerequisite)]) for the spec's `function`,
    `notebook` or `notebooks`."""
    given = [key for key in ("function", "notebook", "notebooks") if key in raw]
    if len(given) != 1:
        raise ConfigError("give exactly one of `function` (module:function), `notebook` "
                          "(a jupytext .py source) or `notebooks` (a list of them)")
    if "notebooks" in raw:
        notebooks = raw["notebooks"]
        if not isinstance(notebooks, list) or not notebooks:
            raise ConfigError("field `notebooks` must be a non-empty list of .py sources")
        targets = [_notebook_entry(nb, base_dir, f"notebooks[{i}]")
                   for i, nb in enumerate(notebooks)]
        if len({t for t, _, _ in targets}) != len(targets):
            raise ConfigError(f"field `notebooks` lists a notebook twice: {notebooks}")
        return "notebook", targets
    if "function" in raw:
        target = raw["function"]
        source = inspect.getsource(inspect.getmodule(_function(target, "function")))
        return "function", [(target, _sha256(source.encode()), None)]
    return "notebook", [(*_notebook(raw["notebook"], base_dir, "notebook"), None)]


def _notebook_entry(entry: Any, base_dir: Path, where: str) -> tuple[str, str, str | None]:
    """(absolute path, sha256, prerequisite) of a `notebooks` entry: a path, or a mapping
    with `path` and `needs`."""
    if not isinstance(entry, Mapping):
        return (*_notebook(entry, base_dir, where), None)
    unknown = sorted(set(entry) - set(NOTEBOOK_ENTRY_FIELDS))
    if unknown or "path" not in entry:
        raise ConfigError(f"field `{where}` must be a path or a mapping of "
                          f"{list(NOTEBOOK_ENTRY_FIELDS)} with `path`, got {dict(entry)!r}")
    needs = entry.get("needs")
    if needs is not None:
        _function(needs, f"{where}.needs")
    return (*_notebook(entry["path"], base_dir, f"{where}.path"), needs)


def _function(target: Any, where: str) -> Callable[..., Any]:
    """The callable a ``module:function`` field ``where`` names (ConfigError naming the field)."""
    if not isinstance(target, str) or not re.fullmatch(r"[\w.]+:\w+", target):
        raise ConfigError(f"field `{where}` must be 'module:function', got {target!r}")
    try:
        return resolve_function(target)
    except ImportError as err:
        raise ConfigError(f"field `{where}`: cannot import {target!r}: {err}") from err


def _notebook(notebook: Any, base_dir: Path, where: str) -> tuple[str, str]:
    """(absolute path, sha256) of a notebook source named in field ``where``."""
    if not isinstance(notebook, str):
        raise ConfigError(f"field `{where}` must be a path to a .py source, got {notebook!r}")
    path = (base_dir / notebook).resolve()
    if path.suffix != ".py" or not path.is_file():
        raise ConfigError(f"field `{where}`: {path} is not a jupytext .py source (paths are "
                          "relative to the spec file)")
    return str(path), _sha256(path.read_bytes())


def _points(raw: Mapping[str, Any], allow_none: bool = False) -> list[dict[str, Any]]:
    """Every point's parameters: the fixed `parameters` plus one `grid` or `points` entry
    (only the fixed ones when ``allow_none`` and neither is given)."""
    fixed = raw.get("parameters", {})
    _check_params(fixed, "parameters")
    if "grid" in raw and "points" in raw or not (allow_none or "grid" in raw or "points" in raw):
        raise ConfigError("give exactly one of `grid` (name: [values]) or `points` "
                          "(a list of parameter mappings)")
    if "grid" not in raw and "points" not in raw:
        return [dict(fixed)]
    if "grid" in raw:
        grid = raw["grid"]
        _check_params(grid, "grid")
        if not grid:
            raise ConfigError("field `grid` is empty; give at least one name: [values]")
        for key, values in grid.items():
            if not isinstance(values, list) or not values:
                raise ConfigError(f"field `grid.{key}` must be a non-empty list, got {values!r}")
        varied = [dict(zip(grid, combo)) for combo in itertools.product(*grid.values())]
    else:
        varied = raw["points"]
        if not isinstance(varied, list) or not varied:
            raise ConfigError("field `points` must be a non-empty list of parameter mappings")
        for i, point in enumerate(varied):
            _check_params(point, f"points[{i}]")
    points = []
    for i, point in enumerate(varied):
        clash = sorted(set(point) & set(fixed))
        if clash:
            raise ConfigError(f"parameter(s) {clash} are in both `parameters` and the "
                              f"{'grid' if 'grid' in raw else f'points[{i}]'}; keep one")
        points.append({**fixed, **point})
    seen = {}
    for i, point in enumerate(points):
        key = json.dumps(point, sort_keys=True, default=str)
        if key in seen:
            raise ConfigError(f"field `points[{i}]` repeats points[{seen[key]}]; remove one")
        seen[key] = i
    return points


def _check_params(params: Any, where: str) -> None:
    if not isinstance(params, Mapping):
        raise ConfigError(f"field `{where}` must be a mapping of parameter names to values, "
                          f"got {params!r}")
    for key in params:
        if not isinstance(key, str) or not _IDENTIFIER.match(key):
            raise ConfigError(f"field `{where}`: parameter name {key!r} is not an identifier")
    try:
        json.dumps(dict(params))
    except TypeError as err:
        raise ConfigError(f"field `{where}`: values must be plain YAML scalars, lists or "
                          f"mappings ({err})") from err


def _seeds(seeds: Any) -> list[int] | None:
    if seeds is None:
        return None
    if (not isinstance(seeds, list) or not seeds
            or not all(isinstance(s, int) and not isinstance(s, bool) for s in seeds)):
        raise ConfigError(f"field `seeds` must be a non-empty list of integers, got {seeds!r}")
    if len(set(seeds)) != len(seeds):
        raise ConfigError(f"field `seeds` repeats a seed: {seeds}")
    return seeds


def _resources(raw: Any) -> Resources:
    if not isinstance(raw, Mapping):
        raise ConfigError(f"field `resources` must be a mapping of {list(RESOURCE_FIELDS)}")
    unknown = sorted(set(raw) - set(RESOURCE_FIELDS))
    if unknown:
        raise ConfigError(f"unknown field(s) {[f'resources.{k}' for k in unknown]}; "
                          f"the fields are {list(RESOURCE_FIELDS)}")
    for key, value in raw.items():
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0 \
                or (value == 0 and key != "gpus"):
            raise ConfigError(f"field `resources.{key}` must be a positive number, got {value!r}")
    return Resources(**{k: float(v) for k, v in raw.items()})


def _figure(raw: Any, spec: SweepSpec) -> dict[str, Any] | None:
    if raw is None:
        return None
    if not isinstance(raw, Mapping):
        raise ConfigError(f"field `figure` must be a mapping of {list(FIGURE_FIELDS)}")
    unknown = sorted(set(raw) - set(FIGURE_FIELDS))
    if unknown:
        raise ConfigError(f"unknown field(s) {[f'figure.{k}' for k in unknown]}; "
                          f"the fields are {list(FIGURE_FIELDS)}")
    names = set(spec.points[0].params)
    for key in ("x", "y", "hue"):
        value = raw.get(key)
        if value is None and key != "hue":
            raise ConfigError(f"field `figure.{key}` is required (a parameter or metric name)")
        if value is not None and not isinstance(value, str):
            raise ConfigError(f"field `figure.{key}` must be a column name, got {value!r}")
    for key in ("x", "hue"):
        if raw.get(key) is not None and raw[key] not in names:
            raise ConfigError(f"field `figure.{key}`: {raw[key]!r} is not a parameter; "
                              f"choose one of {sorted(names)}")
    for key in ("logx", "logy"):
        if not isinstance(raw.get(key, False), bool):
            raise ConfigError(f"field `figure.{key}` must be true or false")
    return dict(raw)


def _point(kind: str, target: str, source_sha256: str, params: dict[str, Any], fixed: set[str],
           named: bool, needs: str | None = None) -> Point:
    """A point of ``target``; ``named``: its id starts with the notebook's name."""
    label = target if kind == "function" else Path(target).name
    prefix = Path(target).stem if named else None
    return Point(_point_id(label, source_sha256, params, fixed, prefix), params, target,
                 source_sha256, needs)


def _point_id(label: str, source_sha256: str, params: Mapping[str, Any],
              fixed: set[str], prefix: str | None = None) -> str:
    """``[<prefix>,]<varied parameters>-<hash>``: the hash covers the target, its source and all
    parameters.

    ``label`` is the function's ``module:function`` or the notebook's file name, so a
    sweep directory stays valid when the checkout moves; ``prefix`` names the notebook
    in a `notebooks` spec.
    """
    digest = _sha256(json.dumps({"target": label, "source": source_sha256, "params": params},
                                sort_keys=True).encode())[:12]
    shown = ",".join([prefix] * (prefix is not None)
                     + [f"{k}={v}" for k, v in params.items() if k not in fixed])
    slug = re.sub(r"[^A-Za-z0-9._=,-]+", "-", shown).strip("-")[:80]
    return f"{slug}-{digest}" if slug else digest


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()
