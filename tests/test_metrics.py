"""Cache metrics: counters, histograms, DataFrame and Prometheus export, the notebook display;
the progress bar every long call shows and its switches."""

from __future__ import annotations

import math
import re

import pytest

import mmcache.metrics as metrics_module
from mmcache.errors import ConfigError, InvalidInputError
from mmcache.metrics import (LATENCY_BUCKETS, PROGRESS_ENV, CacheMetrics, Histogram, progress_bar,
                             progress_enabled)


def test_histogram_buckets_and_quantiles():
    h = Histogram()
    for s in (2e-6, 2e-6, 3e-3, 20.0):
        h.observe(s)
    assert h.count == 4 and math.isclose(h.sum, 20.003004)
    assert h.quantile(0.5) == 2.5e-6 and h.quantile(0.75) == 5e-3
    assert h.quantile(1.0) == float("inf")
    assert list(LATENCY_BUCKETS) == sorted(LATENCY_BUCKETS)


def test_counters_dataframe_and_prometheus():
    m = CacheMetrics()
    m.hit("l2", "text+image", "fresh", correct=False)
    m.hit("l1", "text", "stale-while-revalidate", correct=None)
    m.misses["text"] += 3
    m.time("get", 1e-4)
    assert m.lookups == 5 and m.hit_ratio() == 0.4
    df = m.to_dataframe()
    row = df[(df.metric == "false_hits") & (df.tier == "l2")]
    assert row["modalities"].item() == "text+image" and row["value"].item() == 1
    assert df[df.metric == "stale_hits"]["modalities"].item() == "stale-while-revalidate"
    text = m.to_prometheus()
    assert 'mmcache_misses_total{modalities="text"} 3.0' in text
    assert 'mmcache_latency_seconds_bucket{le="0.0001",stage="get"} 1.0' in text
    m.reset()
    assert m.lookups == 0 and math.isnan(m.hit_ratio())


def test_snapshot_is_an_independent_copy():
    m = CacheMetrics()
    m.hit("l1", "text", "fresh", correct=True)
    m.count("evictions", "l2", 3)
    m.time("get", 1e-3)
    snap = m.snapshot()
    m.hit("l1", "text", "fresh", correct=None)
    m.count("evictions", "l2")
    m.time("get", 1e-3)
    assert snap.hits[("l1", "text")] == 1 and snap.evictions["l2"] == 3
    assert snap.latency["get"].count == 1 and m.latency["get"].count == 2
    assert snap.to_dataframe().equals(CacheMetrics.snapshot(snap).to_dataframe())
    m.reset()
    assert snap.lookups == 1 and m.lookups == 0


def test_shard_counters_export_with_a_shard_label():
    m = CacheMetrics()
    m.count("shard_requests", "127.0.0.1:7000", 5)
    m.count("shard_requests", "127.0.0.1:7001")
    m.count("skew_alerts", "127.0.0.1:7000")
    text = m.to_prometheus()
    assert 'mmcache_shard_requests_total{shard="127.0.0.1:7000"} 5.0' in text
    assert 'mmcache_shard_requests_total{shard="127.0.0.1:7001"} 1.0' in text
    assert 'mmcache_skew_alerts_total{shard="127.0.0.1:7000"} 1.0' in text
    df = m.to_dataframe()
    rows = df[df.metric == "shard_requests"]
    assert list(rows.shard) == ["127.0.0.1:7000", "127.0.0.1:7001"] and list(rows.value) == [5, 1]
    assert m.snapshot().skew_alerts == {"127.0.0.1:7000": 1}


def test_verifier_calls_are_a_counter_in_every_export():
    m = CacheMetrics()
    m.count("verifier_calls", "l2", 2)
    before = m.snapshot()
    m.count("verifier_calls", "l2")
    assert m.verifier_calls == {"l2": 3} and before.verifier_calls == {"l2": 2}
    assert m.since(before).verifier_calls == {"l2": 1}
    assert 'mmcache_verifier_calls_total{tier="l2"} 3.0' in m.to_prometheus()
    df = m.to_dataframe()
    assert df[df.metric == "verifier_calls"][["tier", "value"]].values.tolist() == [["l2", 3]]
    assert re.search(r">verifier calls</th>.*>3</td>", m._repr_html_(), re.S)
    m.reset()
    assert m.verifier_calls == {}


# -- display -----------------------------------------------------------------------------------
def _metrics() -> CacheMetrics:
    m = CacheMetrics()
    m.hit("l1", "text", "fresh", correct=True)
    m.hit("l2", "text+image", "stale-while-revalidate", correct=False)
    m.count("misses", "text", 2)
    m.count("puts", "l1", 3)
    m.time("get", 2e-4)
    m.time("l2.semantic", 3e-3)
    return m


def test_metrics_html_is_a_compact_table_per_tier_modality_set_and_stage():
    page = _metrics()._repr_html_()
    for field in ("Counters", "hit ratio", "Hit ratio per tier and modality set", "text+image",
                  "hit ratio l1", "hit ratio l2", "Per tier", "Latency per stage", "get",
                  "l2.semantic", "p50 ≤", "p95 ≤", "p99 ≤", "250 µs", "5 ms", "1 / 2"):
        assert field in page, field
    # text: 3 lookups, one l1 hit; text+image: its one lookup hit in l2; all: 2 of 4
    assert re.search(r">text</td><td[^>]*>3</td><td[^>]*>0\.3333</td><td[^>]*>0\.0</td>", page)
    assert re.search(r">text\+image</td><td[^>]*>1</td><td[^>]*>0\.0</td><td[^>]*>1\.0</td>",
                     page)
    assert re.search(r">all</td><td[^>]*>4</td><td[^>]*>0\.25</td><td[^>]*>0\.25</td>"
                     r"<td[^>]*>0\.5</td>", page)


def test_metrics_repr_is_one_short_line():
    text = repr(_metrics())
    assert text == ("CacheMetrics(lookups=4, hits=2 [l1=1, l2=1], hit_ratio=0.5, misses=2, "
                    "puts=3, evictions=0, stages=2)")
    assert "0x" not in repr(CacheMetrics()) and "hit_ratio=—" in repr(CacheMetrics())


def test_metrics_html_escapes_the_names_it_shows():
    m = CacheMetrics()
    m.count("shard_requests", "<script>x</script>:7000")
    m.time("<b>stage</b>", 1e-3)
    page = m._repr_html_()
    assert "<script>" not in page and "<b>" not in page and "&lt;script&gt;" in page


# -- progress ----------------------------------------------------------------------------------
def test_progress_is_on_by_default_and_off_by_argument_or_environment(monkeypatch):
    monkeypatch.delenv(PROGRESS_ENV, raising=False)
    assert progress_enabled() and progress_enabled(True) and not progress_enabled(False)
    for off in ("0", "false", "OFF", " no "):
        monkeypatch.setenv(PROGRESS_ENV, off)
        assert not progress_enabled() and not progress_enabled(True)  # the switch wins
    monkeypatch.setenv(PROGRESS_ENV, "1")
    assert progress_enabled()


def test_a_bad_progress_switch_is_a_typed_error(monkeypatch):
    monkeypatch.delenv(PROGRESS_ENV, raising=False)
    with pytest.raises(InvalidInputError, match="progress must be"):
        progress_enabled("yes")
    monkeypatch.setenv(PROGRESS_ENV, "maybe")
    with pytest.raises(ConfigError, match="MMCACHE_PROGRESS='maybe'"):
        progress_enabled()


def test_the_bar_writes_to_stderr_unless_silenced_at_call_time(monkeypatch, capsys):
    monkeypatch.setattr(metrics_module, "PROGRESS_DELAY_S", 0.0)
    monkeypatch.delenv(PROGRESS_ENV, raising=False)
    with progress_bar(3, "counting things", unit="thing") as bar:
        bar.update(3)
    assert "counting things" in capsys.readouterr().err
    monkeypatch.setenv(PROGRESS_ENV, "0")  # after import: read when the bar is made
    with progress_bar(3, "counting things") as bar:
        bar.update(3)
    assert capsys.readouterr().err == ""

