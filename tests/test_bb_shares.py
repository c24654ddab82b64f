"""A SimPoint .bb file has instruction counts, not times: its phases report
their share of the instructions, not "time 0.0 %"."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

BIN = Path(sys.executable).parent / "phasewatch"


def write_bb(path: Path) -> Path:
    """Six intervals of blocks 1-3 (300 instructions each), then two of blocks
    7-9 (900 each): 1,800 and 1,800 instructions, in 6 and 2 intervals."""
    lines = ["T:1:100 :2:100 :3:100"] * 6 + ["T:7:300 :8:300 :9:300"] * 2
    path.write_text("\n".join(lines) + "\n")
    return path


def test_bb_phases_report_their_share_of_instructions(tmp_path):
    bb = write_bb(tmp_path / "prog.bb")
    proc = subprocess.run([str(BIN), "replay", str(bb), "--detector", "bbv", "--json"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    rows = json.loads(proc.stdout)["phases"]
    assert [r["intervals"] for r in rows] == [6, 2]
    assert [r["instruction_share"] for r in rows] == [0.5, 0.5]
    table = subprocess.run([str(BIN), "replay", str(bb), "--detector", "bbv"],
                           capture_output=True, text=True, timeout=120).stdout
    phases = table.split("prediction:", 1)[0]      # the prediction's own shares follow
    assert "instructions" in phases and phases.count(" 50.0 %") == 2 and " 0.0 %" not in phases
