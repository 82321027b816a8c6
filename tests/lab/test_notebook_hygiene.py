"""Every notebook follows the conventions: paired source, no outputs, parameters cell, SMOKE."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import jupytext
import nbformat
import pytest

from mmcache.lab.runbook import NOTEBOOK_DIR, notebook_sources

SOURCES = notebook_sources()


def _code(cells) -> list[str]:
    return [c.source.strip() for c in cells if c.cell_type == "code"]


def test_there_are_notebooks() -> None:
    assert SOURCES, f"no notebooks/NN_*.py in {NOTEBOOK_DIR}"


@pytest.mark.parametrize("source", SOURCES, ids=lambda p: p.stem)
def test_paired_ipynb_matches_source(source: Path) -> None:
    paired = source.with_suffix(".ipynb")
    assert paired.exists(), "run: make pair"
    assert _code(nbformat.read(paired, as_version=4).cells) == _code(jupytext.read(source).cells), \
        f"{paired.name} is out of sync with {source.name}; run: make pair"


@pytest.mark.parametrize("source", SOURCES, ids=lambda p: p.stem)
def test_ipynb_carries_no_outputs(source: Path) -> None:
    result = subprocess.run([sys.executable, "-m", "nbstripout", "--verify",
                             str(source.with_suffix(".ipynb"))], capture_output=True, text=True)
    assert result.returncode == 0, f"{source.stem}.ipynb is not in stripped form (run: make pair): {result.stdout}"


@pytest.mark.parametrize("source", SOURCES, ids=lambda p: p.stem)
def test_parameters_cell_has_smoke_switch(source: Path) -> None:
    cells = [c for c in jupytext.read(source).cells if "parameters" in c.metadata.get("tags", [])]
    assert len(cells) == 1, f"{source.name} needs exactly one cell tagged 'parameters'"
    assert re.search(r"^SMOKE\s*=\s*False\b", cells[0].source, re.M), \
        f"{source.name}'s parameters cell must define SMOKE = False"
    assert re.search(rf'^NOTEBOOK\s*=\s*"{source.stem}"', cells[0].source, re.M), \
        f'{source.name}\'s parameters cell must define NOTEBOOK = "{source.stem}" (its run folder)'
    assert re.search(r"write_metrics\([\s\S]*NOTEBOOK, SMOKE\)", source.read_text()), \
        f"{source.name} must pass NOTEBOOK, SMOKE to write_metrics (a plain papermill run's folder)"


@pytest.mark.parametrize("source", SOURCES, ids=lambda p: p.stem)
def test_figures_only_through_save_figure(source: Path) -> None:
    text = source.read_text()
    assert ".savefig(" not in text, f"{source.name}: save figures with mmcache.lab.plotting.save_figure"
    assert "write_metrics(" in text, f"{source.name} must record its key numbers with write_metrics"
