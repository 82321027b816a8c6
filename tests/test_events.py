"""Failure events (issue 30 item 5): each code raised by its fault, with two caches sharing one
SQLite file in this process (tests/studies/test_failure_codes.py runs them across two processes),
counted in the metrics and exported to Prometheus; a clean share raises none, and detecting
changes nothing the cache does or stores."""

from __future__ import annotations

import logging
import pickle
import re
import sqlite3
import time
from pathlib import Path

import numpy as np
import pytest

import mmcache
from mmcache import keys
from mmcache.errors import ConfigError, MMCacheError, StorageError
from mmcache.metrics import (EVENTS_KEPT, FAILURE_CODES, CacheMetrics, EventLog, FailureEvent,
                             failure_event, failure_table)
from mmcache.studies.failure_codes import NamedEncoder
from mmcache.tiers import sqlite as sqlite_store
from mmcache.tiers.store import MAX_CLOCK_SKEW_S

DIM = 16
SCOPE = "tenant"


def vector(i: int) -> np.ndarray:
    v = np.random.default_rng(100 + i).standard_normal(DIM).astype(np.float32)
    return v / np.linalg.norm(v)


def query(i: int, paraphrase: bool = False) -> mmcache.Query:
    text = f"question {i}" + (", put another way" if paraphrase else "")
    return mmcache.Query(text=text, embeddings={"text": vector(i)}, scope=SCOPE)


def config(path) -> dict:
    return {"l3": {"backend": "sqlite", "path": str(path), "shared": True}}


def open_cache(path, seen: list | None = None, encoder_id: str = "encoder-a",
               clock=time.time) -> mmcache.TieredCache:
    return mmcache.TieredCache(config(path), {"text": NamedEncoder(encoder_id, DIM)}, clock=clock,
                               on_event=None if seen is None else seen.append)


def meta(path) -> dict[str, str]:
    with sqlite3.connect(str(path)) as db:
        return dict(db.execute("SELECT key, value FROM meta"))


def event_lines(cache: mmcache.TieredCache) -> list[str]:
    return [line for line in cache.metrics.to_prometheus().splitlines()
            if line.startswith("mmcache_failure_events_total{")]


def assert_counted(cache: mmcache.TieredCache, code: str, n: int = 1) -> None:
    assert [e.code for e in cache.events()] == [code] * n
    assert cache.metrics.snapshot().failure_events == {(code, "l3"): n}
    assert event_lines(cache) == [f'mmcache_failure_events_total{{code="{code}",tier="l3"}} '
                                  f'{float(n)}']


def test_every_code_has_a_cause_and_a_fix():
    assert set(FAILURE_CODES) == {"MM-KEY-VERSION", "MM-ENCODER-IDENTITY", "MM-SCHEMA-VERSION",
                                  "MM-ENTRY-UNREADABLE", "MM-CLOCK-SKEW"}
    for code, meaning in FAILURE_CODES.items():
        assert re.fullmatch(r"MM-[A-Z]+(-[A-Z]+)*", code)
        assert len(meaning.cause) > 40 and len(meaning.fix) > 20, code
    table = failure_table()
    assert list(table.index) == list(FAILURE_CODES) and list(table.columns) == ["cause", "fix"]
    with pytest.raises(KeyError):
        failure_event("MM-NO-SUCH-CODE", "l3", "")


def test_a_clean_share_emits_no_event(tmp_path):
    path = tmp_path / "s.db"
    seen: list[FailureEvent] = []
    with open_cache(path, seen) as a, open_cache(path, seen) as b:
        a.put(query(0), "answer 0")
        b.put(query(1), "answer 1")
        assert b.get(query(0)).value == "answer 0"
        assert a.get(query(1, paraphrase=True)).value == "answer 1"
        for cache in (a, b):
            assert cache.events() == [] and not cache.metrics.snapshot().failure_events
            assert event_lines(cache) == []
    with open_cache(path, seen) as reopened:
        assert reopened.events() == []
    assert seen == []
    assert meta(path)["fact:key_version"] == keys.KEY_VERSION


def test_another_key_version_is_an_event_and_the_cache_opens_as_before(tmp_path, monkeypatch,
                                                                       caplog):
    path = tmp_path / "s.db"
    with open_cache(path) as a:
        a.put(query(0), "answer 0")
        before = meta(path)
        monkeypatch.setattr(keys, "KEY_VERSION", "k-other")
        seen: list[FailureEvent] = []
        with caplog.at_level(logging.WARNING, "mmcache.events"), open_cache(path, seen) as b:
            assert_counted(b, "MM-KEY-VERSION")
            assert seen == b.events()
            event = seen[0]
            assert event.tier == "l3" and "'k3'" in event.detail and "'k-other'" in event.detail
            assert event.cause == FAILURE_CODES["MM-KEY-VERSION"].cause and event.fix
            hit = b.get(query(0))  # A's key is another exact key here: only a semantic hit
            assert hit is not None and hit.value == "answer 0"
        assert [r.getMessage().split(" ")[0] for r in caplog.records] == ["MM-KEY-VERSION"]
        assert meta(path) == before  # nothing recorded over the store's key version
        assert a.events() == []


def test_another_encoder_is_refused_with_its_code(tmp_path):
    path = tmp_path / "s.db"
    with open_cache(path, encoder_id="encoder-a") as a:
        a.put(query(0), "answer 0")
        before = meta(path)
        seen: list[FailureEvent] = []
        with pytest.raises(ConfigError, match="encoder:text") as refused:
            open_cache(path, seen, encoder_id="encoder-b")
        assert refused.value.code == "MM-ENCODER-IDENTITY"
        assert [e.code for e in seen] == ["MM-ENCODER-IDENTITY"]
        assert seen[0].tier == "l3" and "encoder-b" in seen[0].detail
        assert meta(path) == before
        assert a.get(query(0)).value == "answer 0" and a.events() == []


def test_another_schema_version_is_refused_with_its_code(tmp_path, monkeypatch):
    path = tmp_path / "s.db"
    monkeypatch.setattr(sqlite_store, "SCHEMA_VERSION", "7")  # a newer mmcache wrote the file
    with open_cache(path) as newer:
        newer.put(query(0), "answer 0")
    monkeypatch.undo()
    before = meta(path)
    seen: list[FailureEvent] = []
    with pytest.raises(StorageError, match="schema 7") as refused:
        open_cache(path, seen)
    assert refused.value.code == "MM-SCHEMA-VERSION"
    assert [e.code for e in seen] == ["MM-SCHEMA-VERSION"] and seen[0].tier == "l3"
    assert meta(path) == before and before["schema_version"] == "7"
    assert "`l3.path`" in str(refused.value)  # it says how to go on


def test_an_entry_another_serializer_wrote_is_an_event_and_still_not_served(tmp_path,
                                                                            monkeypatch):
    path = tmp_path / "s.db"
    with open_cache(path) as a, open_cache(path) as b:
        a.put(query(0), "answer 0")
        encode = sqlite_store.encode_value
        monkeypatch.setattr(sqlite_store, "encode_value",
                            lambda value: ("msgpack", encode(value)[1]))
        b.put(query(1), "answer 1")
        monkeypatch.undo()
        assert a.get(query(1, paraphrase=True)) is None  # quarantined: absent, as before
        assert_counted(a, "MM-ENTRY-UNREADABLE")
        assert "unknown type tag 'msgpack'" in a.events()[0].detail
        assert [r for _, r in a.tier("l3").store.quarantined()] == [
            "stored value has unknown type tag 'msgpack'"]
        assert a.get(query(0)).value == "answer 0"


@pytest.mark.parametrize("ahead_s", [MAX_CLOCK_SKEW_S + 55.0, MAX_CLOCK_SKEW_S - 4.0],
                         ids=["beyond-the-bound", "within-it"])
def test_a_writer_clock_ahead_beyond_the_bound_is_an_event(tmp_path, ahead_s):
    path = tmp_path / "s.db"
    with open_cache(path) as a, open_cache(path, clock=lambda: time.time() + ahead_s) as b:
        a.put(query(0), "answer 0")
        b.put(query(1), "answer 1")
        hit = a.get(query(1, paraphrase=True))
        assert hit is not None and hit.value == "answer 1"  # adopted and served, as before
        if ahead_s > MAX_CLOCK_SKEW_S:
            assert_counted(a, "MM-CLOCK-SKEW")
            assert "1 of 1 entries" in a.events()[0].detail
        else:
            assert a.events() == []
        assert b.events() == []  # A's entries lie in B's past: a clock behind is not told


def test_events_of_a_bad_stored_value_reach_the_cache_at_its_first_read(tmp_path):
    path = tmp_path / "s.db"
    with open_cache(path) as a:
        a.put(query(0), "answer 0")
    with sqlite3.connect(str(path)) as db:
        db.execute("UPDATE entries SET value_type = 'msgpack'")
    seen: list[FailureEvent] = []
    with open_cache(path, seen) as reopened:  # opening reads no values: nothing seen yet
        assert reopened.events() == [] and seen == []
        assert reopened.get(query(0)) is None       # quarantined at the first read of its value
        assert_counted(reopened, "MM-ENTRY-UNREADABLE")
        assert seen == reopened.events()
        assert reopened.get(query(0)) is None       # reported once
        assert_counted(reopened, "MM-ENTRY-UNREADABLE")


def test_the_event_log_keeps_the_last_events_and_survives_a_failing_listener(caplog):
    metrics = CacheMetrics()

    def listener(event: FailureEvent) -> None:
        raise RuntimeError("hook broke")

    log = EventLog("l3", keep=3, clock=lambda: 42.0, metrics=metrics, listener=listener)
    with caplog.at_level(logging.DEBUG, "mmcache.events"):
        for i in range(5):
            log.report("MM-CLOCK-SKEW", f"batch {i}")
    assert len(log) == 3 and [e.detail for e in log.events()] == ["batch 2", "batch 3", "batch 4"]
    assert log.events("MM-KEY-VERSION") == [] and log.events()[0].time == 42.0
    assert metrics.failure_events == {("MM-CLOCK-SKEW", "l3"): 5}
    levels = [r.levelno for r in caplog.records if not r.exc_info]
    assert levels == [logging.WARNING] + [logging.DEBUG] * 4  # the first of a code warns
    assert sum(1 for r in caplog.records if r.exc_info) == 5  # each failing hook, logged
    assert EVENTS_KEPT >= 100


def test_failure_events_in_snapshots_windows_and_the_dataframe():
    m = CacheMetrics()
    m.count("failure_events", ("MM-KEY-VERSION", "l3"))
    earlier = m.snapshot()
    m.count("failure_events", ("MM-KEY-VERSION", "l3"), 2)
    assert m.since(earlier).failure_events == {("MM-KEY-VERSION", "l3"): 2}
    rows = m.to_dataframe().query("metric == 'failure_events'")
    assert rows[["tier", "code", "value"]].values.tolist() == [["l3", "MM-KEY-VERSION", 3]]
    assert "Failure events" in m._repr_html_()
    m.reset()
    assert not m.failure_events


def test_a_coded_error_pickles_with_its_code():
    err = pickle.loads(pickle.dumps(StorageError("schema 6", code="MM-SCHEMA-VERSION")))
    assert err.code == "MM-SCHEMA-VERSION" and str(err) == "schema 6"
    assert MMCacheError("plain").code is None


def test_the_docs_list_every_code_with_its_cause_and_fix():
    root = Path(mmcache.__file__).resolve().parent.parent
    page = (root / "docs" / "results" / "07-serving-path.md").read_text()
    for code, meaning in FAILURE_CODES.items():
        assert f"| `{code}` | {meaning.cause} | {meaning.fix} |" in page, code
    guide = (root / "docs" / "guide.md").read_text()
    assert all(code in guide for code in FAILURE_CODES)
