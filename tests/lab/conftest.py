"""Shared fixtures of the lab tests: a headless chromium driven through selenium.

The browser is Debian's ``chromium`` with its ``chromedriver`` (package ``chromium-driver``).
Without them a test that asks for ``chromium`` skips, except in CI (``CI=true``), where a
missing browser fails it.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
from pathlib import Path
from typing import TYPE_CHECKING, Iterator

import pytest

if TYPE_CHECKING:
    from selenium.webdriver import Chrome

IN_CI = os.environ.get("CI", "").strip().lower() in ("true", "1")
CHROMIUM_ARGS = ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage")
#: How long a page may take to load and a script to run (JupyterLab's bundle on 2 busy cores).
PAGE_TIMEOUT_S = 60


def _missing_browser_parts() -> list[str]:
    """What of chromium, its driver and selenium is not installed."""
    missing = [what for what, program in (("chromium", "chromium"),
                                          ("chromedriver (Debian chromium-driver)", "chromedriver"))
               if shutil.which(program) is None]
    if importlib.util.find_spec("selenium") is None:
        missing.append("selenium (the test extra of pyproject.toml)")
    return missing


@pytest.fixture
def chromium(tmp_path: Path) -> Iterator[Chrome]:
    """A headless chromium session (selenium, Debian's chromedriver); skipped when the browser
    is absent, except in CI, where that fails."""
    missing = _missing_browser_parts()
    if missing:
        reason = (f"not installed: {', '.join(missing)}; `make setup` installs chromium and "
                  "chromium-driver (apt, as root) and selenium (pip)")
        if IN_CI:
            pytest.fail(f"CI=true, so a missing browser fails: {reason}")
        pytest.skip(reason)
    # deferred: selenium is imported only once it is known to be installed
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = shutil.which("chromium")
    for arg in (*CHROMIUM_ARGS, f"--user-data-dir={tmp_path / 'chromium-profile'}"):
        options.add_argument(arg)
    driver = webdriver.Chrome(service=Service(shutil.which("chromedriver")), options=options)
    try:
        driver.set_page_load_timeout(PAGE_TIMEOUT_S)
        driver.set_script_timeout(PAGE_TIMEOUT_S)
        yield driver
    finally:
        driver.quit()
