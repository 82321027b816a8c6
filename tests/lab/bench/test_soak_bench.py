"""The store soak, short: with questions coming and going, log rows and file size stay within a
small multiple of the live entries, and the run does not grow without bound."""

from __future__ import annotations

from mmcache.lab.bench import soak
from mmcache.tiers import sqlite


def test_a_short_soak_keeps_the_store_proportional_to_its_live_entries(tmp_path, monkeypatch):
    monkeypatch.setattr(sqlite, "COMPACT_EVERY", 100)
    monkeypatch.setattr(sqlite, "COMPACT_LAG", 500)
    keys = 300
    rows = soak.soak(tmp_path, ops=16_000, keys=keys, samples=4, progress=False)
    assert [r["ops"] for r in rows] == [4_000, 8_000, 12_000, 16_000]
    for row in rows:
        assert 0 < row["live"] <= 2 * keys                  # the L3's capacity
        assert row["log rows"] <= row["live"] + 500 + 100   # live ids + the compaction lag
    assert rows[-1]["file bytes"] <= 1.5 * rows[1]["file bytes"]   # a plateau, not a ramp
    assert rows[-1]["rss MiB"] <= rows[0]["rss MiB"] + 100


def test_the_soak_records_what_its_samples_show():
    rows = [{"ops": 1, "live": 100, "log rows": 150, "file bytes": 1000, "rss MiB": 100.0,
             "open s": 0.2, "sync s": 0.1},
            {"ops": 2, "live": 50, "log rows": 140, "file bytes": 2000, "rss MiB": 110.0,
             "open s": 0.3, "sync s": 0.05},
            {"ops": 3, "live": 100, "log rows": 120, "file bytes": 2400, "rss MiB": 120.0,
             "open s": 0.1, "sync s": 0.2}]
    got = {r.name: round(r.value, 6) for r in soak.figures(rows)}
    assert got == {"log rows over live entries, largest": 2.8,
                   "file bytes, last sample over the second": 1.2,
                   "file bytes per live entry, last sample": 24.0,
                   "resident memory, last sample over the first": 1.2,
                   "open, slowest sample": 300.0, "sync of a second tier, slowest sample": 200.0}
