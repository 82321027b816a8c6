"""`make docs`: the site builds with mkdocs --strict (no warnings, no broken links or anchors)."""

from __future__ import annotations

import subprocess
import sys

from mmcache.paths import PROJECT_ROOT


def test_the_docs_build_strictly(tmp_path) -> None:
    site = tmp_path / "site"
    # `-m` puts this checkout first on sys.path, so the hooks and the API reference read it
    proc = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir",
                           str(site)], cwd=PROJECT_ROOT, capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "WARNING" not in proc.stderr, proc.stderr[-3000:]
    pages = {p.parent.relative_to(site).as_posix() for p in site.rglob("index.html")}
    assert {".", "configuration", "api", "results/02-thresholds", "design/coherence"} <= pages
    reference = (site / "configuration" / "index.html").read_text()
    assert "thresholds.budget" in reference and "Generated from the schema" in reference
    api = (site / "api" / "index.html").read_text()
    assert "opt_bounds" in api and "hypervolume" in api and "load_whisper" in api
    assert ":class:" not in api
