"""The trace format: round trips, other tools, and traces cut off mid-write."""

import json
import os
import signal
import subprocess
import sys
import textwrap
import time

import numpy as np
import pyarrow.feather as feather
import pytest

from phasewatch.core.batch import concat
from phasewatch.errors import UserError
from phasewatch.formats import synthetic
from phasewatch.formats.trace import TraceReader, TraceWriter

META = synthetic.metadata(100_000_000)


def write(path, batches, **kw):
    batches = list(batches)
    with TraceWriter(str(path), META, batches[0].signals, **kw) as w:
        for b in batches:
            w.write(b)
    return concat(batches)


def test_round_trip_keeps_raw_columns_and_metadata(tmp_path):
    path = tmp_path / "t.arrow"
    original = write(path, synthetic.generate(), rows=500)
    reader = TraceReader(str(path))
    back = concat(list(reader.batches()))
    assert reader.metadata == json.loads(json.dumps(META))
    assert back.signals == original.signals
    for name in original.signals:
        assert np.array_equal(back[name], original[name]), name
    assert not reader.truncated


def test_pandas_and_duckdb_read_a_trace_without_phasewatch(tmp_path):
    path = tmp_path / "t.arrow"
    original = write(path, synthetic.generate())
    code = textwrap.dedent(f"""
        import json, duckdb, pandas, pyarrow.feather
        df = pandas.read_feather({str(path)!r})
        trace = pyarrow.feather.read_table({str(path)!r})
        n, top = duckdb.sql("select count(*), max(instructions) from trace").fetchall()[0]
        meta = json.loads(trace.schema.metadata[b"phasewatch"])
        print(len(df), n, top, meta["base_freq_mhz"])
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={**os.environ, "PYTHONPATH": ""}, cwd=tmp_path)
    rows, n, top, base = out.stdout.split()
    assert int(rows) == int(n) == len(original)
    assert int(top) == int(original["instructions"][-1])
    assert float(base) == synthetic.BASE_MHZ


def test_truncated_trace_replays_complete_batches_with_a_warning(tmp_path):
    path = tmp_path / "t.arrow"
    write(path, synthetic.generate(), rows=1000)
    data = path.read_bytes()
    cut = tmp_path / "cut.arrow"
    cut.write_bytes(data[: len(data) * 2 // 3])
    warnings = []
    reader = TraceReader(str(cut), warn=warnings.append)
    rows = sum(len(b) for b in reader.batches())
    assert reader.truncated
    sizes = [r.num_rows for r in TraceReader(str(path)).record_batches()]
    assert rows in np.cumsum(sizes)[:-1]
    assert len(warnings) == 1 and "cut off mid-write" in warnings[0]
    assert f"({rows} samples)" in warnings[0]


WRITER = """
import sys, time
from phasewatch.formats import synthetic
from phasewatch.formats.trace import TraceWriter
batches = list(synthetic.generate())
w = TraceWriter(sys.argv[1], synthetic.metadata(100_000_000), batches[0].signals, rows=1)
for i, b in enumerate(batches * 1000):
    w.write(b)
    if i == 3:
        print("written", flush=True)
    time.sleep(0.01)
"""


def test_writer_killed_mid_run_loses_at_most_the_batch_in_flight(tmp_path):
    path = tmp_path / "killed.arrow"
    proc = subprocess.Popen([sys.executable, "-c", WRITER, str(path)], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "written"
    time.sleep(0.2)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert not path.exists()        # a killed writer never leaves a half file under the name
    partial, = tmp_path.glob(".killed.arrow.*.partial")
    warnings = []
    reader = TraceReader(str(partial), warn=warnings.append)
    batches = list(reader.batches())
    assert reader.truncated and warnings
    assert len(batches) >= 1 and all(len(b) > 0 for b in batches)


def test_full_disk_is_a_one_line_failure(tmp_path):
    batches = list(synthetic.generate())
    w = TraceWriter("/dev/full", META, batches[0].signals, rows=1)
    w.write(batches[0])
    w.close()
    assert w.failure == "cannot write /dev/full: No space left on device"


def test_unknown_arrow_file_is_rejected(tmp_path):
    import pyarrow as pa
    path = tmp_path / "other.arrow"
    feather.write_feather(pa.table({"x": [1, 2]}), str(path))
    with pytest.raises(UserError, match="not a phasewatch trace"):
        TraceReader(str(path))


def test_the_first_bad_id_is_the_earliest_row_of_either_column():
    from phasewatch.core.batch import BatchError, SampleBatch, concat, first_bad_id
    ok = {"t_ns": np.arange(4, dtype=np.int64), "cpu": np.array([0, 1, 8191, 3], np.int32),
          "tid": np.array([1, 4_194_304, 2, 0], np.int32)}
    assert first_bad_id(SampleBatch(ok)) is None
    tid_first = {**ok, "cpu": np.array([0, 1, 2, 8192], np.int32), "tid": np.array([1, -1, 2, 3], np.int32)}
    assert first_bad_id(SampleBatch(tid_first)) == (1, "tid", -1)
    cpu_first = {**ok, "cpu": np.array([0, -2, 2, 3], np.int32), "tid": np.array([1, 2, 4_194_305, 3], np.int32)}
    assert first_bad_id(SampleBatch(cpu_first)) == (1, "cpu", -2)
    only_tid = {**ok, "tid": np.array([4_194_304, -1, -2, 3], np.int32)}      # every CPU fine
    assert first_bad_id(SampleBatch(only_tid)) == (1, "tid", -1)
    same_row = {**ok, "cpu": np.array([0, 9000, 2, 3], np.int32), "tid": np.array([1, -1, 2, 3], np.int32)}
    assert first_bad_id(SampleBatch(same_row)) == (1, "cpu", 9000)
    later_cpu = {**ok, "cpu": np.array([0, 1, -1, 3], np.int32), "tid": np.array([1, -3, 2, 3], np.int32)}
    assert first_bad_id(SampleBatch(later_cpu)) == (1, "tid", -3)
    one = {"t_ns": np.zeros(1, np.int64), "cpu": np.array([9000], np.int32)}
    assert first_bad_id(SampleBatch(one)) == (0, "cpu", 9000)
    assert first_bad_id(SampleBatch.empty()) is None
    joined = concat([SampleBatch(ok), SampleBatch(ok), SampleBatch(ok)])
    assert len(joined) == 12 and joined["tid"].tolist() == ok["tid"].tolist() * 3
    for odd in (2, 1, 0):
        parts = [SampleBatch(ok)] * 3
        parts[odd] = SampleBatch(one)
        with pytest.raises(BatchError, match="cannot join"):
            concat(parts)


def test_a_batch_is_columns_of_one_length_and_names_what_is_wrong():
    from phasewatch.core.batch import BatchError, SampleBatch, id_problem
    t = np.arange(3, dtype=np.int64)
    with pytest.raises(BatchError, match="column 'cpu' has shape \\(2,\\), expected \\(3,\\)"):
        SampleBatch({"t_ns": t, "cpu": np.zeros(2, np.int32)})
    with pytest.raises(BatchError, match="column 'ip' has shape \\(3, 1\\)"):
        SampleBatch({"t_ns": t, "cpu": np.zeros(3, np.int32), "ip": np.zeros((3, 1), np.uint64)})
    empty = SampleBatch.empty(("ip",))
    assert len(empty) == 0 and set(empty.signals) == {"t_ns", "cpu", "ip"}
    assert id_problem("cpu", 9000) == "column 'cpu': 9000 is not a CPU id (0..8191)"
    assert id_problem("tid", -1) == "column 'tid': -1 is not a thread id (0..4194304)"
    assert id_problem("pid", 4_194_305) == \
        "column 'pid': 4194305 is not a process id (0..4194304)"


def test_a_process_id_is_checked_from_0_to_pid_max_limit():
    """0 is the id where perf did not say; 4194304 is PID_MAX_LIMIT."""
    from phasewatch.core.batch import SampleBatch, first_bad_id
    base = {"t_ns": np.arange(3, dtype=np.int64), "cpu": np.zeros(3, np.int32)}
    assert first_bad_id(SampleBatch({**base, "pid": np.array([0, 4_194_304, 7], np.int32)})) \
        is None
    for bad in (-1, 4_194_305):
        pids = np.array([0, 5, bad], np.int32)
        assert first_bad_id(SampleBatch({**base, "pid": pids})) == (2, "pid", bad)
