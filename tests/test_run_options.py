"""``run``'s smaller options as perf users expect them: ``-q``, ``-F HZ``, a
short ``source:`` line, and parsers that offer only what each command takes."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from phasewatch.formats.trace import TraceReader

BIN = Path(sys.executable).parent / "phasewatch"
TIMEOUT = 180


def phasewatch(*args) -> subprocess.CompletedProcess:
    return subprocess.run([str(BIN), *map(str, args)], capture_output=True, text=True,
                          timeout=TIMEOUT)


def test_quiet_leaves_stderr_to_the_command():
    proc = phasewatch("run", "-q", "--", "sh", "-c", "echo out; echo err >&2")
    assert proc.returncode == 0
    assert proc.stdout == "out\n" and proc.stderr == "err\n"


def test_freq_sets_the_sample_rate(abab, tmp_path):
    summary, trace = tmp_path / "s.json", tmp_path / "t.arrow"
    # abab 0.4: 1.2 s of its own CPU time; 300 samples at 250 Hz.
    proc = phasewatch("run", "-F", "250", "--json", summary, "--record", trace, "--", abab, "0.4")
    assert proc.returncode == 0, proc.stderr
    samples = json.loads(summary.read_text())["samples"]
    assert 200 <= samples <= 360, samples
    sampling = TraceReader(str(trace)).metadata["sampling"]
    assert sampling["sample_rate_hz"] == 250


@pytest.mark.parametrize("value", ["0", "1000001", "fast"])
def test_a_bad_freq_is_one_line(value):
    proc = phasewatch("run", "-F", value, "--", "true")
    assert proc.returncode == 2 and len(proc.stderr.splitlines()) == 1
    assert "-F/--freq" in proc.stderr


def test_the_source_line_is_short():
    proc = phasewatch("run", "--", "true")
    line = next(x for x in proc.stderr.splitlines() if x.startswith("source: "))
    assert len(line) <= 120, line


def test_run_and_report_do_not_offer_bbv_and_replay_does():
    assert "bbv" not in phasewatch("run", "--help").stdout
    assert "bbv" not in phasewatch("report", "--help").stdout
    assert "bbv" in phasewatch("replay", "--help").stdout


@pytest.mark.parametrize("command", ["run", "replay", "report", "export"])
def test_an_unknown_option_points_to_the_commands_help(command):
    proc = phasewatch(command, "--no-such-option", "x")
    assert proc.returncode == 2
    assert proc.stderr.strip().endswith(f"(see phasewatch {command} --help)"), proc.stderr


def test_output_ending_in_csv_writes_the_same_results_as_csv(abab, tmp_path):
    import csv
    jsonl, table = tmp_path / "r.jsonl", tmp_path / "r.csv"
    trace = tmp_path / "t.arrow"
    proc = phasewatch("run", "--interval-samples", "100", "--record", trace, "--output", table,
                      "--", abab, "0.3")
    assert proc.returncode == 0, proc.stderr
    proc = phasewatch("replay", trace, "--output", jsonl)
    assert proc.returncode == 0, proc.stderr
    rows = list(csv.DictReader(table.read_text().splitlines()))
    expected = [json.loads(line) for line in jsonl.read_text().splitlines()]
    assert len(rows) == len(expected) >= 5
    for row, want in zip(rows, expected):
        assert int(row["index"]) == want["index"] and int(row["phase"]) == want["phase"]
        assert int(row["samples"]) == want["samples"]
        assert row["new_phase"] == ("true" if want["new_phase"] else "false")
        assert (row["distance"] == "") == (want["distance"] is None)


def test_the_top_help_lists_every_command_wherever_a_command_follows():
    # Only the named subcommand's parser is built, unless --help comes first.
    from phasewatch.cli.main import COMMANDS
    for argv in (["--help"], ["--help", "run"], ["-h", "replay", "x.arrow"]):
        listed = phasewatch(*argv).stdout
        assert all(f"\n    {name}" in listed for name in COMMANDS), (argv, listed)
    proc = phasewatch("run", "--help")
    assert proc.returncode == 0 and "usage: phasewatch run" in proc.stdout
    assert "replay" not in proc.stdout.split("options:")[0]
