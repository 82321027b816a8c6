"""The docs check: the committed expectations quote their pages, and what it catches."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from mmcache.errors import ConfigError
from mmcache.lab import docs_check as readme_check
from mmcache.lab.bench.ledger import Ratio, record
from mmcache.lab.docs_check import (
    Expectation,
    check,
    doc_pages,
    load_expectations,
    load_settings,
    missing_quotes,
    read_pages,
    uncovered_numbers,
)
from mmcache.paths import PROJECT_ROOT

EXPECTATIONS = load_expectations()
PAGES = read_pages(EXPECTATIONS)
EVICTION = "docs/results/06-eviction.md"


def _fabricate_runs(runs: Path, expectations, smoke: bool = False) -> None:
    """metrics.json files holding exactly the docs' values."""
    by_notebook: dict[str, dict] = {}
    for exp in expectations:
        node = by_notebook.setdefault(exp.notebook, {"smoke": smoke})
        for key in exp.path[:-1]:
            node = node.setdefault(key, {})
        # intervals as {low, high} (the run's may be a pair or sit beside a mean)
        if isinstance(exp.value, dict) and "within" in exp.value:   # an interval around it
            node[exp.path[-1]] = exp.value["value"]
            interval = by_notebook[exp.notebook]
            *parents, last = exp.value["within"].split("/")
            for key in parents:
                interval = interval.setdefault(key, {})
            interval.setdefault(last, {}).update(low=exp.value["value"], high=exp.value["value"])
            continue
        if isinstance(exp.value, dict) and "overlaps" in exp.value:  # the page's interval
            node = by_notebook[exp.notebook]
            *parents, last = exp.value["overlaps"].split("/")
            for key in parents:
                node = node.setdefault(key, {})
            low, high = exp.value["interval"]
            node.setdefault(last, {}).update(low=low, high=high)
            continue
        node[exp.path[-1]] = 13 if isinstance(exp.value, dict) else exp.value
        if isinstance(exp.value, dict):       # {same_as: path}: give that path the same value
            by_notebook[exp.notebook][exp.value["same_as"]] = 13
    for notebook, metrics in by_notebook.items():
        if notebook.startswith(readme_check.BENCH):     # a benchmark's ledger record
            ratios = [Ratio(name, value, "baseline")
                      for name, value in _flat(metrics.get("figures", {}))]
            params = {"quick": smoke, **dict(_flat(metrics.get("params", {})))}
            path = record(notebook.removeprefix(readme_check.BENCH), ratios, params,
                          runs / "bench", started=metrics.get("machine_before", {}))
            payload = json.loads(path.read_text())   # the machine the page names
            payload["machine_after"].update(metrics.get("machine_after", {}))
            path.write_text(json.dumps(payload))
            continue
        (runs / notebook).mkdir(parents=True, exist_ok=True)
        (runs / notebook / "metrics.json").write_text(json.dumps(metrics))


def _flat(tree: dict, prefix: str = "") -> list[tuple[str, object]]:
    """(path joined by "/", value) of every leaf: a figure's name may hold a "/"."""
    return [pair for key, value in tree.items()
            for pair in (_flat(value, f"{prefix}{key}/") if isinstance(value, dict)
                         else [(f"{prefix}{key}", value)])]


def test_every_committed_quote_is_on_the_page_it_names() -> None:
    assert all(text is not None for text in PAGES.values()), PAGES.keys()
    assert missing_quotes(EXPECTATIONS, PAGES) == []


def test_expectations_cover_every_study_page_and_the_readme() -> None:
    assert {"00_quickstart", "01_clip_whisper_alignment", "03_cold_start_collapse",
            "06_eviction_replay"} <= {e.notebook for e in EXPECTATIONS}
    study_pages = {str(p.relative_to(PROJECT_ROOT))
                   for p in (PROJECT_ROOT / "docs" / "results").glob("0*.md")}
    assert len(study_pages) == 7
    assert study_pages | {"README.md", "docs/results/benchmarks.md"} <= set(PAGES)


def test_without_runs_every_number_is_missing(tmp_path) -> None:
    problems = [m.problem for m in check(EXPECTATIONS, tmp_path, PAGES)]
    assert problems and all(p.startswith("no ") and ("metrics.json" in p or "make bench" in p)
                            for p in problems)


def test_matching_runs_pass_and_a_changed_number_is_caught(tmp_path) -> None:
    _fabricate_runs(tmp_path, EXPECTATIONS)
    assert check(EXPECTATIONS, tmp_path, PAGES) == []
    path = tmp_path / "03_cold_start_collapse" / "metrics.json"
    metrics = json.loads(path.read_text())
    metrics["collapse_rate"]["baseline"]["1x"] = 1.0      # a collapse at the tuned rate
    metrics["collapse_rate"]["baseline"]["16x"] = 0.625   # two runs more at 16x: still fine
    path.write_text(json.dumps(metrics))
    (mismatch,) = check(EXPECTATIONS, tmp_path, PAGES)
    assert mismatch.problem == "collapse_rate/baseline/1x: docs/results/03-collapse.md 0, run 1.0"


def test_a_changed_headline_is_caught_on_the_readme_and_its_page(tmp_path) -> None:
    _fabricate_runs(tmp_path, EXPECTATIONS)
    path = tmp_path / "06_eviction_replay" / "metrics.json"
    metrics = json.loads(path.read_text())
    metrics["cloudphysics_1GiB_miss_cnt"]["lru"] = 71705
    path.write_text(json.dumps(metrics))
    assert {m.expectation.page for m in check(EXPECTATIONS, tmp_path, PAGES)} == {
        "README.md", EVICTION}


def test_smoke_runs_missing_metrics_edited_and_missing_pages_are_caught(tmp_path) -> None:
    ours = [e for e in EXPECTATIONS if e.notebook == "06_eviction_replay"]
    _fabricate_runs(tmp_path, ours, smoke=True)
    assert all("smoke run" in m.problem for m in check(ours, tmp_path, PAGES))
    edited = {**PAGES, EVICTION: PAGES[EVICTION].replace("LIRS 53,924", "LIRS 53,000")}
    (tmp_path / "06_eviction_replay" / "metrics.json").unlink()
    problems = {m.problem for m in check(ours, tmp_path, edited)}
    assert any(p.startswith(f"{EVICTION} no longer shows 'Belady 48,974") for p in problems)
    # the README's headline still shows its numbers: only the page's own entry fails
    assert not any(p.startswith("README.md no longer shows") for p in problems)
    gone = {page: text for page, text in PAGES.items() if page != EVICTION}
    assert {m.problem for m in missing_quotes(ours, gone)
            if m.expectation.page == EVICTION} == {f"no page {EVICTION}"}
    assert {m.problem for m in missing_quotes(ours, {**PAGES, EVICTION: None})
            if m.expectation.page == EVICTION} == {f"no page {EVICTION}"}


def test_tolerances_lists_and_same_as() -> None:
    exp = readme_check.Expectation("nb", "q", ("a",), 0.5, tol=0.1)
    assert check([exp], Path("/nonexistent"))[0].problem.startswith("no ")
    assert readme_check._compare(exp, {"a": 0.59}) is None
    assert "README.md 0.5, run 0.7" in readme_check._compare(exp, {"a": 0.7})
    counts = readme_check.Expectation("nb", "q", ("k",), [6, 10], tol=1)
    assert readme_check._compare(counts, {"k": [7, 10]}) is None
    assert readme_check._compare(counts, {"k": [8, 10]}) is not None
    same = readme_check.Expectation("nb", "q", ("n",), {"same_as": "m"})
    assert readme_check._compare(same, {"n": 13, "m": 13}) is None
    assert readme_check._compare(same, {"n": 12, "m": 13}) is not None
    assert readme_check._compare(same, {"m": 13}) == "n: no such metric"
    row = readme_check.Expectation("nb", "q", ("sweep", "1", "p99"), 2.0)
    assert readme_check._compare(row, {"sweep": [{"p99": 1.0}, {"p99": 2.0}]}) is None
    assert readme_check._compare(row, {"sweep": [{"p99": 1.0}]}) == "sweep/1/p99: no such metric"
    # a statistic over seeds: the page's value must lie in the run's own interval
    own = readme_check.Expectation("nb", "q", ("e", "effect"),
                                   {"value": -0.42, "within": "e/ci95"}, tol=0.005)
    assert readme_check._compare(own, {"e": {"effect": -0.3, "ci95": [-0.6, -0.2]}}) is None
    assert readme_check._compare(own, {"e": {"effect": -0.3, "ci95": [-0.4155, -0.1]}}) is None
    assert "outside the run's 95% interval" in readme_check._compare(
        own, {"e": {"effect": -0.1, "ci95": [-0.3, 0.1]}})
    assert "no [low, high] interval" in readme_check._compare(own, {"e": {"effect": -0.1}})
    mean = readme_check.Expectation("nb", "q", ("g", "mean"), {"value": 0.059, "within": "g"},
                                    tol=0.0005)   # an interval as {mean, low, high}
    assert readme_check._compare(mean, {"g": {"mean": 0.0588, "low": 0.0435, "high": 0.0741}}) is None
    assert "outside" in readme_check._compare(mean, {"g": {"mean": 0.03, "low": 0.02, "high": 0.04}})
    # runs that differ on one machine too: the page's interval must overlap the run's
    agree = readme_check.Expectation("nb", "q", ("e", "ci95"),
                                     {"interval": [-0.17, 0.11], "overlaps": "e/ci95"}, tol=0.005)
    assert readme_check._compare(agree, {"e": {"ci95": [-0.083, 0.079]}}) is None
    assert readme_check._compare(agree, {"e": {"ci95": [0.114, 0.3]}}) is None   # rounding
    assert "does not overlap" in readme_check._compare(agree, {"e": {"ci95": [0.2, 0.3]}})
    assert "no [low, high] interval" in readme_check._compare(agree, {"e": {"ci95": [0.1]}})
    # a key holding the separator is found by joining the path's parts
    kind = readme_check.Expectation("nb", "q", ("rejected", "image", "near-duplicate"), 0.3)
    assert readme_check._compare(kind, {"rejected": {"image/near-duplicate": 0.3}}) is None
    assert readme_check._compare(kind, {"rejected": {"image": {"near-duplicate": 0.3}}}) is None
    assert readme_check._compare(kind, {"rejected": {"image/other": 0.3}}) is not None


COLLAPSE = "docs/results/03-collapse.md"


def test_a_printed_interval_must_be_a_pair_from_low_to_high(tmp_path) -> None:
    bad = tmp_path / "expected.yaml"
    for interval in ("[0.5]", "[0.78, 0.22]", "[0.2, .nan]", "[true, 1]", "x"):
        bad.write_text("03_x:\n  - page: README.md\n    readme: q\n    metrics:\n"
                       f"      a/ci95: {{interval: {interval}, overlaps: a/ci95}}\n")
        with pytest.raises(ConfigError, match=r"`interval` must be the \[low, high\]"):
            load_expectations(bad)
    bad.write_text("03_x:\n  - page: README.md\n    readme: q\n    metrics:\n"
                   "      a/ci95: {interval: [0.22, 0.78], overlaps: a/ci95}\n")
    assert load_expectations(bad)[0].value["interval"] == [0.22, 0.78]


def _collapse_entries(prefix: str) -> dict[str, Expectation]:
    """Notebook 03's entries whose metric path starts with ``prefix``, by path."""
    return {"/".join(e.path): e for e in EXPECTATIONS
            if e.notebook == "03_cold_start_collapse" and "/".join(e.path).startswith(prefix)}


def test_chaotic_collapse_cells_are_checked_by_the_overlap_of_their_printed_intervals() -> None:
    """Every 16x / 32x cell of the learned-feature table where runs collapsed is an overlap of
    the Wilson interval the page prints (that of the rate printed beside it, over the run's
    seeds) with the new run's; a cell at 0 keeps its 0 inside the new run's interval."""
    from mmcache.studies.collapse.experiment import wilson_interval

    seeds = next(e.value for e in EXPECTATIONS
                 if e.notebook == "03_cold_start_collapse" and e.path == ("seeds",))
    cells = {path: e for path, e in {**_collapse_entries("collapse_rate/"),
                                     **_collapse_entries("collapse_rate_ci95/")}.items()
             if e.path[-1] in ("16x", "32x")}
    assert len({e.readme for e in cells.values()}) == 9 and len(cells) == 18   # 9 arms, 2 rates
    for exp in cells.values():
        assert exp.page == COLLAPSE
        interval_path = "/".join(("collapse_rate_ci95",) + exp.path[1:])
        rate, low, high = re.findall(r"\| ([\d.]+) \(([\d.]+)–([\d.]+)\)",
                                     exp.readme)[("16x", "32x").index(exp.path[-1])]
        k = round(float(rate) * seeds)
        assert [round(v, 2) for v in wilson_interval(k, seeds)] == [float(low), float(high)], exp
        if k == 0:
            assert exp.value == {"value": 0, "within": interval_path}, exp
        else:
            assert exp.value == {"interval": [float(low), float(high)],
                                 "overlaps": interval_path}, exp
            assert exp.tol == 0.005   # the page's rounding, nothing more


def test_a_collapse_interval_that_moved_on_another_cpu_still_agrees() -> None:
    """An AMD EPYC run's intervals (clipping at 16x: 7/8 collapsed where the page's run had 4/8)
    pass by overlap, where the printed rate lay outside them; a run whose interval lies wholly
    apart from the page's fails."""
    clip = _collapse_entries("collapse_rate_ci95/clip_1.0/16x")["collapse_rate_ci95/clip_1.0/16x"]
    amd = {"collapse_rate_ci95": {"clip_1.0": {"16x": [0.5291, 0.9776]}}}
    assert readme_check._compare(clip, amd) is None
    old = Expectation(clip.notebook, clip.readme, ("collapse_rate", "clip_1.0", "16x"),
                      {"value": 0.5, "within": "collapse_rate_ci95/clip_1.0/16x"}, tol=0.005)
    assert "outside the run's 95% interval" in readme_check._compare(
        old, {"collapse_rate": {"clip_1.0": {"16x": 0.875}}, **amd})
    apart = {"collapse_rate_ci95": {"clip_1.0": {"16x": [0.8, 1.0]}}}
    assert "does not overlap" in readme_check._compare(clip, apart)
    # warmup's lower final loss: the verdict word differs between CPUs, its interval is checked
    warmup = _collapse_entries("remedy_effects/warmup/lower_loss/")
    assert "remedy_effects/warmup/lower_loss/verdict" not in warmup
    ci = warmup["remedy_effects/warmup/lower_loss/ci95"]
    assert readme_check._compare(
        ci, {"remedy_effects": {"warmup": {"lower_loss": {"ci95": [-0.3, 0.3]}}}}) is None
    assert "does not overlap" in readme_check._compare(
        ci, {"remedy_effects": {"warmup": {"lower_loss": {"ci95": [0.0, 0.4]}}}})
    # the frozen runs' per-rate cells: the Wilson intervals of 1/6 and 4/6 the page prints
    frozen = _collapse_entries("frozen_collapse_rate_ci95/")
    assert {k: e.value["interval"] for k, e in frozen.items()} == {
        "frozen_collapse_rate_ci95/baseline/16x": [0.03, 0.56],
        "frozen_collapse_rate_ci95/baseline/32x": [0.03, 0.56],
        "frozen_collapse_rate_ci95/seed_combo (xavier_0.1+clip_1.0)/16x": [0.03, 0.56],
        "frozen_collapse_rate_ci95/seed_combo (xavier_0.1+clip_1.0)/32x": [0.30, 0.90]}


def test_a_malformed_entry_is_named(tmp_path) -> None:
    bad = tmp_path / "expected.yaml"
    bad.write_text("03_x:\n  - page: README.md\n    readme: q\n    metrics: {a: 1}\n"
                   "    tolerance: 0.1\n")
    with pytest.raises(ConfigError, match=r"03_x\[0\]: unknown field\(s\) \['tolerance'\]"):
        load_expectations(bad)
    bad.write_text("03_x:\n  - page: README.md\n    readme: q\n    metrics: {a: 1}\n    tol: -1\n")
    with pytest.raises(ConfigError, match="`tol` must be a non-negative number"):
        load_expectations(bad)
    for page in ("", "page: /abs/README.md\n    ", "page: docs/x.txt\n    "):
        bad.write_text(f"03_x:\n  - {page}readme: q\n    metrics: {{a: 1}}\n")
        with pytest.raises(ConfigError, match=r"03_x\[0\]: `page` must be the path"):
            load_expectations(bad)


def test_cli_exit_status(tmp_path, capsys) -> None:
    runs = tmp_path / "runs"
    _fabricate_runs(runs, EXPECTATIONS)
    assert readme_check.main(["--runs", str(runs)]) == 0
    assert readme_check.main(["--quotes-only"]) == 0
    assert f"{len(EXPECTATIONS)} of {len(EXPECTATIONS)} numbers on {len(PAGES)} pages" in \
        capsys.readouterr().out
    (runs / "00_quickstart" / "metrics.json").write_text(
        json.dumps({"n_lookups": 13, "n_as_expected": 12}))
    assert readme_check.main(["--runs", str(runs)]) == 1
    assert "n_as_expected: README.md 13, run 12" in capsys.readouterr().out
    root = tmp_path / "checkout"                       # a checkout whose page was edited
    for page, text in PAGES.items():
        (root / page).parent.mkdir(parents=True, exist_ok=True)
        (root / page).write_text(text)
    (root / "README.md").write_text(PAGES["README.md"].replace("as expected", "fine"))
    assert readme_check.main(["--quotes-only", "--root", str(root)]) == 1
    assert "README.md no longer shows 'every lookup goes as expected'" in capsys.readouterr().out
    shutil.rmtree(root / "docs")
    assert readme_check.main(["--quotes-only", "--root", str(root)]) == 1
    assert f"no page {EVICTION}" in capsys.readouterr().out


def test_a_tolerance_without_a_reason_is_refused(tmp_path) -> None:
    bad = tmp_path / "expected.yaml"
    entry = "03_x:\n  - page: README.md\n    readme: q\n    metrics: {a: 1}\n"
    for tol in ("tol: 0.01", "rtol: 0.05", "factor: 3", "tol: 0.01\n    why: '  '"):
        bad.write_text(f"{entry}    {tol}\n")
        with pytest.raises(ConfigError, match=r"03_x\[0\] \('q'\): a nonzero `tol`/`rtol`/`factor` needs a `why:`"):
            load_expectations(bad)
    bad.write_text(f"{entry}    tol: 0.01\n    why: [rounding]\n")
    with pytest.raises(ConfigError, match="`why` must be one line"):
        load_expectations(bad)
    bad.write_text(f"{entry}    tol: 0.0005\n    why: the page's rounding (3 decimals)\n")
    assert [e.why for e in load_expectations(bad)] == ["the page's rounding (3 decimals)"]
    bad.write_text(f"{entry}    tol: 0\n")   # exactly: no reason needed
    assert [e.why for e in load_expectations(bad)] == [""]


def test_a_bench_section_is_checked_against_its_ledger_record(tmp_path, capsys) -> None:
    expected = tmp_path / "expected.yaml"
    yaml_text = (
        "bench/demo:\n  - page: README.md\n    readme: every lookup goes as expected\n"
        "    rtol: 0.3\n    why: wall-clock ratios move by up to 30% between runs\n"
        "    metrics: {figures/lookups/s at 10 entries: 31.0, params/n: 10}\n"
        "00_quickstart:\n  - page: README.md\n    readme: every lookup goes as expected\n"
        "    metrics: {n_as_expected: {same_as: n_lookups}}\n")
    expected.write_text(yaml_text)
    runs = tmp_path / "runs"
    (bench,) = [e for e in load_expectations(expected) if e.path[0] == "figures"]
    assert check([bench], runs, PAGES)[0].problem.startswith(f"no {runs / 'bench' / 'demo.json'}")

    def record_demo(value: float, **params) -> None:
        record("demo", [Ratio("lookups/s at 10 entries", value, "GPTCache")], params,
               out_dir=runs / "bench")

    record_demo(38.0, n=10)                                      # within 30% of the page's 31
    assert check(load_expectations(expected)[:2], runs, PAGES) == []
    record_demo(45.0, n=10)
    (mismatch,) = check([bench], runs, PAGES)
    assert mismatch.problem == ("figures/lookups/s at 10 entries: README.md 31.0, run 45.0 "
                                "(tol 0, rtol 0.3)")
    factor = [Expectation("bench/demo", "q", ("figures", "lookups/s at 10 entries"), 10.0,
                          factor=5.0, why="spread")]
    assert check(factor, runs, PAGES) == []                 # 45 is within 5x of 10 ...
    record_demo(1.9, n=10)                                  # ... and 1.9 is not
    assert check(factor, runs, PAGES)[0].problem.endswith("run 1.9 (not within ×5)")
    with pytest.raises(ConfigError, match="`factor` must be above 1"):
        expected.write_text("bench/x:\n  - page: README.md\n    readme: q\n    factor: 1\n"
                            "    why: w\n    metrics: {a: 1}\n")
        load_expectations(expected)
    expected.write_text(yaml_text)
    record_demo(31.0, n=10, quick=True)
    assert "from a --quick run" in check([bench], runs, PAGES)[0].problem
    record_demo(31.0, n=10)
    # the command line checks the notebooks' sections, or with --bench the benchmarks'
    assert readme_check.main(["--expected", str(expected), "--runs", str(runs), "--bench"]) == 0
    out = capsys.readouterr().out
    assert "1 numbers of the notebooks are checked by `make check-docs`" in out
    assert "2 of 2 numbers on 1 pages from 1 runs reproduced" in out
    assert readme_check.main(["--expected", str(expected), "--runs", str(runs)]) == 1
    assert "2 numbers of the benchmarks are checked by `make bench`" in capsys.readouterr().out


def test_a_run_published_by_make_figures_gives_its_wall_time(tmp_path) -> None:
    exp = Expectation("00_quickstart", "q", ("point", "elapsed_s"), 20.0, factor=4.0, why="w")
    (tmp_path / "00_quickstart").mkdir()
    (tmp_path / "00_quickstart" / "metrics.json").write_text(json.dumps({"n_lookups": 3}))
    assert check([exp], tmp_path)[0].problem == ("point/elapsed_s: no such metric "
                                                 "(`make figures` writes it)")
    (tmp_path / "00_quickstart" / "point.json").write_text(json.dumps({"elapsed_s": 70.0}))
    assert check([exp], tmp_path) == []
    (tmp_path / "00_quickstart" / "point.json").write_text(json.dumps({"elapsed_s": 90.0}))
    assert check([exp], tmp_path)[0].problem.endswith("run 90.0 (not within ×4)")


def test_coverage_finds_the_numbers_nothing_quotes() -> None:
    page = ("# Study 3 of 2026\n\nWe ran 12 seeds (`seed=7`, [the run](runs/5.md)) at seed 002 §2.4:"
            " the hit rate was 0.42 and p99 1,250 ms; 95% of lookups... took −3.5%.\n"
            "```\nprint(99)\n```\n")
    entry = Expectation("x", "the hit rate was 0.42", ("hit",), 0.42, page="p.md")
    assert [n.split(" in ")[0] for n in uncovered_numbers("p.md", page, [entry], {})] == [
        "12", "1,250", "95%", "−3.5%"]
    settings = {"p.md": ["We ran 12 seeds", "95% of lookups"]}
    assert [n.split(" in ")[0] for n in uncovered_numbers("p.md", page, [entry], settings)] == [
        "1,250", "−3.5%"]


def test_every_page_of_the_docs_quotes_all_its_numbers() -> None:
    settings = load_settings()
    assert set(settings) <= set(doc_pages())
    for page in doc_pages():
        text = (PROJECT_ROOT / page).read_text()
        squashed = readme_check._squash(text)
        assert [q for q in settings.get(page, [])
                if readme_check._squash(q) not in squashed] == [], page
        assert uncovered_numbers(page, text, EXPECTATIONS, settings) == [], page
