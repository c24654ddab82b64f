"""Files that phasewatch did not create are never changed, and none that it
did is lost: the side table written beside a recording, `export`'s outputs,
and a full disk under each.  Each case is a real command on real files."""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from phasewatch.formats.sidetable import read_side_table
from phasewatch.formats.tracefiles import open_trace

BIN = Path(sys.executable).parent / "phasewatch"
EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "synthetic-skylake.csv"


def phasewatch(*argv, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([str(BIN), *map(str, argv)], capture_output=True, text=True,
                          timeout=timeout)


def one_line_refusal(proc: subprocess.CompletedProcess, match: str) -> None:
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert match in proc.stderr, proc.stderr


def fill(directory: Path) -> Path:
    """Fill the filesystem of ``directory`` to the last block."""
    filler = directory / "filler"
    with open(filler, "wb", buffering=0) as f:
        try:
            while True:
                f.write(b"\0" * 4096)
        except OSError:
            pass
    return filler


# --- the side table ---------------------------------------------------------------

def test_a_side_table_name_that_is_a_symlink_is_refused_and_its_target_kept(tmp_path):
    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    trace = tmp_path / "t.arrow"
    os.symlink(victim, f"{trace}.mappings.jsonl")
    proc = phasewatch("run", "--no-pin", "--record", trace, "--", "true")
    one_line_refusal(proc, "symbolic link")
    assert victim.read_text() == "precious\n"
    assert not trace.exists()


def test_a_side_table_name_that_is_a_folder_is_refused(tmp_path):
    trace = tmp_path / "t.arrow"
    Path(f"{trace}.mappings.jsonl").mkdir()
    one_line_refusal(phasewatch("run", "--no-pin", "--record", trace, "--", "true"),
                     "not a regular file")


def test_a_killed_run_leaves_the_old_trace_and_side_table_as_a_pair(tmp_path):
    trace = tmp_path / "t.arrow"
    side = Path(f"{trace}.mappings.jsonl")
    done = phasewatch("run", "--no-pin", "--interval-ms", "50", "--record", trace, "--",
                      "sleep", "0.3")
    assert done.returncode == 0, done.stderr
    old = trace.read_bytes(), side.read_bytes()
    proc = subprocess.Popen([str(BIN), "run", "--no-pin", "--record", str(trace), "--",
                             sys.executable, "-c", "import time; time.sleep(30)"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(1.5)
    proc.kill()
    proc.wait()
    assert (trace.read_bytes(), side.read_bytes()) == old
    # The killed run's own pair stays under its temporary names, and reads as a pair.
    partial, = tmp_path.glob(".t.arrow.*.partial")
    rows = read_side_table(str(partial))
    assert rows and any("python" in r["path"] for r in rows)
    source = open_trace(str(partial), warn=lambda msg: None)
    assert len(source.metadata["mappings"]) == len(rows)


def test_a_run_killed_before_its_first_batch_leaves_a_trace_that_replays(tmp_path):
    trace = tmp_path / "t.arrow"
    proc = subprocess.Popen([str(BIN), "run", "--no-pin", "--record", str(trace), "--",
                             "sleep", "30"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 60
    while (not list(tmp_path.glob(".t.arrow.*.partial.mappings.jsonl"))
           and time.monotonic() < deadline):
        time.sleep(0.01)
    proc.kill()
    proc.wait()
    partial, = tmp_path.glob(".t.arrow.*.partial")
    assert partial.stat().st_size > 0
    replayed = phasewatch("replay", partial, "--detector", "vpf-ip")
    assert replayed.returncode == 0, replayed.stderr
    assert "Traceback" not in replayed.stderr


def test_a_full_disk_under_the_side_table_still_ends_with_the_summary(tiny_filesystem):
    filler = fill(tiny_filesystem)
    trace = tiny_filesystem / "t.arrow"
    proc = phasewatch("run", "--no-pin", "--interval-ms", "100", "--record", trace, "--",
                      "sleep", "0.5")
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    assert "quality:" in proc.stdout + proc.stderr
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith(f"phasewatch run: cannot write {tiny_filesystem}/t.arrow"), last
    assert "No space left on device" in last and "standard output" not in last
    assert sorted(p.name for p in tiny_filesystem.iterdir()) == [filler.name]


# --- export --------------------------------------------------------------------------

def labels_file(path: Path, n: int = 200) -> Path:
    path.write_text("".join(f"{i % 3} 0.{i % 7}\n" for i in range(n)))
    return path


def test_export_onto_its_own_input_is_refused(tmp_path):
    labels = labels_file(tmp_path / "run.simpoints")
    before = labels.read_bytes()
    one_line_refusal(phasewatch("export", "--simpoints", labels), "is the input")
    assert labels.read_bytes() == before


def test_export_through_a_link_to_its_input_is_refused(tmp_path):
    labels = labels_file(tmp_path / "r.labels")
    before = labels.read_bytes()
    os.symlink(labels, tmp_path / "p.weights")
    one_line_refusal(phasewatch("export", "--simpoints", labels, "-o", tmp_path / "p"),
                     "is the input")
    assert labels.read_bytes() == before
    assert not (tmp_path / "p.simpoints").exists()


def test_export_writes_both_files_or_neither(tiny_filesystem, tmp_path):
    labels = labels_file(tmp_path / "r.labels", n=20_000)
    old = tiny_filesystem / "p.simpoints"
    old.write_text("old\n")
    fill(tiny_filesystem)
    proc = phasewatch("export", "--simpoints", labels, "-o", tiny_filesystem / "p")
    one_line_refusal(proc, "No space left on device")
    assert old.read_text() == "old\n" and not (tiny_filesystem / "p.weights").exists()
    assert not list(tiny_filesystem.glob(".*.partial"))


# --- smaller cases -----------------------------------------------------------------------------

def test_report_keeps_the_old_index_when_its_picture_cannot_be_written(tmp_path):
    trace = tmp_path / "t.arrow"
    assert phasewatch("convert", EXAMPLE, trace).returncode == 0
    out = tmp_path / "rep"
    out.mkdir()
    (out / "index.html").write_text("old report\n")
    (out / "phases.png").mkdir()
    proc = phasewatch("report", trace, "--out", out)
    one_line_refusal(proc, "phases.png")
    assert (out / "index.html").read_text() == "old report\n"
    assert sorted(p.name for p in out.iterdir()) == ["index.html", "phases.png"]


def test_run_under_a_small_address_space_limit_is_one_line():
    # Lowered until run no longer fits: where memory first runs out (a
    # library's mapping, an allocation, a thread's stack) it says so in one line.
    for limit_kib in range(300_000, 100_000, -10_000):
        proc = subprocess.run(f"ulimit -v {limit_kib}; exec {BIN} run --no-pin -- true",
                              shell=True, capture_output=True, text=True, timeout=120)
        if proc.returncode != 0:
            break
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, (limit_kib, proc.stderr)
    assert proc.stderr.strip().splitlines()[-1].startswith("phasewatch run: out of memory")


def test_a_csv_with_a_character_across_byte_4096_is_a_trace(tmp_path):
    from phasewatch.formats.csvtrace import looks_like_csv
    lines = EXAMPLE.read_bytes().splitlines()
    header = lines[0] + b",note\n"
    rows = [line + b"," for line in lines[1:100]]
    data, at = header, len(header)
    for row in rows:
        if at + len(row) <= 4095 < at + len(row) + 200:
            row += b"x" * (4095 - at - len(row)) + "é".encode()
        data += row + b"\n"
        at = len(data)
    assert data[4095:4097] == "é".encode()
    path = tmp_path / "u.csv"
    path.write_bytes(data)
    assert looks_like_csv(str(path))


def test_subscribe_skips_null_list_and_oddly_typed_messages():
    import zmq
    ctx = zmq.Context()
    pub = ctx.socket(zmq.PUB)
    port = pub.bind_to_random_port("tcp://127.0.0.1")
    proc = subprocess.Popen([str(BIN), "subscribe", "--endpoint", f"tcp://127.0.0.1:{port}",
                             "--count", "5"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    try:
        odd = [b"null", b"[1, 2]", b'"text"', b'{"type": "samples", "columns": 5}']
        deadline = time.monotonic() + 60
        while proc.poll() is None and time.monotonic() < deadline:
            for body in odd + [b'{"v": 1, "type": "phase", "phase": 1}']:
                pub.send_multipart([b"phase.cpu0", body])
            time.sleep(0.05)
        out, err = proc.communicate(timeout=30)
    finally:
        pub.close(0)
        ctx.term()
    assert proc.returncode == 0 and "Traceback" not in err, err
    assert "not a phasewatch message: skipped" in out


def test_a_recording_named_through_a_link_keeps_its_side_table_beside_the_file(tmp_path):
    real = tmp_path / "real"
    real.mkdir()
    (real / "t.arrow").write_bytes(b"")
    link = tmp_path / "t.arrow"
    os.symlink(real / "t.arrow", link)
    done = phasewatch("run", "--no-pin", "--interval-ms", "50", "--record", link, "--",
                      "sleep", "1.5")
    assert done.returncode == 0, done.stderr
    assert link.is_symlink() and (real / "t.arrow.mappings.jsonl").exists()
    rows = read_side_table(str(link))
    assert rows and any("sleep" in r["path"] for r in rows)


# --- a system user: no home, the sources not writable -----------------------------------

AS_NOBODY = ["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups"]


def as_nobody(*argv, **env) -> subprocess.CompletedProcess:
    return subprocess.run([*AS_NOBODY, str(BIN), *map(str, argv)], capture_output=True,
                          text=True, timeout=600,
                          env={**os.environ, "HOME": "/nonexistent", **env})


@pytest.fixture
def nobodys_folder():
    """A folder of nobody's own, in /tmp (pytest's folders are root's alone)."""
    if os.geteuid() != 0:
        pytest.skip("needs root, to run as the user nobody")
    folder = Path(tempfile.mkdtemp(prefix="phasewatch-nobody-"))
    os.chown(folder, *pwd.getpwnam("nobody")[2:4])
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


def test_the_jit_without_a_folder_to_cache_in_compiles_afresh(nobodys_folder):
    """A stale or missing ahead-of-time module takes numba's JIT, with its
    on-disk cache; a user who may write neither beside the sources nor in a
    home got a RuntimeError ("cannot cache function") and a traceback."""
    done = as_nobody("replay", EXAMPLE, "--output", nobodys_folder / "r.jsonl",
                     PHASEWATCH_KERNELS="jit")
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr[-2000:]
    assert (nobodys_folder / "r.jsonl").stat().st_size > 0


def test_report_without_a_home_says_nothing_of_matplotlibs_folder(nobodys_folder):
    done = as_nobody("report", EXAMPLE, "--out", nobodys_folder / "rep")
    assert done.returncode == 0 and done.stderr == "", done.stderr
    assert (nobodys_folder / "rep" / "phases.png").is_file()
