"""What a plain ``phasewatch run -q`` loads: the whole command's CPU beside
perf record's is mostly start-up (docs/performance.md), so libraries it does
not need must stay unloaded, while it still names functions and keeps the
catalogue."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from phasewatch.collectors.registry import Host

KMOD_DEVICE = Host().kmod_device

#: Runs a phasewatch command in this interpreter, then prints the modules it
#: loaded, one a line.
PROBE = ("import sys\nfrom phasewatch.cli import main as cli\nstatus = cli.main(sys.argv[1:])\n"
         "print('\\n'.join(sorted(sys.modules)))\n"
         "sys.exit(status)\n")

#: Loaded only where needed: pyelftools (the ELF headers are read with
#: struct), psutil (attaching, leftovers), rich (printing a table), numba
#: (a missing ahead-of-time kernel), pyarrow (--record), zmq (the daemon),
#: msgspec (the metadata's schema: reading a trace or a side table, pprof).
NOT_AT_START = {"elftools", "psutil", "rich", "numba", "llvmlite", "pyarrow", "zmq", "msgspec"}


def modules_loaded_by(*argv) -> set[str]:
    proc = subprocess.run([sys.executable, "-c", PROBE, *map(str, argv)], capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return set(proc.stdout.split())


def loaded_by(*argv) -> set[str]:
    """The top-level packages a command loaded."""
    return {m.partition(".")[0] for m in modules_loaded_by(*argv)}


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


@pytest.mark.skipif(os.path.exists(KMOD_DEVICE), reason="the kernel module is loaded here")
def test_a_source_this_host_lacks_is_not_loaded_to_say_so():
    """Where the kernel module is not loaded, its source's code is not
    imported only to find its device missing."""
    loaded = modules_loaded_by("run", "-q", "--", "true")
    assert "phasewatch.collectors.registry" in loaded
    assert "phasewatch.collectors.kmod_source" not in loaded


def test_the_version_is_told_without_loading_any_command():
    """``phasewatch --version`` answers at once: it loads no subcommand (the
    report's plotting libraries took seconds)."""
    probe = ("import sys\nfrom phasewatch.cli import main as cli\ntry:\n    cli.main(['--version'])\n"
             "except SystemExit as exc:\n    status = exc.code\n"
             "print('\\n'.join(sorted(sys.modules)), file=sys.stderr)\nsys.exit(status)\n")
    proc = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0 and proc.stdout.startswith("phasewatch ")
    commands = {m for m in proc.stderr.split() if m.startswith("phasewatch.cli.")}
    assert commands == {"phasewatch.cli.main", "phasewatch.cli.blas"}, commands
