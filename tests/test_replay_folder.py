"""``replay FOLDER`` on a folder of ``run --record`` output replays the
traces in it, each with its side table of mappings, and nothing else."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

BIN = Path(sys.executable).parent / "phasewatch"
BUSY = "import time\nt = time.time()\nwhile time.time() - t < 1.0: pass\n"


def phasewatch(*args) -> subprocess.CompletedProcess:
    return subprocess.run([str(BIN), *map(str, args)], capture_output=True, text=True,
                          timeout=180)


def test_a_folder_of_recordings_replays_its_traces_only(tmp_path):
    folder = tmp_path / "recordings"
    folder.mkdir()
    for name in ("one", "two"):
        proc = phasewatch("run", "--no-pin", "--record", folder / f"{name}.arrow",
                          "--output", folder / f"{name}.jsonl", "--json", folder / f"{name}.json",
                          "--", sys.executable, "-c", BUSY)
        assert proc.returncode == 0, proc.stderr
    assert (folder / "one.arrow.mappings.jsonl").exists()
    out = tmp_path / "replayed"
    proc = phasewatch("replay", folder, "--output", out)
    assert proc.returncode == 0, proc.stderr
    assert sorted(p.name for p in out.iterdir()) == ["one.jsonl", "two.jsonl"]
    for name in ("one", "two"):
        live = (folder / f"{name}.jsonl").read_text().splitlines()
        replayed = (out / f"{name}.jsonl").read_text().splitlines()
        assert [json.loads(x) for x in replayed] == [json.loads(x) for x in live]
