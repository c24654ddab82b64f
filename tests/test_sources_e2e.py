"""``phasewatch run --source msr`` end to end, with real parts: the real CLI,
real perf events and a real program, and fake MSR devices (sparse files, each
value at offset = MSR address) whose counters a writer thread advances while
the program runs.  The kernel module's path is in test_kmod_pipeline.py, the
choice of ``auto`` in test_registry.py."""

from __future__ import annotations

import json
import os
import struct
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from phasewatch.collectors.cpuinfo import online_cpus
from phasewatch.core import registers

BIN = Path(sys.executable).parent / "phasewatch"
TIMEOUT = 180
#: Core voltage before and after the program says it is halfway, in 1/8192 V
#: (both inside the virtual-machine model's histogram range, 962..1080 mV).
VOLTS = (0.970, 1.060)
#: Productive frequency as a fraction of the base frequency, before and after.
PPERF_SHARE = (0.3, 0.8)
#: The program: busy for a while, a flag file, busy again.
WORKLOAD = """
import sys, time, pathlib
def busy(s):
    end = time.monotonic() + s
    while time.monotonic() < end:
        pass
busy(float(sys.argv[2]))
pathlib.Path(sys.argv[1]).touch()
busy(float(sys.argv[2]))
"""


class MsrWriter(threading.Thread):
    """Advances APERF, MPERF, PPERF and TSC in fake MSR files every
    millisecond and sets PERF_STATUS's voltage, switching both schedules when
    ``flag`` appears.  In a file, MPERF (0xE7) reads its own low byte followed
    by APERF's (0xE8) low seven: its deltas are 256 times APERF's, and PPERF
    advances by its share of that."""

    def __init__(self, paths: list[Path], flag: Path):
        super().__init__(daemon=True)
        self.fds = [os.open(p, os.O_RDWR) for p in paths]
        self.flag = flag
        self.stop = threading.Event()
        self.switched_at: float | None = None

    def run(self) -> None:
        aperf = pperf = 0
        last = time.monotonic_ns()
        while not self.stop.is_set():
            now = time.monotonic_ns()
            step, last = now - last, now
            phase = 1 if self.flag.exists() else 0
            aperf += step
            pperf += int(256 * step * PPERF_SHARE[phase])
            volts = round(VOLTS[phase] * 8192)
            for fd in self.fds:
                os.pwrite(fd, struct.pack("<Q", now), registers.REGISTERS["tsc"])
                os.pwrite(fd, struct.pack("<Q", aperf), registers.REGISTERS["aperf"])
                os.pwrite(fd, struct.pack("<Q", pperf), registers.REGISTERS["pperf"])
                os.pwrite(fd, struct.pack("<Q", volts << 32 | 0x2000), registers.REGISTERS["perf_status"])
            time.sleep(0.001)

    def close(self) -> None:
        self.stop.set()
        self.join(timeout=5)
        for fd in self.fds:
            os.close(fd)


@pytest.fixture
def fake_msrs(tmp_path):
    paths = []
    for cpu in online_cpus():
        path = tmp_path / f"cpu{cpu}" / "msr"
        path.parent.mkdir()
        with open(path, "wb") as f:
            f.truncate(0x1000)
        paths.append(path)
    flag = tmp_path / "halfway"
    writer = MsrWriter(paths, flag)
    writer.start()
    yield str(tmp_path / "cpu{cpu}" / "msr"), flag
    writer.close()


def test_run_source_msr_samples_voltage_and_pfreq_and_finds_the_two_halves(fake_msrs, tmp_path):
    template, flag = fake_msrs
    out, trace = tmp_path / "phases.jsonl", tmp_path / "run.arrow"
    # Wall-clock intervals: as many however much CPU a loaded host leaves the
    # program; a second, so that each holds several register readings at the
    # 2-25 Hz the agent's budget leaves the register sampler on a virtual
    # machine.
    proc = subprocess.run([str(BIN), "run", "--source", "msr", "--msr-path", template,
                           "--interval-ms", "1000", "--json", str(tmp_path / "s.json"), "--output", str(out), "--record", str(trace), "--",
                           sys.executable, "-c", WORKLOAD, str(flag), "6.0"],
                          capture_output=True, text=True, timeout=TIMEOUT)
    assert proc.returncode == 0, proc.stderr
    summary = json.loads((tmp_path / "s.json").read_text())
    assert summary["source"] == "perf+msr"
    assert summary["detector"] == "vpf-ip"            # the default where IPs are sampled
    assert {"perf_status", "aperf", "mperf", "pperf", "ip"} <= set(summary["signals"])
    assert "core voltage" not in summary["missing_signals"]
    assert "productive frequency" not in summary["missing_signals"]
    phases = [iv["phase"] for iv in map(json.loads, out.read_text().splitlines())]
    assert len(phases) >= 10, phases
    first, last = phases[0], phases[-1]
    assert first != last, phases
    head = next(i for i, p in enumerate(phases) if p != first)
    tail = len(phases) - next(i for i, p in enumerate(reversed(phases)) if p != last)
    # One phase per half; the one interval that straddles the switch mixes
    # both halves' samples and may open a phase of its own.
    assert tail - head <= 1, phases
    assert 0.25 < head / len(phases) < 0.75, phases
    rows = {row["phase"]: row for row in summary["phases"]}
    # The interval that straddles the switch may join either side, bringing
    # at most one interval's worth of the other half's voltage to its mean.
    step = 1000 * (VOLTS[1] - VOLTS[0])
    for phase, volts in ((first, VOLTS[0]), (last, VOLTS[1])):
        mixed = step / phases.count(phase)
        assert rows[phase]["voltage_mv"] == pytest.approx(1000 * volts, abs=5 + mixed), phases
    ratio = rows[last]["pfreq_mhz"] / rows[first]["pfreq_mhz"]
    low, high = PPERF_SHARE
    mixed_low = (high - (high - low) / phases.count(last)) / (low + (high - low) / phases.count(first))
    assert 0.9 * mixed_low <= ratio <= 1.1 * high / low, phases
    # The recording replays to the same phases, interval for interval.
    replayed = tmp_path / "replayed.jsonl"
    proc = subprocess.run([str(BIN), "replay", str(trace), "--output", str(replayed)],
                          capture_output=True, text=True, timeout=TIMEOUT)
    assert proc.returncode == 0, proc.stderr
    assert [json.loads(line)["phase"] for line in replayed.read_text().splitlines()] == phases
