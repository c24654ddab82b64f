"""Samples lost are samples the kernel or the agent dropped, never more:
``run --source msr`` over fake MSR files of a command that ends at once takes
no samples and loses none, although the 1 kHz register sampler ticks (and is
late now and then) while the agent starts."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from test_collectors_msr import write_msrs

from phasewatch.collectors.cpuinfo import online_cpus

BIN = Path(sys.executable).parent / "phasewatch"


@pytest.fixture
def fake_msr(tmp_path) -> str:
    for cpu in online_cpus():
        write_msrs(tmp_path / f"cpu{cpu}" / "msr",
                   {"perf_status": (8000 << 32) | 0x2000, "aperf": 1 << 20,
                    "mperf": 1 << 20, "pperf": 1 << 19, "tsc": 1 << 30})
    return str(tmp_path / "cpu{cpu}" / "msr")


@pytest.mark.parametrize("attempt", range(3))
def test_no_samples_no_losses(fake_msr, tmp_path, attempt):
    summary = tmp_path / "s.json"
    proc = subprocess.run([str(BIN), "run", "--source", "msr", "--msr-path", fake_msr,
                           "--json", str(summary), "--", "/bin/true"],
                          capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stderr
    result = json.loads(summary.read_text())
    assert result["source"] == "perf+msr"
    assert result["samples"] == 0
    assert result["samples_lost"] == {"ring": 0, "queue": 0}
    proc = subprocess.run([str(BIN), "run", "--source", "msr", "--msr-path", fake_msr, "--",
                           "/bin/true"], capture_output=True, text=True, timeout=180)
    assert "samples lost" not in proc.stderr
