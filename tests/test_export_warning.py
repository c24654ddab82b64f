"""``export --simpoints`` warns when its intervals are not instruction counts
(results of a host that counted no instructions), and not otherwise."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

BIN = Path(sys.executable).parent / "phasewatch"


def results(path: Path, instructions: int) -> Path:
    rows = [{"index": i, "t_start_ns": i * 10**8, "t_end_ns": (i + 1) * 10**8,
             "instructions": instructions, "cycles": 0, "samples": 100,
             "distance": None if i in (0, 4) else 0.01, "phase": int(i >= 4),
             "new_phase": i in (0, 4)} for i in range(8)]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def export(path: Path) -> subprocess.CompletedProcess:
    return subprocess.run([str(BIN), "export", "--simpoints", str(path), "-o",
                           str(path.with_suffix(""))], capture_output=True, text=True, timeout=60)


def test_sample_count_intervals_are_warned_about(tmp_path):
    proc = export(results(tmp_path / "samples.jsonl", instructions=0))
    assert proc.returncode == 0, proc.stderr
    assert "not instructions" in proc.stderr
    assert (tmp_path / "samples.simpoints").read_text() == "1 0\n5 1\n"


def test_instruction_intervals_are_not(tmp_path):
    proc = export(results(tmp_path / "instr.jsonl", instructions=100_000_000))
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == ""
