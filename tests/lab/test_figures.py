"""`make figures`: the figures spec, publishing, the manifest, and a tiny end-to-end run."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from mmcache.lab import figures
from mmcache.errors import ConfigError
from mmcache.lab.runbook import notebook_sources
from mmcache.lab.sweep import load_spec, parse_spec
from mmcache.lab.sweep.store import RECORD_FILE

TINY = '''# %% tags=["parameters"]
NOTEBOOK = "{name}"
SMOKE = False

# %%
import matplotlib.pyplot as plt
from mmcache.lab.plotting import save_figure
from mmcache.lab.runbook import write_metrics

fig, ax = plt.subplots()
ax.plot([0, 1], [0, 1])
save_figure(fig, "{name}_line", {{"weights": "none", "data": "two points", "smoke": SMOKE}})
write_metrics({{"smoke": SMOKE}}, NOTEBOOK, SMOKE)
'''


def test_figures_spec_is_valid_and_lists_every_notebook_in_full_mode() -> None:
    spec = load_spec(figures.FIGURES_SPEC)
    assert spec.kind == "notebook"
    assert sorted(Path(t) for t in spec.targets) == notebook_sources()
    assert all(p.params == {"SMOKE": False} for p in spec.points)
    assert spec.resources.cpus == 1      # two notebooks at a time on 2 cores


def test_notebooks_spec_gives_one_named_point_per_notebook(tmp_path) -> None:
    for name in ("00_a", "01_b"):
        (tmp_path / f"{name}.py").write_text(TINY.format(name=name))
    spec = parse_spec({"notebooks": ["00_a.py", "01_b.py"], "parameters": {"X": 1}},
                      base_dir=tmp_path)
    assert [p.id.split("-")[0] for p in spec.points] == ["00_a", "01_b"]
    assert [Path(p.target).name for p in spec.points] == ["00_a.py", "01_b.py"]
    assert spec.points[0].params == {"X": 1, "SMOKE": False}
    with pytest.raises(ConfigError, match="twice"):
        parse_spec({"notebooks": ["00_a.py", "00_a.py"]}, base_dir=tmp_path)
    with pytest.raises(ConfigError, match=r"`notebooks\[1\]`"):
        parse_spec({"notebooks": ["00_a.py", "missing.py"]}, base_dir=tmp_path)
    with pytest.raises(ConfigError, match="exactly one of"):
        parse_spec({"notebooks": ["00_a.py"], "notebook": "00_a.py"}, base_dir=tmp_path)


def _fabricated_sweep(tmp_path: Path):
    """A figures sweep folder as a run would leave it: one ok point with a sidecar, one failed."""
    for name in ("00_a", "01_b"):
        (tmp_path / f"{name}.py").write_text(TINY.format(name=name))
    spec = parse_spec({"notebooks": ["00_a.py", "01_b.py"]}, base_dir=tmp_path)
    sweep = tmp_path / "sweep"
    for point, status in zip(spec.points, ("ok", "failed")):
        (sweep / point.id / "figures").mkdir(parents=True)
        (sweep / point.id / RECORD_FILE).write_text(json.dumps({"status": status,
                                                               "elapsed_s": 12.5}))
        (sweep / point.id / "metrics.json").write_text('{"x": 1}')
        stem = Path(point.target).stem
        (sweep / point.id / "figures" / f"{stem}_fig.png").write_bytes(b"png")
        (sweep / point.id / "figures" / f"{stem}_fig.json").write_text(json.dumps(
            {"figure": f"{stem}_fig", "provenance": {
                "weights": {"text": "minilm:all-MiniLM-L6-v2/53aa"}, "data": "scenes | v2",
                "steps": 200}}))
    return spec, sweep


def test_publish_copies_ok_points_and_the_manifest_names_their_provenance(tmp_path) -> None:
    spec, sweep = _fabricated_sweep(tmp_path)
    entries = figures.publish(spec, sweep, tmp_path / "figs", tmp_path / "runs")
    assert [e.name for e in entries] == ["00_a_fig"]            # the failed point is not published
    assert (tmp_path / "figs" / "00_a_fig.png").read_bytes() == b"png"
    assert not (tmp_path / "figs" / "01_b_fig.png").exists()
    assert json.loads((tmp_path / "runs" / "00_a" / "metrics.json").read_text()) == {"x": 1}
    assert json.loads((tmp_path / "runs" / "00_a" / RECORD_FILE).read_text())["elapsed_s"] == 12.5

    text = figures.render_manifest(entries, "abc123", "notebooks/sweeps/figures.yaml",
                                   failed=["01_b"])
    assert "`abc123`" in text
    row = next(line for line in text.splitlines() if line.startswith("| [`00_a_fig`]"))
    assert "`SMOKE=False`" in row and spec.points[0].source_sha256[:12] in row
    assert "`00_a`" in row and "[00_a_fig.json](00_a_fig.json)" in row
    assert "text: minilm:all-MiniLM-L6-v2/53aa" in row and "scenes \\| v2" in row  # pipes escaped
    assert "steps" not in row                                  # the rest is in the sidecar
    assert "**Failed, so missing here:** 01_b" in text and "01_b_fig" not in text


def test_tiny_figures_run_writes_figures_runs_and_manifest(tmp_path) -> None:
    (tmp_path / "07_tiny.py").write_text(TINY.format(name="07_tiny"))
    (tmp_path / "figs.yaml").write_text(yaml.safe_dump({"notebooks": ["07_tiny.py"]}))
    spec = load_spec(tmp_path / "figs.yaml")
    failed = figures.run_figures(spec, tmp_path / "sweep", tmp_path / "figs", tmp_path / "runs",
                                 "figs.yaml", progress=False)
    assert failed == []
    assert (tmp_path / "figs" / "07_tiny_line.png").read_bytes()[:4] == b"\x89PNG"
    sidecar = json.loads((tmp_path / "figs" / "07_tiny_line.json").read_text())
    assert sidecar["provenance"]["smoke"] is False                      # ran in full mode
    assert json.loads((tmp_path / "runs" / "07_tiny" / "metrics.json").read_text()) \
        == {"smoke": False}
    assert "`07_tiny_line`" in (tmp_path / "figs" / figures.MANIFEST_FILE).read_text()
    index = (tmp_path / "figs" / figures.INDEX_FILE).read_text()
    assert '<img src="07_tiny_line.png"' in index and "two points" in index
