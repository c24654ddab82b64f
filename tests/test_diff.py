"""``phasewatch diff A B`` on two real recordings of a three-part program
(tests/workloads/parts.c): the second walks a working set 16 or more times larger in
its middle part, which takes longer with the same number of steps.  diff must
pair the phases, name that part alone as changed, and give its slowdown
within 10 % of the one the program measured on its own clock."""

from __future__ import annotations

import itertools
import json

import numpy as np
import pytest
from test_run import phasewatch

from phasewatch.core.histograms import TOTAL_VARIATION
from phasewatch.core.intervals import SEGMENT_KINDS
from phasewatch.report.diff import PhaseStats, RunPhases, diff_runs, pair_phases

SCALE = "2"
DETECTION = ("--detector", "vpf-ip", "--interval-samples", "100")
#: The two runs are separate processes on a shared host: a part that does the
#: same work may take up to a quarter longer in one of them, and must not
#: count as a change; the changed part takes several times longer.
TOLERANCE = ("--tolerance", "0.3")
SAME_WORK = 0.25


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
    proc = phasewatch("diff", d / "a.arrow", d / "b.arrow", *DETECTION, *TOLERANCE, "--json")
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout), measured


@pytest.mark.slow
def test_diff_names_the_slowed_part_alone_with_its_measured_slowdown(diffed):
    result, measured = diffed
    slowdown = measured["b"]["part_walk"] / measured["a"]["part_walk"]
    others = [measured["b"][p] / measured["a"][p] for p in ("part_hash", "part_float")]
    assert slowdown > 2 and all(abs(r - 1) < SAME_WORK for r in others), measured  # the premise
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
    proc = phasewatch("diff", d / "a.arrow", d / "b.arrow", *DETECTION, *TOLERANCE)
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


# --- the pairing, on phases built by hand ---------------------------------------

BOUNDS = np.array([0, 8, 24, 40])       # voltage and pfreq histograms, the code signature
USED = np.ones(len(SEGMENT_KINDS), bool)


def run_of(profiles: dict[int, list], samples: dict[int, int] | None = None,
           members: dict[int, list] | None = None) -> RunPhases:
    """A run whose phase P has the mean profile ``profiles[P]`` (one interval)."""
    phases = {p: PhaseStats(p, intervals=1, samples=(samples or {}).get(p, 100),
                            profile_sum=np.asarray(profile, float),
                            segment_members=np.asarray((members or {}).get(p, [1, 1, 1])))
              for p, profile in profiles.items()}
    return RunPhases("run", 1_000_000, BOUNDS, USED, 0.3, phases)


def code(*bins: int) -> list:
    """A profile with all samples in the code signature's ``bins``, evenly."""
    profile = np.zeros(BOUNDS[-1])
    profile[[BOUNDS[2] + b for b in bins]] = 1 / len(bins)
    profile[0], profile[BOUNDS[1]] = 1.0, 1.0
    return list(profile)


def plain_pairings(a: RunPhases, b: RunPhases, threshold: float) -> list[list]:
    """The pairing written out plainly: every distance by its definition
    (half the L1 distance of code signatures; the mean absolute difference
    of the running sums of value histograms, over one less than the bins),
    every assignment of the smaller side tried; the pairs within
    ``threshold`` of each assignment of least sum (several where they tie)."""
    def distance(x: PhaseStats, y: PhaseStats) -> float:
        found = []
        for s, kind in enumerate(SEGMENT_KINDS[:len(BOUNDS) - 1]):
            if x.segment_members[s] and y.segment_members[s]:
                hx = [v / x.segment_members[s] for v in x.profile_sum[BOUNDS[s]:BOUNDS[s + 1]]]
                hy = [v / y.segment_members[s] for v in y.profile_sum[BOUNDS[s]:BOUNDS[s + 1]]]
                if kind == TOTAL_VARIATION:
                    found.append(sum(abs(u - v) for u, v in zip(hx, hy)) / 2)
                else:
                    run = list(itertools.accumulate(u - v for u, v in zip(hx, hy)))
                    found.append(sum(abs(r) for r in run) / (len(run) - 1))
        return max(found) if found else 1.0
    ids_a, ids_b = sorted(a.phases), sorted(b.phases)
    d = {(i, j): distance(a.phases[i], b.phases[j]) for i in ids_a for j in ids_b}
    flip = len(ids_a) > len(ids_b)
    small, large = (ids_b, ids_a) if flip else (ids_a, ids_b)
    assignments = [[((c, s) if flip else (s, c)) for s, c in zip(small, chosen)]
                   for chosen in itertools.permutations(large, len(small))]
    least = min(sum(d[pair] for pair in pairs) for pairs in assignments)
    return [sorted((i, j, round(d[i, j], 9)) for i, j in pairs if d[i, j] <= threshold)
            for pairs in assignments if sum(d[pair] for pair in pairs) <= least + 1e-9]


def random_profiles(rng, n: int) -> tuple[dict, dict]:
    profiles, members = {}, {}
    for p in range(n):
        have = rng.integers(0, 3, len(BOUNDS) - 1)
        profiles[p] = np.concatenate([rng.dirichlet(np.ones(hi - lo)) * k * rng.integers(0, 2)
                                      if rng.random() < 0.5 else rng.dirichlet(np.ones(hi - lo)) * k
                                      for lo, hi, k in zip(BOUNDS[:-1], BOUNDS[1:], have)])
        members[p] = have
    return profiles, members


@pytest.mark.parametrize("seed", range(40))
def test_pairing_is_the_plain_least_sum_pairing(seed):
    rng = np.random.default_rng(seed)
    na, nb = int(rng.integers(1, 6)), int(rng.integers(1, 6))
    a, b = run_of(*_split(random_profiles(rng, na))), run_of(*_split(random_profiles(rng, nb)))
    threshold = float(rng.choice([0.1, 0.3, 0.6, 1.0]))
    got = pair_phases(a, b, threshold)
    paired = sorted((i, j, round(d, 9)) for i, j, d in got if i is not None and j is not None)
    assert paired in plain_pairings(a, b, threshold)
    assert sorted(i for i, _, _ in got if i is not None) == sorted(a.phases)
    assert sorted(j for _, j, _ in got if j is not None) == sorted(b.phases)


def _split(profiles_members):
    profiles, members = profiles_members
    return profiles, None, members


def test_a_phase_only_in_a_is_gone_and_one_only_in_b_is_new():
    a = run_of({0: code(0), 1: code(5, 6)})
    b = run_of({0: code(0), 1: code(11)})
    result = diff_runs(a, b, threshold=0.3)
    statuses = {(p["phase_a"], p["phase_b"]): p["status"] for p in result["pairs"]}
    assert statuses == {(0, 0): "same", (1, None): "gone", (None, 1): "new"}
    assert result["unpaired_a"] == result["unpaired_b"] == 0


def test_phases_just_within_the_threshold_pair_and_just_beyond_do_not():
    a = run_of({0: code(0, 1, 2, 3, 4)})
    near, far = run_of({0: code(0, 1, 2, 3, 5)}), run_of({0: code(0, 1, 2, 5, 6)})
    assert pair_phases(a, near, 0.2) == [(0, 0, pytest.approx(0.2))]
    assert pair_phases(a, far, 0.2) == [(0, None, pytest.approx(float("nan"), nan_ok=True)),
                                        (None, 0, pytest.approx(float("nan"), nan_ok=True))]


def test_phases_beyond_the_limit_are_listed_as_unpaired_not_as_gone():
    a = run_of({p: code(p) for p in range(5)}, samples={0: 10, 1: 500, 2: 400, 3: 5, 4: 300})
    b = run_of({p: code(p) for p in range(4)}, samples={0: 100, 1: 100, 2: 100, 3: 100})
    result = diff_runs(a, b, threshold=0.3, limit=3)
    statuses = {(p["phase_a"], p["phase_b"]): p["status"] for p in result["pairs"]}
    assert statuses[(1, 1)] != "gone" and statuses[(2, 2)] != "gone" and statuses[(4, None)] == "gone"
    assert statuses[(0, None)] == statuses[(3, None)] == "unpaired"
    assert statuses[(None, 3)] == "unpaired" and (None, 0) in statuses
    assert (result["unpaired_a"], result["unpaired_b"]) == (2, 1)
    assert not any(p["changed"] for p in result["pairs"] if p["status"] == "unpaired")
