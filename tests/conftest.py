"""Shared fixtures: run a notebook once per session in smoke mode and read its metrics."""

from __future__ import annotations

import os
import tempfile
from typing import Any, Callable

import pytest

from mmcache.lab import runbook
from mmcache.offline import enforce_offline

# Tests are an entry point: nothing they load may reach a model hub.
enforce_offline()
# Benchmarks run by tests record their ratios outside the checkout's runs/.
os.environ.setdefault("MMCACHE_BENCH_DIR", tempfile.mkdtemp(prefix="mmcache-test-bench-"))


@pytest.fixture(scope="session")
def smoke_metrics() -> Callable[[str], dict[str, Any]]:
    """``smoke_metrics("00_quickstart")`` runs the notebook (once) and returns its metrics."""
    done: dict[str, dict[str, Any]] = {}

    def run(name: str) -> dict[str, Any]:
        if name not in done:
            runbook.execute(name, smoke=True)
            done[name] = runbook.read_metrics(name, smoke=True)
        return done[name]

    return run
