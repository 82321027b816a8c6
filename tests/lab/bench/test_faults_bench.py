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
    row = faults.run_fault(fault, keys=5, rounds=1)
    assert (row["stale"], row["acked lost"], row["typed"], row["untyped"]) == (0, 0, 0, 0), row
    assert row["reads"] == 10 and row["recover s"] is not None and row["recover s"] < 5.0


def test_the_matrix_prints_one_row_per_fault(capsys, monkeypatch):
    monkeypatch.setattr(faults, "FAULTS", faults.FAULTS[:1])
    faults.main(["--keys", "2", "--rounds", "1"])
    table = capsys.readouterr().out.splitlines()
    assert table[0].startswith("| fault | kind | reads | stale |") and len(table) == 3


def test_a_row_becomes_the_ledgers_figures():
    row = {"fault": "FLUSHALL", "kind": "data loss", "reads": 300, "stale": 0, "acked lost": 1,
           "typed": 0, "untyped": 0, "recover s": None}
    got = {r.name: (r.value, r.met) for r in faults.figures(row)}
    assert got == {"FLUSHALL: reads": (300, None), "FLUSHALL: stale reads": (0, True),
                   "FLUSHALL: acknowledged puts lost": (1, False),
                   "FLUSHALL: typed errors": (0, True), "FLUSHALL: untyped errors": (0, True),
                   "FLUSHALL: seconds to recover": (float("inf"), None)}
