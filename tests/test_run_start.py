"""``phasewatch run`` starts the command before its kernels load, and loses no
sample while they load."""

import json
import subprocess
import sys
from pathlib import Path

from phasewatch.formats.trace import TraceReader

BIN = Path(sys.executable).parent / "phasewatch"
TIMEOUT = 180


def test_every_sample_from_exec_on_reaches_the_trace_and_the_pipeline(abab, tmp_path):
    trace = tmp_path / "t.arrow"
    proc = subprocess.run([str(BIN), "run", "--json", str(tmp_path / "s.json"), "--record",
                           str(trace), "--", str(abab), "0.4"],
                          capture_output=True, text=True, timeout=TIMEOUT)
    assert proc.returncode == 0, proc.stderr
    summary = json.loads((tmp_path / "s.json").read_text())
    assert summary["samples_lost"] == {"ring": 0, "queue": 0}
    reader = TraceReader(str(trace))
    recorded = sum(len(b) for b in reader.batches())
    reader.close()
    assert recorded == summary["samples"]
    # cpu-clock samples every millisecond of abab's CPU time: 3 × 0.4 s
    assert summary["samples"] >= 1000


def test_a_command_that_ends_at_once_is_watched_and_reported(tmp_path):
    proc = subprocess.run([str(BIN), "run", "--json", str(tmp_path / "s.json"), "--", "/bin/true"],
                          capture_output=True, text=True, timeout=TIMEOUT)
    assert proc.returncode == 0, proc.stderr
    summary = json.loads((tmp_path / "s.json").read_text())
    assert summary["exit_status"] == 0 and summary["intervals"] == 0
