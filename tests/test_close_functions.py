"""``phasewatch run -- closefns`` with the default detector: two hot functions
that sit next to each other in ``.text`` (a hash loop and a pointer-chasing
walk, run as A, B, A) come out as three stretches, the first and last in one
phase and the middle one in another.

Which function each interval ran is told from closefns's own
``--print-addrs`` and the IPs of the recorded trace, independently of the
detector.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np

from phasewatch.formats.trace import TraceReader

BIN = Path(sys.executable).parent / "phasewatch"


def addresses(stdout: str) -> dict[str, int]:
    return {name: int(addr, 16) for name, addr in (line.split() for line in stdout.splitlines()[:3])}


def interval_functions(trace: Path, intervals: list[dict], addrs: dict[str, int]) -> list[str]:
    """Per interval: 'a' (alpha) or 'b' (beta) if more than 80 % of its samples
    fell in that function, else '-'."""
    reader = TraceReader(str(trace))
    ips = np.concatenate([b["ip"] for b in reader.batches()])
    reader.close()
    in_a = (ips >= addrs["alpha"]) & (ips < addrs["beta"])
    in_b = (ips >= addrs["beta"]) & (ips < addrs["closefns_end"])
    labels, row = [], 0
    for iv in intervals:
        n = iv["samples"]
        a, b = in_a[row:row + n].sum(), in_b[row:row + n].sum()
        labels.append("a" if a > 0.8 * n else "b" if b > 0.8 * n else "-")
        row += n
    return labels


def test_two_functions_a_cache_line_apart_come_out_a_b_a(closefns, tmp_path):
    proc = subprocess.run([str(BIN), "run", "--record", str(tmp_path / "t.arrow"),
                           "--output", str(tmp_path / "live.jsonl"), "--",
                           str(closefns), "1.5", "--print-addrs"],
                          capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stderr
    addrs = addresses(proc.stdout)
    assert addrs["beta"] - addrs["alpha"] <= 256, addrs      # the point of the test
    live = [json.loads(line) for line in (tmp_path / "live.jsonl").read_text().splitlines()]
    labels = interval_functions(tmp_path / "t.arrow", live, addrs)
    phases = [iv["phase"] for iv in live]
    runs = []                       # (function, phases of its intervals)
    for label, phase in zip(labels, phases):
        if label == "-":
            continue
        if runs and runs[-1][0] == label:
            runs[-1][1].append(phase)
        else:
            runs.append((label, [phase]))
    assert [r[0] for r in runs] == ["a", "b", "a"], labels
    main = [max(set(p), key=p.count) for _, p in runs]
    assert main[0] == main[2] != main[1], (labels, phases)
    for (_, p), m in zip(runs, main):            # each stretch stays in its phase
        assert p.count(m) >= 0.8 * len(p), (labels, phases)
