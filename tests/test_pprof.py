"""pprof output: ``run --pprof`` and ``replay --pprof`` on the real A/B/A
program, read back by Go's own pprof (Debian's golang-go), and the
generated message module checked against its .proto."""

from __future__ import annotations

import collections
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pyarrow.feather
import pytest
from test_run import TIMEOUT, interval_regions, phasewatch, region_addresses, results, stretches

from phasewatch.formats.pprof import read_profile

REPO = Path(__file__).resolve().parents[1]
FORMATS = REPO / "agent" / "formats"
SPEEDSCOPE_SHOT = REPO / "tools" / "speedscope_shot.py"


def go_pprof(*args) -> str:
    if shutil.which("go") is None:
        pytest.fail("go tool pprof needs Debian's golang-go (packaging/apt-packages.txt; make install)")
    proc = subprocess.run(["go", "tool", "pprof", *map(str, args)], capture_output=True, text=True,
                          timeout=TIMEOUT, env={"HOME": "/tmp", "PATH": "/usr/bin:/bin",
                                                "PPROF_BINARY_PATH": "/nonexistent"})
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def top_function(top_output: str) -> str:
    """The first function of ``pprof -top`` (flat order)."""
    lines = top_output.split("flat  flat%", 1)[1].splitlines()[1:]
    return lines[0].split()[-1]


def elf_build_id(path) -> str:
    from elftools.elf.elffile import ELFFile
    with open(path, "rb") as f:
        for section in ELFFile(f).iter_sections():
            if section["sh_type"] == "SHT_NOTE":
                for note in section.iter_notes():
                    if note["n_type"] == "NT_GNU_BUILD_ID":
                        return note["n_desc"]
    return ""


@pytest.fixture(scope="module")
def profiled(abab, tmp_path_factory):
    """``abab 1.5`` watched with --pprof, its trace and results kept to tell
    independently which phase ran region A and which region B."""
    d = tmp_path_factory.mktemp("pprof")
    proc = phasewatch("run", "--detector", "vpf-ip", "--interval-samples", 200,
                      "--record", d / "t.arrow", "--output", d / "live.jsonl",
                      "--pprof", d / "abab.pb.gz", "--", abab, "1.5", "--print-addrs")
    assert proc.returncode == 0, proc.stderr
    live = results(d / "live.jsonl")
    runs = stretches(interval_regions(d / "t.arrow", live, region_addresses(proc.stdout)))
    assert [r[0] for r in runs] == ["a", "b", "a"], runs
    phases = {region: live[(first + last) // 2]["phase"] for region, first, last in runs}
    return d, phases


@pytest.mark.slow
def test_go_pprof_shows_region_a_on_top_of_as_phase_and_region_b_of_bs(profiled):
    d, phases = profiled
    assert phases["a"] != phases["b"]
    for region, phase in phases.items():
        top = go_pprof("-top", f"-tagfocus=phase={phase}", d / "abab.pb.gz")
        assert top_function(top) == f"region_{region}", top


@pytest.mark.slow
def test_every_sample_carries_phase_name_interval_thread_and_cpu_labels(profiled):
    d, phases = profiled
    profile = read_profile(str(d / "abab.pb.gz"))
    strings = profile.string_table
    live = results(d / "live.jsonl")
    assert profile.sample
    for sample in profile.sample:
        assert {strings[lab.key] for lab in sample.label} == {"phase", "phase_name", "interval",
                                                              "thread", "cpu"}
    tags = go_pprof("-tags", d / "abab.pb.gz")
    for key in ("phase", "phase_name", "interval", "thread", "cpu"):
        assert f" {key}: Total" in tags, tags
    by_interval = {}
    for sample in profile.sample:
        labels = {strings[lab.key]: strings[lab.str] for lab in sample.label if lab.str}
        phase = [lab.num for lab in sample.label if strings[lab.key] == "phase"]
        by_interval.setdefault(int(labels["interval"]), set()).add(*phase)
    assert by_interval == {iv["index"]: {iv["phase"]} for iv in live}


def go_trace_labels(path) -> collections.Counter:
    """Samples per (thread, cpu) label values, as ``go tool pprof -traces``
    reads them (one block of labels and a CPU time per stack)."""
    found = collections.Counter()
    blocks = go_pprof("-traces", path).split("-----------+")[1:]
    for block in (b for b in blocks if b.strip("-\n")):
        labels = dict(re.findall(r"^\s*(\w+):\s+(\S+)\s*$", block, re.M))
        found[int(labels["thread"]), int(labels["cpu"])] += 1
    return found


@pytest.mark.slow
def test_thread_and_cpu_labels_are_the_samples_own_tid_and_cpu(profiled):
    """Each stack's labels name a (tid, cpu) the trace sampled at least as
    often, and the trace's main thread is among them."""
    d, _ = profiled
    trace = pyarrow.feather.read_table(d / "t.arrow", columns=["tid", "cpu"])
    sampled = collections.Counter(zip(trace["tid"].to_pylist(), trace["cpu"].to_pylist()))
    labelled = go_trace_labels(d / "abab.pb.gz")
    assert labelled and all(n <= sampled[pair] for pair, n in labelled.items()), (labelled, sampled)
    assert max(sampled, key=sampled.get)[0] in {tid for tid, _ in labelled}


@pytest.mark.slow
def test_profile_counts_every_classified_sample_and_names_the_executable(profiled, abab):
    d, _ = profiled
    profile = read_profile(str(d / "abab.pb.gz"))
    strings = profile.string_table
    live = results(d / "live.jsonl")
    assert [strings[t.type] for t in profile.sample_type] == ["samples", "cpu"]
    assert sum(s.value[0] for s in profile.sample) == sum(iv["samples"] for iv in live)
    assert all(s.value[1] == s.value[0] * profile.period for s in profile.sample)
    main = profile.mapping[0]
    assert strings[main.filename].endswith("/abab")
    assert strings[main.build_id] == elf_build_id(abab) != ""
    assert profile.time_nanos > 1.7e18   # wall clock (2023 on), not the monotonic clock


@pytest.mark.slow
def test_replay_writes_the_same_profile_from_the_recording(profiled, tmp_path):
    d, phases = profiled
    rp = phasewatch("replay", d / "t.arrow", "--detector", "vpf-ip", "--interval-samples", 200,
                    "--pprof", tmp_path / "replay.pb.gz")
    assert rp.returncode == 0, rp.stderr
    for region, phase in phases.items():
        top = go_pprof("-top", f"-tagfocus=phase={phase}", tmp_path / "replay.pb.gz")
        assert top_function(top) == f"region_{region}", top
    live = read_profile(str(d / "abab.pb.gz"))
    replayed = read_profile(str(tmp_path / "replay.pb.gz"))
    assert sum(s.value[0] for s in replayed.sample) == sum(s.value[0] for s in live.sample)


@pytest.mark.slow
def test_one_phase_cut_out_by_go_pprof_opens_in_speedscope_in_headless_chromium(profiled, tmp_path):
    d, phases = profiled
    for region, phase in phases.items():
        cut = tmp_path / f"phase{phase}.pb.gz"
        cut.write_bytes(subprocess.run(
            ["go", "tool", "pprof", f"-tagfocus=phase={phase}", "-proto", d / "abab.pb.gz"],
            capture_output=True, check=True, timeout=TIMEOUT).stdout)
        shot = tmp_path / f"phase{phase}.png"
        proc = subprocess.run([sys.executable, SPEEDSCOPE_SHOT, cut, shot],
                              capture_output=True, text=True, timeout=TIMEOUT)
        assert proc.returncode == 0, proc.stderr
        functions = proc.stdout.split()
        assert functions[0] == f"region_{region}", functions
        assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_pprof_naming_the_trace_it_replays_is_refused_in_one_line(tmp_path):
    trace = tmp_path / "t.csv"
    trace.write_text("t_ns,cpu,ip\n")
    proc = phasewatch("replay", trace, "--pprof", trace)
    assert proc.returncode == 2
    assert "would destroy it" in proc.stderr and len(proc.stderr.strip().splitlines()) == 1


def test_generated_message_module_matches_its_proto(tmp_path):
    if shutil.which("protoc") is None:
        pytest.fail("protoc needs Debian's protobuf-compiler (packaging/apt-packages.txt)")
    subprocess.run(["protoc", f"--proto_path={FORMATS}", f"--python_out={tmp_path}",
                    "pprof_profile.proto"], check=True, timeout=60)
    fresh = (tmp_path / "pprof_profile_pb2.py").read_text()
    assert fresh == (FORMATS / "pprof_profile_pb2.py").read_text(), "run: make pprof-proto"
