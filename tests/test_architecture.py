"""The house's rules: the import contracts (layers, the embeddable cache's forbidden imports, no
circles), at most 16 top-level modules, and the public import paths outside checks call."""

from __future__ import annotations

import importlib
import os
import subprocess
import sys
from pathlib import Path

import pytest

import mmcache

ROOT = Path(mmcache.__file__).resolve().parent.parent
LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")

#: The public API contract (shared design card): module -> names that must stay importable.
CONTRACT = {
    "mmcache": ["TieredCache", "Query", "Hit", "CacheConfig", "errors", "__version__"],
    "mmcache.replay": ["read_oracle_general", "simulate", "opt_bounds"],
    "mmcache.policies": ["POLICIES"],
    "mmcache.encoders": ["load_whisper"],
    "mmcache.pareto": ["hypervolume"],
    "mmcache.sweep": ["run_sweep", "load_spec"],
}


def test_import_contracts_are_kept():
    out = subprocess.run([str(LINT_IMPORTS), "--no-cache"], cwd=ROOT, capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "0 broken" in out.stdout and "3 kept" in out.stdout, out.stdout


def test_contracts_have_no_ignore_list():
    text = (ROOT / "pyproject.toml").read_text()
    assert "ignore_imports" not in text


def test_at_most_16_top_level_modules():
    modules = sorted(p.name for p in (ROOT / "mmcache").glob("*.py"))
    assert len(modules) <= 16, modules


@pytest.mark.parametrize("module", sorted(CONTRACT))
def test_public_paths_import(module):
    mod = importlib.import_module(module)
    missing = [name for name in CONTRACT[module] if not hasattr(mod, name)]
    assert not missing, f"{module} lacks {missing}"


def test_import_mmcache_is_light_and_sets_nothing():
    code = ("import os, sys; before = dict(os.environ); import mmcache; "
            "heavy = [m for m in ('torch', 'faiss', 'cvxpy', 'numpy', 'transformers') if m in sys.modules]; "
            "changed = sorted(k for k in set(os.environ) | set(before) if os.environ.get(k) != before.get(k)); "
            "print(heavy, changed)")
    env = {k: v for k, v in os.environ.items() if not k.endswith("_OFFLINE")}
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True,
                         text=True, timeout=60, check=True)
    assert out.stdout.strip() == "[] []", out.stdout


def test_sweep_runs_as_a_module():
    out = subprocess.run([sys.executable, "-m", "mmcache.sweep", "--help"], cwd=ROOT,
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and "python -m mmcache.sweep" in out.stdout, out.stderr
