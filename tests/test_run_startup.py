"""What a plain ``phasewatch run -q`` loads: the whole command's CPU beside
perf record's is mostly start-up (docs/performance.md), so libraries it does
not need must stay unloaded, while it still names functions and keeps the
catalogue."""

from __future__ import annotations

import json
import subprocess
import sys

#: Runs a phasewatch command in this interpreter, then prints the top-level
#: packages it loaded, one a line.
PROBE = ("import sys\nfrom phasewatch.cli import main as cli\nstatus = cli.main(sys.argv[1:])\n"
         "print('\\n'.join(sorted({m.partition('.')[0] for m in sys.modules})))\n"
         "sys.exit(status)\n")

#: Loaded only where needed: pyelftools (the ELF headers are read with
#: struct), psutil (attaching, leftovers), rich (printing a table), numba
#: (a missing ahead-of-time kernel), pyarrow (--record), zmq (the daemon),
#: msgspec (the metadata's schema: reading a trace or a side table, pprof).
NOT_AT_START = {"elftools", "psutil", "rich", "numba", "llvmlite", "pyarrow", "zmq", "msgspec"}


def loaded_by(*argv) -> set[str]:
    proc = subprocess.run([sys.executable, "-c", PROBE, *map(str, argv)], capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return set(proc.stdout.split())


def test_run_quiet_loads_no_library_it_does_not_need(abab, tmp_path):
    loaded = loaded_by("run", "-q", "--json", tmp_path / "s.json", "--", abab, "0.3")
    assert "numpy" in loaded and "phasewatch" in loaded
    assert loaded & NOT_AT_START == set()
    # ... and yet it read abab's symbols and keyed its catalogue by build id
    summary = json.loads((tmp_path / "s.json").read_text())
    names = {f["name"] for phase in summary["phases"] for f in phase["top_functions"]}
    assert {"region_a", "region_b"} <= names


def test_run_of_a_command_that_ends_at_once_loads_none_either(tmp_path):
    assert loaded_by("run", "-q", "--", "true") & NOT_AT_START == set()
