"""``report``, ``diff`` and ``replay`` name each sample in the mappings of its
own process, as ``replay --pprof`` does.  A shell script runs two programs
whose code sits at the same addresses (tests/workloads/parts.c built twice
as fixed-address executables, its parts renamed ``alpha_*`` in one and
``beta_*`` in the other): over one merged address space the program mapped
last names both programs' samples; per process, each phase is named by the
program that ran it.  A recording from before the per-process rows (no
``pid`` column, or mapping rows without a ``pid``) still names its phases.
Real programs under real perf events."""

from __future__ import annotations

import html
import json
import re
import subprocess
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from daemonutil import Daemon
from test_run import phasewatch

from phasewatch.formats.tracefiles import open_trace
from phasewatch.live.sample_names import sample_names
from phasewatch.live.tree_symbolizer import RecordedTree

PARTS_C = Path(__file__).parent / "workloads" / "parts.c"
PROGRAMS = ("alpha", "beta")
PARTS = ("hash", "walk", "float")
SCALE = "0.4"


def build_renamed(out: Path, prefix: str) -> Path:
    """parts.c as a fixed-address executable, its parts named PREFIX_*."""
    renames = [f"-Dpart_{part}={prefix}_{part}" for part in PARTS]
    subprocess.run(["gcc", "-O2", "-g", "-fno-omit-frame-pointer", "-no-pie", *renames,
                    "-o", out, PARTS_C], check=True)
    return out


def symbol_addresses(exe: Path) -> dict[str, int]:
    found = {}
    for line in subprocess.run(["nm", exe], capture_output=True, text=True,
                               check=True).stdout.splitlines():
        fields = line.split()
        if len(fields) == 3:
            found[fields[2]] = int(fields[0], 16)
    return found


def checked(*args) -> subprocess.CompletedProcess:
    proc = phasewatch(*args)
    assert proc.returncode == 0, proc.stderr
    return proc


@pytest.fixture(scope="module")
def two_programs(tmp_path_factory) -> tuple[Path, dict[int, str]]:
    """The recording of the script, and each phase's program (the one that
    ran every interval of it; phases spanning both are left out)."""
    d = tmp_path_factory.mktemp("two")
    exes = {p: build_renamed(d / p, p) for p in PROGRAMS}
    addresses = {p: symbol_addresses(exe) for p, exe in exes.items()}
    for part in PARTS:    # the premise: the same code at the same addresses
        assert addresses["alpha"][f"alpha_{part}"] == addresses["beta"][f"beta_{part}"]
    script = d / "run.sh"
    script.write_text("#!/bin/sh\n" + "".join(f"{exe} --scale {SCALE} > /dev/null\n"
                                              for exe in exes.values()))
    script.chmod(0o755)
    trace, results = d / "t.arrow", d / "r.jsonl"
    checked("run", "-q", "--record", trace, "--", script)
    checked("replay", trace, "--output", results)
    return trace, phase_programs(trace, results)


def phase_programs(trace: Path, results: Path) -> dict[int, str]:
    """Phase -> the program that ran all its intervals, by when beta was mapped."""
    rows = [json.loads(line) for line in results.read_text().splitlines()]
    side = [json.loads(line) for line in Path(f"{trace}.mappings.jsonl").read_text().splitlines()]
    beta_from = min(r["t_ns"] for r in side if r["path"].endswith("/beta"))
    sides: dict[int, set[str]] = {}
    for r in rows:
        if "index" in r:
            side_of = "alpha" if r["t_end_ns"] <= beta_from else \
                "beta" if r["t_start_ns"] >= beta_from else "both"
            sides.setdefault(r["phase"], set()).add(side_of)
    found = {phase: s.pop() for phase, s in sides.items() if len(s) == 1 and s != {"both"}}
    assert set(found.values()) == set(PROGRAMS), (sides, beta_from)   # both programs phased
    return found


def assert_named_by_their_program(top: dict[int, str], programs: dict[int, str]) -> None:
    """Every phase of one program has that program's function on top."""
    named = {phase: top.get(phase, "") for phase in programs}
    assert all(named[phase].startswith(f"{program}_") for phase, program in programs.items()), \
        (named, programs)


def report_tops(trace: Path, out: Path) -> dict[int, str]:
    """Phase -> the first of its top functions in the report's phase table."""
    checked("report", trace, "--out", out)
    page = (out / "index.html").read_text()
    table = re.search(r'<table id="phase-table">(.*?)</table>', page).group(1)
    rows = re.findall(r'<tr><td>(?:<span[^>]*></span>)?(\d+)</td>.*?'
                      r'<td class="functions">(.*?)</td></tr>', table)
    assert rows, table
    return {int(phase): html.unescape(cell).split(" ")[0] for phase, cell in rows}


def diff_tops(a: Path, b: Path) -> tuple[dict[int, str], dict[int, str]]:
    """Phase -> top function, of each side of ``diff A B``."""
    result = json.loads(checked("diff", a, b, "--json").stdout)
    tops = ({}, {})
    for pair in result["pairs"]:
        for side, key in enumerate("ab"):
            if pair[f"phase_{key}"] is not None:
                tops[side][pair[f"phase_{key}"]] = pair[f"top_function_{key}"]
    return tops


def test_report_names_each_program_s_phases_by_its_own_functions(two_programs, tmp_path):
    trace, programs = two_programs
    assert_named_by_their_program(report_tops(trace, tmp_path / "report"), programs)


def test_report_labels_the_code_signature_with_each_program_s_functions(two_programs,
                                                                       tmp_path):
    """The code signature's entries are found with each sample's process, as
    the pipeline found them, and named by the functions in them."""
    trace, _ = two_programs
    checked("report", trace, "--out", tmp_path)
    labels = set(re.findall(r'"(\w+) \(#\d+\)"', (tmp_path / "index.html").read_text()))
    assert {f"{program}_{part}" for program in PROGRAMS for part in PARTS} <= labels, labels


def test_diff_names_each_program_s_phases_by_its_own_functions(two_programs):
    trace, programs = two_programs
    tops_a, tops_b = diff_tops(trace, trace)
    assert_named_by_their_program(tops_a, programs)
    assert_named_by_their_program(tops_b, programs)


def test_replay_names_each_program_s_phases_by_its_own_functions(two_programs):
    trace, programs = two_programs
    summary = json.loads(checked("replay", trace, "--json").stdout)
    tops = {row["phase"]: row["top_functions"][0]["name"]
            for row in summary["phases"] if row["top_functions"]}
    assert_named_by_their_program(tops, programs)


def test_the_daemon_replaying_the_recording_names_each_program_s_phases(two_programs):
    """phasewatchd --replay names phases by their functions (its ``phase_name``)."""
    trace, _ = two_programs
    wanted = {f"{program}_{part}" for program in PROGRAMS for part in PARTS}
    with Daemon("--replay", trace, "--replay-speed", "0", "--no-catalog") as daemon:
        daemon.wait_ready()
        deadline, names = time.monotonic() + 60, set()
        while time.monotonic() < deadline and not wanted <= names:
            names = {name.partition("~")[0] for name in
                     re.findall(r'phase_name="([^"]*)"', daemon.metrics_text())}
            time.sleep(0.2)
    assert wanted <= names, names


def test_one_address_is_named_per_process_and_over_every_mapping_without_one(two_programs):
    """The one naming path (sample_names over a recording): the same address
    in alpha's process and in beta's gets each one's function; a sample of no
    known process (pid 0) is named over every mapping, the one mapped last
    taking the address, as every sample was before per-process rows."""
    trace, _ = two_programs
    source = open_trace(str(trace))
    meta = source.metadata
    source.close()
    pid_of = {Path(row["path"]).name: row["pid"] for row in meta["mappings"]
              if row.get("pid") is not None and Path(row["path"]).name in PROGRAMS}
    address = symbol_addresses(trace.parent / "alpha")["alpha_hash"]
    names = sample_names(RecordedTree(meta), np.full(3, address, np.uint64),
                         np.array([pid_of["alpha"], pid_of["beta"], 0]), offsets=False)
    assert names.tolist() == ["alpha_hash", "beta_hash", "beta_hash"], (names, pid_of)


# -- recordings from before the per-process rows ------------------------------

def without_processes(trace: Path, out: Path, drop_column: bool) -> Path:
    """A copy of ``trace`` as recordings were before per-process rows: its
    side table's rows without ``pid``, and (``drop_column``) no ``pid``
    column either."""
    with pa.memory_map(str(trace)) as source:
        table = pa.ipc.open_file(source).read_all()
    meta = json.loads(table.schema.metadata[b"phasewatch"])
    if drop_column:
        table = table.drop_columns(["pid"])
        for signals in (meta["signals"], meta["sampling"]["signals"]):
            signals.pop("pid", None)
    table = table.replace_schema_metadata({b"phasewatch": json.dumps(meta).encode()})
    with pa.OSFile(str(out), "wb") as sink, pa.ipc.new_file(sink, table.schema) as writer:
        writer.write_table(table)
    rows = [json.loads(line) for line in Path(f"{trace}.mappings.jsonl").read_text().splitlines()]
    Path(f"{out}.mappings.jsonl").write_text(
        "".join(json.dumps({k: v for k, v in r.items() if k != "pid"}) + "\n" for r in rows))
    return out


@pytest.fixture(scope="module")
def one_program(abab, tmp_path_factory) -> Path:
    """parts (position-independent) recorded on its own: one process."""
    trace = tmp_path_factory.mktemp("one") / "t.arrow"
    checked("run", "-q", "--record", trace, "--", abab.parent / "parts", "--scale", SCALE)
    return trace


@pytest.mark.parametrize("drop_column", [True, False], ids=["no-pid-column", "pid-column"])
def test_a_recording_without_per_process_rows_names_its_phases_as_before(
        one_program, tmp_path, drop_column):
    old = without_processes(one_program, tmp_path / "old.arrow", drop_column)
    report = report_tops(old, tmp_path / "report")
    tops_a, tops_b = diff_tops(old, old)
    assert report == report_tops(one_program, tmp_path / "new-report"), report
    assert tops_a == tops_b == diff_tops(one_program, one_program)[0], (tops_a, tops_b)
    assert {f"part_{part}" for part in PARTS} <= set(report.values()), report
