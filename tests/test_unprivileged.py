"""A user without root at perf_event_paranoid=2: perf lets them sample their
own processes in user mode, and so does phasewatch; ``probe`` says what ``run``
then takes.  Run as ``nobody`` through ``setpriv``, with a home of its own."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import pytest

from phasewatch.collectors import perf_msr
from phasewatch.formats.trace import TraceReader

BIN = Path(sys.executable).parent / "phasewatch"
PARANOID = Path("/proc/sys/kernel/perf_event_paranoid")
#: 1.5 s of CPU time, nearly all of it in user mode (process_time is a system call).
BUSY = ("import time\nwhile time.process_time() < 1.5:\n"
        "    for _ in range(100_000): pass\n")
#: x86-64 user addresses end below the canonical hole; the kernel's are above it.
USER_SPACE_END = 1 << 47

pytestmark = pytest.mark.skipif(os.geteuid() != 0 or shutil.which("setpriv") is None,
                                reason="needs root and setpriv to become another user")


@pytest.fixture(scope="module")
def paranoid_two():
    """perf_event_paranoid at 2 (perf's user-mode, own-process rule), restored after."""
    before = int(PARANOID.read_text())
    if before > 2:
        pytest.skip(f"perf_event_paranoid={before} forbids every unprivileged perf user")
    if before < 2:
        PARANOID.write_text("2")
    yield
    if before < 2:
        PARANOID.write_text(str(before))


@pytest.fixture
def home():
    """A directory ``nobody`` can write: its home and the outputs."""
    path = Path(tempfile.mkdtemp(prefix="phasewatch-nobody-"))
    path.chmod(0o777)
    yield path
    shutil.rmtree(path, ignore_errors=True)


def as_nobody(home: Path, *argv) -> subprocess.CompletedProcess:
    return subprocess.run(["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups",
                           "env", f"HOME={home}", str(BIN), *map(str, argv)],
                          capture_output=True, text=True, timeout=180, cwd=home)


def test_a_user_samples_their_own_command_as_probe_says(paranoid_two, home):
    said = as_nobody(home, "probe", "--json")
    assert said.returncode == 0, said.stderr
    said = json.loads(said.stdout)
    offers = {s["name"]: s for s in said["sources"]}
    assert said["auto"] == "perf" and offers["perf"]["available"]

    summary, trace = home / "s.json", home / "t.arrow"
    proc = as_nobody(home, "run", "--no-pin", "--json", summary, "--record", trace, "--",
                     sys.executable, "-c", BUSY)
    assert proc.returncode == 0, proc.stderr
    result = json.loads(summary.read_text())
    assert result["source"] == said["auto"]
    assert set(result["signals"]) == set(offers["perf"]["columns"])
    assert result["samples"] > 500
    reader = TraceReader(str(trace))
    ips = np.concatenate([b["ip"] for b in reader.batches()])
    reader.close()
    assert len(ips) == result["samples"] and (ips < USER_SPACE_END).all()


def test_probe_does_not_offer_what_a_user_cannot_open(paranoid_two, home):
    said = json.loads(as_nobody(home, "probe", "--json").stdout)
    offers = {s["name"]: s for s in said["sources"]}
    # The msr PMU counts CPU-wide, kernel time included: not a user's at paranoid 2.
    assert not {"tsc", "aperf", "mperf", "pperf"} & set(offers["perf"]["columns"])
    if perf_msr.available_columns() and not Path("/dev/cpu/0/msr").exists():
        assert not offers["msr"]["available"]
        assert "perf_event_paranoid=2" in offers["msr"]["reason"]
