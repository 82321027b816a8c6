"""The store fault matrix, small: under every fault no cache serves a copy the store no longer
holds, loses an acknowledged put or raises, and each recovers within seconds."""

from __future__ import annotations

import shutil

import pytest

from mmcache.lab.bench import faults

pytestmark = pytest.mark.skipif(shutil.which("redis-server") is None,
                                reason="redis-server is not installed (Debian package)")


@pytest.mark.parametrize("fault", faults.FAULTS, ids=[f.name for f in faults.FAULTS])
def test_no_fault_makes_a_cache_serve_stale_lose_an_acknowledged_put_or_raise(fault):
    """A corrupted row is noticed only by the reader that decodes it (and quarantines it):
    until then the other cache serves the copy it holds of the last write, one round at most."""
    row = faults.run_fault(fault, keys=5, rounds=1)
    stale = 5 if fault.kind == "corruption" else 0
    assert (row["acked lost"], row["typed"], row["untyped"]) == (0, 0, 0), row
    assert row["stale"] <= stale, row
    assert row["reads"] == 10 and row["recover s"] is not None and row["recover s"] < 5.0
    assert (row["gets during"] > 0) == (fault.kind == "outage"), row
    if fault.kind == "outage":
        assert 0 < row["get p50 ms"] <= row["get p99 ms"] <= row["get max ms"], row


def test_the_matrix_prints_one_row_per_fault(capsys, monkeypatch):
    monkeypatch.setattr(faults, "FAULTS", faults.FAULTS[:1])
    faults.main(["--keys", "2", "--rounds", "1"])
    table = capsys.readouterr().out.splitlines()
    assert table[0].startswith("| fault | kind | reads | stale |") and len(table) == 3


def test_a_row_becomes_the_ledgers_figures():
    row = {"fault": "FLUSHALL", "kind": "data loss", "reads": 300, "stale": 0, "acked lost": 1,
           "typed": 0, "untyped": 0, "recover s": None, "gets during": 0, "get p50 ms": None,
           "get p99 ms": None, "get max ms": None}
    got = {r.name: (r.value, r.met) for r in faults.figures(row)}
    assert got == {"FLUSHALL: reads": (300, None), "FLUSHALL: stale reads": (0, True),
                   "FLUSHALL: acknowledged puts lost": (1, False),
                   "FLUSHALL: typed errors": (0, True), "FLUSHALL: untyped errors": (0, True),
                   "FLUSHALL: seconds to recover": (float("inf"), None)}
    row.update({"kind": "outage", "gets during": 3, "get p50 ms": 0.5, "get p99 ms": 900.0,
                "get max ms": 1001.0})
    got = {r.name: (r.value, r.unit) for r in faults.figures(row)}
    assert {name: got[name] for name in got if "during" in name} == {
        "FLUSHALL: gets during the fault": (3, "count"),
        "FLUSHALL: get p50 during the fault": (0.5, "ms"),
        "FLUSHALL: get p99 during the fault": (900.0, "ms"),
        "FLUSHALL: get max during the fault": (1001.0, "ms")}
