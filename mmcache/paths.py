"""Where the project keeps its data, runs and figures."""

from __future__ import annotations

import os
from pathlib import Path

#: The repository root (the folder holding ``pyproject.toml``).
PROJECT_ROOT = Path(os.environ.get("MMCACHE_ROOT", Path(__file__).resolve().parent.parent))
#: Small committed data and git-ignored generated data (models, embedding store).
DATA_DIR = PROJECT_ROOT / "data"
#: Executed notebooks and their metrics.json, one folder per notebook.
RUNS_DIR = PROJECT_ROOT / "runs"
