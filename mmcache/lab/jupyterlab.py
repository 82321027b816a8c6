"""JupyterLab as the workbench starts it, for ``make lab`` and tests/lab/test_jupyterlab.py.

The server is quiet and offline: no news feed, no update check and a read-only extension
manager, so it asks no remote site for anything and no toast waits for an answer. Its
notebooks run in the project's kernel: the ``python3`` kernel spec that ipykernel installs into
the venv starts ``python``, which jupyter_client replaces with the server's own interpreter,
the venv's; the notebooks' kernelspec is ``python3``.

Command line (``make lab``)::

    python -m mmcache.lab.jupyterlab [jupyter lab options ...]
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from mmcache.lab.runbook import NOTEBOOK_DIR

#: The settings that keep JupyterLab from reaching out and from popping up notices.
QUIET_OPTIONS = (
    "--LabApp.news_url=None",
    "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate",
    "--LabApp.extension_manager=readonly",
)


def lab_command(root_dir: Path | str, *options: str) -> list[str]:
    """The command that starts JupyterLab on ``root_dir`` with the workbench's settings, then
    ``options`` (``jupyter lab`` options; a later one overrides an earlier one)."""
    as_root = ("--allow-root",) if os.geteuid() == 0 else ()
    return [sys.executable, "-m", "jupyterlab", f"--ServerApp.root_dir={root_dir}",
            *QUIET_OPTIONS, *as_root, *options]


def main(argv: list[str] | None = None) -> None:
    """Replace this process with JupyterLab on ``notebooks/`` (``argv``: more options)."""
    command = lab_command(NOTEBOOK_DIR, *(sys.argv[1:] if argv is None else argv))
    os.execv(command[0], command)


if __name__ == "__main__":
    main()
