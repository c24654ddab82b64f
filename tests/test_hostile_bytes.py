"""Hostile names, class "bytes stay bytes": a command line, an executable's
path, a ``comm`` and a trace's file name that are not UTF-8, and a process
whose ``/proc`` files are refused (a setuid program run by a user).

The kernel checks none of these names, so phasewatch reads every per-process
``/proc`` file as bytes (phasewatch.collectors.procfs), shows undecodable
bytes escaped as ``\\xNN``, and writes them into traces, side tables and JSON
losslessly, and into pprof escaped (docs/formats.md).  Each case runs the
real ``phasewatch`` (or ``phasewatchd``) on real programs: no traceback, the
command's own output intact, and what was recorded reads back."""

from __future__ import annotations

import ast
import gzip
import os
import random
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from daemonutil import Daemon
from phasewatch.formats import pprof_profile_pb2 as pb
from phasewatch.formats.sidetable import read_side_table
from phasewatch.formats.trace import TraceReader

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent / "phasewatch"
EXAMPLE = ROOT / "examples" / "synthetic-skylake.csv"
BZIP2 = shutil.which("bzip2")
PYTHON3 = shutil.which("python3")

#: Bytes no UTF-8 decoder takes, as Python holds them (lone surrogates, PEP 383).
FF, FE = os.fsdecode(b"\xff"), os.fsdecode(b"\xfe")

#: A process that names itself (prctl PR_SET_NAME) with bytes that are not UTF-8,
#: then compresses for about ``SECONDS`` of CPU time.
RENAMED = ("import bz2, ctypes, sys, time\n"
           "ctypes.CDLL(None).prctl(15, b'pw\\xff\\xfe', 0, 0, 0)\n"
           "data = bytes(range(256)) * 4000\n"
           "while time.process_time() < float(sys.argv[1]):\n"
           "    bz2.compress(data)\n")


def phasewatch(*argv, cwd=None, timeout: float = 180, stdout=subprocess.PIPE, **kwargs):
    """``phasewatch ARGV``; output kept as bytes, as the process wrote them."""
    return subprocess.run([str(BIN), *map(str, argv)], stdout=stdout, stderr=subprocess.PIPE,
                          cwd=cwd, timeout=timeout, **kwargs)


def clean(proc: subprocess.CompletedProcess, status: int = 0) -> str:
    """The run ended with ``status`` and no traceback, and said every
    undecodable byte escaped: its standard error is UTF-8."""
    err = proc.stderr.decode("utf-8")       # raises if a raw byte reached the terminal
    assert proc.returncode == status, err
    assert "Traceback" not in err and "Exception in thread" not in err, err
    return err


@pytest.fixture(scope="module")
def text_file(tmp_path_factory) -> Path:
    """About 3 MB that bzip2 takes most of a second to compress."""
    rng = random.Random(7)
    path = tmp_path_factory.mktemp("bytes") / "F"
    words = [f"w{rng.randrange(10**6)}" for _ in range(4000)]
    path.write_text(" ".join(rng.choice(words) for _ in range(400_000)))
    return path


def pprof_strings(path: Path) -> list[str]:
    profile = pb.Profile()
    profile.ParseFromString(gzip.decompress(path.read_bytes()))
    return list(profile.string_table)


# --- argv -------------------------------------------------------------------------

def test_argv_that_is_not_utf8_reaches_the_profile_escaped(tmp_path, text_file):
    profile = tmp_path / "p.pb"
    proc = phasewatch("run", "--no-pin", "--pprof", profile, "--", "sh", "-c",
                      f"{BZIP2} -c {text_file} >/dev/null", "name" + FF, cwd=tmp_path)
    err = clean(proc)
    assert "name\\xff" in err, err
    assert any("name\\xff" in s for s in pprof_strings(profile))


def test_a_recording_of_such_argv_keeps_its_bytes_and_replays_to_pprof(tmp_path, text_file):
    trace = tmp_path / "r.arrow"
    clean(phasewatch("run", "--no-pin", "--record", trace, "--", "sh", "-c",
                     f"{BZIP2} -c {text_file} >/dev/null", "name" + FF, cwd=tmp_path))
    assert TraceReader(str(trace)).metadata["command"][-1] == "name" + FF   # lossless
    profile = tmp_path / "replayed.pb"
    clean(phasewatch("replay", trace, "--pprof", profile))
    assert any("name\\xff" in s for s in pprof_strings(profile))


# --- the executable's path (/proc/PID/maps) ----------------------------------------------

def test_an_executable_path_that_is_not_utf8_is_recorded_and_replayed(tmp_path, text_file):
    program = tmp_path / f"bz{FE}"
    shutil.copy(BZIP2, program)
    trace, out = tmp_path / "e.arrow", tmp_path / "out.bz2"
    with open(out, "wb") as f:
        proc = phasewatch("run", "--no-pin", "--record", trace, "--pprof", tmp_path / "e.pb",
                          "--", program, "-c", text_file, stdout=f)
    clean(proc)
    assert out.read_bytes() == subprocess.run([BZIP2, "-c", text_file], capture_output=True,
                                              check=True).stdout     # the command ran whole
    recorded = (TraceReader(str(trace)).metadata.get("mappings") or []) + \
        (read_side_table(str(trace)) or [])
    assert str(program) in [row["path"] for row in recorded]    # the bytes, kept
    clean(phasewatch("replay", trace, "--pprof", tmp_path / "again.pb"))


# --- comm ----------------------------------------------------------------------------

def test_a_command_that_renames_itself_to_bytes_is_watched_to_its_end(tmp_path):
    proc = phasewatch("run", "--no-pin", "--interval-ms", "50", "--", PYTHON3, "-c", RENAMED,
                      "0.6", cwd=tmp_path)
    assert "exit status 0" in clean(proc)


#: Two busy threads, the second named (its own comm) in bytes that are not UTF-8.
THREAD_RENAMED = ("import bz2, ctypes, threading, time\n"
                  "def busy():\n"
                  "    t = time.monotonic()\n"
                  "    while time.monotonic() - t < 0.8:\n"
                  "        bz2.compress(bytes(range(256)) * 400)\n"
                  "def renamed():\n"
                  "    ctypes.CDLL(None).prctl(15, b'th\\xff\\xfe', 0, 0, 0)\n"
                  "    busy()\n"
                  "thread = threading.Thread(target=renamed)\n"
                  "thread.start()\n"
                  "busy()\n"
                  "thread.join()\n")


def test_a_thread_that_renames_itself_to_bytes_is_watched_to_its_end(tmp_path):
    proc = phasewatch("run", "--interval-ms", "50", "--", PYTHON3, "-c", THREAD_RENAMED,
                      cwd=tmp_path)
    assert "exit status 0" in clean(proc)


def test_run_pid_on_a_process_named_in_bytes(tmp_path):
    """Its comm and its command line (/proc/PID/cmdline) both hold such bytes."""
    target = subprocess.Popen([PYTHON3, "-c", RENAMED, "3", "arg" + FF])
    try:
        time.sleep(0.3)
        proc = phasewatch("run", "--no-pin", "--interval-ms", "50", "--pid", target.pid)
        assert "arg\\xff" in clean(proc)
    finally:
        target.kill()
        target.wait()


#: A parent that starts a child named pwvictim, which renames itself to bytes
#: that are not UTF-8 and exits; the parent never reaps it (a zombie stays).
ZOMBIE_MAKER = ("import os, sys, time\n"
                "pid = os.fork()\n"
                "if pid == 0:\n"
                "    import ctypes\n"
                "    libc = ctypes.CDLL(None)\n"
                "    libc.prctl(15, b'pwvictim', 0, 0, 0)\n"
                "    t = time.monotonic()\n"
                "    while time.monotonic() - t < float(sys.argv[1]):\n"
                "        sum(range(10000))\n"
                "    libc.prctl(15, b'pw\\xff\\xfe', 0, 0, 0)\n"
                "    os._exit(0)\n"
                "print(pid, flush=True)\n"
                "time.sleep(120)\n")


@pytest.mark.slow
def test_the_daemon_outlives_a_comm_target_that_renames_itself_and_stays_a_zombie(tmp_path):
    config = tmp_path / "comm.toml"
    config.write_text('[source]\nkind = "perf"\n[targets]\ncpus = []\ncommands = ["pwvictim"]\n'
                      'rescan_seconds = 0.2\n[detector]\nname = "vpf-ip"\ninterval_ms = 100\n')
    with Daemon("--config", config) as d:
        d.wait_ready()
        maker = subprocess.Popen([PYTHON3, "-c", ZOMBIE_MAKER, "4"], stdout=subprocess.PIPE,
                                 text=True)
        try:
            victim = int(maker.stdout.readline())
            d.wait_metric("phasewatch_intervals_total", lambda v: v >= 1, target="comm:pwvictim")
            deadline = time.monotonic() + 30
            while Path(f"/proc/{victim}/stat").read_bytes().rpartition(b")")[2].split()[0] != b"Z":
                assert time.monotonic() < deadline, "the victim never ended"
                time.sleep(0.1)
            time.sleep(2)                       # the daemon's look at the zombie
            assert d.proc.poll() is None, d.proc.stderr.read()
            d.metrics_text()                    # and it still serves
        finally:
            maker.kill()
            maker.wait()
    status, err = d.stop()
    assert status == 0 and "Traceback" not in err, err


# --- a trace's file name --------------------------------------------------------------

def test_a_trace_named_in_bytes_is_converted_replayed_and_shown_escaped(tmp_path):
    trace = tmp_path / f"t{FF}.arrow"
    clean(phasewatch("convert", EXAMPLE, trace))
    proc = phasewatch("replay", trace)
    clean(proc)
    assert "t\\xff.arrow".encode() in proc.stdout


def test_a_report_of_a_trace_named_in_bytes_titles_it_escaped(tmp_path):
    trace, out = tmp_path / f"t{FF}.arrow", tmp_path / f"report{FE}"
    clean(phasewatch("convert", EXAMPLE, trace))
    clean(phasewatch("report", trace, "--out", out))
    assert "phases of t\\xff.arrow" in (out / "index.html").read_text(encoding="utf-8")
    assert (out / "phases.png").stat().st_size > 0


def test_run_record_to_a_name_in_bytes_replays(tmp_path, text_file):
    trace = tmp_path / f"r{FE}.arrow"
    err = clean(phasewatch("run", "--no-pin", "--record", trace, "--", BZIP2, "-c", text_file,
                           stdout=subprocess.DEVNULL))
    assert "r\\xfe.arrow" in err
    clean(phasewatch("replay", trace))


# --- /proc refused: a setuid program run by a user ----------------------------------------

needs_root = pytest.mark.skipif(os.geteuid() != 0 or shutil.which("setpriv") is None,
                                reason="needs root and setpriv to become another user")


@pytest.fixture
def nobody_home(text_file):
    """A folder ``nobody`` can write, with a setuid-root copy of bzip2 in it."""
    home = Path(tempfile.mkdtemp(prefix="phasewatch-setuid-"))
    home.chmod(0o777)
    shutil.copy(BZIP2, home / "sbzip2")
    (home / "sbzip2").chmod(0o4755)
    shutil.copy(text_file, home / "F")
    (home / "F").chmod(0o644)
    yield home
    shutil.rmtree(home, ignore_errors=True)


@needs_root
@pytest.mark.parametrize("how", ["directly", "through a shell"])
def test_a_setuid_command_run_by_a_user_runs_whole_and_is_said_once(nobody_home, how):
    command = ["./sbzip2", "-c", "F"] if how == "directly" else \
        ["sh", "-c", "./sbzip2 -c F && for i in 1 2 3; do ./sbzip2 -c F >/dev/null; done"]
    out = nobody_home / "out.bz2"
    with open(out, "wb") as f:
        proc = subprocess.run(["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups",
                               "env", f"HOME={nobody_home}", str(BIN), "run", "--no-pin", "--",
                               *command], stdout=f, stderr=subprocess.PIPE, cwd=nobody_home,
                              timeout=180)
    err = clean(proc)
    assert out.read_bytes() == subprocess.run([BZIP2, "-c", nobody_home / "F"],
                                              capture_output=True, check=True).stdout
    assert len(re.findall(r"cannot read /proc/\d+/maps", err)) == 1, err     # said once


# --- the root cause: no per-process /proc file read as text ------------------------------

def test_no_module_reads_a_process_proc_file_as_text():
    """Every read of ``/proc/PID/...`` goes through collectors/procfs.py, which
    keeps the bytes: an ``open()`` in text mode or a ``read_text()`` of such a
    path anywhere else is the next traceback on a name that is not UTF-8."""
    found = []
    for path in [*(ROOT / "agent").rglob("*.py"), *(ROOT / "collectors").glob("*.py")]:
        if path.name in ("procfs.py", "pprof_profile_pb2.py"):
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if not isinstance(node, ast.Call):
                continue
            text = ast.unparse(node)
            per_process = re.search(r"/proc/\{", text)
            opens_text = (isinstance(node.func, ast.Name) and node.func.id == "open"
                          and not any(isinstance(a, ast.Constant) and "b" in str(a.value)
                                      for a in node.args[1:]))
            reads_text = isinstance(node.func, ast.Attribute) and node.func.attr == "read_text"
            if per_process and (opens_text or reads_text):
                found.append(f"{path.relative_to(ROOT)}:{node.lineno}: {text}")
    assert not found, "\n".join(found)



def test_a_catalogue_in_a_folder_named_in_bytes_is_kept_and_listed(tmp_path):
    """$XDG_STATE_HOME (or --catalog) may name a folder that is not UTF-8: the
    catalogue's file name went into a SQLite URI through an encoder that
    refused the bytes."""
    state = tmp_path / f"state{FF}[bold]"
    env = {**os.environ, "XDG_STATE_HOME": str(state)}
    busy = [sys.executable, "-c", "sum(i * i for i in range(300_000))"]
    clean(phasewatch("run", "--no-pin", "-q", "--", *busy, env=env))
    assert (state / "phasewatch" / "catalog.sqlite").is_file()
    listed = phasewatch("catalog", "list", env=env)
    clean(listed)
    assert b"programs in" in listed.stdout
    clean(phasewatch("run", "--no-pin", "-q", "--catalog", state / "phasewatch" / "catalog.sqlite",
                     "--", *busy))
