"""mmcache installs as a wheel: built from the checkout, installed outside it, the README
quickstart and the error-budget rule run from another directory with the shipped priors."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

import mmcache

ROOT = Path(mmcache.__file__).resolve().parent.parent
pytestmark = pytest.mark.slow

ERROR_BUDGET = """
import mmcache, numpy as np
cache = mmcache.TieredCache({"thresholds": {"rule": "error-budget", "budget": 0.02},
                             "encoders": {"text": "minilm"}})
cache.put(mmcache.Query(text="how do I reset my password?", scope="t"), "use the reset link")
hit = cache.get(mmcache.Query(text="how do I reset my password?", scope="t"))
assert hit is not None and hit.value == "use the reset link", hit
cache.close()
print("error-budget ok", mmcache.__file__)
"""


def quickstart_code() -> str:
    """The README's quickstart: the first python block after its "Quickstart" heading."""
    text = (ROOT / "README.md").read_text()
    start = re.search(r"^#+ .*[Qq]uickstart.*$", text, re.M)
    assert start, "README.md has no Quickstart section"
    block = re.search(r"```python\n(.*?)```", text[start.end():], re.S)
    assert block, "the Quickstart section has no python block"
    return block.group(1)


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> Path:
    build = tmp_path_factory.mktemp("wheel")
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
                    "-q", "-w", str(build), str(ROOT)], check=True, timeout=300)
    wheel = next(build.glob("mmcache-*.whl"))
    names = zipfile.ZipFile(wheel).namelist()
    assert "mmcache/resources/threshold_priors.json" in names
    assert "mmcache/resources/latency_profile.json" in names
    target = tmp_path_factory.mktemp("site")
    subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "--no-compile", "-q",
                    "--target", str(target), str(wheel)], check=True, timeout=300)
    return target


def run_outside(code: str, site: Path, cwd: Path) -> str:
    env = {**os.environ, "PYTHONPATH": str(site), "HF_HUB_OFFLINE": "1",
           "TRANSFORMERS_OFFLINE": "1", "HOME": str(cwd)}
    env.pop("MMCACHE_ROOT", None)
    out = subprocess.run([sys.executable, "-c", code], cwd=cwd, env=env, capture_output=True,
                         text=True, timeout=600)
    assert out.returncode == 0, out.stdout + out.stderr
    return out.stdout


def test_wheel_runs_the_quickstart_and_the_error_budget_rule(installed, tmp_path):
    where = run_outside("import mmcache, mmcache.paths as p; print(mmcache.__file__); "
                        "print(p.RESOURCES); print(p.DATA_DIR)", installed, tmp_path).split()
    assert all(Path(w).is_relative_to(installed) for w in where[:2]), where
    assert not Path(where[2]).is_relative_to(ROOT), where
    run_outside(quickstart_code(), installed, tmp_path)
    assert "error-budget ok" in run_outside(ERROR_BUDGET, installed, tmp_path)
