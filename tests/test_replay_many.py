"""Many traces replay in parallel, to exactly what each gives replayed alone."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent / "phasewatch"


def phasewatch(*args):
    return subprocess.run([str(BIN), *map(str, args)], capture_output=True, text=True)


@pytest.fixture(scope="module")
def traces(tmp_path_factory):
    d = tmp_path_factory.mktemp("traces")
    for seed in (1, 2, 3):
        subprocess.run([sys.executable, str(ROOT / "tools" / "make_example_trace.py"),
                        "--out", str(d / f"t{seed}.arrow"), "--seed", str(seed),
                        "--samples", "40000"], check=True, capture_output=True)
        (d / f"t{seed}.labels.json").unlink()
    return d


def test_a_folder_on_two_cores_gives_each_trace_its_own_results(traces, tmp_path):
    alone = {}
    for trace in sorted(traces.iterdir()):
        out = tmp_path / f"{trace.stem}.alone.jsonl"
        proc = phasewatch("replay", trace, "--detector", "vpf-ip", "--output", out, "--json")
        assert proc.returncode == 0, proc.stderr
        alone[trace.stem] = (out.read_bytes(), json.loads(proc.stdout))
    for jobs in (2, 1):
        folder = tmp_path / f"jobs{jobs}"
        proc = phasewatch("replay", traces, "--detector", "vpf-ip", "--jobs", jobs,
                          "--output", folder, "--json")
        assert proc.returncode == 0, proc.stderr
        reports = json.loads(proc.stdout)
        assert [Path(r["trace"]).stem for r in reports] == sorted(alone)
        for report in reports:
            name = Path(report.pop("trace")).stem
            assert (folder / f"{name}.jsonl").read_bytes() == alone[name][0]
            assert report == alone[name][1]
    assert len({results for results, _ in alone.values()}) == 3


def test_several_traces_print_every_table_in_order(traces):
    names = [traces / "t3.arrow", traces / "t1.arrow"]
    proc = phasewatch("replay", *names)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.index(str(names[0])) < proc.stdout.index(str(names[1]))
    assert proc.stdout.count("quality:") == 2


def test_one_bad_trace_fails_in_one_line_after_the_rest(traces, tmp_path):
    proc = phasewatch("replay", traces / "t1.arrow", tmp_path / "missing.arrow")
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        f"phasewatch replay: 1 of 2 streams failed; the first: {tmp_path / 'missing.arrow'}: no such file"]
    assert "quality:" in proc.stdout


def test_results_of_several_traces_need_a_folder(traces, tmp_path):
    a_file = tmp_path / "r.jsonl"
    a_file.write_text("")
    proc = phasewatch("replay", traces, "--output", a_file)
    assert proc.returncode == 2 and "give a folder" in proc.stderr
    proc = phasewatch("replay", traces, "--labels", a_file)
    assert proc.returncode == 2 and "--labels goes with one trace" in proc.stderr


def write_trace(path, batches):
    from phasewatch.formats import synthetic
    from phasewatch.formats.trace import TraceWriter
    with TraceWriter(str(path), synthetic.metadata(100_000_000), batches[0].signals) as writer:
        for batch in batches:
            writer.write(batch)


@pytest.fixture(scope="module")
def two_cpu_trace(tmp_path_factory):
    """Two CPUs' synthetic streams (different seeds) interleaved in time, and
    each CPU's stream alone as a trace of its own."""
    import numpy as np

    from phasewatch.core.batch import SampleBatch, concat
    from phasewatch.formats import synthetic
    d = tmp_path_factory.mktemp("twocpu")
    schedule = synthetic.repeat_schedule(60_000, 100_000_000)
    streams = []
    for cpu in (0, 1):
        one = concat(list(synthetic.generate(schedule, 100_000_000, seed=11 + cpu, tid=100 + cpu)))
        cols = dict(one.columns)
        cols["cpu"] = np.full(len(one), cpu, np.int32)
        streams.append(SampleBatch(cols))
        write_trace(d / f"cpu{cpu}-alone.arrow", [streams[-1]])
    both = concat(streams)
    order = np.argsort(both["t_ns"], kind="stable")
    merged = SampleBatch({n: c[order] for n, c in both.columns.items()})
    write_trace(d / "both.arrow", [merged.slice(a, a + 5000) for a in range(0, len(merged), 5000)])
    return d


def test_per_cpu_replay_on_two_cores_matches_one_core_and_each_cpu_alone(two_cpu_trace, tmp_path):
    both = two_cpu_trace / "both.arrow"
    for jobs in (1, 2):
        proc = phasewatch("replay", both, "--per-cpu", "--jobs", jobs, "--detector", "vpf-ip",
                          "--output", tmp_path / f"jobs{jobs}", "--json")
        assert proc.returncode == 0, proc.stderr
        assert [r["cpu"] for r in json.loads(proc.stdout)] == [0, 1]
    for cpu in (0, 1):
        one_core = (tmp_path / "jobs1" / f"both.cpu{cpu}.jsonl").read_bytes()
        assert (tmp_path / "jobs2" / f"both.cpu{cpu}.jsonl").read_bytes() == one_core
        alone = tmp_path / f"alone{cpu}.jsonl"
        proc = phasewatch("replay", two_cpu_trace / f"cpu{cpu}-alone.arrow", "--detector", "vpf-ip",
                          "--output", alone)
        assert proc.returncode == 0, proc.stderr
        assert alone.read_bytes() == one_core and len(one_core.splitlines()) > 100
