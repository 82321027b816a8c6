"""Where mmcache finds its shipped resources and keeps its data, runs and figures.

Shipped resources (threshold priors, the latency profile) are package data, found through
:mod:`importlib.resources` wherever the package is installed. Data the workbench generates
(trained models, the embedding store) goes under the project's ``data/`` folder in a checkout,
and under ``~/.cache/mmcache`` for an installed package; ``MMCACHE_ROOT`` overrides both.
"""

from __future__ import annotations

import os
from importlib.resources import files
from pathlib import Path

#: The package's shipped resources (a folder of the installed package).
RESOURCES = Path(str(files("mmcache") / "resources"))


def _project_root() -> Path:
    if "MMCACHE_ROOT" in os.environ:
        return Path(os.environ["MMCACHE_ROOT"])
    checkout = Path(__file__).resolve().parent.parent
    if (checkout / "pyproject.toml").is_file():
        return checkout
    return Path.home() / ".cache" / "mmcache"


#: The repository root in a checkout (the folder holding ``pyproject.toml``).
PROJECT_ROOT = _project_root()
#: Small committed data and git-ignored generated data (models, embedding store).
DATA_DIR = PROJECT_ROOT / "data"
#: Executed notebooks and their metrics.json, one folder per notebook.
RUNS_DIR = PROJECT_ROOT / "runs"
