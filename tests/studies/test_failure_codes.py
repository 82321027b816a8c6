"""The failure-codes study: each fault injected across two real processes (this one and a
spawned worker) over one shared SQLite store raises exactly its code, in the process that
detects it, counted and exported there; the clean run raises none."""

from __future__ import annotations

import pytest

from mmcache.errors import InvalidInputError
from mmcache.metrics import FAILURE_CODES
from mmcache.studies.failure_codes import FAULTS, events_frame, inject, mine, summary

REFUSING = {"MM-ENCODER-IDENTITY", "MM-SCHEMA-VERSION"}  # the open is refused: no cache left


@pytest.fixture(scope="module")
def sides(tmp_path_factory):
    return inject(workdir=tmp_path_factory.mktemp("faults"))


def test_each_fault_raises_its_code_in_the_process_that_detects_it(sides):
    assert [(s.fault, s.process) for s in sides][::2] == [(f, "A") for f in FAULTS]
    for fault, (code, where) in FAULTS.items():
        a, b = (s for s in sides if s.fault == fault)
        by_process = {"A": a, "B": b}
        if code is None:
            assert a.events == b.events == [] and a.counted == b.counted == {}, fault
            assert a.prometheus == b.prometheus == [] and a.refused is b.refused is None
            continue
        detector, other = by_process[where], by_process["AB".replace(where, "")]
        assert [e["code"] for e in detector.events] == [code], fault
        assert other.events == [] and other.refused is None, fault
        assert detector.events[0]["cause"] == FAILURE_CODES[code].cause
        if code in REFUSING:
            assert detector.refused == code and detector.counted == {}
        else:
            assert detector.refused is None and detector.counted == {code: 1}
            assert detector.prometheus == [
                f'mmcache_failure_events_total{{code="{code}",tier="l3"}} 1.0']


def test_the_events_mined_by_code_and_cause(sides):
    mined = mine(sides)
    assert list(mined.index) == list(FAILURE_CODES)
    assert (mined["count"] == 1).all()
    assert mined.loc["MM-CLOCK-SKEW", "faults"] == ["clock-skew"]
    assert len(events_frame(sides)) == len(FAILURE_CODES)
    numbers = summary(sides)
    assert numbers["events"] == len(FAILURE_CODES)
    assert numbers["faults"]["clean"]["seen"] == {}
    assert set(numbers["codes"]) == set(FAILURE_CODES)


def test_an_unknown_fault_is_refused():
    with pytest.raises(InvalidInputError, match="unknown faults"):
        inject(["no-such-fault"])
