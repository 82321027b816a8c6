"""The README-versus-run check: the committed expectations, and what it catches."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mmcache.lab import docs_check as readme_check
from mmcache.errors import ConfigError
from mmcache.lab.docs_check import check, load_expectations

EXPECTATIONS = load_expectations()
README = readme_check.README_FILE.read_text()


def _fabricate_runs(runs: Path, expectations, smoke: bool = False) -> None:
    """metrics.json files holding exactly the README's values."""
    by_notebook: dict[str, dict] = {}
    for exp in expectations:
        node = by_notebook.setdefault(exp.notebook, {"smoke": smoke})
        for key in exp.path[:-1]:
            node = node.setdefault(key, {})
        node[exp.path[-1]] = 13 if isinstance(exp.value, dict) else exp.value
        if isinstance(exp.value, dict):       # {same_as: path}: give that path the same value
            by_notebook[exp.notebook][exp.value["same_as"]] = 13
    for notebook, metrics in by_notebook.items():
        (runs / notebook).mkdir(parents=True)
        (runs / notebook / "metrics.json").write_text(json.dumps(metrics))


def test_expectations_cover_the_readme_notebooks_and_quote_the_readme(tmp_path) -> None:
    assert {"00_quickstart", "01_clip_whisper_alignment", "03_cold_start_collapse",
            "06_eviction_replay"} <= {e.notebook for e in EXPECTATIONS}
    problems = [m.problem for m in check(EXPECTATIONS, tmp_path, README)]
    assert problems and all(p.startswith("no ") for p in problems), problems[:3]


def test_matching_runs_pass_and_a_changed_number_is_caught(tmp_path) -> None:
    _fabricate_runs(tmp_path, EXPECTATIONS)
    assert check(EXPECTATIONS, tmp_path, README) == []
    path = tmp_path / "03_cold_start_collapse" / "metrics.json"
    metrics = json.loads(path.read_text())
    metrics["collapse_rate"]["baseline"]["1x"] = 1.0      # a collapse at the tuned rate
    metrics["collapse_rate"]["baseline"]["16x"] = 1.0     # the AMD run's 16x: still fine
    path.write_text(json.dumps(metrics))
    (mismatch,) = check(EXPECTATIONS, tmp_path, README)
    assert mismatch.problem == "collapse_rate/baseline/1x: README 0, run 1.0"


def test_smoke_runs_missing_metrics_and_an_edited_readme_are_caught(tmp_path) -> None:
    ours = [e for e in EXPECTATIONS if e.notebook == "06_eviction_replay"]
    _fabricate_runs(tmp_path, ours, smoke=True)
    assert all("smoke run" in m.problem for m in check(ours, tmp_path, README))
    edited = README.replace("LIRS 53,924", "LIRS 53,000")
    (tmp_path / "06_eviction_replay" / "metrics.json").unlink()
    problems = {m.problem for m in check(ours, tmp_path, edited)}
    assert any(p.startswith("README.md no longer shows 'Belady 48,974") for p in problems)


def test_tolerances_lists_and_same_as() -> None:
    exp = readme_check.Expectation("nb", "q", ("a",), 0.5, tol=0.1)
    assert check([exp], Path("/nonexistent"))[0].problem.startswith("no ")
    assert readme_check._compare(exp, {"a": 0.59}) is None
    assert "README 0.5, run 0.7" in readme_check._compare(exp, {"a": 0.7})
    counts = readme_check.Expectation("nb", "q", ("k",), [6, 10], tol=1)
    assert readme_check._compare(counts, {"k": [7, 10]}) is None
    assert readme_check._compare(counts, {"k": [8, 10]}) is not None
    same = readme_check.Expectation("nb", "q", ("n",), {"same_as": "m"})
    assert readme_check._compare(same, {"n": 13, "m": 13}) is None
    assert readme_check._compare(same, {"n": 12, "m": 13}) is not None
    assert readme_check._compare(same, {"m": 13}) == "n: no such metric"


def test_a_malformed_entry_is_named(tmp_path) -> None:
    bad = tmp_path / "expected.yaml"
    bad.write_text("03_x:\n  - readme: q\n    metrics: {a: 1}\n    tolerance: 0.1\n")
    with pytest.raises(ConfigError, match=r"03_x\[0\]: unknown field\(s\) \['tolerance'\]"):
        load_expectations(bad)
    bad.write_text("03_x:\n  - readme: q\n    metrics: {a: 1}\n    tol: -1\n")
    with pytest.raises(ConfigError, match="`tol` must be a non-negative number"):
        load_expectations(bad)


def test_cli_exit_status(tmp_path, capsys) -> None:
    _fabricate_runs(tmp_path, EXPECTATIONS)
    assert readme_check.main(["--runs", str(tmp_path)]) == 0
    (tmp_path / "00_quickstart" / "metrics.json").write_text(
        json.dumps({"n_lookups": 13, "n_as_expected": 12}))
    assert readme_check.main(["--runs", str(tmp_path)]) == 1
    assert "n_as_expected: README 13, run 12" in capsys.readouterr().out
