"""``phasewatch diff A B`` on two real recordings of a three-part program
(tests/workloads/parts.c): the second walks a working set 16 or more times larger in
its middle part, which takes longer with the same number of steps.  diff must
pair the phases, name that part alone as changed, and give its slowdown
within 10 % of the one the program measured on its own clock."""

from __future__ import annotations

import json

import pytest
from test_run import phasewatch

SCALE = "2"
DETECTION = ("--detector", "vpf-ip", "--interval-samples", "100")


def large_walk_kib() -> int:
    """A working set that does not fit the core's level-2 cache: 1 MiB, or
    the cache's size where it is larger (2 MiB on some Xeons, where a 1 MiB
    walk is barely slower than a 64 KiB one)."""
    try:
        with open("/sys/devices/system/cpu/cpu0/cache/index2/size") as f:
            size = f.read().strip()
        return max(1024, int(size.rstrip("K")) if size.endswith("K") else int(size) // 1024)
    except (OSError, ValueError):
        return 1024


def part_seconds(stdout: str) -> dict[str, float]:
    """parts prints "part_NAME SECONDS" per part (its thread's CPU time)."""
    found = {}
    for line in stdout.splitlines():
        words = line.split()
        if len(words) == 2 and words[0].startswith("part_"):
            found[words[0]] = float(words[1])
    return found


@pytest.fixture(scope="module")
def recordings(abab, tmp_path_factory):
    parts = abab.parent / "parts"
    d = tmp_path_factory.mktemp("diff")
    measured = {}
    for name, walk_kib in (("a", "64"), ("b", str(large_walk_kib()))):
        proc = phasewatch("run", *DETECTION, "--record", d / f"{name}.arrow", "--",
                          parts, "--scale", SCALE, "--walk-kib", walk_kib)
        assert proc.returncode == 0, proc.stderr
        measured[name] = part_seconds(proc.stdout)
        assert set(measured[name]) == {"part_hash", "part_walk", "part_float"}, proc.stdout
    return d, measured


@pytest.fixture(scope="module")
def diffed(recordings):
    d, measured = recordings
    proc = phasewatch("diff", d / "a.arrow", d / "b.arrow", *DETECTION, "--json")
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout), measured


@pytest.mark.slow
def test_diff_names_the_slowed_part_alone_with_its_measured_slowdown(diffed):
    result, measured = diffed
    slowdown = measured["b"]["part_walk"] / measured["a"]["part_walk"]
    others = [measured["b"][p] / measured["a"][p] for p in ("part_hash", "part_float")]
    assert slowdown > 1.5 and all(abs(r - 1) < 0.1 for r in others), measured  # the premise
    changed = [p for p in result["pairs"] if p["changed"]]
    assert len(changed) == 1, result["pairs"]
    pair = changed[0]
    assert pair["status"] == "slower"
    assert pair["top_function_a"] == pair["top_function_b"] == "part_walk"
    assert pair["slowdown"] == pytest.approx(slowdown, rel=0.10), (pair, measured)


@pytest.mark.slow
def test_every_part_is_paired_with_itself(diffed):
    result, _ = diffed
    big = [p for p in result["pairs"] if max(p["share_a"], p["share_b"]) >= 0.1]
    assert sorted(p["top_function_a"] for p in big) == ["part_float", "part_hash", "part_walk"]
    for pair in big:
        assert pair["phase_b"] is not None and pair["top_function_b"] == pair["top_function_a"]
        assert {"phase_a", "phase_b", "seconds_a", "seconds_b", "functions"} <= set(pair)


@pytest.mark.slow
def test_the_table_marks_the_changed_pair(recordings):
    d, _ = recordings
    proc = phasewatch("diff", d / "a.arrow", d / "b.arrow", *DETECTION)
    assert proc.returncode == 0, proc.stderr
    slower = [line for line in proc.stdout.splitlines() if "slower *" in line]
    assert len(slower) == 1 and "part_walk" in slower[0], proc.stdout
    assert "changed (*): 1 of" in proc.stdout


def test_a_missing_recording_is_one_line_and_status_2(tmp_path):
    proc = phasewatch("diff", tmp_path / "none.arrow", tmp_path / "other.arrow")
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "none.arrow" in lines[0] and "Traceback" not in proc.stderr


@pytest.mark.slow
def test_report_has_a_section_of_the_changes_since_a_baseline(recordings, tmp_path):
    d, _ = recordings
    proc = phasewatch("report", d / "b.arrow", "--diff", d / "a.arrow", *DETECTION,
                      "--out", tmp_path / "report")
    assert proc.returncode == 0, proc.stderr
    page = (tmp_path / "report" / "index.html").read_text()
    section = page.split('<table id="diff-table">', 1)[1].split("</table>", 1)[0]
    rows = section.split("<tr>")[2:]
    changed = [row for row in rows if "slower *" in row]
    assert len(changed) == 1 and "part_walk" in changed[0], section
