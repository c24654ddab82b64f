"""``phasewatch run --detector vpf-ip`` on real programs whose phases are known
in outline: bzip2 on a file of mixed sections, cc1 on a generated C file, and
a perl script whose two halves run plainly different code.

Intervals are every 100 samples: samples are taken per millisecond of the
program's CPU time, so an interval is 100 ms of the program's running however
busy the host is.  Each recording is then replayed, and replay must give the
phases the live run gave, interval for interval.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tools"))
import real_workloads  # noqa: E402

BIN = Path(sys.executable).parent / "phasewatch"
CC1 = Path("/usr/lib/gcc/x86_64-linux-gnu/12/cc1")
OPTIONS = ("--detector", "vpf-ip", "--interval-samples", "100")
#: A phase needs two intervals in a row; bzip2's sections and cc1's stretches
#: last about a tenth of a second of CPU here, so intervals of 30 samples.
SHORT = ("--detector", "vpf-ip", "--interval-samples", "30")
TIMEOUT = 300


def perf_sampling_works() -> bool:
    try:
        import perf  # noqa: F401
    except ImportError:
        return False
    return Path("/proc/sys/kernel/perf_event_paranoid").exists()


pytestmark = pytest.mark.skipif(not perf_sampling_works(),
                                reason="needs Linux perf events and the python perf bindings")


def watch(tmp: Path, name: str, argv: list[str], options=OPTIONS) -> tuple[list[int], str]:
    """Phases of the complete intervals of a live run, and CMD's stderr; checks
    that replaying the recording gives the same phases."""
    trace, live, again = tmp / f"{name}.arrow", tmp / f"{name}.jsonl", tmp / f"{name}.replay.jsonl"
    proc = subprocess.run([str(BIN), "run", *options, "--record", trace, "--output", live,
                           "--", *argv], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                          text=True, timeout=TIMEOUT, cwd=tmp)
    assert proc.returncode == 0, proc.stderr
    assert Path(str(trace) + ".mappings.jsonl").stat().st_size > 0
    subprocess.run([str(BIN), "replay", trace, *options, "--output", again],
                   check=True, capture_output=True, timeout=TIMEOUT)
    phases = [row["phase"] for row in map(json.loads, live.read_text().splitlines())]
    replayed = [row["phase"] for row in map(json.loads, again.read_text().splitlines())]
    assert phases == replayed
    return [p for p in phases if p >= 0], proc.stderr


def assert_several_phases(phases: list[int]) -> None:
    """More than one phase, and not a new phase for nearly every interval."""
    assert len(phases) >= 8
    assert 1 < len(set(phases)) <= len(phases) // 2, phases


@pytest.fixture(scope="module")
def inputs(tmp_path_factory):
    d = tmp_path_factory.mktemp("real")
    real_workloads.mixed_file(d / "mixed.bin")
    real_workloads.c_source(d / "gen.c")
    real_workloads.perl_script(d / "phases.pl")
    return d


def test_bzip2_on_mixed_sections_has_phases(inputs):
    phases, _ = watch(inputs, "bzip2", ["bzip2", "-9", "-c", "mixed.bin"], SHORT)
    tentative = sum(row["tentative"] for row in map(json.loads, (inputs / "bzip2.jsonl")
                                                    .read_text().splitlines()))
    # its sections last one or two intervals: where none lasts two, the
    # changes are still seen (tentative), and no phase opens
    assert len(set(phases)) > 1 or tentative >= 2, phases
    assert len(set(phases)) <= len(phases) // 2, phases


@pytest.mark.skipif(not CC1.exists(), reason=f"{CC1} (gcc-12) is not installed")
def test_cc1_on_generated_source_has_phases(inputs):
    phases, _ = watch(inputs, "cc1", [str(CC1), "-O2", "-quiet", "gen.c", "-o", "gen.s"], SHORT)
    assert_several_phases(phases)


def test_perl_halves_fall_in_different_phases(inputs):
    phases, stderr = watch(inputs, "perl", ["perl", "phases.pl"])
    switch_s = float(re.search(r"part 2 starts at ([\d.]+) s", stderr).group(1))
    switch = int(switch_s * 1000 / 100)          # interval holding the switch
    first, second = phases[:switch], phases[switch + 1:]
    seen = f"switch at interval {switch}; phases {phases}"
    assert len(first) >= 4 and len(second) >= 4, seen
    main_first = max(set(first), key=first.count)
    assert first.count(main_first) >= 0.8 * len(first), seen
    # part 2 is three short loops of the same interpreter, about nine
    # intervals: an interval astride two of them may look like part 1
    assert sum(p == main_first for p in second) <= len(second) / 3, seen


def test_code_of_a_child_process_is_mapped(tmp_path):
    """sh starts perl as a child: perl's mappings are learnt from perf's
    records of them, stamped with the time they apply from and perl's pid,
    and nearly every sample lands in a known mapping of its own process."""
    from phasewatch.core.codemap import CodeMap
    from phasewatch.formats.tracefiles import open_trace

    script = "my $s = 0; for my $i (1 .. 60_000_000) { $s += $i % 7 } print STDERR $s";
    trace = tmp_path / "sh.arrow"
    proc = subprocess.run([str(BIN), "run", *OPTIONS, "--record", trace, "--",
                           "sh", "-c", f"perl -e '{script}'; true"],
                          capture_output=True, text=True, timeout=TIMEOUT)
    assert proc.returncode == 0, proc.stderr
    source = open_trace(str(trace))
    rows = source.metadata["mappings"]
    assert any(r["path"].endswith("/perl") and "t_ns" in r for r in rows), rows
    batches = list(source.batches())
    ips = np.concatenate([b["ip"] for b in batches])
    t_ns = np.concatenate([b["t_ns"] for b in batches])
    pids = np.concatenate([b["pid"] for b in batches])
    assert CodeMap.from_mappings(rows).unknown(ips, t_ns, pids).mean() < 0.1
