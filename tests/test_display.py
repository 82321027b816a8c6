"""Notebook displays of the embeddable cache: the shared HTML helpers (escaped), Hit and
TieredCache (open, closed, busy), and what a display must not do (raise, wait, load, print
addresses)."""

from __future__ import annotations

import re
import threading
import time

import numpy as np
import pytest

from mmcache import Query, TieredCache
from mmcache.errors import InvalidInputError
from mmcache.lab.testing import FakeClock
from mmcache.types import (Hit, fmt, fmt_bytes, fmt_seconds, html_card, html_fields, html_table,
                           preview, safe_display)

DIM = 16
SCRIPT = "<script>alert('x')</script>"


def unit(seed: int) -> np.ndarray:
    v = np.random.default_rng(seed).normal(size=DIM).astype(np.float32)
    return v / np.linalg.norm(v)


def q(text: str, seed: int, scope: str = "tenant-a", **extra: np.ndarray) -> Query:
    return Query(text=text, embeddings={"text": unit(seed), **extra}, scope=scope)


def small_cache(tmp_path=None) -> TieredCache:
    """Three text entries in tenant-a, one text+image entry in tenant-b whose value holds a
    script tag; four lookups (two l1 hits, one l2 hit, one miss)."""
    config = {"l1": {"max_entries": 100}}
    if tmp_path is not None:
        config["l3"] = {"backend": "sqlite", "path": str(tmp_path / "l3.db")}
    cache = TieredCache(config)
    for i in range(3):
        cache.put(q(f"question {i}", i), f"answer {i}")
    cache.put(q("look", 9, "tenant-b", image=unit(10)), {"html": SCRIPT})
    assert cache.get(q("question 0", 0)).tier == "l1"
    near = Query(text="question 0, reworded", embeddings={"text": unit(0) + 0.01 * unit(5)},
                 scope="tenant-a")
    assert cache.get(near).tier == "l2"
    assert cache.get(q("unrelated", 77)) is None
    assert cache.get(q("look", 9, "tenant-b", image=unit(10))).tier == "l1"
    return cache


def no_address(text: str) -> bool:
    return re.search(r"0x[0-9a-fA-F]{4,}", text) is None


# -- the shared helpers ------------------------------------------------------------------------
def test_html_helpers_escape_every_cell_title_and_note():
    table = html_table([SCRIPT], [[SCRIPT, 1.5]], caption=SCRIPT)
    card = html_card(SCRIPT, html_fields([(SCRIPT, SCRIPT)]), note=SCRIPT)
    for text in (table, card):
        assert "<script>" not in text and "&lt;script&gt;" in text
    assert "<table" in table and "1.5" in table


def test_html_table_says_how_many_rows_it_left_out():
    text = html_table(["n"], [[i] for i in range(60)], max_rows=50)
    assert "<td style='text-align:left'>49</td>" in text and ">50<" not in text
    assert "10 more" in text


def test_cells_read_as_people_write_them():
    assert fmt(None) == fmt(float("nan")) == "—" and fmt(float("inf")) == "∞"
    assert fmt(1234567) == "1,234,567" and fmt(1.0) == "1.0" and fmt(0.123456) == "0.1235"
    assert fmt_bytes(512) == "512 B" and fmt_bytes(1500) == "1.5 kB" and fmt_bytes(None) == "∞"
    assert fmt_seconds(2.5e-4) == "250 µs" and fmt_seconds(0.0031) == "3.1 ms"
    assert fmt_seconds(2.5) == "2.5 s" and fmt_seconds(float("nan")) == "—"
    assert preview("x" * 500, 20) == "'" + "x" * 18 + "…" and len(preview("x" * 500, 20)) == 20
    assert preview(b"\x00" * 3000).startswith("<3,000 bytes>")
    assert "\n" not in preview("two\nlines")


def test_a_display_that_fails_shows_its_type_instead_of_raising():
    def broken() -> str:
        raise RuntimeError("boom")

    assert safe_display(broken, object()) == "object(<display failed: RuntimeError>)"
    assert safe_display(broken, object(), as_html=True).startswith("<pre>object(&lt;")


# -- Hit ---------------------------------------------------------------------------------------
def test_hit_shows_tier_similarities_verdict_freshness_and_a_cut_value():
    hit = Hit(SCRIPT * 40, "l2", 0.91234, "ab" * 32, "stale-while-revalidate",
              {"text": 0.91234, "image": 0.95}, lookup=3, verdict=0.8)
    text = repr(hit)
    assert len(text) < 250 and no_address(text)
    assert "tier='l2'" in text and "text=0.9123" in text and "verdict=0.8" in text
    assert "stale-while-revalidate" in text and "…" in text and "ab" * 32 not in text
    page = hit._repr_html_()
    assert "<script>" not in page and "&lt;script&gt;" in page
    for field in ("similarity: text", "similarity: image", "0.95", "verifier verdict", "0.8",
                  "stale-while-revalidate", "l2"):
        assert field in page
    assert "not judged" in Hit("v", "l1", 1.0, "k")._repr_html_()


def test_a_verified_hit_carries_the_verifiers_score():
    cache = TieredCache({"thresholds": {"rule": "static", "delta": {"text": 0.1},
                                        "verifier_band": 0.5}},
                        verifier=lambda query, entry: 0.75)
    cache.put(q("stored", 1), "answer")
    near = Query(text="near", embeddings={"text": unit(1) + 0.05 * unit(2)}, scope="tenant-a")
    hit = cache.get(near)
    assert hit is not None and hit.tier == "l2" and hit.verdict == 0.75
    assert "verdict=0.75" in repr(hit)
    assert cache.get(q("stored", 1)).verdict is None  # exact: no verifier


# -- TieredCache -------------------------------------------------------------------------------
def test_cache_html_shows_tiers_backends_policies_rule_scopes_and_hit_ratios(tmp_path):
    cache = small_cache(tmp_path)
    page = cache._repr_html_()
    for field in ("Tiers", "l1", "l2", "l3", "memory + faiss", "sqlite", "lru", "static",
                  "δ text", "verifier", "none", "Scopes (2)", "tenant-a", "tenant-b",
                  "Hit ratio per tier and modality set", "text+image", "Latency per stage",
                  "l1.exact", "p99 ≤"):
        assert field in page, field
    rows = dict(re.findall(r"<tr><td style='text-align:left'>(l[123])</td>"
                           r"(?:<td style='text-align:left'>[^<]*</td>){8}"
                           r"<td style='text-align:left'>([^<]*)</td></tr>", page))
    assert rows == {"l1": "0.5", "l2": "0.25", "l3": "0.0"}  # hits ÷ every lookup, per tier
    assert "<script>" not in page and no_address(page)
    cache.close()


def test_cache_repr_is_one_short_line_without_addresses():
    cache = small_cache()
    text = repr(cache)
    assert "\n" not in text and len(text) < 300 and no_address(text), text
    assert text.startswith("TieredCache(l1: memory lru 4/100 entries, l2: memory+faiss lru")
    assert "rule='static'" in text and "scopes=2" in text and "lookups=4" in text
    assert "hit_ratio=0.75" in text


def test_cache_to_dataframe_has_one_row_per_tier(tmp_path):
    cache = small_cache(tmp_path)
    frame = cache.to_dataframe()
    assert list(frame.tier) == ["l1", "l2", "l3"] and list(frame.entries) == [4, 4, 4]
    assert list(frame.hits) == [2, 1, 0] and frame.hit_ratio.tolist() == [0.5, 0.25, 0.0]
    assert frame.max_entries.iloc[0] == 100
    assert frame.max_bytes.iloc[:2].tolist() == [256 << 20, 1 << 30]  # the default byte limits
    assert frame.max_bytes.isna().iloc[2]                              # the L3: none
    cache.close()


def test_a_closed_cache_still_shows_itself(tmp_path):
    cache = small_cache(tmp_path)
    cache.close()
    text, page = repr(cache), cache._repr_html_()
    assert text.startswith("TieredCache(closed;") and "lookups=4" in text
    assert "closed" in page and "l3" in page and "Hit ratio per tier" in page
    assert "display failed" not in text + page


def test_a_display_does_not_wait_for_a_busy_cache_nor_load_an_encoder():
    cache = small_cache()
    cache.config.encoders["text"] = "no-such-encoder"  # loading it would fail loudly
    held, release = threading.Event(), threading.Event()

    def hold() -> None:
        with cache._lock:
            held.set()
            release.wait(10)

    worker = threading.Thread(target=hold)
    worker.start()
    held.wait(5)
    try:
        start = time.perf_counter()
        text, page = repr(cache), cache._repr_html_()
        assert time.perf_counter() - start < 1.0
    finally:
        release.set()
        worker.join()
    assert "lookups=4" in text and "another call held the cache&#x27;s lock" in page
    assert "no-such-encoder (not loaded)" in page and "display failed" not in page


def test_an_escaped_scope_and_value_show_as_text():
    cache = TieredCache()
    cache.put(Query(text="t", embeddings={"text": unit(1)}, scope=SCRIPT), SCRIPT)
    hit = cache.get(Query(text="t", embeddings={"text": unit(1)}, scope=SCRIPT))
    for page in (cache._repr_html_(), hit._repr_html_()):
        assert "<script>" not in page and "&lt;script&gt;" in page


def test_a_redis_url_shows_without_its_password():
    from mmcache.types import redacted_url

    assert redacted_url("redis://:secret@10.0.0.1:6379/0") == "redis://:***@10.0.0.1:6379/0"
    assert redacted_url("redis://u:p@[::1]:7000") == "redis://u:***@[::1]:7000"
    assert redacted_url("redis://127.0.0.1:6379/0") == "redis://127.0.0.1:6379/0"


def test_the_dashboard_shows_the_window_and_the_last_hits_and_renders_at_most_each_refresh():
    cache = TieredCache()
    clock = FakeClock(0.0)
    board = cache.dashboard(refresh_s=1.0, window_s=10.0, live=False)
    board._clock = clock              # the view's own clock, apart from the cache's
    q = Query(text="kept", embeddings={"text": unit(1)}, scope="s")
    cache.put(q, "the answer")
    for _ in range(5):
        cache.get(q)
    cache.get(Query(text="absent", embeddings={"text": unit(2)}, scope="s"))
    assert board.renders == 1         # the first get rendered; the clock has not moved since
    html = board._repr_html_()
    assert "Cache dashboard" in html and "the answer" in html and "Threshold rule now" in html
    assert ">6<" in html              # six lookups in the window
    clock.advance(11.0)               # past the window: those lookups leave the view
    cache.get(q)
    assert board.renders == 2
    assert ">1<" in board._repr_html_() and ">6<" not in board._repr_html_()
    board.close()
    assert cache.after_get is None
    cache.close()


def test_the_dashboard_keeps_the_hook_that_was_there_and_is_static_without_a_kernel():
    cache = TieredCache()
    seen = []
    cache.after_get = seen.append
    board = cache.dashboard()
    assert board.widget is None       # not in a Jupyter kernel: a static table
    cache.get(Query(text="x", scope="s"))
    assert seen == [None]
    board.close()
    assert cache.after_get == seen.append
    with pytest.raises(InvalidInputError):
        cache.dashboard(window_s=0)
    cache.close()


def test_the_dashboard_is_a_widget_that_updates_in_a_live_kernel():
    jupyter_client = pytest.importorskip("jupyter_client")
    manager, client = jupyter_client.manager.start_new_kernel(kernel_name="python3")
    printed = []
    code = "\n".join([
        "import mmcache, numpy as np",
        "cache = mmcache.TieredCache()",
        "board = cache.dashboard(refresh_s=0)",
        "q = mmcache.Query(text='x', embeddings={'text': np.ones(8, np.float32)}, scope='s')",
        "cache.put(q, 'the answer')",
        "before = board.widget.value",
        "for _ in range(3): cache.get(q)",
        "print(type(board.widget).__name__, 'the answer' in board.widget.value,",
        "      before != board.widget.value)"])
    try:
        client.execute_interactive(code, timeout=120, output_hook=lambda m: printed.append(
            m["content"].get("text", "")) if m["msg_type"] == "stream" else None)
    finally:
        client.stop_channels()
        manager.shutdown_kernel()
    assert "".join(printed).split() == ["HTML", "True", "True"]


def test_the_dashboard_shows_a_named_scopes_threshold_state_and_an_error_budget_ledger():
    cache = TieredCache({"thresholds": {"rule": "error-budget", "budget": 0.05}})
    board = cache.dashboard(live=False, scope="tenant-a")
    cache.put(Query(text="kept", embeddings={"text": unit(1)}, scope="tenant-a"), "the answer")
    for k in range(3):
        cache.get(Query(text=f"other {k}", embeddings={"text": unit(2 + k)}, scope="tenant-a"))
    html = board._repr_html_()
    assert "Threshold state of scope &#x27;tenant-a&#x27;" in html
    assert "text: a new entry needs cosine ≥" in html and "allowed now" in html
    rule = cache.thresholds
    assert rule.scope_state("tenant-a", ["text"])["lookups"] == 3
    assert rule.scope_state("tenant-b", ["text"])["lookups"] == 0
    assert "Threshold state" not in cache.dashboard(live=False)._repr_html_()
    cache.close()


def test_a_static_rules_scope_state_is_its_threshold_per_modality():
    from mmcache.thresholds.static import StaticThreshold

    state = StaticThreshold({"text": 0.2, "image": 0.1}).scope_state("s", ["text", "image"])
    assert state == pytest.approx({"text: a new entry needs cosine ≥": 0.8,
                                   "image: a new entry needs cosine ≥": 0.9})
