"""A recording replays as it was watched: ``run --record`` writes the
detector and interval settings it used into the trace, and ``replay``,
``report`` and ``phasewatchd --replay`` take them unless told otherwise."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from daemonutil import Daemon
from phasewatch.core.settings import DetectionSettings
from phasewatch.formats.trace import TraceReader

BIN = Path(sys.executable).parent / "phasewatch"
TIMEOUT = 180
BUSY = ("import time\n"
        "def spin(s):\n    t = time.time()\n    while time.time() - t < s: pass\n"
        "spin(0.8)\nsum(i * i for i in range(3_000_000))\nspin(0.8)\n")


def phasewatch(*args) -> subprocess.CompletedProcess:
    return subprocess.run([str(BIN), *map(str, args)], capture_output=True, text=True,
                          timeout=TIMEOUT)


def lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    """A run with settings other than the defaults, and one with the defaults."""
    d = tmp_path_factory.mktemp("recorded")
    made = {}
    for name, options in (("chosen", ["--detector", "vpf-ip", "--threshold", "0.4",
                                      "--cpi-tolerance", "0.2", "--interval-samples", "150"]),
                          ("default", [])):
        trace, out = d / f"{name}.arrow", d / f"{name}.jsonl"
        proc = phasewatch("run", "--no-pin", *options, "--record", trace, "--output", out,
                          "--", sys.executable, "-c", BUSY)
        assert proc.returncode == 0, proc.stderr
        made[name] = (trace, out)
    return made


def test_the_trace_says_what_run_used(recorded):
    trace, _ = recorded["chosen"]
    meta = TraceReader(str(trace)).metadata
    assert meta["detection"] == {"detector": "vpf-ip", "threshold": 0.4, "adaptive": False,
                                 "cpi_tolerance": 0.2}
    assert meta["interval"]["kind"] == "samples" and meta["interval"]["samples"] == 150


@pytest.mark.parametrize("name", ["chosen", "default"])
def test_replay_without_options_gives_the_live_results(recorded, name, tmp_path):
    trace, live = recorded[name]
    out = tmp_path / "replayed.jsonl"
    proc = phasewatch("replay", trace, "--output", out)
    assert proc.returncode == 0, proc.stderr
    assert len(lines(live)) >= 3
    assert lines(out) == lines(live)


def test_an_option_still_overrides_the_recording(recorded, tmp_path):
    trace, live = recorded["chosen"]
    out = tmp_path / "other.jsonl"
    proc = phasewatch("replay", trace, "--interval-samples", "300", "--output", out)
    assert proc.returncode == 0, proc.stderr
    assert len(lines(out)) < len(lines(live))


def test_report_takes_the_recorded_settings(recorded, tmp_path):
    trace, live = recorded["default"]
    proc = phasewatch("report", trace, "--out", tmp_path / "a")
    assert proc.returncode == 0, proc.stderr
    proc = phasewatch("report", live, "--trace", trace, "--out", tmp_path / "b")
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "b" / "index.html").exists()


def total(metrics: str, name: str) -> float:
    """The sum of one metric over all its targets."""
    return sum(float(line.rpartition(" ")[2]) for line in metrics.splitlines()
               if line.startswith(name + "{") or line.startswith(name + " "))


def test_phasewatchd_replays_with_the_recorded_settings(recorded):
    """The daemon splits the samples by CPU: each CPU's intervals are 150 of its samples."""
    trace, live = recorded["chosen"]
    samples = sum(len(b) for b in TraceReader(str(trace)).batches())
    with Daemon("--replay", trace, "--replay-speed", "0") as d:
        d.wait_ready()
        d.wait_metric("phasewatch_samples_total", lambda v: v >= samples)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            intervals = total(d.metrics_text(), "phasewatch_intervals_total")
            if intervals >= samples // 150 - 2:     # one partial interval per CPU at most
                break
            time.sleep(0.2)
        time.sleep(1.0)
        intervals = total(d.metrics_text(), "phasewatch_intervals_total")
    assert samples // 150 - 2 <= intervals <= samples // 150


def test_phasewatchd_takes_the_detection_options():
    proc = subprocess.run([str(Path(sys.executable).parent / "phasewatchd"), "--help"],
                          capture_output=True, text=True, timeout=60)
    for option in ("--detector", "--threshold", "--adaptive", "--interval-samples",
                   "--interval-ms", "--interval-instructions"):
        assert option in proc.stdout


def test_the_samples_interval_warning_counts_milliseconds_at_the_rate_sampled():
    """-F 200: 100 samples are 500 ms of CPU time, and the warning says so."""
    said = []
    fitted = DetectionSettings().for_stream(("t_ns", "cpu", "tid", "ip"), said.append,
                                            rate_hz=200)
    assert fitted.interval.kind == "samples"
    assert said == ["the samples have no instruction counts: ending intervals every 100 samples "
                    "instead (500 ms of the program's CPU time at 200 Hz; set it with "
                    "--interval-samples or --interval-ms)"]
