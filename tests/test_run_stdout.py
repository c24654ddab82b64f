"""``phasewatch run`` leaves stdout to the command, as perf, time and strace
do: a compressor piped through it writes the same bytes as without it, and
the summary goes to stderr or to ``--json FILE``."""

from __future__ import annotations

import json
import random
import subprocess
import sys
from pathlib import Path

BIN = Path(sys.executable).parent / "phasewatch"
TIMEOUT = 180


def some_text(path: Path, lines: int = 60_000) -> Path:
    """Compressible, not trivially so: words in a fixed pseudo-random order."""
    rng = random.Random(22)
    words = ["phase", "interval", "voltage", "sample", "cluster", "leader", "signature"]
    path.write_text("\n".join(" ".join(rng.choice(words) for _ in range(12))
                              for _ in range(lines)))
    return path


def test_a_compressor_piped_through_run_writes_the_same_bytes(tmp_path):
    data = some_text(tmp_path / "data.txt")
    direct = subprocess.run(["bzip2", "-9", "-c", str(data)], capture_output=True, check=True,
                            timeout=TIMEOUT).stdout
    proc = subprocess.run([str(BIN), "run", "--no-pin", "--", "bzip2", "-9", "-c", str(data)],
                          capture_output=True, timeout=TIMEOUT)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == direct
    check = subprocess.run(["bzip2", "-t"], input=proc.stdout, capture_output=True, timeout=TIMEOUT)
    assert check.returncode == 0, check.stderr
    assert b"exit status 0" in proc.stderr          # the summary went to stderr


def test_json_goes_to_its_file_and_the_command_keeps_stdout(tmp_path):
    data = some_text(tmp_path / "data.txt", lines=20_000)
    summary = tmp_path / "summary.json"
    proc = subprocess.run([str(BIN), "run", "--no-pin", "--json", str(summary), "--",
                           "xz", "-c", str(data)], capture_output=True, timeout=TIMEOUT)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == subprocess.run(["xz", "-c", str(data)], capture_output=True,
                                         check=True, timeout=TIMEOUT).stdout
    result = json.loads(summary.read_text())
    assert result["exit_status"] == 0 and result["command"][0] == "xz"


def test_json_without_a_file_goes_to_stderr():
    proc = subprocess.run([str(BIN), "run", "--no-pin", "--json", "--", "echo", "hello"],
                          capture_output=True, text=True, timeout=TIMEOUT)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "hello\n"
    start = proc.stderr.index("{\n")
    assert json.loads(proc.stderr[start:])["command"] == ["echo", "hello"]
