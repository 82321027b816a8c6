"""The house's rules: the import contracts (layers, the embeddable cache's forbidden imports, no
circles), at most 16 top-level modules, function-local imports only for deferred dependencies with
their reason, and the public import paths outside checks call."""

from __future__ import annotations

import ast
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


def function_local_import_blocks(tree: ast.AST) -> list[list[ast.stmt]]:
    """Runs of consecutive import statements inside any function body of ``tree``."""
    blocks = []
    for fn in ast.walk(tree):
        if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        for node in ast.walk(fn):
            for field in ("body", "orelse", "finalbody"):
                stmts = getattr(node, field, None)
                run: list[ast.stmt] = []
                for stmt in stmts if isinstance(stmts, list) else []:
                    if isinstance(stmt, (ast.Import, ast.ImportFrom)):
                        run.append(stmt)
                    elif run:
                        blocks.append(run)
                        run = []
                if run:
                    blocks.append(run)
    return blocks


def imported_top(stmt: ast.Import | ast.ImportFrom) -> str:
    name = stmt.module if isinstance(stmt, ast.ImportFrom) else stmt.names[0].name
    return "." if getattr(stmt, "level", 0) else (name or "").split(".")[0]


def unexplained_local_imports(path: Path) -> list[str]:
    """Function-local imports of ``path`` that are stdlib, or lack a reason comment (on their own
    line, or on the comment line heading their block)."""
    lines = path.read_text().splitlines()
    found = []
    for block in function_local_import_blocks(ast.parse("\n".join(lines))):
        headed = lines[block[0].lineno - 2].strip().startswith("#")
        for stmt in block:
            where = f"{path.relative_to(ROOT)}:{stmt.lineno}"
            if imported_top(stmt) in sys.stdlib_module_names:
                found.append(f"{where} imports the standard library inside a function")
            elif not headed and "#" not in lines[stmt.lineno - 1]:
                found.append(f"{where} has no reason comment")
    return sorted(set(found))


def test_function_local_imports_are_deferred_dependencies_with_a_reason():
    found = [f for p in sorted((ROOT / "mmcache").rglob("*.py")) for f in unexplained_local_imports(p)]
    assert not found, "\n".join(found)


def test_unexplained_local_import_is_found(tmp_path, monkeypatch):
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    probe = tmp_path / "probe.py"
    probe.write_text("def f():\n    import json\n    import torch\n\n"
                     "def g():\n    # deferred: a reason\n    import torch\n    import numpy\n")
    assert unexplained_local_imports(probe) == ["probe.py:2 imports the standard library inside a function",
                                                "probe.py:3 has no reason comment"]


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
