"""``phasewatch run --on-change CMD``: a real program that alternates two
phases of fixed length (tests/workloads/alternate.c: A for 2 s of CPU time,
then B for 1 s, six cycles: 11 changes), and a hook that writes down when it
ran and what it was told.  From the third cycle on (7 changes) at least 5
changes are foreseen: the hook ran at least one interval before the program
switched (its own CLOCK_REALTIME stamp against the program's), naming the
phase that came.

Intervals are every 100 samples of the program's CPU time (no PMU here), so
about 100 ms, longer in wall time on a loaded host; the interval's wall time
is taken from the results file.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

BIN = Path(sys.executable).parent / "phasewatch"
OPTIONS = ("-q", "--detector", "vpf-ip", "--interval-samples", "100", "--no-catalog")
HOOK = ('echo "$(date +%s%N) $PHASEWATCH_INTERVAL $PHASEWATCH_PHASE '
        '$PHASEWATCH_PREDICTED_AFTER_CHANGE $PHASEWATCH_EXPECTED_REMAINING_INTERVALS" >> {log}')
WITHIN = 3


def perf_sampling_works() -> bool:
    try:
        import perf  # noqa: F401
    except ImportError:
        return False
    return Path("/proc/sys/kernel/perf_event_paranoid").exists()


pytestmark = pytest.mark.skipif(not perf_sampling_works(),
                                reason="needs Linux perf events and the python perf bindings")


@pytest.fixture(scope="module")
def alternation(abab, tmp_path_factory):
    d = tmp_path_factory.mktemp("alternate")
    log, results, summary = d / "hook.log", d / "r.jsonl", d / "s.json"
    proc = subprocess.run([str(BIN), "run", *OPTIONS, "--output", results, "--json", summary,
                           "--on-change-within", str(WITHIN), "--on-change", HOOK.format(log=log),
                           "--", abab.parent / "alternate", "2", "1", "6"],
                          capture_output=True, text=True, timeout=300, cwd=d)
    assert proc.returncode == 0, proc.stderr
    switches = [(line.split()[1], int(line.split()[2])) for line in proc.stdout.splitlines()
                if line.startswith("start ")]
    fired = [tuple(int(x) for x in line.split()) for line in log.read_text().splitlines()]
    rows = [json.loads(line) for line in results.read_text().splitlines()]
    return switches, fired, rows, json.loads(summary.read_text())


def test_changes_from_the_third_cycle_on_are_foreseen(alternation):
    switches, fired, rows, summary = alternation
    assert [name for name, _ in switches] == ["A", "B"] * 6
    offset = summary["realtime_offset_ns"]         # CLOCK_REALTIME - the samples' clock
    start = np.array([r["t_start_ns"] + offset for r in rows])
    phase = np.array([r["phase"] for r in rows])
    interval_ns = float(np.median([r["t_end_ns"] - r["t_start_ns"] for r in rows]))
    late = switches[5:]                             # B3, A4, B4, A5, B5, A6, B6
    assert len(late) == 7
    foreseen = []
    for name, at in late:
        after = phase[np.searchsorted(start, at + 1.5 * interval_ns)]    # the phase that came
        ahead = [f for f in fired if at - (WITHIN + 2) * interval_ns <= f[0] <= at - interval_ns
                 and f[3] == after]
        foreseen.append(bool(ahead))
    assert sum(foreseen) >= 5, (foreseen, fired, switches, interval_ns)


def test_the_hook_runs_once_per_run_of_a_phase_at_most(alternation):
    _, fired, rows, summary = alternation
    phases = [r["phase"] for r in rows if r["phase"] >= 0]
    runs = 1 + sum(a != b for a, b in zip(phases, phases[1:]))
    assert 0 < len(fired) <= runs
    by_interval = {r["index"]: r for r in rows}
    for _, interval, phase, after, remaining in fired:
        row = by_interval[interval]
        assert (row["phase"], row["predicted_after_change"]) == (phase, after)
        assert row["expected_remaining_intervals"] == remaining < WITHIN
    assert summary["prediction"]["changes"] == runs - 1


def test_an_empty_hook_is_refused_in_one_line(tmp_path):
    proc = subprocess.run([str(BIN), "run", "--on-change", " ", "--", "true"],
                          capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert proc.returncode != 0
    assert "--on-change" in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
    assert "Traceback" not in proc.stderr


def test_a_second_run_foresees_the_first_change_from_the_catalogue(abab, tmp_path):
    """What the predictor learnt goes into the phase catalogue beside the
    phases: a second run of the program foresees its first change, which a
    first run cannot."""
    catalog = tmp_path / "catalog.sqlite"

    def one_run(name: str):
        log = tmp_path / f"{name}.log"
        proc = subprocess.run([str(BIN), "run", "-q", "--detector", "vpf-ip", "--interval-samples",
                               "100", "--catalog", catalog, "--on-change-within", str(WITHIN),
                               "--on-change", HOOK.format(log=log), "--",
                               abab.parent / "alternate", "2", "1", "2"],
                              capture_output=True, text=True, timeout=300, cwd=tmp_path)
        assert proc.returncode == 0, proc.stderr
        first_b = next(int(line.split()[2]) for line in proc.stdout.splitlines()
                       if line.startswith("start B"))
        fired = [tuple(int(x) for x in line.split())
                 for line in (log.read_text().splitlines() if log.exists() else [])]
        return [f for f in fired if f[0] < first_b]
    assert one_run("first") == []
    before = one_run("second")
    assert len(before) == 1, before
    assert before[0][2] != before[0][3]         # from A's phase, naming another (B's)
