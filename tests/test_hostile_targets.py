"""phasewatchd never dies of what a target does.  Every error met while
looking for a process target, opening its source or watching it is caught,
said once, and counted in ``phasewatch_target_errors_total{target, kind}``;
the daemon goes on serving.  Also what it is given to bind or watch: an
``ipc://`` path that is not a socket is refused before libzmq deletes it, a
CPU the host lacks is named with the ones it has.  Each case is the real
daemon with real processes."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import pytest

from daemonutil import Daemon, PHASEWATCH, free_port, refused
from phasewatch.daemon.target_errors import KINDS

#: A child that takes the name ``NAME``, runs, renames itself to ``NEXT``
#: (bytes), runs, and exits; its parent prints its pid and never reaps it.
TARGET = """
import ctypes, os, sys, time
libc = ctypes.CDLL(None)
name, first, rename_to, then = sys.argv[1].encode(), float(sys.argv[2]), sys.argv[3], float(sys.argv[4])
pid = os.fork()
if pid == 0:
    libc.prctl(15, name, 0, 0, 0)           # PR_SET_NAME
    end = time.monotonic() + first
    while time.monotonic() < end: pass
    libc.prctl(15, bytes.fromhex(rename_to), 0, 0, 0)
    end = time.monotonic() + then
    while time.monotonic() < end: pass
    os._exit(0)
print(pid, flush=True)
time.sleep(120)
"""


def unique_name() -> str:
    return "pw" + uuid.uuid4().hex[:10]         # at most 15 bytes, as comm holds


def config(path: Path, targets: str) -> Path:
    path.write_text('[source]\nkind = "perf"\n[targets]\ncpus = []\n' + targets +
                    'rescan_seconds = 0.2\n[detector]\nname = "vpf-ip"\ninterval_ms = 100\n')
    return path


class Lines(list):
    """The daemon's stderr, line by line, as it comes."""

    def __init__(self, d: Daemon):
        super().__init__()
        threading.Thread(target=lambda: self.extend(
            line.rstrip("\n") for line in iter(d.proc.stderr.readline, "")), daemon=True).start()

    def wait_for(self, *texts: str, timeout: float = 60.0) -> str:
        """The first line holding one of ``texts``."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            found = [line for line in self if any(text in line for text in texts)]
            if found:
                return found[0]
            time.sleep(0.05)
        raise AssertionError(f"phasewatchd never said {texts!r}: {list(self)}")


def start_target(name: str, first: float, rename_to: bytes, then: float) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", TARGET, name, str(first), rename_to.hex(),
                             str(then)], stdout=subprocess.PIPE, text=True)


def stop_target(parent: subprocess.Popen) -> None:
    parent.kill()
    parent.wait()


# --- watching ---------------------------------------------------------------------------

def test_a_target_renamed_to_bytes_that_are_not_utf8_and_left_unreaped_leaves_it_serving(
        tmp_path):
    name = unique_name()
    with Daemon("--config", config(tmp_path / "c.toml", f'commands = ["{name}"]\n')) as d:
        lines = Lines(d)
        d.wait_ready()
        parent = start_target(name, 2.0, b"\xff\xfe\xfd", 1.0)
        try:
            lines.wait_for(f"watching comm:{name}")
            # after the rename and exit: its end, or what went wrong watching it
            lines.wait_for(f"comm:{name}: the source ended", "no longer watched")
            time.sleep(1.0)
            assert d.proc.poll() is None, list(lines)
            assert "phasewatch_samples_total" in d.metrics_text()
        finally:
            stop_target(parent)
        status, _ = d.stop()
    assert status == 0, list(lines)
    assert not any("Traceback" in line for line in lines), list(lines)


#: A process that takes the name ``NAME``, maps ``N`` small executable
#: regions (each a line of /proc/PID/maps), runs ``SECONDS`` and exits.
MAPPED = """
import ctypes, mmap, sys, time
ctypes.CDLL(None).prctl(15, sys.argv[1].encode(), 0, 0, 0)
kept = [mmap.mmap(-1, 4096, prot=mmap.PROT_READ | mmap.PROT_EXEC) for _ in range(int(sys.argv[2]))]
start = time.process_time()
while time.process_time() - start < float(sys.argv[3]):
    pass
"""


@pytest.mark.parametrize("regions", [0, 20_000])
def test_a_process_target_that_ends_is_no_error(tmp_path, regions):
    """A process target's mappings sink kept its ended processes in an
    attribute named ``ended``, over the sink's ``ended()``: every process
    target that ended was "no longer watched" with a TypeError and counted as
    an error, whether it had a few mappings or 20,000."""
    name = unique_name()
    with Daemon("--config", config(tmp_path / "c.toml", f'commands = ["{name}"]\n')) as d:
        lines = Lines(d)
        d.wait_ready()
        subprocess.run([sys.executable, "-c", MAPPED, name, str(regions), "1.5"], timeout=120,
                       check=True)
        said = lines.wait_for(f"comm:{name}: the source ended", "no longer watched")
        assert "the source ended" in said, list(lines)
        assert d.metric("phasewatch_target_errors_total", target=f"comm:{name}",
                        kind="watch") is None
        status, _ = d.stop()
    assert status == 0 and not any("Traceback" in line for line in lines), list(lines)


def test_a_target_that_cannot_be_opened_is_said_once_and_counted(tmp_path):
    # A zombie of the watched name: found at every rescan, and no perf event opens on it.
    name = unique_name()
    with Daemon("--config", config(tmp_path / "c.toml", f'commands = ["{name}"]\n')) as d:
        lines = Lines(d)
        d.wait_ready()
        parent = start_target(name, 0.0, name.encode(), 0.0)
        try:
            d.wait_metric("phasewatch_target_errors_total", lambda n: n >= 1,
                          target=f"comm:{name}", kind="open")
            time.sleep(2.0)                 # ten rescans more
            assert d.proc.poll() is None
        finally:
            stop_target(parent)
        d.stop()
    said = [line for line in lines if f"comm:{name}" in line]
    assert len(said) == 1, said
    assert "phasewatch_target_errors_total" in said[0]


#: Children that take the name ``NAME``, run a moment and exit, forked
#: without pause for ``SECONDS``; reaped fifty at a time.
STORM = """
import ctypes, os, sys, time
name, seconds = sys.argv[1].encode(), float(sys.argv[2])
libc = ctypes.CDLL(None)
end, forked = time.monotonic() + seconds, 0
while time.monotonic() < end:
    if os.fork() == 0:
        libc.prctl(15, name, 0, 0, 0)
        x = 0
        for i in range(20_000):
            x += i
        os._exit(0)
    forked += 1
    if forked % 50 == 0:
        while True:
            try:
                if os.waitpid(-1, os.WNOHANG) == (0, 0):
                    break
            except ChildProcessError:
                break
while True:
    try:
        os.wait()
    except ChildProcessError:
        break
"""


def test_a_storm_of_short_lived_processes_of_a_target_is_said_once(tmp_path):
    """Class "processes appearing and vanishing quickly": each child of a comm
    target gone before its source opened was said in a line of its own (171
    lines in 8 s here), the log flooded by what is one target's behaviour."""
    name = unique_name()
    with Daemon("--config", config(tmp_path / "c.toml", f'commands = ["{name}"]\n')) as d:
        lines = Lines(d)
        d.wait_ready()
        subprocess.run([sys.executable, "-c", STORM, name, "6"], timeout=120, check=True)
        time.sleep(1.0)
        assert d.proc.poll() is None
        status, _ = d.stop()
    said = [line for line in lines if f"comm:{name}:" in line and "target_errors" in line]
    assert status == 0 and len(said) <= len(KINDS), said


def test_a_cgroup_removed_while_watched_is_said_once_and_counted(tmp_path):
    hierarchy = Path("/sys/fs/cgroup/pids")
    if not (hierarchy / "cgroup.procs").exists() or not os.access(hierarchy, os.W_OK):
        pytest.skip("no writable cgroup v1 pids hierarchy here")
    group = hierarchy / f"phasewatch-{uuid.uuid4().hex[:8]}"
    group.mkdir()
    try:
        path = f"pids/{group.name}"
        with Daemon("--config", config(tmp_path / "c.toml", f'cgroups = ["{path}"]\n')) as d:
            lines = Lines(d)
            d.wait_ready()
            group.rmdir()
            d.wait_metric("phasewatch_target_errors_total", lambda n: n >= 3,
                          target=f"cgroup:{path}", kind="find")
            assert d.proc.poll() is None
            d.stop()
        said = [line for line in lines if f"cgroup:{path}" in line or "no cgroup" in line]
        assert len(said) == 1, said
    finally:
        if group.exists():
            group.rmdir()


# --- what it is given ----------------------------------------------------------------------

def test_an_ipc_endpoint_on_a_file_that_is_not_a_socket_is_refused_and_kept(tmp_path):
    victim = tmp_path / "notes.txt"
    victim.write_text("precious\n")
    line = refused("--replay", tmp_path / "none.arrow", "--zmq", f"ipc://{victim}")
    assert "not a socket" in line and str(victim) in line
    assert victim.read_text() == "precious\n"


def test_an_ipc_endpoint_from_the_config_is_refused_as_the_config_names_it(tmp_path):
    """Not as `--zmq`, an option the user never gave."""
    victim = tmp_path / "notes.txt"
    victim.write_text("precious\n")
    config = tmp_path / "phasewatchd.toml"
    config.write_text(f'[zmq]\nendpoint = "ipc://{victim}"\n')
    line = refused("--config", config, "--replay", tmp_path / "none.arrow")
    assert f"[zmq] endpoint = ipc://{victim}: {victim} exists and is not a socket" in line, line
    assert "--zmq" not in line
    assert victim.read_text() == "precious\n"


def test_the_proxy_refuses_to_bind_over_a_file_too(tmp_path):
    victim = tmp_path / "notes.txt"
    victim.write_text("precious\n")
    proc = subprocess.run([str(PHASEWATCH), "proxy", "--connect", "tcp://127.0.0.1:1",
                           "--bind", f"ipc://{victim}"], capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 2 and "not a socket" in proc.stderr, proc.stderr
    assert victim.read_text() == "precious\n"


def test_an_ipc_endpoint_on_a_socket_left_behind_is_bound(tmp_path):
    path = tmp_path / "events.sock"
    left = socket.socket(socket.AF_UNIX)
    left.bind(str(path))
    left.close()                            # a daemon's socket after it was killed
    example = Path(__file__).resolve().parents[1] / "examples" / "synthetic-skylake.csv"
    with Daemon("--replay", example, "--replay-speed", "0", zmq=f"ipc://{path}") as d:
        d.wait_ready()
        assert path.is_socket()


def test_an_ipc_endpoint_a_running_daemon_serves_on_is_not_taken_over(tmp_path):
    """libzmq unlinks a socket before it binds: a second daemon (or a proxy)
    given the first one's ipc path took it over, and the first one's
    subscribers could no longer reach it."""
    path = tmp_path / "events.sock"
    example = Path(__file__).resolve().parents[1] / "examples" / "synthetic-skylake.csv"
    with Daemon("--replay", example, "--replay-speed", "0", zmq=f"ipc://{path}") as first:
        first.wait_ready()
        bound = os.lstat(path).st_ino
        line = refused("--replay", example, "--zmq", f"ipc://{path}",
                       "--metrics", f"127.0.0.1:{free_port()}")
        assert "another process is serving" in line and str(path) in line, line
        proxy = subprocess.run([str(PHASEWATCH), "proxy", "--connect", "tcp://127.0.0.1:1",
                                "--bind", f"ipc://{path}"], capture_output=True, text=True,
                               timeout=60)
        assert proxy.returncode == 2 and "another process is serving" in proxy.stderr, \
            proxy.stderr
        assert os.lstat(path).st_ino == bound and first.proc.poll() is None


def test_a_cpu_the_host_lacks_is_named_with_the_ones_it_has(tmp_path):
    path = tmp_path / "c.toml"
    path.write_text("[targets]\ncpus = [8191]\n")
    line = refused("--config", path)
    online = Path("/sys/devices/system/cpu/online").read_text().strip()
    assert "CPU 8191" in line and online in line, line
