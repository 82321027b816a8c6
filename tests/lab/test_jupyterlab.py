"""Notebook 00 run cell by cell in a real JupyterLab, driven in headless chromium.

A smoke copy of ``notebooks/00_quickstart.ipynb`` (papermill injects ``SMOKE = True`` and runs
nothing) is opened in JupyterLab, started on loopback as ``make lab`` starts it
(:mod:`mmcache.lab.jupyterlab`) with a smoke run's environment: the kernel is offline and writes
the notebook's metrics and figures under ``tmp_path``. Every cell runs through the UI (Run All
Cells); then no output may be an error, the dashboard must be an ``ipywidgets.HTML`` rendered by
the widget manager (not a text stand-in) and the cache and its metrics must show their HTML
tables. A screenshot of the whole executed notebook is saved to
``runs/jupyterlab/00_quickstart.png`` for a person to look at.

Uses the ``chromium`` fixture (tests/lab/conftest.py): skipped without chromium, except in CI.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import signal
import socket
import subprocess
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterator

import papermill
import pytest

from mmcache.lab.jupyterlab import lab_command
from mmcache.lab.runbook import NOTEBOOK_DIR, RUN_DIR_ENV, run_env
from mmcache.metrics import DASHBOARD_ENV
from mmcache.paths import RUNS_DIR

if TYPE_CHECKING:
    from selenium.webdriver import Chrome

pytestmark = [pytest.mark.notebook, pytest.mark.slow]

NOTEBOOK = "00_quickstart"
SCREENSHOT = RUNS_DIR / "jupyterlab" / f"{NOTEBOOK}.png"
SERVER_START_S = 60
KERNEL_START_S = 120
RUN_ALL_S = 300
VIEWPORT_WIDTH = 1400
MAX_SCREENSHOT_HEIGHT = 16000
#: The test's JupyterLab user settings: no news question in a toast; every cell attached to the
#: page, so that the checks and the screenshot see the whole notebook.
LAB_SETTINGS = {
    "@jupyterlab/apputils-extension/notification": {"fetchNews": "false",
                                                    "checkForUpdates": False},
    "@jupyterlab/notebook-extension/tracker": {"windowingMode": "none"},
}
#: JavaScript that finds the open notebook's panel (``arguments[0]``: its path) as ``panel``.
FIND_PANEL = """
const app = window.jupyterapp;
const panel = app && Array.from(app.shell.widgets('main'))
    .find(w => w.context && w.context.path === arguments[0]);
"""
KERNEL_IDLE = FIND_PANEL + """
const kernel = panel && panel.sessionContext.session && panel.sessionContext.session.kernel;
return !!kernel && kernel.status === 'idle';
"""
CODE_CELLS = FIND_PANEL + """
const cells = panel.content.widgets.filter(c => c.model.type === 'code');
"""
PROGRESS = CODE_CELLS + """
return {cells: cells.length, executed: cells.filter(c => c.model.executionCount !== null).length,
        errors: cells.some(c => c.model.outputs.toJSON().some(o => o.output_type === 'error'))};
"""
ERRORS = CODE_CELLS + """
return cells.flatMap(c => c.model.outputs.toJSON().filter(o => o.output_type === 'error')
    .map(o => ({cell: c.model.sharedModel.getSource(), traceback: o.traceback.join('\\n')})));
"""
#: The height of the notebook's cells and how much of the window is not its scrolled area.
NOTEBOOK_HEIGHT = FIND_PANEL + """
return [panel.content.viewportNode.scrollHeight,
        window.innerHeight - panel.content.outerNode.clientHeight];
"""
SCROLL_TO_TOP = FIND_PANEL + "panel.content.outerNode.scrollTop = 0;"
ANSI_ESCAPE = re.compile(r"\x1b\[[0-9;]*m")


@dataclass(frozen=True)
class LabServer:
    """A running JupyterLab: its address and login token."""

    url: str
    token: str


def _free_port() -> int:
    """A TCP port free on loopback now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _smoke_copy(folder: Path) -> Path:
    """Notebook 00 with ``SMOKE = True`` injected by papermill, not executed, in ``folder``."""
    folder.mkdir(parents=True, exist_ok=True)
    copy = folder / f"{NOTEBOOK}.ipynb"
    papermill.execute_notebook(str(NOTEBOOK_DIR / f"{NOTEBOOK}.ipynb"), str(copy),
                               parameters={"SMOKE": True}, prepare_only=True, progress_bar=False)
    return copy


def _write_settings(config_dir: Path) -> None:
    """Write :data:`LAB_SETTINGS` as the user settings of a JupyterLab configured in
    ``config_dir`` (its ``JUPYTER_CONFIG_DIR``)."""
    for plugin, settings in LAB_SETTINGS.items():
        path = config_dir / "lab" / "user-settings" / f"{plugin}.jupyterlab-settings"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(settings))


def _server_env(run_dir: Path, config_dir: Path) -> dict[str, str]:
    """This process's environment (offline switches, PYTHONPATH) with a smoke run's variables
    (metrics and figures to ``run_dir``), Jupyter's configuration from ``config_dir`` only and
    the dashboard live whatever the caller's environment says."""
    env = {**os.environ, **run_env(run_dir, smoke=True), "JUPYTER_CONFIG_DIR": str(config_dir)}
    env.pop(DASHBOARD_ENV, None)
    return env


def _wait_for(condition: Callable[[], Any], timeout_s: float, what: str,
              poll_s: float = 0.5) -> Any:
    """Poll ``condition()`` until it returns something true and return that; fail the test
    saying ``what`` did not happen within ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while not (result := condition()):
        if time.monotonic() > deadline:
            pytest.fail(f"{what} within {timeout_s:.0f} s")
        time.sleep(poll_s)
    return result


def _answers(server: LabServer, proc: subprocess.Popen, log: Path) -> bool:
    """Whether the server answers ``/api/status``; fails the test if it has exited."""
    if proc.poll() is not None:
        pytest.fail(f"jupyter lab exited with {proc.returncode}:\n{log.read_text()[-3000:]}")
    try:
        with urllib.request.urlopen(f"{server.url}/api/status?token={server.token}",
                                    timeout=2) as response:
            return response.status == 200
    except OSError:
        return False


def _stop(proc: subprocess.Popen) -> None:
    """Stop the server's process group: SIGTERM (the server shuts its kernels down), then
    SIGKILL if it has not exited within 20 s."""
    os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


@pytest.fixture
def lab_server(tmp_path: Path) -> Iterator[LabServer]:
    """JupyterLab on a free loopback port with a random token, its root a folder holding the
    smoke copy of notebook 00; stopped (its whole process group) at teardown."""
    port, token, root = _free_port(), secrets.token_hex(16), tmp_path / "lab"
    _smoke_copy(root)
    _write_settings(tmp_path / "jupyter-config")
    server = LabServer(f"http://127.0.0.1:{port}", token)
    log = tmp_path / "jupyterlab.log"
    command = lab_command(root, "--no-browser", "--ip=127.0.0.1", f"--port={port}",
                          "--ServerApp.port_retries=0", f"--IdentityProvider.token={token}",
                          "--LabApp.expose_app_in_browser=True")
    with log.open("w") as out:
        proc = subprocess.Popen(command, cwd=root, stdout=out, stderr=subprocess.STDOUT,
                                env=_server_env(tmp_path / "run", tmp_path / "jupyter-config"),
                                start_new_session=True)
    try:
        _wait_for(lambda: _answers(server, proc, log), SERVER_START_S, "jupyter lab answering")
        yield server
    finally:
        _stop(proc)


def _run_all_cells(driver: Chrome, path: str) -> None:
    """Run every cell of the open notebook ``path`` from the UI's command (Run > Run All
    Cells) and wait until the kernel is idle with every code cell executed or an error shown."""
    driver.execute_script(FIND_PANEL + "app.commands.execute('notebook:run-all-cells');", path)

    def finished() -> bool:
        progress = driver.execute_script(PROGRESS, path)
        done = progress["errors"] or progress["executed"] == progress["cells"]
        return done and driver.execute_script(KERNEL_IDLE, path)

    _wait_for(finished, RUN_ALL_S, "every cell executed and the kernel idle again")


def _error_outputs(driver: Chrome, path: str) -> list[str]:
    """Each error output of the notebook: its cell's source and the traceback, as text."""
    return [f"{e['cell']}\n{ANSI_ESCAPE.sub('', e['traceback'])}"
            for e in driver.execute_script(ERRORS, path)]


def _set_viewport(driver: Chrome, height: int) -> None:
    """Give the page a :data:`VIEWPORT_WIDTH` × ``height`` pixel viewport (a headless
    window's own size is bounded by its screen's)."""
    driver.execute_cdp_cmd("Emulation.setDeviceMetricsOverride", {
        "width": VIEWPORT_WIDTH, "height": height, "deviceScaleFactor": 1, "mobile": False})


def _save_full_screenshot(driver: Chrome, path: str, to: Path) -> None:
    """Make the page as tall as the whole notebook and save a screenshot of it to ``to``."""
    height, rest = driver.execute_script(NOTEBOOK_HEIGHT, path)
    _set_viewport(driver, min(height + rest, MAX_SCREENSHOT_HEIGHT))
    time.sleep(1)  # the page lays the notebook out at its new size
    driver.execute_script(SCROLL_TO_TOP, path)
    to.parent.mkdir(parents=True, exist_ok=True)
    assert driver.save_screenshot(str(to)), to


@pytest.mark.timeout(600)
def test_notebook_00_runs_in_jupyterlab_with_its_widget_and_tables(
        chromium: Chrome, lab_server: LabServer, tmp_path: Path) -> None:
    from selenium.webdriver.common.by import By  # deferred: the fixture checked selenium

    path = f"{NOTEBOOK}.ipynb"
    _set_viewport(chromium, 1000)
    chromium.get(f"{lab_server.url}/lab/tree/{path}?token={lab_server.token}")
    _wait_for(lambda: chromium.execute_script(KERNEL_IDLE, path), KERNEL_START_S,
              "the notebook open with its kernel idle")
    _run_all_cells(chromium, path)
    _save_full_screenshot(chromium, path, SCREENSHOT)

    errors = _error_outputs(chromium, path)
    assert not errors, "error outputs:\n\n" + "\n\n".join(errors)
    widgets = chromium.find_elements(By.CSS_SELECTOR, ".jp-OutputArea-output .widget-html-content")
    assert any("Cache dashboard" in w.text for w in widgets), \
        "the dashboard's ipywidgets.HTML was not rendered by the widget manager"
    displays = chromium.find_elements(By.CSS_SELECTOR, ".jp-RenderedHTML div.mmcache-display")
    with_tables = [d for d in displays if d.find_elements(By.TAG_NAME, "table")]
    assert len(with_tables) >= 2, \
        f"the cache and cache.metrics: {len(with_tables)} HTML displays with tables, not 2"
    assert (tmp_path / "run" / "metrics.json").is_file(), f"no metrics in ${RUN_DIR_ENV}"
