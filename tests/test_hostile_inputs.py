"""Hostile input files, one named case each: a side table, a trace, a .bb
file, results and labels that are wrong in type, range, depth or kind (a FIFO,
a device).  Every one ends with one line on stderr naming the file, exit
status 2, no traceback, no hang, and no input changed."""

from __future__ import annotations

import json
import os
import random
import struct
import subprocess
import sys
import time
from pathlib import Path

import pytest

from daemonutil import free_port
from cliutil import call

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "synthetic-skylake.csv"
DAEMON = Path(sys.executable).parent / "phasewatchd"


def refused(*argv, inputs=(), match=None) -> str:
    before = {Path(p): Path(p).read_bytes() for p in inputs if Path(p).is_file()}
    status, _, err = call(*argv)
    assert status == 2, err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    if match:
        assert match in err, err
    for p, data in before.items():
        assert p.read_bytes() == data, f"{p} changed"
    return err


@pytest.fixture(scope="module")
def trace(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("inputs") / "t.arrow"
    assert call("convert", EXAMPLE, path)[0] == 0
    return path


@pytest.fixture
def own_trace(tmp_path, trace) -> Path:
    path = tmp_path / "t.arrow"
    path.write_bytes(trace.read_bytes())
    return path


# --- side table ----------------------------------------------------------------------

GOOD_ROW = {"start": 4096, "end": 8192, "offset": 0, "path": "/bin/x", "t_ns": 5}

SIDE_TABLES = {
    "byte 0xff": b'{"start": 4096, "end": 8192, "offset": 0, "path": "/bin/x"}\n\xff\n',
    "start as text": b'{"start": "abc", "end": 8192, "offset": 0, "path": "/x"}\n',
    "end of 2**70": json.dumps({**GOOD_ROW, "end": 2**70}).encode() + b"\n",
    "path as an int": json.dumps({**GOOD_ROW, "path": 7}).encode() + b"\n",
    "t_ns of 2**64": json.dumps({**GOOD_ROW, "t_ns": 2**64}).encode() + b"\n",
    "a list": b"[1, 2]\n",
    "nested deep": b"[" * 100_000 + b"]" * 100_000 + b"\n",
}


@pytest.mark.parametrize("case", SIDE_TABLES)
def test_a_hostile_side_table_is_one_line_naming_it(own_trace, case):
    side = Path(f"{own_trace}.mappings.jsonl")
    side.write_bytes(SIDE_TABLES[case])
    refused("replay", own_trace, inputs=[own_trace, side], match=f"{side}: line")


@pytest.mark.parametrize("kind", ["fifo", "folder"])
def test_a_side_table_that_is_no_file_is_refused_not_waited_on(own_trace, kind):
    side = Path(f"{own_trace}.mappings.jsonl")
    os.mkfifo(side) if kind == "fifo" else side.mkdir()
    refused("replay", own_trace, match="not a regular file")


def test_a_side_table_line_cut_short_by_a_crash_is_left_out(own_trace):
    side = Path(f"{own_trace}.mappings.jsonl")
    side.write_bytes(json.dumps(GOOD_ROW).encode() + b'\n{"start": 12')
    status, _, err = call("replay", own_trace)
    assert status == 0, err


def test_random_bit_flips_in_a_side_table_never_end_in_a_traceback(own_trace, fuzz_count):
    side = Path(f"{own_trace}.mappings.jsonl")
    good = b"".join(json.dumps({**GOOD_ROW, "start": 4096 * i, "end": 4096 * i + 100}).encode()
                    + b"\n" for i in range(1, 6))
    rng = random.Random(3)
    for _ in range(60):
        data = bytearray(good)
        for _ in range(rng.randint(1, 4)):
            data[rng.randrange(len(data))] ^= 1 << rng.randrange(8)
        side.write_bytes(bytes(data))
        status, _, err = call("replay", own_trace)
        assert status in (0, 2) and "Traceback" not in err, err
        fuzz_count("side table bit flips")


def test_a_side_table_is_checked_by_the_daemon_too(own_trace):
    Path(f"{own_trace}.mappings.jsonl").write_bytes(SIDE_TABLES["start as text"])
    proc = subprocess.run([str(DAEMON), "--replay", str(own_trace), "--metrics",
                           f"127.0.0.1:{free_port()}", "--zmq", f"tcp://127.0.0.1:{free_port()}"],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    assert ".mappings.jsonl: line 1" in proc.stderr


# --- traces ------------------------------------------------------------------------------

def test_random_bytes_in_the_head_or_tail_of_a_trace_are_one_line_or_read(trace, tmp_path,
                                                                           fuzz_count):
    good = trace.read_bytes()
    rng = random.Random(11)
    damaged = tmp_path / "d.arrow"
    for trial in range(100):
        data = bytearray(good)
        for _ in range(rng.randint(1, 16)):
            at = rng.randrange(4096)
            data[at if trial % 2 else len(data) - 1 - at] = rng.randrange(256)
        damaged.write_bytes(bytes(data))
        status, _, err = call("replay", damaged, "--json")
        assert status in (0, 2) and "Traceback" not in err, err
        if status == 2:
            assert len(err.strip().splitlines()) == 1 and str(damaged) in err, err
        fuzz_count("trace head and tail bytes")


def test_a_record_batch_claiming_a_billion_rows_is_one_line(trace, tmp_path):
    data = trace.read_bytes()
    rows = struct.pack("<q", 7_559)
    assert rows in data
    damaged = tmp_path / "billion.arrow"
    damaged.write_bytes(data.replace(rows, struct.pack("<q", 10**9)))
    refused("replay", damaged, match=str(damaged))


def test_the_daemon_replays_a_damaged_trace_as_one_line(trace, tmp_path):
    damaged = tmp_path / "d.arrow"
    data = trace.read_bytes()
    damaged.write_bytes(data.replace(struct.pack("<q", 7_559), struct.pack("<q", 10**9)))
    proc = subprocess.run([str(DAEMON), "--replay", str(damaged), "--replay-speed", "0",
                           "--metrics", f"127.0.0.1:{free_port()}",
                           "--zmq", f"tcp://127.0.0.1:{free_port()}"],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    assert str(damaged) in proc.stderr.strip().splitlines()[-1]


@pytest.mark.parametrize("kind", ["fifo", "/dev/zero"])
def test_a_trace_that_never_ends_is_refused_at_once(tmp_path, kind):
    path = tmp_path / "fifo" if kind == "fifo" else Path(kind)
    if kind == "fifo":
        os.mkfifo(path)
    started = time.monotonic()
    refused("replay", path, match="not a regular file")
    assert time.monotonic() - started < 10


# --- .bb files -----------------------------------------------------------------------------

BB_CASES = {
    "block id 10**23": "T:1:5 :100000000000000000000000:3\n",
    "block id 2**63-1": f"T:1:5 :{2**63 - 1}:3\n",
    "count 10**23": "T:1:100000000000000000000000\n",
    "counts summing past 2**50": "T" + "".join(f":{i}:{2**40}" for i in range(1, 9000)) + "\n",
}


@pytest.mark.parametrize("case", BB_CASES)
def test_a_bb_file_out_of_range_is_one_line(tmp_path, case):
    bb = tmp_path / "x.bb"
    bb.write_text("T:1:5 :2:7\n" + BB_CASES[case])
    refused("replay", bb, inputs=[bb], match=str(bb))


# --- results and labels ----------------------------------------------------------------------

def results_file(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def result(i: int, **changes) -> dict:
    return {"index": i, "t_end_ns": 1000 * (i + 1), "instructions": 100, "cycles": 150,
            "phase": i % 2, "distance": 0.1, "new_phase": i < 2, **changes}


HOSTILE_RESULTS = {
    "phase x": {"phase": "x"},
    "distance far": {"distance": "far"},
    "phase 10**15": {"phase": 10**15},
    "phase true": {"phase": True},
}


@pytest.mark.parametrize("case", HOSTILE_RESULTS)
@pytest.mark.parametrize("command", ["eval", "export", "report"])
def test_hostile_results_are_one_line(tmp_path, trace, case, command):
    rows = [result(i) for i in range(10)]
    rows[4] = result(4, **HOSTILE_RESULTS[case])
    path = results_file(tmp_path / "r.jsonl", rows)
    good = results_file(tmp_path / "g.jsonl", [result(i) for i in range(10)])
    argv = {"eval": ["eval", path, good], "export": ["export", "--simpoints", path, "-o",
                                                    tmp_path / "out"],
            "report": ["report", path, "--trace", trace, "--out", tmp_path / "rep"]}[command]
    refused(*argv, inputs=[path, good], match=f"{path}")


def test_labels_nested_a_hundred_thousand_deep_are_one_line(tmp_path, trace):
    labels = tmp_path / "deep.json"
    labels.write_text("[" * 100_000 + "]" * 100_000)
    refused("eval", labels, labels, inputs=[labels], match="nested too deeply")
    refused("replay", trace, "--labels", labels, inputs=[labels], match="nested too deeply")


@pytest.mark.parametrize("kind", ["fifo", "/dev/zero"])
def test_labels_that_never_end_are_refused_at_once(tmp_path, trace, kind):
    path = tmp_path / "fifo" if kind == "fifo" else Path(kind)
    if kind == "fifo":
        os.mkfifo(path)
    started = time.monotonic()
    refused("replay", trace, "--labels", path, match="not a regular file")
    refused("eval", path, path, match="not a regular file")
    assert time.monotonic() - started < 10


def test_eval_and_export_of_a_hundred_thousand_phases_group_in_one_pass(tmp_path):
    import numpy as np
    from phasewatch.cli.eval import cpi_cov_quality
    from phasewatch.cli.export import representatives
    from phasewatch.formats.labellings import Labelling
    from scaling import growth

    def group(n: int):
        labels = np.arange(n) % (n // 2)
        cpi = 1.0 + (np.arange(n) % 7) / 10
        return cpi_cov_quality(labels, cpi), representatives(Labelling(
            "x", "simpoint", labels, None, np.arange(n, dtype=np.float64)[::-1].copy()), None)

    n = 100_000
    # A pass per phase took 13 s: work per phase and interval, 400 times
    # longer for 20 times the phases; one pass, some 20 to 40 times.
    ratio = growth(group, n // 20, n, repeat=3)
    assert ratio < 150, f"{ratio:.0f} times longer for 20 times the phases"
    quality, points = group(n)
    assert np.isfinite(quality) and len(points) == n // 2
    assert (points == np.arange(n // 2) + n // 2).all()     # the member nearer the end
    path = tmp_path / "many.labels"
    path.write_text("".join(f"{i} 0.{i % 10}\n" for i in range(n)))
    assert call("export", "--simpoints", path, "-o", tmp_path / "out")[0] == 0
    assert len((tmp_path / "out.simpoints").read_text().splitlines()) == n


def test_grouped_quality_and_representatives_match_a_pass_per_phase():
    import numpy as np
    from phasewatch.cli.eval import _cov, cpi_cov_quality
    from phasewatch.cli.export import representatives
    from phasewatch.formats.labellings import Labelling
    rng = np.random.default_rng(5)
    for _ in range(50):
        n = int(rng.integers(1, 60))
        labels = rng.integers(0, 6, n)
        labels = np.unique(labels, return_inverse=True)[1]
        cpi = rng.uniform(0.5, 2.0, n)
        run = _cov(cpi)
        per_phase = [run if (labels == p).sum() == 1 else _cov(cpi[labels == p])
                     for p in np.unique(labels)]
        assert cpi_cov_quality(labels, cpi) == pytest.approx(float(np.mean(per_phase)))
        dist = np.where(rng.random(n) < 0.3, np.nan, rng.random(n))
        got = representatives(Labelling("x", "simpoint", labels, None, dist), None)
        for p in range(labels.max() + 1):
            members = np.flatnonzero(labels == p)
            d = dist[members]
            want = members[np.nanargmin(d)] if (~np.isnan(d)).any() else members[0]
            assert got[p] == want


MEASURED = """
import resource, subprocess, sys
proc = subprocess.run(sys.argv[1:], stderr=subprocess.PIPE, text=True)
print(proc.returncode, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)
print(proc.stderr, end="")
"""


def test_a_small_labels_file_is_read_under_a_memory_limit(tmp_path):
    """Reading a text input asked for a buffer of its cap (4 GiB) whatever
    the file's size: under `ulimit -v 3G` a five-interval file was "out of
    memory"."""
    import resource
    labels = tmp_path / "l.json"
    labels.write_text("[0, 0, 1, 1, 0]")
    limit = 3 << 30
    proc = subprocess.run([str(BIN), "export", "--simpoints", labels, "-o", tmp_path / "out"],
                          capture_output=True, text=True, timeout=120,
                          preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_AS, (limit, limit)))
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "out.weights").read_text().split() == ["0.600000", "0", "0.400000", "1"]


def test_a_csv_line_of_256_mb_is_refused_without_holding_copies_of_it(tmp_path):
    lines = EXAMPLE.read_bytes().splitlines()
    cells = lines[3].split(b",")
    path = tmp_path / "long.csv"
    with open(path, "wb") as f:
        f.write(b"\n".join(lines[:3]) + b"\n" + b",".join(cells[:5]) + b",")
        for _ in range(256):
            f.write(b"1" * (1 << 20))
        f.write(b"," + b",".join(cells[6:]) + b"\n" + b"\n".join(lines[4:50]) + b"\n")
    # measured from a small parent, so that the child's peak is its own
    proc = subprocess.run([sys.executable, "-c", MEASURED,
                           str(Path(sys.executable).parent / "phasewatch"), "replay", str(path),
                           "--base-mhz", "3000"], capture_output=True, text=True, timeout=300)
    head, err = proc.stdout.split("\n", 1)
    status, peak_kb = map(int, head.split())
    assert status == 2 and "Traceback" not in err, err
    assert err.strip() == (f"phasewatch replay: {path}:4: a line longer than 1,048,576 bytes: "
                           f"not a sample row")
    assert peak_kb * 1024 < 512 << 20       # it took 1 GB: four copies of the line


# --- FIFOs where a file of keys, an export or a device is read --------------------------

BIN = Path(sys.executable).parent / "phasewatch"


def curve_keys(folder: Path) -> Path:
    import zmq.auth
    folder.mkdir()
    zmq.auth.create_certificates(str(folder), "server")
    zmq.auth.create_certificates(str(folder), "client")
    return folder


FIFO_READS = {
    "catalog import": lambda t, fifo: [BIN, "catalog", "import", fifo, "--catalog", t / "c.sqlite"],
    "subscribe --curve-server-key": lambda t, fifo: [
        BIN, "subscribe", "--count", "1", "--endpoint", f"tcp://127.0.0.1:{free_port()}",
        "--curve-server-key", fifo, "--curve-key", curve_keys(t / "k") / "client.key_secret"],
    "subscribe --curve-key": lambda t, fifo: [
        BIN, "subscribe", "--count", "1", "--endpoint", f"tcp://127.0.0.1:{free_port()}",
        "--curve-server-key", curve_keys(t / "k") / "server.key", "--curve-key", fifo],
    "phasewatchd curve_secret_key": lambda t, fifo: daemon_with_curve(t, fifo, None),
    "phasewatchd a client's key among curve_authorized_keys": lambda t, fifo: daemon_with_curve(
        t, None, fifo),
}


def daemon_with_curve(tmp_path: Path, secret: Path | None, client: Path | None) -> list:
    keys = curve_keys(tmp_path / "k")
    allowed = tmp_path / "allowed"
    allowed.mkdir()
    (allowed / "client.key").write_bytes((keys / "client.key").read_bytes())
    if client is not None:
        client.rename(allowed / "evil.key")
    config = tmp_path / "d.toml"
    config.write_text(f'[zmq]\ncurve_secret_key = "{secret or keys / "server.key_secret"}"\n'
                      f'curve_authorized_keys = "{allowed}"\n')
    return [DAEMON, "--config", config, "--replay", EXAMPLE, "--no-catalog",
            "--metrics", f"127.0.0.1:{free_port()}", "--zmq", f"tcp://127.0.0.1:{free_port()}"]


@pytest.mark.parametrize("case", FIFO_READS)
def test_a_fifo_where_a_key_or_export_is_read_is_refused_not_waited_on(tmp_path, case):
    """Each of these opened its file with a blocking open: a FIFO with no
    writer hung the command (the daemon at start-up, or its authenticator's
    thread reading every ``*.key`` of the folder)."""
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    argv = FIFO_READS[case](tmp_path, fifo)
    done = subprocess.run([str(a) for a in argv], capture_output=True, text=True, timeout=60)
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr and "a FIFO, not a regular file" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr


def test_a_fifo_as_the_msr_device_is_said_not_waited_on(tmp_path):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    done = subprocess.run([str(BIN), "probe", "--msr-path", str(fifo)], capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr
    assert f"{fifo}: not an MSR device" in done.stdout
