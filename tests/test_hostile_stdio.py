"""Hostile start-up, class "stdio descriptors are guarded": standard input,
output or error closed by the caller (``<&-``, ``>&-``, ``2>&-``) or opened
read-only (``1</dev/null``), and a working folder deleted under the command.

A closed descriptor 0, 1 or 2 is the lowest free number, so the next file
opened took it: the gate pipe landed on 0 and the clean-up before exec then
closed the command's stdout and stderr; with 2 closed, Python's ``sys.stderr``
is None and every message went to standard output, into the command's data.
Both entry points (``phasewatch``, ``phasewatchd``) now put ``/dev/null`` on
a closed 0-2 first (phasewatch.console.guard_stdio), and the clean-up in
live/child.py never touches 0-2.  Each case is the real command from a real
shell, on bzip2's real output."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from daemonutil import free_port

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent / "phasewatch"
DAEMON = Path(sys.executable).parent / "phasewatchd"
EXAMPLE = ROOT / "examples" / "synthetic-skylake.csv"
BZIP2 = shutil.which("bzip2")


def shell(script: str, cwd: Path, timeout: float = 180) -> subprocess.CompletedProcess:
    """``sh -c SCRIPT`` with $PW, $PWD_D (the daemon) and $BZ (bzip2) set
    (not $BZIP2: bzip2 reads that as options)."""
    env = {**os.environ, "PW": str(BIN), "PWD_D": str(DAEMON), "BZ": BZIP2}
    return subprocess.run(["sh", "-c", script], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=timeout)


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> tuple[Path, bytes]:
    """A file, and what bzip2 alone makes of it."""
    path = tmp_path_factory.mktemp("stdio") / "F"
    path.write_bytes(b"".join(b"line %d of the file\n" % i for i in range(60_000)))
    return path, subprocess.run([BZIP2, "-c", path], capture_output=True, check=True).stdout



def wait_serving(daemon: subprocess.Popen, port: int, why_not) -> None:
    """Until the daemon serves metrics with intervals counted; ``why_not()``
    says why, should it exit first."""
    deadline = time.monotonic() + 60
    while True:
        assert daemon.poll() is None, why_not()
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
                if b"phasewatch_intervals_total" in r.read():
                    return
        except OSError:
            pass
        assert time.monotonic() < deadline, "phasewatchd never served"
        time.sleep(0.2)

def test_closed_stdin_leaves_the_commands_output_whole(tmp_path, data):
    source, expected = data
    proc = shell(f'"$PW" run -q --no-pin -- "$BZ" -c {source} > out.bz2 <&-', tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "out.bz2").read_bytes() == expected


def test_closed_stderr_keeps_the_agents_messages_out_of_the_commands_output(tmp_path, data):
    source, expected = data
    proc = shell(f'"$PW" run --no-pin -- "$BZ" -c {source} > out.bz2 2>&-', tmp_path)
    assert proc.returncode == 0
    assert (tmp_path / "out.bz2").read_bytes() == expected     # no warning, no table in it


def test_closed_stdout_with_output_writes_the_results(tmp_path, data):
    source, _ = data
    proc = shell(f'"$PW" run --no-pin --output o.jsonl -- "$BZ" -c {source} >&-', tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr
    assert (tmp_path / "o.jsonl").is_file()


def test_all_three_closed(tmp_path, data):
    source, _ = data
    proc = shell(f'"$PW" run --no-pin --output o.jsonl -- "$BZ" -c {source} '
                 f'<&- >&- 2>&-; echo "status $?" > status', tmp_path)
    assert proc.returncode == 0
    assert (tmp_path / "status").read_text() == "status 0\n"
    assert (tmp_path / "o.jsonl").is_file()


def test_a_read_only_stdout_is_no_traceback(tmp_path, trace):
    proc = shell(f'"$PW" replay {trace} 1</dev/null', tmp_path)
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr


def test_a_read_only_stderr_leaves_the_command_and_its_status_alone(tmp_path, data):
    source, expected = data
    proc = shell(f'"$PW" run --no-pin -- "$BZ" -c {source} > out.bz2 2</dev/null; '
                 f'echo "status $?" > status', tmp_path)
    assert proc.returncode == 0
    assert (tmp_path / "status").read_text() == "status 0\n"
    assert (tmp_path / "out.bz2").read_bytes() == expected


@pytest.mark.parametrize("argv", [
    "run --no-pin --output o.jsonl -- true",
    "run --no-pin --record r.arrow -- true",
    f"replay {EXAMPLE} --output o.jsonl",
    f"convert {EXAMPLE} t.arrow",
])
def test_a_deleted_working_folder_is_one_line(tmp_path, argv):
    gone = tmp_path / "gone"
    gone.mkdir()
    proc = shell(f'cd {gone} && rmdir {gone} && exec "$PW" {argv}', tmp_path)
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
    assert "working folder has been deleted" in proc.stderr


# --- phasewatchd ------------------------------------------------------------------------

@pytest.fixture(scope="module")
def trace(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("stdio-daemon") / "t.arrow"
    assert subprocess.run([str(BIN), "convert", EXAMPLE, path], capture_output=True).returncode == 0
    return path


def test_the_daemon_with_stdin_and_stderr_closed_serves_and_writes_nothing_to_stdout(tmp_path,
                                                                                    trace):
    port = free_port()
    out = tmp_path / "stdout"
    with open(out, "wb") as f:
        daemon = subprocess.Popen(
            ["sh", "-c", 'exec "$0" "$@" <&- 2>&-', str(DAEMON), "--replay", str(trace),
             "--replay-speed", "0", "--metrics", f"127.0.0.1:{port}",
             "--zmq", f"tcp://127.0.0.1:{free_port()}"], stdout=f)
    try:
        wait_serving(daemon, port, lambda: out.read_text())
    finally:
        daemon.terminate()
        status = daemon.wait(timeout=20)
    assert out.read_bytes() == b""          # its log went nowhere, not to standard output
    assert status == 0


def test_the_daemon_in_a_deleted_working_folder_is_one_line(tmp_path, trace):
    gone = tmp_path / "gone"
    gone.mkdir()
    proc = shell(f'cd {gone} && rmdir {gone} && exec "$PWD_D" --replay {trace} '
                 f'--metrics 127.0.0.1:{free_port()} --zmq tcp://127.0.0.1:{free_port()}',
                 tmp_path, timeout=60)
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
    assert "working folder has been deleted" in proc.stderr


# --- the root cause, in the clean-up: descriptors 0-2 are the command's ------------------------

CHILD_WITH_STDIN_CLOSED = """
import os, sys
from phasewatch.live.child import Child
os.close(0)                        # the gate pipe now lands on 0, as with '<&-'
child = Child.run(["sh", "-c", "echo to-stdout; echo to-stderr >&2"], pin=False)
sys.exit(child.wait())
"""


def test_the_clean_up_before_exec_never_closes_0_to_2():
    proc = subprocess.run([sys.executable, "-c", CHILD_WITH_STDIN_CLOSED], capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "to-stdout\n" and proc.stderr == "to-stderr\n"


# --- standard output or error on a full device ----------------------------------------

@pytest.mark.parametrize("option", ["--version", "--help"])
def test_the_daemons_help_on_a_full_standard_output_is_one_line(tmp_path, option):
    done = shell(f'"$PWD_D" {option} >/dev/full', tmp_path)
    assert done.returncode == 2, done.stderr
    assert done.stderr.splitlines() == [
        "phasewatchd: cannot write standard output: No space left on device"], done.stderr


@pytest.mark.parametrize("status", [0, 3])
def test_a_full_standard_error_loses_the_messages_not_the_commands_status(tmp_path, status):
    """The phase table goes to standard error; when it could not be written
    there, `run` ended with a traceback (to a stderr that took none) and
    status 1, whatever the command's."""
    done = shell(f'"$PW" run --no-pin -- sh -c "echo out; exit {status}" 2>/dev/full', tmp_path)
    assert done.returncode == status
    assert done.stdout == "out\n"


def test_the_daemon_with_a_full_standard_error_serves(tmp_path, trace):
    port = free_port()
    daemon = subprocess.Popen(
        ["sh", "-c", 'exec "$0" "$@" 2>/dev/full', str(DAEMON), "--replay", str(trace),
         "--replay-speed", "0", "--metrics", f"127.0.0.1:{port}",
         "--zmq", f"tcp://127.0.0.1:{free_port()}"], stdout=subprocess.DEVNULL)
    try:
        wait_serving(daemon, port, lambda: f"phasewatchd exited {daemon.returncode}")
    finally:
        daemon.terminate()
        status = daemon.wait(timeout=20)
    assert status == 0
