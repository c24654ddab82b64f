"""``phasewatch run -- CMD`` as a user runs it: the real CLI, the real compiled
abab (region A, then B, then A again), real perf events, real files.

Which region each interval ran is told from abab's own ``--print-addrs`` and
the IPs in the recorded trace, independently of phasewatch's detector.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import psutil
import pytest

from phasewatch.collectors import kallsyms
from phasewatch.formats.trace import TraceReader

BIN = Path(sys.executable).parent / "phasewatch"
REGION_BYTES = 4096   # region_a and region_b are page-aligned and smaller than a page
TIMEOUT = 180


def phasewatch(*args, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run([str(BIN), *map(str, args)], capture_output=True, text=True,
                          timeout=TIMEOUT, **kwargs)


def results(path) -> list[dict]:
    return [json.loads(line) for line in Path(path).read_text().splitlines()]


def region_addresses(stdout: str) -> dict[str, int]:
    """abab --print-addrs: one ``name 0xADDR`` line per region, before anything else."""
    addrs = {}
    for line in stdout.splitlines()[:3]:
        name, addr = line.split()
        addrs[name] = int(addr, 16)
    return addrs


def interval_regions(trace, intervals: list[dict], addrs: dict[str, int]) -> list[str]:
    """Per interval, the region most of its IP samples fell in ('a', 'b' or '-').
    Interval k holds the next ``samples`` rows of the trace after interval k-1's."""
    reader = TraceReader(str(trace))
    ips = np.concatenate([b["ip"] for b in reader.batches()])
    reader.close()
    in_a = (ips >= addrs["region_a"]) & (ips < addrs["region_a"] + REGION_BYTES)
    in_b = (ips >= addrs["region_b"]) & (ips < addrs["region_b"] + REGION_BYTES)
    labels, row = [], 0
    for iv in intervals:
        a, b = in_a[row:row + iv["samples"]].sum(), in_b[row:row + iv["samples"]].sum()
        labels.append("a" if a > 0.8 * iv["samples"] else "b" if b > 0.8 * iv["samples"] else "-")
        row += iv["samples"]
    return labels


def stretches(labels: list[str]) -> list[tuple[str, int, int]]:
    """Maximal runs of one region: (region, first interval, last interval)."""
    runs = []
    for i, label in enumerate(labels):
        if label == "-":
            continue
        if runs and runs[-1][0] == label and runs[-1][2] == i - 1:
            runs[-1] = (label, runs[-1][1], i)
        else:
            runs.append((label, i, i))
    return [r for r in runs if r[2] - r[1] >= 2]   # ignore blips of one or two intervals


@pytest.fixture(scope="module")
def watched(abab, tmp_path_factory):
    """One recorded run of ``abab 2 --exit 3`` (2 s of A, of B, of A, each of
    its own CPU time), intervals of 200 samples: 200 ms of that CPU time at
    1 kHz, ten to each stretch.  Intervals of wall time would put the switch
    anywhere in an interval whenever the program waits for the CPU."""
    d = tmp_path_factory.mktemp("run")
    proc = phasewatch("run", "--detector", "vpf-ip", "--interval-samples", 200,
                      "--record", d / "t.arrow", "--output", d / "live.jsonl",
                      "--", abab, "2", "--exit", "3", "--print-addrs")
    return proc, d


def test_run_returns_the_commands_own_exit_code(watched):
    proc, _ = watched
    assert proc.returncode == 3, proc.stderr


def test_run_detects_a_b_a_and_gives_the_return_to_a_the_first_phase_id(watched):
    proc, d = watched
    live = results(d / "live.jsonl")
    regions = interval_regions(d / "t.arrow", live, region_addresses(proc.stdout))
    runs = stretches(regions)
    assert [r[0] for r in runs] == ["a", "b", "a"], regions
    middle = [live[(first + last) // 2]["phase"] for _, first, last in runs]
    assert len({iv["phase"] for iv in live}) >= 2
    assert middle[0] == middle[2] != middle[1], (middle, [iv["phase"] for iv in live])


def test_run_says_what_the_host_lacks_and_prints_the_phase_table(watched):
    proc, d = watched
    reader = TraceReader(str(d / "t.arrow"))
    lacks = {"perf_status", "pperf", "instructions"} - set(reader.signals)
    reader.close()
    assert ("missing on this host: " in proc.stderr) == bool(lacks)
    if "instructions" in lacks:
        assert "instructions and cycles (CPI)" in proc.stderr
    assert "phases" in proc.stderr and "top functions" in proc.stderr
    header = next(line for line in proc.stderr.splitlines() if "top functions" in line)
    # a signal the host lacks is no column of dashes
    assert ("CoV CPI" in header) == ("instructions" not in lacks), header
    assert ("voltage mV" in header) == ("perf_status" not in lacks), header
    assert "region_a" in proc.stderr.split("top functions", 1)[1]
    assert "region_b" in proc.stderr.split("top functions", 1)[1]


def test_replay_of_the_recording_matches_the_live_run_interval_for_interval(watched, tmp_path):
    proc, d = watched
    live = results(d / "live.jsonl")
    replay_out = tmp_path / "replay.jsonl"
    rp = phasewatch("replay", d / "t.arrow", "--detector", "vpf-ip", "--output", replay_out)
    assert rp.returncode == 0, rp.stderr
    assert len(live) >= 10
    assert results(replay_out) == live


def test_json_summary_parses_and_names_the_top_functions(abab, tmp_path):
    proc = phasewatch("run", "--json", tmp_path / "s.json", "--", abab, "0.3")
    assert proc.returncode == 0, proc.stderr
    summary = json.loads((tmp_path / "s.json").read_text())
    assert summary["exit_status"] == 0 and summary["intervals"] >= 3
    assert summary["samples"] > 0 and summary["phases"]
    missing = set(summary["missing_signals"])
    assert missing <= {"core voltage", "productive frequency", "instructions and cycles (CPI)"}
    assert summary["detector"] == "vpf-ip"        # the default where IPs are sampled
    if "instructions" not in summary["signals"]:
        assert summary["interval"] == "every 100 samples" and "100 samples" in proc.stderr
    tops = {f["name"] for row in summary["phases"] for f in row["top_functions"]}
    assert {"region_a", "region_b"} <= tops
    shares = [sum(f["share"] for f in row["top_functions"]) for row in summary["phases"]]
    assert all(0 < s <= 1 + 1e-9 for s in shares)


def test_json_on_stderr_is_json_alone(abab):
    """Without FILE the summary is on stderr, and the warnings are in it, not beside it.
    abab runs 0.6 s a region: at 0.3 s B has only three intervals of 100
    samples, and once, on CI, no phase came out named region_b."""
    proc = phasewatch("run", "--json", "--", abab, "0.6")
    assert proc.returncode == 0
    summary = json.loads(proc.stderr)
    if "instructions" not in summary["signals"]:
        assert any("no instruction counts" in w for w in summary["warnings"])
    assert {row["name"] for row in summary["phases"]} >= {"region_a", "region_b"}


def test_a_command_killed_by_a_signal_exits_128_plus_the_signal():
    proc = phasewatch("run", "--no-pin", "--", "sh", "-c", "kill -TERM $$")
    assert proc.returncode == 128 + signal.SIGTERM, proc.stderr
    assert "exit status 143" in proc.stderr


def test_a_missing_command_exits_127_with_one_line():
    proc = phasewatch("run", "--", "no-such-command-phasewatch")
    assert proc.returncode == 127
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "no-such-command-phasewatch" in lines[0], proc.stderr
    assert "Traceback" not in proc.stderr


@pytest.mark.parametrize("args, needle", [
    ([], "no command given"),
    (["--cpu", "0", "--no-pin", "--", "true"], "--no-pin"),
    (["--threshold", "2", "--", "true"], "--threshold"),
    (["--interval-ms", "-5", "--", "true"], "--interval-ms"),
    (["--cpu", "4096", "--", "true"], "--cpu 4096"),
])
def test_bad_input_is_one_line_and_a_nonzero_exit(args, needle):
    proc = phasewatch("run", *args)
    assert proc.returncode != 0
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and needle in lines[0], proc.stderr


def command_cpu_s(agent_pid: int) -> float:
    """The CPU seconds the agent's children have taken so far."""
    try:
        return sum(sum(c.cpu_times()[:2]) for c in psutil.Process(agent_pid).children())
    except psutil.Error:
        return 0.0


def test_ctrl_c_stops_the_command_prints_the_summary_and_closes_the_trace(abab, tmp_path):
    trace = tmp_path / "int.arrow"
    agent = subprocess.Popen([str(BIN), "run", "--record", str(trace), "--", str(abab), "20"],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             start_new_session=True)
    deadline = time.monotonic() + 60
    # The recording is written under a temporary name until it is complete.
    while (not list(tmp_path.glob(".int.arrow.*.partial")) and time.monotonic() < deadline
           and agent.poll() is None):
        time.sleep(0.05)
    assert agent.poll() is None, "the agent ended before the command started"
    # 1.5 s of the command's own CPU time (at 1 kHz, 1,500 samples), however
    # busy the host is.
    while command_cpu_s(agent.pid) < 1.5 and time.monotonic() < deadline:
        time.sleep(0.05)
    started = time.monotonic()
    agent.send_signal(signal.SIGINT)
    out, err = agent.communicate(timeout=TIMEOUT)
    assert time.monotonic() - started < 30, "the command was not stopped"
    assert agent.returncode == 130, err
    assert "interrupted" in err and "phases" in err
    reader = TraceReader(str(trace))
    rows = sum(len(b) for b in reader.batches())
    assert not reader.truncated and rows > 500
    reader.close()
    rp = phasewatch("replay", trace, "--detector", "vpf-ip")
    assert rp.returncode == 0, rp.stderr


def test_kernel_time_is_sampled_where_allowed_and_said_to_be_left_out_with_user_only(tmp_path):
    """dd from /dev/zero spends most of its time in the kernel (read_zero):
    perf record, as root, shows it; so does run, by default where this user
    may sample kernel mode, with each phase's kernel share; --user-only
    leaves it out and says so."""
    if os.geteuid() != 0 and int(Path("/proc/sys/kernel/perf_event_paranoid").read_text()) > 1:
        pytest.skip("sampling kernel mode needs root or perf_event_paranoid 1 or less")
    dd = ["--", "dd", "if=/dev/zero", "of=/dev/null", "bs=64k", "count=200000"]
    proc = phasewatch("run", "--no-catalog", "--json", tmp_path / "k.json",
                      "--record", tmp_path / "k.arrow", *dd)
    assert proc.returncode == 0, proc.stderr
    summary = json.loads((tmp_path / "k.json").read_text())
    replayed = phasewatch("replay", "--json", tmp_path / "k.arrow")
    assert replayed.returncode == 0, replayed.stderr
    assert ([row["kernel_share"] for row in json.loads(replayed.stdout)["phases"]]
            == [row["kernel_share"] for row in summary["phases"]])
    assert summary["kernel_sampled"] is True
    names = [f["name"] for row in summary["phases"] for f in row["top_functions"]]
    intervals = sum(row["intervals"] for row in summary["phases"])
    kernel = sum(f["share"] * row["intervals"] for row in summary["phases"]
                 for f in row["top_functions"] if f["name"].startswith(("[k] ", "[kernel]")))
    assert kernel > 0.5 * intervals, names
    shares = sum(row["kernel_share"] * row["intervals"] for row in summary["phases"])
    assert shares >= kernel - 0.01 * intervals, summary["phases"]    # top three only, beside all
    if kallsyms.running_kernel() is not None:       # named as perf report names it
        assert "[k] read_zero" in names, names
    proc = phasewatch("run", "--no-catalog", *dd)
    assert proc.returncode == 0, proc.stderr
    assert re.search(r"┃ kernel ┃", proc.stderr) and re.search(r"│ [5-9]\d %", proc.stderr), proc.stderr
    proc = phasewatch("run", "--no-catalog", "--user-only", *dd)
    assert proc.returncode == 0, proc.stderr
    assert "source: perf, user mode only;" in proc.stderr
    assert "[kernel]" not in proc.stderr and "[k] " not in proc.stderr


def test_a_cpu_bound_program_spends_a_small_share_in_the_kernel(tmp_path, abab):
    """kernel_share is each phase's share of samples in kernel mode: small
    for abab, which only computes (interrupts and, on a loaded host, the
    scheduler)."""
    if os.geteuid() != 0 and int(Path("/proc/sys/kernel/perf_event_paranoid").read_text()) > 1:
        pytest.skip("sampling kernel mode needs root or perf_event_paranoid 1 or less")
    proc = phasewatch("run", "--no-catalog", "--json", tmp_path / "a.json", "--", abab, "0.5")
    assert proc.returncode == 0, proc.stderr
    phases = json.loads((tmp_path / "a.json").read_text())["phases"]
    assert phases and all(0 <= row["kernel_share"] < 0.5 for row in phases), phases
