"""The code signature over every executable mapping: the numba kernel against
its numpy reference, and mappings learnt from a real process and read back."""

from __future__ import annotations

import json
import subprocess
import time
import zlib

import numpy as np
import pytest
from scaling import growth
from splitmix import plain_mix

from phasewatch.core.batch import SampleBatch
from phasewatch.core.codemap import FOREVER, NEVER, CodeMap, code_bins_reference, replaced_at
from phasewatch.core.params import DetectorParams, Params
from phasewatch.core.pipeline import Pipeline
from phasewatch.formats import metadata as md
from phasewatch.formats.sidetable import read_side_table, with_side_table
from phasewatch.formats.trace import TraceWriter
from phasewatch.live.process_maps import ProcessMappings

IP_SIGNALS = ("t_ns", "cpu", "tid", "ip")
#: Where the kernel's half of the x86-64 address space begins (Linux's
#: Documentation/arch/x86/x86_64/mm.rst, 4-level page tables), and a value
#: that could not be read (docs/formats.md): from outside the code under test.
KERNEL_HALF, NO_VALUE = 0xFFFF_8000_0000_0000, 0xFFFF_FFFF_FFFF_FFFF

MAPPINGS = [
    {"start": 0x400000, "end": 0x480000, "offset": 0x1000, "path": "/usr/bin/prog"},
    {"start": 0x7F0000000000, "end": 0x7F0000040000, "offset": 0x2000, "path": "/lib/libz.so"},
    {"start": 0x7F0000100000, "end": 0x7F0000140000, "offset": 0x0, "path": "[anon]"},
    {"start": 0x7F0000200000, "end": 0x7F0000240000, "offset": 0x0, "path": ""},
    # exec'd later over the first program's addresses
    {"start": 0x400000, "end": 0x420000, "offset": 0x0, "path": "/usr/bin/other", "t_ns": 500},
    {"start": 0x7F0000300000, "end": 0x7F0000310000, "offset": 0x0, "path": "/lib/late.so",
     "t_ns": 700},
]


def random_ips(rng, n: int) -> tuple[np.ndarray, np.ndarray]:
    picks = [rng.integers(m["start"] - 0x1000, m["end"] + 0x1000, n) for m in MAPPINGS]
    edges = [[m["start"] - 1, m["start"], m["end"] - 1, m["end"]] for m in MAPPINGS]
    ips = np.concatenate(picks + edges).astype(np.uint64)
    special = np.array([0, NO_VALUE, KERNEL_HALF, KERNEL_HALF + 0x1234567, 0x10], np.uint64)
    ips = np.concatenate([ips, special])
    return ips, rng.integers(0, 1000, len(ips)).astype(np.int64)


@pytest.mark.parametrize("bits,nbins", [(12, 1024), (8, 64), (16, 4096)])
def test_kernel_matches_reference(bits, nbins):
    rng = np.random.default_rng(bits)
    ips, t = random_ips(rng, 2000)
    out = np.empty(len(ips), np.int32)
    CodeMap.from_mappings(MAPPINGS).bins(ips, t, bits, nbins, out)
    ref = code_bins_reference(ips, t, MAPPINGS, bits, nbins)
    assert np.array_equal(out, ref)
    assert (out[-5:-3] == -1).all() and (out[-3:-1] >= 0).all()   # 0/MISSING; kernel
    assert out[-1] >= 0                       # an unmapped user address, by its address
    CodeMap.from_mappings(MAPPINGS).bins(ips, t, bits, nbins, out, unmapped=False)
    assert out[-1] == -1 and 0 < (out >= 0).mean() < 1


def plain_key(name: str) -> int:
    return (zlib.crc32(name.encode()) << 32) | zlib.adler32(name.encode())


def plain_entry(ip: int, t: int, mappings: list[dict], bits: int, nbins: int) -> int:
    """One IP's entry by the definition, without the code under test: the
    mapping covering it at time ``t`` (from its ``t_ns``, until a later
    mapping overlapping it), its object (the file's name without its folder,
    or the anonymous mapping itself), and the IP's offset in that object's file."""
    if ip in (0, NO_VALUE):
        return -1
    if ip >= KERNEL_HALF:
        key, offset = plain_key("[kernel]"), ip - KERNEL_HALF
    else:
        key, offset = plain_key("[address space]"), ip
        for m in mappings:
            since = m.get("t_ns", -2**63)
            later = [o.get("t_ns") for o in mappings if o.get("t_ns") is not None
                     and o["t_ns"] > since and o["start"] < m["end"] and m["start"] < o["end"]]
            if m["start"] <= ip < m["end"] and since <= t < min(later, default=2**63):
                anonymous = m["path"] in ("", "[anon]")
                key = plain_key(f"[anon@{m['start']:x}]" if anonymous
                                else m["path"].split("/")[-1])
                offset = ip - m["start"] + (0 if anonymous else m["offset"])
    return plain_mix(key ^ plain_mix(offset >> bits)) % nbins


@pytest.mark.parametrize("bits,nbins", [(12, 1024), (8, 64), (0, 4096)])
def test_kernel_matches_the_definition_written_out_plainly(bits, nbins):
    rng = np.random.default_rng(bits + 1)
    ips, t = random_ips(rng, 300)
    out = np.empty(len(ips), np.int32)
    CodeMap.from_mappings(MAPPINGS).bins(ips, t, bits, nbins, out)
    want = [plain_entry(int(ip), int(when), MAPPINGS, bits, nbins) for ip, when in zip(ips, t)]
    assert out.tolist() == want


def test_no_mapping_list_hashes_absolute_addresses():
    rng = np.random.default_rng(5)
    ips, t = random_ips(rng, 500)
    out = np.empty(len(ips), np.int32)
    CodeMap.from_mappings(None).bins(ips, t, 12, 1024, out)
    assert np.array_equal(out, code_bins_reference(ips, t, None, 12, 1024))
    assert (out[ips == 0] == -1).all() and (out[(ips != 0) & (ips != NO_VALUE)] >= 0).all()


def test_without_a_mapping_list_no_user_address_is_unknown():
    """Unknown: a user-space IP in no mapping; no IP (0, MISSING) and kernel IPs never."""
    ips = np.array([0x400000, 0x7F0000001234, 0x10, 0, NO_VALUE, KERNEL_HALF], np.uint64)
    t = np.zeros(len(ips), np.int64)
    assert not CodeMap.from_mappings(None).unknown(ips, t).any()
    assert CodeMap.from_mappings(MAPPINGS[:1]).unknown(ips, t).tolist() == \
        [False, True, True, False, False, False]


def test_objects_and_times_decide_the_entry():
    table = CodeMap.from_mappings(MAPPINGS)
    ips = np.array([0x401000, 0x401000, 0x7F0000300010, 0x7F0000300010], np.uint64)
    t = np.array([100, 600, 600, 800], np.int64)
    out = np.empty(4, np.int32)
    table.bins(ips, t, 12, 1 << 20, out)
    assert out[0] != out[1]          # the exec'd program replaced the first one at t=500
    assert out[2] != out[3] and out[3] >= 0   # the late library applies from t=700
    # the same file offset in the same object is the same entry, wherever it is mapped
    moved = [{**m, "start": m["start"] + 0x10000, "end": m["end"] + 0x10000} for m in MAPPINGS[:2]]
    a, b = np.empty(1, np.int32), np.empty(1, np.int32)
    CodeMap.from_mappings(MAPPINGS[:2]).bins(np.array([0x7F0000001234], np.uint64),
                                             np.zeros(1, np.int64), 12, 1024, a)
    CodeMap.from_mappings(moved).bins(np.array([0x7F0000011234], np.uint64),
                                      np.zeros(1, np.int64), 12, 1024, b)
    assert a[0] == b[0]


def entries_of(mappings: list[dict], ips: list[int]) -> list[int]:
    out = np.empty(len(ips), np.int32)
    CodeMap.from_mappings(mappings).bins(np.array(ips, np.uint64), np.zeros(len(ips), np.int64),
                                         12, 1 << 20, out)
    return out.tolist()


def test_the_same_file_in_another_folder_is_the_same_object():
    """A build run from another folder (a container's root, /lib against
    /usr/lib) gives the same entries; a file of another name does not."""
    ips = [0x400000 + k * 0x1000 for k in range(40)]
    at = {"start": 0x400000, "end": 0x480000, "offset": 0x1000}
    here = entries_of([{**at, "path": "/home/u/build/prog"}], ips)
    assert entries_of([{**at, "path": "/tmp/ci-41/prog"}], ips) == here
    assert entries_of([{**at, "path": "prog"}], ips) == here
    renamed = entries_of([{**at, "path": "/home/u/build/prog2"}], ips)
    assert sum(a == b for a, b in zip(renamed, here)) <= 1


def test_distinct_regions_stay_apart():
    """Sixty 4 KiB regions of one library: (almost) all in entries of their own,
    where the 32-entry fold could hold at most 32."""
    starts = 0x7F0000000000 + np.arange(60, dtype=np.uint64) * np.uint64(0x5000)
    out = np.empty(60, np.int32)
    CodeMap.from_mappings([{"start": 0x7F0000000000, "end": 0x7F0000200000, "offset": 0,
                            "path": "/lib/x.so"}]).bins(starts, np.zeros(60, np.int64), 12, 1024, out)
    assert len(set(out.tolist())) >= 57


def mapped_libc(pid: int, within_s: float = 10.0) -> str:
    """The line of ``pid``'s maps for libc's code, once its loader has mapped it
    (a process just started may not have exec'd, or loaded libc, yet)."""
    deadline = time.monotonic() + within_s
    while True:
        with open(f"/proc/{pid}/maps") as f:
            found = [line for line in f if "x" in line.split()[1] and "libc" in line]
        if found or time.monotonic() > deadline:
            assert found, f"process {pid} mapped no libc within {within_s} s"
            return found[0]
        time.sleep(0.01)


def test_live_mappings_of_a_real_process_are_recorded_and_replayed(tmp_path):
    """ProcessMappings reads a real process's maps when IPs fall outside what it
    knows, writes them beside the trace, and replay's metadata gets them back."""
    proc = subprocess.Popen(["sleep", "30"])
    try:
        meta = md.new(signals={"t_ns": "", "cpu": "", "tid": "", "ip": ""}, mappings=[])
        pipeline = Pipeline.for_trace(meta, Params(detector=DetectorParams(detector="vpf-ip")))
        trace = tmp_path / "t.arrow"
        writer = TraceWriter(str(trace), meta, IP_SIGNALS, side_table=True)
        maps = ProcessMappings(proc.pid, pipeline, record=writer)
        libc = mapped_libc(proc.pid)
        ip = int(libc.split("-")[0], 16) + 0x40
        batch = SampleBatch({"t_ns": np.array([1000, 2000], np.int64),
                             "cpu": np.zeros(2, np.int32), "tid": np.full(2, proc.pid, np.int32),
                             "ip": np.array([ip, ip], np.uint64)})
        assert pipeline.code_map.unknown(batch["ip"], batch["t_ns"]).all()
        maps.batch(batch)
        assert not pipeline.code_map.unknown(batch["ip"], batch["t_ns"]).any()
        maps.batch(batch)          # nothing new: no second read
        assert maps.rereads == 1
        writer.close()
    finally:
        proc.kill()
        proc.wait()
    rows = read_side_table(str(trace))
    assert any("libc" in r["path"] for r in rows) and all(r["t_ns"] == 1000 for r in rows)
    assert with_side_table({"mappings": []}, str(trace))["mappings"] == rows
    assert with_side_table({"a": 1}, str(tmp_path / "none.arrow")) == {"a": 1}
    said = []
    assert with_side_table({"a": 1, "mappings": []}, str(tmp_path / "none.arrow"),
                           said.append) == {"a": 1}
    assert len(said) == 1 and "none.arrow.mappings.jsonl" in said[0]
    (tmp_path / "t.arrow.mappings.jsonl").write_text(json.dumps(rows[0]) + "\n{\"start\": 1")
    assert read_side_table(str(trace)) == rows[:1]      # a line cut short is left out


def test_maps_read_right_after_exec_apply_from_the_start(tmp_path):
    proc = subprocess.Popen(["sleep", "30"])
    try:
        meta = md.new(signals={"t_ns": "", "cpu": "", "tid": "", "ip": ""}, mappings=[])
        pipeline = Pipeline.for_trace(meta, Params(detector=DetectorParams(detector="vpf-ip")))
        writer = TraceWriter(str(tmp_path / "t.arrow"), meta, IP_SIGNALS, side_table=True)
        maps = ProcessMappings(proc.pid, pipeline, record=writer, just_execd=True)
        writer.close()
        exe = next(r for r in maps.rows if r["path"].endswith("/sleep"))
    finally:
        proc.kill()
        proc.wait()
    assert all("t_ns" not in r for r in maps.rows)
    ip = np.array([exe["start"]], np.uint64)
    assert not pipeline.code_map.unknown(ip, np.array([-(2 ** 62)], np.int64)).any()
    assert read_side_table(str(tmp_path / "t.arrow")) == maps.rows


def brute_force_replaced_at(rows):
    until = [FOREVER] * len(rows)
    for j, (t, start, end, _, _) in enumerate(rows):
        for i in range(j):
            if until[i] == FOREVER and rows[i][1] < end and start < rows[i][2] and rows[i][0] < t:
                until[i] = t
    return until


def test_when_a_mapping_is_replaced_matches_every_pair_compared():
    rng = np.random.default_rng(7)
    for _ in range(300):
        n = int(rng.integers(0, 30))
        rows = sorted((int(rng.choice([NEVER, 1, 2, 3, 5, 8])), s, s + int(rng.integers(1, 40)), 0, 0)
                      for s in rng.integers(0, 100, n).tolist())
        assert replaced_at(rows) == brute_force_replaced_at(rows), rows


def many_mappings(n: int) -> list[dict]:
    return [{"start": 0x1000 * i, "end": 0x1000 * i + 0x800, "offset": 0, "path": f"/lib{i}.so",
             "t_ns": i} for i in range(n)]


def test_mappings_build_in_time_that_grows_about_linearly():
    """Twenty times the mappings take well under the 400 times that work
    per pair of mappings would (timed side by side: tests/scaling.py)."""
    small, large = many_mappings(600), many_mappings(12_000)
    assert len(CodeMap.from_mappings(large).starts) == 12_000
    ratio = growth(CodeMap.from_mappings, small, large, repeat=3)
    assert ratio < 150, f"{ratio:.0f} times longer for 20 times the mappings"


def test_a_process_own_mappings_come_first_then_those_of_no_process():
    """Mappings with a ``pid`` hold for that process only; an IP in none of
    its process's falls back to the mappings recorded without a process."""
    own = [{"start": 0x7F0000000000, "end": 0x7F0000020000, "offset": 0x0,
            "path": "/lib/libq.so", "pid": 7}]
    mappings = MAPPINGS + own
    ips = np.array([0x401000, 0x7F0000001000, 0x7F0000030000, 0x7F0000101000] * 3, np.uint64)
    pids = np.repeat([7, 1, 0], 4)
    t = np.full(len(ips), 100, np.int64)

    def plain(ip, pid):
        mine = [m for m in own if m["pid"] == pid and m["start"] <= ip < m["end"]]
        return plain_entry(ip, 100, mine if mine else MAPPINGS, 12, 1024)
    want = [plain(int(ip), int(pid)) for ip, pid in zip(ips, pids)]
    out = np.empty(len(ips), np.int32)
    CodeMap.from_mappings(mappings).bins(ips, t, 12, 1024, out, pids=pids)
    assert out.tolist() == want
    assert code_bins_reference(ips, t, mappings, 12, 1024, pids=pids).tolist() == want
    assert want[1] != want[5] == want[9]      # libq for process 7 only


def test_an_empty_mapping_list_places_every_user_ip_by_its_address():
    ips = np.array([0x401000, 0x7F0000001000, 0], np.uint64)
    t, pids = np.zeros(3, np.int64), np.array([5, 0, 5])
    out = np.empty(3, np.int32)
    CodeMap.from_mappings([]).bins(ips, t, 12, 1024, out, pids=pids)
    assert out.tolist() == [plain_entry(int(ip), 0, [], 12, 1024) for ip in ips]


def test_a_mapping_inside_another_from_a_later_time():
    """Sorted by start, not by end: a later mapping nested in an earlier one
    takes its addresses from its time on, the outer one keeps the rest."""
    nested = [{"start": 0x400000, "end": 0x500000, "offset": 0x0, "path": "/usr/bin/outer"},
              {"start": 0x410000, "end": 0x420000, "offset": 0x3000, "path": "/lib/inner.so",
               "t_ns": 100}]
    ips = np.array([0x405000, 0x415000, 0x415000, 0x430000, 0x4FF000], np.uint64)
    t = np.array([150, 50, 150, 150, 150], np.int64)
    out = np.empty(len(ips), np.int32)
    CodeMap.from_mappings(nested).bins(ips, t, 12, 1024, out)
    assert out.tolist() == [plain_entry(int(ip), int(w), nested, 12, 1024) for ip, w in zip(ips, t)]
