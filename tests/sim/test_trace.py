"""mmcache.sim.trace: make_trace, dense ids, the oracleGeneral reader and writer and the CSV
reader (format checks, errors)."""

from __future__ import annotations

import numpy as np
import pytest

from mmcache.errors import TraceFormatError
from mmcache.paths import DATA_DIR
from mmcache.sim.trace import (ORACLE_GENERAL_DTYPE, make_trace, read_csv_trace,
                               read_oracle_general, write_oracle_general)


def _write(path, ids, sizes, vtime=None):
    rec = np.zeros(len(ids), ORACLE_GENERAL_DTYPE)
    rec["obj_id"], rec["obj_size"] = ids, sizes
    rec["next_access_vtime"] = make_trace(ids, sizes).next_access + 1 if vtime is None else vtime
    rec["next_access_vtime"][rec["next_access_vtime"] == 0] = -1
    rec.tofile(path)
    return path


def test_reader_round_trips_records(tmp_path):
    trace = read_oracle_general(_write(tmp_path / "t.bin", [7, 9, 7, 7], [10, 20, 10, 10]))
    assert trace.obj_id.tolist() == [7, 9, 7, 7]
    assert trace.next_access.tolist() == [2, -1, 3, -1]
    assert (trace.n_req, trace.n_req_byte, trace.n_obj) == (4, 50, 2)


@pytest.mark.parametrize("payload", [b"", b"\x00" * 23, b"\x00" * 25])
def test_reader_rejects_truncated_files(tmp_path, payload):
    path = tmp_path / "bad.bin"
    path.write_bytes(payload)
    with pytest.raises(TraceFormatError):
        read_oracle_general(path)


def test_reader_rejects_inconsistent_next_access(tmp_path):
    path = _write(tmp_path / "t.bin", [1, 2, 1], [5, 5, 5], vtime=[-1, -1, -1])
    with pytest.raises(TraceFormatError, match="next_access_vtime"):
        read_oracle_general(path)


def test_reader_rejects_missing_file(tmp_path):
    with pytest.raises(TraceFormatError):
        read_oracle_general(tmp_path / "nope.bin")


@pytest.mark.parametrize("ids, sizes", [([1, 2], [1, 0]), ([-1, 2], 1), ([1.5, 2], 1),
                                         ([[1, 2]], 1), (["a"], 1), ([1, 2], [1, 2, 3]),
                                         ([], 1), ([1], [np.nan])])
def test_make_trace_rejects_malformed_input(ids, sizes):
    with pytest.raises(TraceFormatError):
        make_trace(ids, sizes)


def test_writer_round_trips_the_shipped_trace(tmp_path):
    source = DATA_DIR / "cloudPhysicsIO.oracleGeneral.bin"
    write_oracle_general(read_oracle_general(source), tmp_path / "copy.bin")
    assert (tmp_path / "copy.bin").read_bytes() == source.read_bytes()


def test_dense_ids_number_objects_in_first_request_order_across_table_growth():
    # ~190,000 distinct ids outgrow the 2**16-row table three times: numbering resumes after each.
    rng = np.random.default_rng(0)
    keys = rng.integers(0, 2**64 - 1, 200_000, dtype=np.uint64)
    obj_id = keys[rng.integers(0, keys.shape[0], 600_000)]
    ids, n_obj = make_trace(obj_id, 1).dense_ids()
    uniq, first, inverse = np.unique(obj_id, return_index=True, return_inverse=True)
    rank = np.empty(uniq.shape[0], np.int64)
    rank[np.argsort(first)] = np.arange(uniq.shape[0])
    assert ids.dtype == np.int32 and n_obj == uniq.shape[0]
    assert np.array_equal(ids, rank[inverse.reshape(-1)])


def test_csv_reader_keeps_integer_ids_and_numbers_other_keys_in_first_request_order(tmp_path):
    numeric = tmp_path / "numeric.csv"
    numeric.write_text("obj_id,obj_size,time\n7,100,1\n9,50,2\n7,100,3\n")
    trace = read_csv_trace(numeric, time="time")
    assert trace.obj_id.tolist() == [7, 9, 7] and trace.obj_size.tolist() == [100, 50, 100]
    assert trace.time.tolist() == [1, 2, 3] and trace.next_access.tolist() == [2, -1, -1]
    keyed = tmp_path / "keyed.csv"
    keyed.write_text("prompt,bytes\nhow are you,10\nhi,4\nhow are you,10\n42,3\n")
    trace = read_csv_trace(keyed, obj_id="prompt", obj_size="bytes")
    assert trace.obj_id.tolist() == [0, 1, 0, 2] and trace.n_obj == 3


def test_csv_reader_gives_unit_sizes_without_a_size_column(tmp_path):
    path = tmp_path / "ids.csv"
    path.write_text("obj_id\n1\n2\n1\n")
    assert read_csv_trace(path, obj_size=None).obj_size.tolist() == [1, 1, 1]


@pytest.mark.parametrize("text, kwargs", [
    ("key,obj_size\n1,2\n", {}),                       # no obj_id column
    ("obj_id,obj_size\n1,0\n", {}),                    # size below one byte
    ("obj_id,obj_size\n1,big\n", {}),                  # size not an integer
    ("obj_id,obj_size\n", {}),                         # no request
    ("obj_id,obj_size\n1,2\n", {"time": "t"}),         # no such time column
])
def test_csv_reader_rejects_bad_traces_with_a_typed_error(tmp_path, text, kwargs):
    path = tmp_path / "bad.csv"
    path.write_text(text)
    with pytest.raises(TraceFormatError):
        read_csv_trace(path, **kwargs)
    with pytest.raises(TraceFormatError, match="cannot read"):
        read_csv_trace(tmp_path / "absent.csv")
