"""Notebook 00 (the tour) in smoke mode: every lookup comes back as the cache's contract says, and
each step of the tour (own embeddings, encoder, pairs, trace, dashboard) did what it shows."""

from __future__ import annotations

import json

import pytest

pytestmark = pytest.mark.notebook


def test_every_lookup_as_expected(smoke_metrics) -> None:
    m = smoke_metrics("00_quickstart")
    wrong = [c for c in m["cases"] if not c["as expected"]]
    assert not wrong, wrong
    assert m["n_lookups"] >= 13


def test_exact_image_hits_need_the_same_pixels(smoke_metrics) -> None:
    """A re-encoded PNG is an exact hit; a brighter copy never is (a semantic hit below
    similarity 1 with an image encoder, else a miss)."""
    m = smoke_metrics("00_quickstart")
    case = {c["case"]: c for c in m["cases"] if c["modality"] == "image"}
    png = case["same photo, saved as PNG"]
    assert (png["got"], png["similarity"]) == ("l1 hit", 1.0)
    brighter = case["brighter copy"]
    if m["image_semantic"] and brighter["got"] != "miss":
        assert brighter["got"] != "l1 hit" and brighter["similarity"] < 1.0
    else:
        assert brighter["got"] == "miss"


def test_shows_each_outcome_for_each_modality(smoke_metrics) -> None:
    cases = smoke_metrics("00_quickstart")["cases"]
    for modality in ("text", "image", "audio"):
        got = {c["got"] for c in cases if c["modality"] == modality}
        assert {"l1 hit", "miss"} <= got, (modality, got)
    assert any(c["got"] == "l2 hit" and c["modality"] == "text" for c in cases)
    assert any(c["got"] == "l2 hit" and c["modality"] == "audio" for c in cases)
    tenants = [c for c in cases if c["case"].endswith("other tenant")]
    assert len(tenants) == 3 and all(c["got"] == "miss" for c in tenants)


def test_results_name_their_weights(smoke_metrics) -> None:
    weights = smoke_metrics("00_quickstart")["weights"]
    assert weights["text"].startswith("minilm:")
    assert "whisper" in weights["audio"] and "stand-in" not in " ".join(weights.values())


def test_freshness_follows_ttl_stale_window_and_scope_factor(smoke_metrics) -> None:
    cases = smoke_metrics("00_quickstart")["freshness_cases"]
    wrong = [c for c in cases if c["got"] != c["expected"]]
    assert not wrong, wrong
    got = {(c["minutes after put"], c["scope"]): c["got"] for c in cases}
    assert got[(4, "tenant-a")] == "fresh" and got[(4, "demo-7")] == "stale-while-revalidate"
    assert got[(11, "tenant-a")] == "stale-while-revalidate" and got[(13, "tenant-a")] == "miss"


def test_own_embeddings_and_a_registered_encoder_find_the_near_query(smoke_metrics) -> None:
    m = smoke_metrics("00_quickstart")
    assert m["own_embeddings"]["near vector"] is not None
    assert m["own_embeddings"]["far vector"] is None
    assert m["own_encoder"]["tier"] == "l2" and 0.7 <= m["own_encoder"]["similarity"] < 1.0


def test_the_study_runs_on_the_pairs_file(smoke_metrics) -> None:
    pairs = smoke_metrics("00_quickstart")["own_pairs"]
    assert pairs["file"] == "pairs.jsonl" and pairs["n_pairs"] == 21
    assert pairs["encoder_ids"]["text"].startswith("minilm:")
    for rule in pairs["rules"]:
        assert rule["lookups"] == 21 and 0.0 <= rule["realised_error"] <= rule["hit_rate"]


def test_the_trace_replays_within_the_optimal_bound(smoke_metrics) -> None:
    trace = smoke_metrics("00_quickstart")["own_trace"]
    assert trace["n_req"] == 5000 and trace["n_obj"] <= trace["bound_lower"]
    assert trace["bound_lower"] <= trace["bound_upper"] <= min(trace["misses"].values())
    assert set(trace["misses"]) == {"fifo", "lru", "arc", "s3fifo", "sieve"}


def test_under_papermill_the_dashboard_is_a_static_table(smoke_metrics) -> None:
    from mmcache.lab import runbook

    smoke_metrics("00_quickstart")
    cells = json.loads((runbook.run_dir("00_quickstart", smoke=True)
                        / "00_quickstart.ipynb").read_text())["cells"]
    board = next(c for c in cells
                 if c["cell_type"] == "code" and "cache.dashboard(" in "".join(c["source"]))
    (output,) = board["outputs"]
    assert "application/vnd.jupyter.widget-view+json" not in output["data"]
    assert "Threshold state of scope" in "".join(output["data"]["text/html"])
