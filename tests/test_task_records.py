"""Mappings from the kernel, as perf takes them: the executable mappings,
execs and forks of a watched tree come as perf records in the samples' own
ring (``PERF_RECORD_MMAP2``, ``COMM``, ``FORK``, ``EXIT``), so the samples of
a child that lived a moment are placed in its own mappings, by file and
offset, and named.  Real programs under real perf events, read back by
Go's own pprof."""

from __future__ import annotations

import json
import os
import re
import struct
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
from test_pprof import go_pprof
from test_run import TIMEOUT

from phasewatch.collectors import perf_event as pe
from phasewatch.collectors.perf_records import ExecRecord, MapRecord, TaskRecord, TaskRecords
from phasewatch.collectors.perf_source import PerfSource
from phasewatch.core.batch import SampleBatch
from phasewatch.core.codemap import CodeMap, code_bins_reference
from phasewatch.live import process_maps
from phasewatch.live.process_maps import ProcessMappings
from phasewatch.live.symbolizer import Symbolizer
from phasewatch.live.tree_symbolizer import TreeSymbolizer

BIN = Path(sys.executable).parent / "phasewatch"

HOT_C = r"""
#include <stdio.h>
#include <stdlib.h>
__attribute__((noinline)) double spin_alpha(long n) { double s = 0; for (long i = 0; i < n; i++) s += i * 0.5 / (i + 1); return s; }
__attribute__((noinline)) double spin_beta(long n) { double s = 1; for (long i = 1; i < n; i++) s = s * 1.0000001 + 1.0 / i; return s; }
int main(int argc, char **argv) { long n = atol(argv[1]); printf("%f %f\n", spin_alpha(n), spin_beta(n)); return 0; }
"""


def phasewatch(*args, cwd=None) -> subprocess.CompletedProcess:
    proc = subprocess.run([str(BIN), *map(str, args)], capture_output=True, text=True,
                          timeout=TIMEOUT, cwd=cwd)
    assert proc.returncode == 0, proc.stderr
    return proc


def phases_of(summary: Path) -> list[dict]:
    return json.loads(summary.read_text())["phases"]


def interval_phases(results: Path) -> list[int]:
    rows = [json.loads(line) for line in results.read_text().splitlines()]
    return [r["phase"] for r in rows if "index" in r]


def compressible(path: Path, megabytes: int) -> Path:
    """Words of a small vocabulary: gzip takes about 0.1 s a megabyte here."""
    rng = np.random.default_rng(7)
    words = [rng.integers(97, 107, n).astype(np.uint8).tobytes() for n in rng.integers(3, 10, 2000)]
    picked = rng.integers(0, len(words), megabytes * 150_000)
    path.write_bytes(b" ".join(words[i] for i in picked.tolist()))
    return path


# -- the records themselves --------------------------------------------------

def test_a_short_child_s_exec_fork_and_mappings_come_in_the_ring(tmp_path):
    """``sh`` forks ``true`` (which lives about a millisecond): its fork,
    exec and the mapping of /usr/bin/true come from perf, with its pid."""
    child = subprocess.Popen(["sh", "-c", "read x; /bin/true; sleep 0.2"], stdin=subprocess.PIPE)
    source = PerfSource(pid=child.pid, cpus=None, event="cpu-clock", counts=False,
                        msr_pmu=False, task_records=True, poll_ms=50)
    try:
        child.communicate(b"go\n", timeout=30)
        time.sleep(0.1)
        source.read()
        records = source.take_records()
    finally:
        source.close()
    forks = [r for r in records if isinstance(r, TaskRecord) and r.kind == "fork"
             and r.ppid == child.pid and r.pid != child.pid]
    assert forks, records
    kid = forks[0].pid
    assert any(isinstance(r, ExecRecord) and r.pid == kid and r.comm == "true" for r in records)
    true_maps = [r for r in records if isinstance(r, MapRecord) and r.pid == kid
                 and os.path.basename(r.path) == "true"]
    assert true_maps and true_maps[0].inode == os.stat("/usr/bin/true").st_ino, records
    assert any(isinstance(r, TaskRecord) and r.kind == "exit" and r.pid == kid for r in records)
    assert [r.t_ns for r in records] == sorted(r.t_ns for r in records)


def _record(rtype: int, body: bytes, t_ns: int, misc: int = 0) -> bytes:
    trailer = struct.pack("<IIQII", 1, 1, t_ns, 0, 0)        # pid tid, time, cpu res
    size = 8 + len(body) + len(trailer)
    return struct.pack("<IHH", rtype, misc, size) + body + trailer


def test_samples_are_split_from_records_among_them_without_losing_any():
    dtype = pe.sample_dtype(pe.SAMPLE_IP | pe.SAMPLE_TID | pe.SAMPLE_TIME | pe.SAMPLE_CPU
                            | pe.SAMPLE_PERIOD)
    samples = np.zeros(300, dtype)
    samples["type"], samples["size"] = pe.RECORD_SAMPLE, dtype.itemsize
    samples["ip"] = np.arange(300) + 0x400000
    name = b"/usr/bin/x\0".ljust(16, b"\0")
    mmap2 = _record(pe.RECORD_MMAP2, struct.pack("<IIQQQIIQQII", 5, 5, 0x400000, 0x2000, 0x1000,
                                                 0, 0, 77, 0, 5, 2) + name, 123)
    exec_ = _record(pe.RECORD_COMM, struct.pack("<II", 5, 5) + b"x\0".ljust(8, b"\0"), 124,
                    misc=pe.MISC_COMM_EXEC)
    raw = np.frombuffer(samples[:100].tobytes() + mmap2 + samples[100:299].tobytes() + exec_
                        + samples[299:].tobytes(), np.uint8)

    class Counts:
        lost = throttled = 0
    others = []
    found = pe.parse_samples(raw, dtype, Counts(), others)
    assert found["ip"].tolist() == samples["ip"].tolist()
    queue = TaskRecords(pe.SAMPLE_IP | pe.SAMPLE_TID | pe.SAMPLE_TIME | pe.SAMPLE_CPU)
    queue.add(others)
    assert queue.take() == [MapRecord(123, 5, 5, 0x400000, 0x402000, 0x1000, "/usr/bin/x", 77),
                            ExecRecord(124, 5, 5, "x")]


# -- the code map, per process ----------------------------------------------

def test_the_same_code_in_two_processes_at_other_addresses_gives_the_same_entries():
    rows = [{"start": 0x5000_0000, "end": 0x5001_0000, "offset": 0x1000, "path": "/bin/gz",
             "t_ns": 10, "pid": 100},
            {"start": 0x6000_0000, "end": 0x6001_0000, "offset": 0x1000, "path": "/bin/gz",
             "t_ns": 20, "pid": 200},
            {"start": 0x6000_0000, "end": 0x6001_0000, "offset": 0, "path": "/bin/sh"}]
    ips = np.array([0x5000_0400, 0x6000_0400, 0x6000_0400, 0x5000_0400], np.uint64)
    t = np.array([50, 50, 50, 50], np.int64)
    pids = np.array([100, 200, 300, 200], np.int32)
    out = np.empty(4, np.int32)
    CodeMap.from_mappings(rows).bins(ips, t, 12, 1024, out, pids=pids)
    ref = code_bins_reference(ips, t, rows, 12, 1024, pids)
    assert out.tolist() == ref.tolist()
    assert out[0] == out[1]             # gz in process 100 and in 200
    assert out[2] != out[1]             # process 300 has only the shared /bin/sh there
    unknown = CodeMap.from_mappings(rows).unknown(ips, t, pids)
    assert unknown.tolist() == [False, False, False, True]   # 200 has nothing at 0x5000_0400


def test_kernel_and_reference_agree_over_mappings_of_several_processes():
    rng = np.random.default_rng(3)
    for _ in range(30):
        rows = []
        for _ in range(rng.integers(1, 25)):
            start = int(rng.integers(1, 64)) << 16
            row = {"start": start, "end": start + (int(rng.integers(1, 8)) << 16),
                   "offset": int(rng.integers(0, 4)) << 12, "path": f"/bin/{rng.integers(0, 5)}",
                   "t_ns": int(rng.integers(0, 100))}
            pid = int(rng.integers(0, 4))
            if pid:
                row["pid"] = pid
            rows.append(row)
        n = 500
        ips = rng.integers(1 << 16, 80 << 16, n).astype(np.uint64)
        t = rng.integers(0, 120, n).astype(np.int64)
        pids = rng.integers(0, 5, n).astype(np.int32)
        for unmapped in (True, False):
            out = np.empty(n, np.int32)
            CodeMap.from_mappings(rows).bins(ips, t, 12, 1024, out, unmapped=unmapped, pids=pids)
            ref = code_bins_reference(ips, t, rows, 12, 1024, pids)
            if unmapped:
                assert out.tolist() == ref.tolist(), rows
            else:
                unknown = CodeMap.from_mappings(rows).unknown(ips, t, pids)
                assert ((out < 0) == unknown).all()
                assert (out[~unknown] == ref[~unknown]).all()


class RowsOnly:
    """What the sink asks of a pipeline: its mappings, and a new list of them."""

    def __init__(self):
        self.mappings = []
        self.code_map = CodeMap.from_mappings([])

    def set_mappings(self, rows):
        self.mappings = list(rows)
        self.code_map = CodeMap.from_mappings(self.mappings)


def test_a_forked_child_has_its_parent_s_code_until_it_execs_another():
    pipeline = RowsOnly()
    sink = ProcessMappings(10, pipeline, read=lambda pid: [], records=lambda: [])
    sink.take([MapRecord(100, 10, 10, 0x1000, 0x9000, 0x2000, "/bin/a", 1),
               TaskRecord("fork", 200, 11, 10, 11, 10),
               ExecRecord(300, 11, 11, "b"),
               MapRecord(301, 11, 11, 0x1000, 0x9000, 0x2000, "/bin/b", 2)])
    assert sink.sync()                          # the code map built from the records
    ips = np.full(3, 0x1400, np.uint64)
    t = np.array([250, 400, 400], np.int64)
    pids = np.array([11, 11, 10], np.int32)
    out = np.empty(3, np.int32)
    pipeline.code_map.bins(ips, t, 12, 1 << 20, out, pids=pids)
    expect_a = np.empty(1, np.int32)
    CodeMap.from_mappings([{"start": 0x1000, "end": 0x9000, "offset": 0x2000, "path": "/bin/a"}]
                          ).bins(ips[:1], t[:1], 12, 1 << 20, expect_a)
    assert out[0] == expect_a[0] == out[2]      # the child before its exec, and its parent
    assert out[1] != out[0]                     # the child after: /bin/b's code
    # A record read late never reaches back before a sample already classified.
    sink.batch(SampleBatch({"t_ns": np.array([1000], np.int64), "cpu": np.zeros(1, np.int32)}))
    sink.take([MapRecord(500, 12, 12, 0x1000, 0x2000, 0, "/bin/c", 3)])
    sink.sync()
    assert pipeline.mappings[-1]["t_ns"] == 1001 and pipeline.mappings[-1]["pid"] == 12


def samples_at(t_ns, pids) -> SampleBatch:
    return SampleBatch({"t_ns": np.array(t_ns, np.int64), "pid": np.array(pids, np.int32),
                        "cpu": np.zeros(len(t_ns), np.int32)})


def test_an_ended_process_s_rows_go_once_no_sample_can_still_need_them():
    """Rows of a process stay while a sample of it may still come (its
    EXIT record less than the grace before the samples read), then go; a
    late sample of it, read after its EXIT, is still placed in its code."""
    pipeline = RowsOnly()
    queue = []
    sink = ProcessMappings(10, pipeline, read=lambda pid: [], records=lambda: queue[:])
    grace = process_maps.EXIT_GRACE_NS
    queue[:] = [TaskRecord("fork", 100, 11, 10, 11, 10),
                MapRecord(110, 11, 11, 0x1000, 0x9000, 0, "/bin/b", 2),
                TaskRecord("exit", 1_000, 11, 10, 11, 10)]
    sink.batch(samples_at([500, 900], [10, 10]))
    queue.clear()
    assert sink.row_count == 1 and sink.processes == 1
    assert all(r.get("pid") != 11 for r in pipeline.mappings)   # ended, not sampled: not built in
    sink.batch(samples_at([950, 1_000 + grace], [11, 10]))      # its last sample, read late
    assert any(r.get("pid") == 11 for r in pipeline.mappings)
    out = np.empty(1, np.int32)
    pipeline.code_map.bins(np.array([0x1400], np.uint64), np.array([950], np.int64), 12, 1 << 20,
                           out, unmapped=False, pids=np.array([11], np.int32))
    assert out[0] >= 0
    assert sink.row_count == 1                  # within the grace of the samples read
    sink.batch(samples_at([1_001 + grace], [10]))
    assert sink.row_count == 0 and sink.processes == 0
    assert sink.exited == 1


def test_ended_processes_not_in_a_batch_go_with_it_where_they_ended_before_its_last_sample():
    """One long batch (a wake-up late on a loaded host) over many short
    children: those that ended the grace before its last sample and have no
    sample in it go at once, not a batch later; one sampled in it stays for
    its samples."""
    pipeline = RowsOnly()
    queue = []
    sink = ProcessMappings(10, pipeline, read=lambda pid: [], records=lambda: queue[:])
    grace = process_maps.EXIT_GRACE_NS
    for pid in range(11, 21):
        t = pid * 1_000
        queue += [TaskRecord("fork", t, pid, 10, pid, 10),
                  MapRecord(t + 10, pid, pid, 0x1000, 0x9000, 0, f"/bin/{pid}", pid),
                  TaskRecord("exit", t + 500, pid, 10, pid, 10)]
    last = 20_500 + grace + 1                  # every child ended the grace before it
    sink.batch(samples_at([1_000, 15_100, last], [10, 15, 10]))
    queue.clear()
    assert sink.processes == 1 and set(sink.rows_of) == {15}    # the one sampled in it
    assert any(r.get("pid") == 15 for r in pipeline.mappings)
    sink.batch(samples_at([last + 1], [10]))
    assert sink.processes == 0 and sink.row_count == 0
    assert sink.exited == 10


def test_a_process_number_taken_again_starts_from_no_rows_of_the_ended_one():
    pipeline = RowsOnly()
    sink = ProcessMappings(10, pipeline, read=lambda pid: [], records=lambda: [])
    sink.take([TaskRecord("fork", 100, 11, 10, 11, 10),
               MapRecord(110, 11, 11, 0x1000, 0x9000, 0, "/bin/b", 2),
               TaskRecord("exit", 200, 11, 10, 11, 10),
               TaskRecord("fork", 300, 11, 10, 11, 10),
               MapRecord(310, 11, 11, 0x20000, 0x28000, 0, "/bin/c", 3)])
    sink.sync(np.array([11]))
    assert [r["path"] for r in pipeline.mappings if r.get("pid") == 11] == ["/bin/c"]


def test_processes_kept_are_bounded_where_their_ends_are_not_heard():
    pipeline = RowsOnly()
    sink = ProcessMappings(10, pipeline, read=lambda pid: [], records=lambda: [], max_processes=4)
    for pid in range(11, 31):
        sink.take([MapRecord(pid, pid, pid, 0x1000, 0x9000, 0, f"/bin/{pid}", pid)])
    assert sink.processes == 4 and sink.row_count == 4
    assert set(sink.rows_of) == {27, 28, 29, 30}        # those heard of last


def test_a_long_watched_tree_names_children_from_their_records_and_forgets_the_ended():
    """The daemon's tree symbolizer: each child from its own records, the
    ended ones forgotten past ``keep_ended``, never a new process given an
    ended one's number."""
    root = Symbolizer(10)
    tree = TreeSymbolizer(root, keep_ended=2)
    records = []
    for pid in range(11, 16):
        records += [TaskRecord("fork", pid * 100, pid, 10, pid, 10),
                    MapRecord(pid * 100 + 1, pid, pid, 0x1000, 0x9000, 0, f"/bin/p{pid}", pid),
                    TaskRecord("exit", pid * 100 + 50, pid, 10, pid, 10)]
    tree.learn_records(records)
    assert tree.processes == 3                  # the root and the last two ended
    assert [m.path for m in tree.of_process(15).mappings] == ["/bin/p15"]
    assert tree.of_process(11) is root          # forgotten
    tree.learn_records([TaskRecord("fork", 2000, 15, 10, 15, 10),     # 15's number again
                        MapRecord(2001, 15, 15, 0x1000, 0x9000, 0, "/bin/new", 99)]
                       + [r for pid in (21, 22) for r in (
                           TaskRecord("fork", 3000 + pid, pid, 10, pid, 10),
                           TaskRecord("exit", 3100 + pid, pid, 10, pid, 10))])
    assert [m.path for m in tree.of_process(15).mappings] == ["/bin/new"]


# -- whole runs ----------------------------------------------------------------

def test_a_loop_of_short_gzip_children_is_one_phase_named_as_perf_names_it(tmp_path):
    """Six gzip children, each a fresh address layout, are one behaviour:
    one phase (or one and a transition), and its code is gzip's (stripped on
    Debian, so named ``[gzip]``, as ``perf report`` shows it)."""
    big = compressible(tmp_path / "BIG", 8)
    summary, trace = tmp_path / "s.json", tmp_path / "t.arrow"
    live, replayed = tmp_path / "live.jsonl", tmp_path / "replayed.jsonl"
    phasewatch("run", "--json", summary, "--record", trace, "--output", live, "--", "bash", "-c",
               f"for i in 1 2 3 4 5 6; do gzip -c {big} > /dev/null; done")
    phasewatch("replay", trace, "--output", replayed)
    assert interval_phases(replayed) == interval_phases(live)      # the recorded mappings
    rows = [json.loads(line) for line in open(f"{trace}.mappings.jsonl")]
    gzips = {r["pid"] for r in rows if r.get("pid") and r["path"].endswith("/gzip")}
    assert len(gzips) == 6, rows
    phases = phases_of(summary)
    sizes = sorted(p["intervals"] for p in phases)
    assert len(phases) == 1 or (len(phases) == 2 and sizes[0] == 1), phases
    assert sum(sizes) >= 12, phases        # the loop lasted long enough to judge
    main = max(phases, key=lambda p: p["intervals"])
    top = main["top_functions"][0]
    assert top["name"] in ("[gzip]", "deflate", "longest_match", "fill_window"), main
    assert top["share"] > 0.5, main


def distinct_tools(project: Path) -> set[str]:
    """The programs a build of ``project`` runs: make, the gcc driver, and
    those the driver lists for a compile and a link (``gcc -###``), with
    the linker collect2 runs."""
    tools = {"make", "gcc"}
    for args in (["-c", "m1.c", "-o", "/dev/null"], ["m1.o", "-o", "/dev/null"]):
        listed = subprocess.run(["gcc", "-###", "-O2", *args], capture_output=True, text=True,
                                cwd=project).stderr
        tools |= {os.path.basename(line.split()[0].strip('"')) for line in listed.splitlines()
                  if line.startswith(" ")}
    if "collect2" in tools:
        tools.add("ld")
    return tools


def small_c_project(root: Path, files: int = 8) -> Path:
    root.mkdir()
    for i in range(1, files + 1):
        body = "\n".join(
            f"int f{i}_{j}(struct rec *r, int n) {{ int s = 0; for (int k = 0; k < n; k++) "
            f"{{ s += r[k].a[k % 16] * {j}; if (s > 1000) s -= r[k].a[(k + {j}) % 16]; }} "
            f"qsort(r, n, sizeof *r, cmp); return s + (int) strlen(r[0].name); }}"
            for j in range(1, 41))
        calls = " ".join(f"s += f{i}_{j}(r, 64);" for j in range(1, 41))
        (root / f"m{i}.c").write_text(
            "#include <stdlib.h>\n#include <string.h>\n"
            "struct rec { int a[16]; double d; char name[32]; };\n"
            "static int cmp(const void *x, const void *y) "
            "{ return ((const struct rec *) x)->a[0] - ((const struct rec *) y)->a[0]; }\n"
            f"{body}\nint run{i}(void) {{ static struct rec r[64]; int s = 0; {calls} return s; }}\n")
    decls = " ".join(f"int run{i}(void);" for i in range(1, files + 1))
    total = " + ".join(f"run{i}()" for i in range(1, files + 1))
    (root / "main.c").write_text(f"#include <stdio.h>\n{decls}\n"
                                 f"int main(void) {{ printf(\"%d\\n\", {total}); return 0; }}\n")
    objects = " ".join(["main.o"] + [f"m{i}.o" for i in range(1, files + 1)])
    (root / "Makefile").write_text(f"prog: {objects}\n\tgcc -O2 -o $@ {objects}\n"
                                   "%.o: %.c\n\tgcc -O2 -c -o $@ $<\n")
    return root


def test_make_j2_of_a_small_c_project_has_no_more_phases_than_tools(tmp_path):
    project = small_c_project(tmp_path / "proj")
    tools = distinct_tools(project)
    assert {"cc1", "as", "collect2"} <= tools, tools
    summary = tmp_path / "s.json"
    phasewatch("run", "--json", summary, "--", "make", "-s", "-j2", cwd=project)
    assert (project / "prog").exists()
    phases = phases_of(summary)
    assert sum(p["intervals"] for p in phases) >= 8, phases
    assert len(phases) <= len(tools), (phases, tools)
    named = {f["name"] for p in phases for f in p["top_functions"]}
    assert any("cc1" in name for name in named) or any(
        not name.startswith("[") for name in named), named
    assert "[unknown]" not in named, named


def test_pprof_of_a_script_names_the_c_program_s_functions_live_and_replayed(tmp_path):
    exe = tmp_path / "hot"
    subprocess.run(["gcc", "-O2", "-g", "-o", exe, "-x", "c", "-"], input=HOT_C, text=True,
                   check=True)
    script = tmp_path / "run.sh"
    script.write_text(f"#!/bin/sh\n{exe} 150000000 > /dev/null\n{exe} 150000000 > /dev/null\n")
    script.chmod(0o755)
    live, trace, replayed = tmp_path / "live.pb.gz", tmp_path / "t.arrow", tmp_path / "r.pb.gz"
    phasewatch("run", "-q", "--pprof", live, "--record", trace, "--", script)
    phasewatch("replay", trace, "--pprof", replayed)
    for profile in (live, replayed):
        top = go_pprof("-top", profile)
        shares = {m.group(2): float(m.group(1)) for m in
                  re.finditer(r"^\s*\S+\s+([\d.]+)%\s+\S+%\s+\S+\s+\S+%\s+(\S+)$", top, re.M)}
        assert shares.get("spin_alpha", 0) + shares.get("spin_beta", 0) > 80, top
        assert min(shares.get("spin_alpha", 0), shares.get("spin_beta", 0)) > 10, top
