"""Declared sweeps: spec validation, local and Ray engines, resume, failures, Ctrl-C."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest
import yaml

import mmcache
from mmcache.errors import ConfigError
from mmcache.lab.sweep import load_spec, parse_spec, run_sweep
from mmcache.lab.sweep.store import PARTIAL_DIR, RECORD_FILE

ROOT = Path(mmcache.__file__).resolve().parent.parent

# A sweep function that leaves one marker file per call, so tests count calls, and fails
# while a `fail-<x>` file exists in the marker folder.
TASKS = '''
import os, time
from pathlib import Path


def square(x, marker_dir, seed=0, sleep_s=0.0):
    marker_dir = Path(marker_dir)
    (marker_dir / f"call-{x}-{seed}-{os.getpid()}-{time.time_ns()}").touch()
    time.sleep(sleep_s)
    if (marker_dir / f"fail-{x}").exists():
        raise RuntimeError(f"point {x} was told to fail")
    return {"square": x * x, "x_plus_seed": x + seed, "nested": {"half": x / 2}}


PREPARED = Path(__file__).parent / "prepared"


def prepare():
    """A prerequisite: takes a while, then leaves its mark (once per call)."""
    time.sleep(3.0)
    PREPARED.mkdir(exist_ok=True)
    (PREPARED / f"done-{time.time_ns()}").touch()


def prepare_and_fail():
    raise RuntimeError("cannot prepare")


def after_prepare(x, marker_dir, check):
    """Fails (when ``check``) unless the prerequisite has finished; leaves a call marker."""
    (Path(marker_dir) / f"call-{x}-{time.time_ns()}").touch()
    if check and not list(PREPARED.glob("done-*")):
        raise RuntimeError("started before its prerequisite finished")
    return {"x": x}


def thread_caps(x):
    import numpy  # noqa: F401  (loads its BLAS, whose pool threadpoolctl reports)
    from threadpoolctl import threadpool_info
    return {"omp_env": int(os.environ["OMP_NUM_THREADS"]),
            "pool_threads": max(pool["num_threads"] for pool in threadpool_info())}
'''


@pytest.fixture(scope="session")
def tasks_dir(tmp_path_factory) -> Path:
    """A folder on sys.path (here and in spawned workers) holding the ``sweep_tasks`` module."""
    folder = tmp_path_factory.mktemp("sweep_tasks")
    (folder / "sweep_tasks.py").write_text(TASKS)
    sys.path.insert(0, str(folder))
    yield folder
    sys.path.remove(str(folder))


@pytest.fixture(scope="session")
def ray_session():
    """One small local Ray head for the whole session (loopback, no auth, no telemetry)."""
    from mmcache.lab.sweep.engines import local_ray_head  # sets Ray's env before Ray is imported
    ray = pytest.importorskip("ray")
    with local_ray_head(num_cpus=2):
        yield ray


def square_spec(marker_dir: Path, xs=(1, 2, 3), **extra) -> dict:
    return {"name": "squares", "function": "sweep_tasks:square",
            "parameters": {"marker_dir": str(marker_dir), **extra.pop("parameters", {})},
            "grid": {"x": list(xs)}, **extra}


def calls(marker_dir: Path) -> dict[int, int]:
    """How many times each x was called."""
    counts: dict[int, int] = {}
    for marker in marker_dir.glob("call-*"):
        x = int(marker.name.split("-")[1])
        counts[x] = counts.get(x, 0) + 1
    return counts


# ---- spec validation -------------------------------------------------------------------

GOOD = {"function": "mmcache.lab.sweep.tasks:replay", "grid": {"policy": ["lru"],
                                                           "cache_size": [1 << 20]}}


@pytest.mark.parametrize("change, field", [
    ({"colour": "red"}, "colour"),
    ({"notebook": "x.py"}, "exactly one of `function`"),
    ({"function": "no_colon"}, "`function`"),
    ({"function": "mmcache.no_such_module:f"}, "`function`"),
    ({"function": "mmcache.lab.sweep.tasks:nope"}, "`function`"),
    ({"grid": {"policy": "lru"}}, "`grid.policy`"),
    ({"grid": {}}, "`grid`"),
    ({"points": [{"policy": "lru"}]}, "exactly one of `grid`"),
    ({"parameters": {"policy": "fifo"}}, "`parameters`"),
    ({"parameters": ["trace"]}, "`parameters`"),
    ({"seeds": [1, 1]}, "`seeds`"),
    ({"seeds": "0"}, "`seeds`"),
    ({"seed_parameter": "not an id", "seeds": [0]}, "`seed_parameter`"),
    ({"smoke": True}, "`smoke`"),
    ({"resources": {"cpus": 0}}, "`resources.cpus`"),
    ({"resources": {"cores": 1}}, "resources.cores"),
    ({"figure": {"y": "miss_ratio"}}, "`figure.x`"),
    ({"figure": {"x": "nope", "y": "miss_ratio"}}, "`figure.x`"),
    ({"name": "has space"}, "`name`"),
])
def test_bad_spec_names_the_field(change, field) -> None:
    with pytest.raises(ConfigError, match=field.replace("[", r"\[").replace(".", r"\.")):
        parse_spec({**GOOD, **change})


def test_bad_points_entry_is_named(tmp_path) -> None:
    raw = {"function": GOOD["function"], "points": [{"policy": "lru"}, {"policy": "lru"}]}
    with pytest.raises(ConfigError, match=r"points\[1\]"):
        parse_spec(raw)
    with pytest.raises(ConfigError, match=r"points\[0\]"):
        parse_spec({**raw, "points": [{"bad key": 1}]})
    with pytest.raises(ConfigError, match="`notebook`"):
        parse_spec({"notebook": "missing.py", "grid": {"X": [1]}}, base_dir=tmp_path)
    (tmp_path / "nb.py").write_text(NOTEBOOK)
    with pytest.raises(ConfigError, match="`smoke`"):
        parse_spec({"notebook": "nb.py", "grid": {"SMOKE": [True]}}, base_dir=tmp_path)


def test_points_are_content_addressed(tasks_dir, tmp_path) -> None:
    spec = parse_spec({**square_spec(tmp_path, xs=(1, 2)), "seeds": [0, 1]})
    assert [p.params["x"] for p in spec.points] == [1, 1, 2, 2]
    assert [p.params["seed"] for p in spec.points] == [0, 1, 0, 1]
    assert len({p.id for p in spec.points}) == 4
    assert spec.points[0].id.startswith("x=1,seed=0-")
    again = parse_spec({**square_spec(tmp_path, xs=(2, 1)), "seeds": [0, 1]})
    assert {p.id for p in again.points} == {p.id for p in spec.points}


def test_cli_reports_a_bad_spec(tmp_path) -> None:
    spec = tmp_path / "bad.yaml"
    spec.write_text(yaml.safe_dump({**GOOD, "grid": {"policy": "lru"}}))
    proc = subprocess.run([sys.executable, "-m", "mmcache.lab.sweep", str(spec), "--out",
                           str(tmp_path / "out")], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "grid.policy" in proc.stderr


# ---- running, resuming, failing --------------------------------------------------------

def test_function_sweep_writes_points_table_and_figure(tasks_dir, tmp_path) -> None:
    markers = tmp_path / "markers"
    markers.mkdir()
    spec = parse_spec(square_spec(markers, seeds=[0, 5],
                                  figure={"x": "x", "y": "square", "hue": "seed"}))
    report = run_sweep(spec, tmp_path / "out", progress=False)
    assert (report.ran, report.skipped, report.failed) == (6, 0, 0)
    for point in spec.points:
        folder = tmp_path / "out" / point.id
        metrics = json.loads((folder / "metrics.json").read_text())
        assert metrics["square"] == point.params["x"] ** 2
        assert json.loads((folder / RECORD_FILE).read_text())["status"] == "ok"
    table = pd.read_csv(tmp_path / "out" / "results.csv")
    assert list(table.point) == [p.id for p in spec.points]
    assert list(table.x_plus_seed) == [1, 6, 2, 7, 3, 8]
    assert list(table["nested.half"]) == [0.5, 0.5, 1.0, 1.0, 1.5, 1.5]
    assert (tmp_path / "out" / "squares.png").read_bytes()[:4] == b"\x89PNG"
    assert not (tmp_path / "out" / PARTIAL_DIR).exists()


@pytest.mark.timeout(120)
def test_points_that_finish_before_the_pool_waits_are_all_collected(tasks_dir, tmp_path,
                                                                    monkeypatch) -> None:
    """A point done by the time the local engine looks at its pending futures (a fast point)
    is collected, not left holding a worker slot (that spun the engine forever)."""
    from concurrent.futures import ProcessPoolExecutor

    submit = ProcessPoolExecutor.submit

    def submit_and_finish(self, fn, *args, **kwargs):
        future = submit(self, fn, *args, **kwargs)
        future.exception()  # wait: the point is done before the engine sees it
        return future

    monkeypatch.setattr(ProcessPoolExecutor, "submit", submit_and_finish)
    markers = tmp_path / "markers"
    markers.mkdir()
    report = run_sweep(parse_spec(square_spec(markers, seeds=[0, 5])), tmp_path / "out",
                       progress=False)
    assert (report.ran, report.skipped, report.failed) == (6, 0, 0)


def test_points_run_with_thread_pools_capped_at_their_cpus(tasks_dir, tmp_path) -> None:
    """Two one-core points side by side on a 2-core machine must not each start 2-thread
    BLAS / OpenMP pools (oversubscribed, they spin-wait)."""
    spec = parse_spec({"name": "caps", "function": "sweep_tasks:thread_caps",
                       "grid": {"x": [1, 2]}, "resources": {"cpus": 1}})
    run_sweep(spec, tmp_path / "out", progress=False)
    table = pd.read_csv(tmp_path / "out" / "results.csv")
    assert list(table.omp_env) == [1, 1]
    assert list(table.pool_threads) == [1, 1]


def prerequisite_tasks(markers: Path) -> list:
    """Points 0 and 2 check that their prerequisite ran; point 1 needs none."""
    return [(i, ("function", "sweep_tasks:after_prepare",
                 {"x": i, "marker_dir": str(markers), "check": i != 1})) for i in range(3)]


def test_a_prerequisite_runs_once_before_its_points_and_beside_the_others(tasks_dir,
                                                                          tmp_path) -> None:
    from mmcache.lab.sweep.engines import available_cpus, run_local
    from mmcache.lab.sweep.spec import Resources

    markers = tmp_path / "markers"
    markers.mkdir()
    prepared = tasks_dir / "prepared"
    if prepared.exists():
        for mark in prepared.iterdir():
            mark.unlink()
    outcomes = dict(run_local(prerequisite_tasks(markers), Resources(cpus=1),
                              needs={0: "sweep_tasks:prepare", 2: "sweep_tasks:prepare"}))
    assert all(o.ok for o in outcomes.values()), {i: o.error for i, o in outcomes.items()}
    done = [int(m.name.split("-")[1]) for m in prepared.glob("done-*")]
    assert len(done) == 1  # once, for both points that need it
    started = {int(m.name.split("-")[1]): int(m.name.split("-")[2]) for m in markers.iterdir()}
    assert started[0] > done[0] and started[2] > done[0]
    if available_cpus() >= 2:  # the point without a prerequisite did not wait for it
        assert started[1] < done[0]


def test_a_failed_prerequisite_fails_its_points_only(tasks_dir, tmp_path) -> None:
    from mmcache.lab.sweep.engines import run_local
    from mmcache.lab.sweep.spec import Resources

    markers = tmp_path / "markers"
    markers.mkdir()
    outcomes = dict(run_local(prerequisite_tasks(markers), Resources(cpus=1),
                              needs={0: "sweep_tasks:prepare_and_fail",
                                     2: "sweep_tasks:prepare_and_fail"}))
    assert outcomes[1].ok
    for i in (0, 2):
        assert not outcomes[i].ok and "prerequisite sweep_tasks:prepare_and_fail failed" in \
            outcomes[i].error and "cannot prepare" in outcomes[i].error
    assert sorted(int(m.name.split("-")[1]) for m in markers.iterdir()) == [1]


def test_notebook_entries_name_their_prerequisite(tmp_path) -> None:
    (tmp_path / "tiny.py").write_text(NOTEBOOK)
    (tmp_path / "other.py").write_text(NOTEBOOK)
    spec = parse_spec({"notebooks": [{"path": "tiny.py", "needs": "mmcache.lab.sweep.tasks:replay"},
                                     "other.py"]}, base_dir=tmp_path)
    assert [p.needs for p in spec.points] == ["mmcache.lab.sweep.tasks:replay", None]
    for entry, field in (({"path": "tiny.py", "needs": "no colon"}, "notebooks[0].needs"),
                         ({"path": "tiny.py", "needs": "mmcache.nope:f"}, "notebooks[0].needs"),
                         ({"needs": "mmcache.lab.sweep.tasks:replay"}, "notebooks[0]"),
                         ({"path": "tiny.py", "after": "x"}, "notebooks[0]")):
        with pytest.raises(ConfigError, match=re.escape(f"`{field}")):
            parse_spec({"notebooks": [entry]}, base_dir=tmp_path)


def test_failed_point_is_recorded_and_rerun_resumes(tasks_dir, tmp_path) -> None:
    markers = tmp_path / "markers"
    markers.mkdir()
    (markers / "fail-2").touch()
    spec = parse_spec(square_spec(markers, xs=(1, 2, 3, 4)))
    first = run_sweep(spec, tmp_path / "out", progress=False)
    assert (first.ran, first.failed) == (4, 1)
    row = first.table.set_index("x").loc[2]
    assert row.status == "failed" and "point 2 was told to fail" in row.error
    assert list(first.table.status) == ["ok", "failed", "ok", "ok"]
    assert list(first.table.square.fillna(-1)) == [1, -1, 9, 16]
    (markers / "fail-2").unlink()
    second = run_sweep(spec, tmp_path / "out", progress=False)
    assert (second.ran, second.skipped, second.failed) == (1, 3, 0)
    assert calls(markers) == {1: 1, 2: 2, 3: 1, 4: 1}
    assert list(pd.read_csv(tmp_path / "out" / "results.csv").square) == [1, 4, 9, 16]
    third = run_sweep(spec, tmp_path / "out", progress=False)
    assert (third.ran, third.skipped) == (0, 4)


def test_point_ids_follow_source_and_parameters(tasks_dir, tmp_path) -> None:
    base = parse_spec(square_spec(tmp_path, xs=(1,))).points[0].id
    other_params = parse_spec(square_spec(tmp_path, xs=(1,), parameters={"sleep_s": 0.001}))
    assert other_params.points[0].id != base
    notebook = tmp_path / "nb.py"
    notebook.write_text(NOTEBOOK)
    raw = {"notebook": "nb.py", "grid": {"X": [1]}}
    before = parse_spec(raw, base_dir=tmp_path).points[0].id
    notebook.write_text(NOTEBOOK + "\nprint('changed')\n")
    assert parse_spec(raw, base_dir=tmp_path).points[0].id != before


def test_sigint_stops_cleanly_and_the_next_run_resumes(tasks_dir, tmp_path) -> None:
    markers = tmp_path / "markers"
    markers.mkdir()
    spec_path = tmp_path / "slow.yaml"
    spec_path.write_text(yaml.safe_dump(square_spec(markers, xs=list(range(8)),
                                                    parameters={"sleep_s": 0.7})))
    out = tmp_path / "out"
    cmd = [sys.executable, "-m", "mmcache.lab.sweep", str(spec_path), "--engine", "local",
           "--out", str(out), "--no-progress"]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(tasks_dir)])}
    # the default SIGINT disposition, as in a terminal: a test run started in the background
    # (`cmd &` in a script) inherits SIGINT ignored, and Python then never raises
    # KeyboardInterrupt, so the sweep would run to the end and exit 0
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    deadline = time.monotonic() + 90
    while not list(out.glob(f"*/{RECORD_FILE}")):
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
        time.sleep(0.05)
    proc.send_signal(signal.SIGINT)
    _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 130, stderr
    assert "resume" in stderr
    done = sorted(p.parent.name for p in out.glob(f"*/{RECORD_FILE}"))
    assert 1 <= len(done) < 8
    assert sorted(p.name for p in out.iterdir()) == done  # whole points only, no table yet
    for name in done:
        assert json.loads((out / name / "metrics.json").read_text())["square"] >= 0
    done_x = {json.loads((out / n / RECORD_FILE).read_text())["params"]["x"] for n in done}

    rerun = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=90)
    assert rerun.returncode == 0, rerun.stderr
    assert f"{len(done)} already done" in rerun.stdout
    table = pd.read_csv(out / "results.csv")
    assert list(table.square) == [x * x for x in range(8)]
    assert all(calls(markers)[x] == 1 for x in done_x)
    assert not (out / PARTIAL_DIR).exists()


# ---- notebooks -------------------------------------------------------------------------

NOTEBOOK = '''# %% tags=["parameters"]
SMOKE = False
X = 1

# %%
from mmcache.lab.runbook import write_metrics

assert X >= 0, "X must not be negative"
write_metrics({"double": 2 * X, "smoke": SMOKE})
'''


def test_notebook_sweep_runs_papermill_per_point(tmp_path) -> None:
    (tmp_path / "tiny.py").write_text(NOTEBOOK)
    (tmp_path / "tiny.yaml").write_text(yaml.safe_dump(
        {"notebook": "tiny.py", "smoke": True, "points": [{"X": 2}, {"X": -1}]}))
    spec = load_spec(tmp_path / "tiny.yaml")
    report = run_sweep(spec, tmp_path / "out", progress=False)
    assert list(report.table.status) == ["ok", "failed"], report.table.error.tolist()
    assert report.table.double[0] == 4 and report.table.smoke[0]
    assert "X must not be negative" in report.table.error[1]
    for point, x in zip(spec.points, (2, -1)):  # the failed point keeps its executed copy
        executed = json.loads((tmp_path / "out" / point.id / "tiny.ipynb").read_text())
        assert any(f"X = {x}" in "".join(c["source"]) for c in executed["cells"])


# ---- Ray -------------------------------------------------------------------------------

def test_ray_and_local_give_the_same_table(ray_session, tmp_path) -> None:
    spec = parse_spec({"name": "replay_small", "function": "mmcache.lab.sweep.tasks:replay",
                       "grid": {"policy": ["lru", "s3fifo"], "cache_size": [1 << 24, 1 << 26]}})
    local = run_sweep(spec, tmp_path / "local", engine="local", progress=False)
    on_ray = run_sweep(spec, tmp_path / "ray", engine="ray", progress=False)
    assert local.failed == on_ray.failed == 0
    assert (tmp_path / "local" / "results.csv").read_bytes() == \
        (tmp_path / "ray" / "results.csv").read_bytes()
    assert ray_session.is_initialized()  # the sweep used the session's Ray, and left it up


# ---- display and progress ----------------------------------------------------------------

def test_a_sweep_report_shows_its_counts_and_table_escaped(tasks_dir, tmp_path) -> None:
    markers = tmp_path / "markers"
    markers.mkdir()
    (markers / "fail-3").touch()
    report = run_sweep(parse_spec(square_spec(markers)), tmp_path / "out", progress=False)
    text = repr(report)
    assert text == ("SweepReport(points=3, ran=3, skipped=0, failed=1, columns=[point, "
                    "marker_dir, x, status, error, square, +2 more])")
    page = report._repr_html_()
    for field in ("SweepReport", "ran now", "failed now", "point", "square", "status", "ok",
                  "point 3 was told to fail"):
        assert field in page, field
    report.table.loc[0, "error"] = "<script>alert(1)</script>"
    assert "<script>" not in report._repr_html_()
    assert report.to_dataframe() is report.table


def test_a_sweeps_progress_is_silenced_by_the_switch_but_not_its_failures(
        tasks_dir, tmp_path, monkeypatch, capsys) -> None:
    import mmcache.metrics

    markers = tmp_path / "markers"
    markers.mkdir()
    (markers / "fail-3").touch()
    spec = parse_spec(square_spec(markers))
    monkeypatch.setattr(mmcache.metrics, "PROGRESS_DELAY_S", 0.0)
    monkeypatch.setenv("MMCACHE_PROGRESS", "0")
    run_sweep(spec, tmp_path / "quiet", progress=True)  # the switch wins
    out, err = capsys.readouterr()
    assert err == "" and "FAILED" in out  # failures are printed anyway
    monkeypatch.delenv("MMCACHE_PROGRESS")
    run_sweep(spec, tmp_path / "loud")
    assert "sweep squares" in capsys.readouterr().err
