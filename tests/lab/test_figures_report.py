"""The figures report: `figures/MANIFEST.md` lines and `figures/index.html` in a real browser.

Fast (no notebook runs): a sweep folder is fabricated with figures that
:func:`mmcache.lab.plotting.save_figure` writes for real (PNG, PDF, JSON sidecar), published with
:func:`mmcache.lab.figures.publish` and reported with :func:`mmcache.lab.figures.write_report`, as
``make figures`` does. index.html is then opened from disk in Debian's chromium (package
``chromium`` + ``chromium-driver``) through selenium (the ``chromium`` fixture of
``tests/lab/conftest.py``). Without chromium this skips, except in CI (``CI=true``), where a
missing browser fails the test.
"""

from __future__ import annotations

import json
from pathlib import Path
from urllib.parse import unquote, urlparse

import matplotlib.pyplot as plt
import pytest
from matplotlib.image import imread

from mmcache.lab import figures, plotting
from mmcache.lab.sweep import parse_spec
from mmcache.lab.sweep.store import RECORD_FILE

COMMIT = "0123456789abcdef0123456789abcdef01234567"
LONG_DATA = ("ShareGPT V3 prompts and conversations (real; no licence stated) with rewrites and "
             "traps made by nlpaug (synonym, antonym, name / place / date-word swaps)")
#: name -> (notebook, caption given to save_figure or None for the titles, provenance)
FIGURES = {
    "00_a_lines": ("00_a", None, {
        "weights": {"text": "minilm:all-MiniLM-L6-v2/53aa", "image": "clip:offline-vit/9f0c"},
        "data": {"real": "Asterisk core sounds en (CC-BY-SA-3.0) | prompts",
                 "stream": {"n_queries": 400, "novel_share": 0.1}},
        "smoke": False, "lrs": [0.001, 0.01]}),
    "00_a_bars": ("00_a", "Bars <b>not bold</b> & escaped", {
        "weights": "none (synthetic vectors)",
        "data": {"config": {"n_queries": 400}, "n_queries": 400, "novel_share": 0.1},
        "steps": 200}),
    "01_b_scatter": ("01_b", None, {"weights": "none", "data": LONG_DATA}),
}
TITLES = {"00_a_lines": ("Two lines", "left panel"), "01_b_scatter": ("", "scatter <i>x</i>")}


def _draw(name: str) -> plt.Figure:
    if name == "00_a_bars":
        fig, ax = plt.subplots(figsize=(3, 2))
        ax.bar([0, 1, 2], [3, 1, 2])
        return fig
    suptitle, title = TITLES[name]
    fig, ax = plt.subplots(figsize=(4, 3) if name == "00_a_lines" else (2.5, 2.5))
    ax.plot([0, 1, 2], [0, 1, 0]) if name == "00_a_lines" else ax.scatter([0, 1], [1, 0])
    ax.set_title(title)
    if suptitle:
        fig.suptitle(suptitle)
    return fig


def _report(tmp_path: Path, monkeypatch) -> tuple[Path, list[figures.FigureEntry]]:
    """A figures folder as ``make figures`` leaves it: two ok notebooks, one failed."""
    for name in ("00_a", "01_b", "02_c"):
        (tmp_path / f"{name}.py").write_text('# %% tags=["parameters"]\nSMOKE = True\n')
    spec = parse_spec({"notebooks": ["00_a.py", "01_b.py", "02_c.py"]}, base_dir=tmp_path)
    sweep = tmp_path / "sweep"
    for point, status in zip(spec.points, ("ok", "ok", "failed")):
        stem = Path(point.target).stem
        (sweep / point.id).mkdir(parents=True)
        (sweep / point.id / RECORD_FILE).write_text(json.dumps({"status": status}))
        monkeypatch.setenv(plotting.FIGURE_DIR_ENV, str(sweep / point.id / "figures"))
        for name, (notebook, caption, provenance) in FIGURES.items():
            if notebook == stem:
                fig = _draw(name)
                plotting.save_figure(fig, name, provenance, caption=caption)
                plt.close(fig)
    figs = tmp_path / "figs"
    entries = figures.publish(spec, sweep, figs, tmp_path / "runs")
    figures.write_report(entries, figs, COMMIT, "notebooks/sweeps/figures.yaml", ["02_c"])
    return figs, entries


def test_manifest_has_one_line_per_figure_with_names_and_the_sidecar_for_the_rest(
        tmp_path, monkeypatch) -> None:
    figs, entries = _report(tmp_path, monkeypatch)
    assert [e.name for e in entries] == ["00_a_bars", "00_a_lines", "01_b_scatter"]
    text = (figs / figures.MANIFEST_FILE).read_text()
    assert "[index.html](index.html)" in text and f"`{COMMIT}`" in text
    assert "**Failed, so missing here:** 02_c." in text
    rows = [line for line in text.splitlines() if line.startswith("| [`")]
    assert len(rows) == len(FIGURES)
    for name, row in zip(sorted(FIGURES), rows):
        notebook = FIGURES[name][0]
        cells = [c.strip() for c in row.strip("|").split(" | ")]
        assert cells[0] == f"[`{name}`]({name}.png)" and (figs / f"{name}.png").is_file()
        assert cells[1].startswith(f"`{notebook}` (sha256 ")
        assert cells[2] == "`SMOKE=False`"
        assert cells[3] == f"`{COMMIT[:12]}`"
        assert cells[6] == f"[{name}.json]({name}.json)" and (figs / f"{name}.json").is_file()
    bars, lines, scatter = ([c.strip() for c in r.strip("|").split(" | ")] for r in rows)
    assert lines[4] == "text: minilm:all-MiniLM-L6-v2/53aa; image: clip:offline-vit/9f0c"
    assert lines[5] == "real, stream"                      # the sources' names, not their JSON
    assert bars[4] == "none (synthetic vectors)"
    assert bars[5] == "one described source (see the sidecar)"
    assert scatter[5].endswith(" …") and len(scatter[5]) <= figures.NAME_WIDTH
    assert scatter[5] == LONG_DATA[:len(scatter[5]) - 2].rstrip() + " …"
    # The full provenance stays in the sidecars: none of it is repeated in the table.
    assert "CC-BY-SA" not in text and "n_queries" not in text and "novel_share" not in text
    assert "lrs" not in text and "steps" not in text
    assert json.loads((figs / "00_a_bars.json").read_text())["provenance"]["steps"] == 200


def test_source_and_weight_names_in_one_line() -> None:
    assert figures.source_names(None) == "—" == figures.weight_names(None)
    assert figures.source_names("Fashion-MNIST test photos") == "Fashion-MNIST test photos"
    assert figures.source_names({"cloudPhysics": "trace.bin", "Zipf": "zipf_trace(...)",
                                 "multimodal": {"n_queries": 3}}) \
        == "cloudPhysics, Zipf, multimodal"
    assert figures.source_names(["a", {"b": "x"}]) == "a, b"
    assert figures.source_names({"n_queries": 3}) == "one described source (see the sidecar)"
    assert figures.weight_names({"text": "minilm", "audio": "whisper"}) \
        == "text: minilm; audio: whisper"
    assert figures.weight_names("x\ny") == "x y"


# --- index.html in a real browser ---------------------------------------------------------

WAIT_S = 20


def _load(driver, url: str) -> list[dict]:
    """Open ``url``, wait (bounded) until the page and its images have loaded, and return what
    the browser says of every ``<img>``."""
    from selenium.webdriver.support.ui import WebDriverWait
    driver.get(url)
    WebDriverWait(driver, WAIT_S).until(lambda d: d.execute_script(
        "return document.readyState === 'complete' && "
        "Array.from(document.images).every(i => i.complete)"))
    return driver.execute_script(
        "return Array.from(document.images).map(i => ({src: i.getAttribute('src'), "
        "url: i.src, width: i.naturalWidth, height: i.naturalHeight, alt: i.alt}))")


@pytest.mark.timeout(120)
def test_index_html_shows_every_figure_with_caption_and_provenance_in_chromium(
        tmp_path, monkeypatch, chromium) -> None:
    from selenium.webdriver.common.by import By
    figs, entries = _report(tmp_path, monkeypatch)
    index = figs / figures.INDEX_FILE
    images = _load(chromium, index.as_uri())

    # Every figure's image loaded from its relative path, at the PNG's own size.
    assert [i["src"] for i in images] == [f"{e.name}.png" for e in entries]
    for image in images:
        height, width = imread(figs / image["src"]).shape[:2]
        assert (image["width"], image["height"]) == (width, height), image
        assert image["width"] > 0

    # Captions: given, or the figure's titles; markup in them is shown, not interpreted.
    captions = [c.text for c in chromium.find_elements(By.TAG_NAME, "figcaption")]
    assert captions == ["Bars <b>not bold</b> & escaped", "Two lines; left panel",
                        "scatter <i>x</i>"]
    assert not chromium.find_elements(By.CSS_SELECTOR, "figcaption b, figcaption i")
    assert [i["alt"] for i in images] == captions

    # Each figure's provenance: notebook, parameters, commit, weights, data, the rest.
    for e in entries:
        article = chromium.find_element(By.ID, e.name)
        field = {cls: article.find_element(By.CSS_SELECTOR, f"dd.{cls}").text
                 for cls in ("notebook", "parameters", "commit", "weights", "data", "files")}
        assert field["notebook"].startswith(e.notebook) and e.source in field["notebook"]
        assert field["parameters"] == "SMOKE=False" and field["commit"] == COMMIT
        provenance = FIGURES[e.name][2]
        for text in _leaves(provenance["weights"]):
            assert text in field["weights"]
        for text in _leaves(provenance["data"]):
            assert text in field["data"]
        others = [dd.text for dd in article.find_elements(By.CSS_SELECTOR, "dd.other")]
        assert len(others) == len(provenance) - 2
        assert f"{e.name}.json (provenance)" in field["files"]
    page = chromium.find_element(By.TAG_NAME, "body").text
    assert "Failed, so missing here: 02_c." in page and "3 figures from 2 notebooks" in page
    assert LONG_DATA in page                               # the full text, not the short name

    # Every link is relative and resolves to a file in the folder (or an anchor on the page).
    hrefs = chromium.execute_script(
        "return Array.from(document.links).map(a => [a.getAttribute('href'), a.href])")
    for raw, resolved in hrefs:
        assert "://" not in raw and not raw.startswith("/"), raw
        if raw.startswith("#"):
            assert chromium.find_elements(By.ID, unquote(raw[1:])), raw
        else:
            assert Path(unquote(urlparse(resolved).path)).parent == figs, raw
            assert (figs / unquote(raw)).is_file(), raw

    # The image check can fail: a PNG gone from the folder is an image that did not load.
    (figs / "00_a_lines.png").unlink()
    broken = {i["src"]: i["width"] for i in _load(chromium, index.as_uri())}
    assert broken == {"00_a_bars.png": images[0]["width"], "00_a_lines.png": 0,
                      "01_b_scatter.png": images[2]["width"]}


def _leaves(value) -> list[str]:
    """The texts a provenance value shows: its keys and scalar leaves."""
    if isinstance(value, dict):
        return [t for k, v in value.items() for t in (str(k), *_leaves(v))]
    if isinstance(value, list):
        return [t for v in value for t in _leaves(v)]
    return [value if isinstance(value, str) else json.dumps(value)]
