"""Replay streams its trace: a trace several times the memory limit replays.

The replay runs as a child process whose data segment (RLIMIT_DATA: heap and
every private anonymous mapping) is capped; the trace is four times that cap.
Arrow's default allocator reserves about a gigabyte of address space up front
without using it, so the child uses the system allocator, where what is
reserved is what is used.
"""

import json
import os
import resource
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from phasewatch.core.batch import concat
from phasewatch.formats import synthetic
from phasewatch.formats.trace import arrow_schema

BIN = Path(sys.executable).parent / "phasewatch"
LIMIT = 384 << 20
TRACE_BYTES = 4 * LIMIT
LIBRARIES = 160 << 20
INTERVAL = 100_000_000
CUMULATIVE = ("t_ns", "aperf", "mperf", "pperf", "tsc", "instructions", "cycles", "energy_pkg_uj")


def write_big_trace(path: Path) -> tuple[int, int]:
    """One synthetic stretch written again and again, each copy's counters
    carrying on from the last; (rows, intervals)."""
    schedule = synthetic.repeat_schedule(500_000, INTERVAL)
    batch = concat(list(synthetic.generate(schedule, INTERVAL, seed=5)))
    cols = {n: np.asarray(batch[n]) for n in batch.signals}
    schema = arrow_schema(batch.signals, synthetic.metadata(INTERVAL))
    row_bytes = sum(c.dtype.itemsize for c in cols.values())
    copies = -(-TRACE_BYTES // (row_bytes * len(batch)))
    step = {n: cols[n][-1] - cols[n][0] + cols[n].dtype.type(1) for n in CUMULATIVE}
    with pa.OSFile(str(path), "wb") as sink, pa.ipc.new_file(sink, schema) as writer:
        for k in range(copies):
            shifted = {n: (c + step[n] * c.dtype.type(k)) if n in step else c
                       for n, c in cols.items()}
            writer.write_batch(pa.record_batch([shifted[n] for n in schema.names], schema=schema))
    return copies * len(batch), copies * len(synthetic.labels(schedule))


def synthetic_trace(path: Path) -> None:
    """A small trace of the same columns as the big one."""
    schedule = synthetic.repeat_schedule(20_000, INTERVAL)
    batch = concat(list(synthetic.generate(schedule, INTERVAL, seed=5)))
    schema = arrow_schema(batch.signals, synthetic.metadata(INTERVAL))
    with pa.OSFile(str(path), "wb") as sink, pa.ipc.new_file(sink, schema) as writer:
        writer.write_batch(pa.record_batch([np.asarray(batch[n]) for n in schema.names],
                                           schema=schema))


def cap_data_segment():
    resource.setrlimit(resource.RLIMIT_DATA, (LIMIT, LIMIT))


#: Starts argv[2:] under the cap and prints its peak resident set (KiB).  A
#: child forked from pytest itself would start with pytest's resident set, which
#: ru_maxrss keeps across exec; forked from this small launcher it starts small.
LAUNCHER = f"""
import os, resource, sys
pid = os.fork()
if pid == 0:
    resource.setrlimit(resource.RLIMIT_DATA, ({LIMIT}, {LIMIT}))
    os.execv(sys.argv[1], sys.argv[1:])
_, status, usage = os.wait4(pid, 0)
print(usage.ru_maxrss, file=sys.stderr)
sys.exit(os.waitstatus_to_exitcode(status))
"""


@pytest.mark.slow
def test_a_trace_four_times_the_memory_limit_replays_in_bounded_memory(tmp_path):
    trace = tmp_path / "big.arrow"
    rows, intervals = write_big_trace(trace)
    assert trace.stat().st_size >= TRACE_BYTES
    env = {**os.environ, "ARROW_DEFAULT_MEMORY_POOL": "system"}
    # Compiling the kernels (a first run on a fresh checkout) takes LLVM's
    # memory, once; what is measured is replay with the kernels cached.
    warm = tmp_path / "warm.arrow"
    synthetic_trace(warm)
    subprocess.run([str(BIN), "replay", str(warm), "--json", "--output", str(tmp_path / "w.jsonl")],
                   check=True, capture_output=True, env=env)
    out, stdout, stderr = tmp_path / "r.jsonl", tmp_path / "stdout", tmp_path / "stderr"
    with open(stdout, "w") as o, open(stderr, "w") as e:
        child = subprocess.run(["/usr/bin/python3", "-c", LAUNCHER, str(BIN), "replay", str(trace),
                                "--json", "--output", str(out)], stdout=o, stderr=e, env=env)
    assert child.returncode == 0, stderr.read_text()[-2000:]
    peak_bytes = int(stderr.read_text().split()[-1]) * 1024
    # The data cap bounds anonymous memory; the resident set adds the mapped
    # libraries (LLVM, Arrow: about 100 MB) but stays far below the 1.5 GB
    # trace: it is read a record batch at a time, not mapped whole.
    assert peak_bytes < LIMIT + LIBRARIES
    assert peak_bytes < TRACE_BYTES / 3
    summary = json.loads(stdout.read_text())
    assert summary["samples"] == rows
    assert summary["intervals"] == intervals
    with open(out) as f:
        assert sum(1 for _ in f) == intervals


def test_the_cap_is_real(tmp_path):
    """Under the same cap, reading the whole trace into memory at once fails."""
    code = ("import numpy, sys; numpy.ones(%d, numpy.uint8); print('allocated')" % (2 * LIMIT))
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          preexec_fn=cap_data_segment)
    assert proc.returncode != 0 and "allocated" not in proc.stdout
