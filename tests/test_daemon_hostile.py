"""phasewatchd under hostile input: configs swapped for garbage before a
SIGHUP, SIGHUPs from its first moments, a full or vanished recording folder,
taken ports and broken certificates, a thousand scrapes at once, and a local
client flooding the event socket with subscriptions.  Every case either
keeps the daemon running with its old state, or ends it with one line and
exit status 2; the memory case holds it under a fixed bound."""

from __future__ import annotations

import os
import shutil
import signal
import statistics
import socket
import struct
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from daemonutil import Daemon, free_port, refused, write_trace
from phasewatch.daemon.publish import MAX_MESSAGE_BYTES
from phasewatch.daemon.subguard import PEER_BYTES, SAY_EVERY_S
from phasewatch.formats.trace import TraceReader


@pytest.fixture(scope="module")
def trace(tmp_path_factory) -> Path:
    return write_trace(tmp_path_factory.mktemp("hostile") / "one-cpu.arrow", samples=60_000)


def rss_bytes(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


def wait_for_line(d: Daemon, lines: list[str], text: str, timeout: float = 30.0) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = [line for line in lines if text in line]
        if found:
            return found[-1]
        time.sleep(0.05)
    raise AssertionError(f"phasewatchd never said {text!r}: {lines}")


class StderrLines(list):
    """The daemon's standard error, line by line, as it comes."""

    def __init__(self, d: Daemon):
        super().__init__()
        self.d = d
        self.reader = threading.Thread(target=lambda: self.extend(
            line.rstrip("\n") for line in iter(d.proc.stderr.readline, "")), daemon=True)
        self.reader.start()

    def terminate(self, timeout: float = 10.0) -> int:
        """SIGTERM; the exit status once every line is read."""
        self.d.proc.terminate()
        code = self.d.proc.wait(timeout)
        self.reader.join(timeout)
        return code


def collect_stderr(d: Daemon) -> StderrLines:
    return StderrLines(d)


# --- start-up: values out of range --------------------------------------------------

@pytest.mark.parametrize("speed", ["nan", "inf", "1e-300", "-1"])
def test_a_replay_speed_out_of_range_is_one_line(trace, speed):
    line = refused("--replay", trace, "--replay-speed", speed,
                            "--metrics", f"127.0.0.1:{free_port()}")
    assert line.startswith(f"phasewatchd: --replay-speed {float(speed)}: give 0")


def test_a_config_that_is_not_utf8_is_one_line_at_start(trace, tmp_path):
    config = tmp_path / "latin1.toml"
    config.write_bytes(b"# r\xe9glages\n[detector]\nthreshold = 0.2\n")
    line = refused("--config", config, "--replay", trace)
    assert "not UTF-8" in line and str(config) in line


def test_a_taken_metrics_port_is_one_line(trace):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        line = refused("--replay", trace, "--metrics", f"127.0.0.1:{port}",
                                "--zmq", f"tcp://127.0.0.1:{free_port()}")
    assert line == (f"phasewatchd: --metrics 127.0.0.1:{port}: cannot listen: "
                    f"Address already in use: give a free port")


@pytest.mark.parametrize("content", [None, b"not a certificate\n"])
def test_a_missing_or_garbage_certificate_is_one_line(trace, tmp_path, content):
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    if content is not None:
        cert.write_bytes(content)
        key.write_bytes(content)
    config = tmp_path / "tls.toml"
    config.write_text(f'[metrics]\ncertfile = "{cert}"\nkeyfile = "{key}"\n')
    line = refused("--config", config, "--replay", trace,
                            "--metrics", f"127.0.0.1:{free_port()}",
                            "--zmq", f"tcp://127.0.0.1:{free_port()}")
    assert line.startswith(f"phasewatchd: [metrics] certfile {cert}") and "cannot use it" in line


# --- reload ---------------------------------------------------------------------------

def hostile_config(kind: str, path: Path) -> None:
    path.unlink()
    if kind == "latin1":
        path.write_bytes(b"# r\xe9glages\n[detector]\nthreshold = 0.2\n")
    elif kind == "nested":
        path.write_text("x = " + "[" * 100_000 + "]" * 100_000 + "\n")
    elif kind == "fifo":
        os.mkfifo(path)
    elif kind == "folder":
        path.mkdir()
    elif kind == "huge":
        path.write_text("# " + "x" * (2 << 20) + "\n")
    elif kind == "out of range":
        path.write_text("[detector]\nmax_phases = 100000000000000000000000\n")


RELOAD_CASES = ["latin1", "nested", "fifo", "folder", "huge", "out of range"]


@pytest.mark.parametrize("kind", RELOAD_CASES)
def test_a_hostile_config_on_sighup_keeps_the_old_one(trace, tmp_path, kind):
    config = tmp_path / "phasewatch.toml"
    config.write_text("[detector]\nthreshold = 0.25\n")
    with Daemon("--config", config, "--replay", trace) as d:
        lines = collect_stderr(d)
        d.wait_ready()
        hostile_config(kind, config)
        d.proc.send_signal(signal.SIGHUP)
        line = wait_for_line(d, lines, "reload refused")
        assert str(config) in line and "Traceback" not in "".join(lines)
        assert d.proc.poll() is None
        d.metrics_text()                    # still serving
        # and it still stops on SIGTERM, promptly (a FIFO must not block it)
        started = time.monotonic()
        assert lines.terminate() == 0 and time.monotonic() - started < 5


def test_sighups_from_the_first_moment_do_not_end_it(trace):
    """A storm of SIGHUPs from the moment the process holds one off (blocked
    or handled) until it serves metrics: it starts, and serves."""
    d = Daemon("--replay", trace)
    try:
        mask = 1 << (signal.SIGHUP - 1)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            with open(f"/proc/{d.proc.pid}/status") as f:
                status = dict(line.split(":", 1) for line in f if ":" in line)
            if any(int(status[k], 16) & mask for k in ("SigBlk", "SigCgt", "SigIgn")):
                break
            time.sleep(0.001)
        sent = 0
        while d.proc.poll() is None and sent < 200_000:
            for _ in range(100):
                d.proc.send_signal(signal.SIGHUP)
            sent += 100
            try:
                d.metrics_text()
                break
            except OSError:
                pass
        assert d.proc.poll() is None, d.proc.stderr.read()
        assert sent > 500
        d.wait_ready()
    finally:
        code, err = d.stop()
    assert code == 0 and "Traceback" not in err, err


# --- recording ----------------------------------------------------------------------

def test_a_full_disk_keeps_the_complete_batches_and_says_so(trace, small_filesystem):
    with Daemon("--replay", trace, "--replay-speed", "2", "--record", small_filesystem) as d:
        lines = collect_stderr(d)
        d.wait_ready()
        said = wait_for_line(d, lines, "it stops here", timeout=60)
        assert "No space left on device" in said
        code = lines.terminate()
    assert code == 2
    last = lines[-1]
    assert "kept the" in last and "samples written before" in last, lines
    kept, = small_filesystem.glob("phasewatchd-*.arrow")
    reader = TraceReader(str(kept), warn=lambda msg: None)
    samples = sum(len(b) for b in reader.batches())
    assert samples > 0 and f"kept the {samples:,} samples" in last
    assert not list(small_filesystem.glob(".*.partial"))


def test_a_recording_folder_removed_mid_run_is_said_and_the_status_is_2(trace, tmp_path):
    folder = tmp_path / "rec"
    folder.mkdir()
    with Daemon("--replay", trace, "--record", folder) as d:
        lines = collect_stderr(d)
        d.wait_ready()
        time.sleep(1.5)
        shutil.rmtree(folder)
        code = lines.terminate()
    assert code == 2
    assert "cannot write" in lines[-1] and str(folder) in lines[-1], lines
    assert "Traceback" not in "".join(lines)


def test_two_daemons_started_in_one_second_record_to_two_files(trace, tmp_path):
    daemons = [Daemon("--replay", trace, "--replay-speed", "0", "--record", tmp_path)
               for _ in range(2)]
    for d in daemons:
        d.wait_ready()
    for d in daemons:
        code, err = d.stop()
        assert code == 0, err
    assert len(list(tmp_path.glob("phasewatchd-*.arrow"))) == 2


# --- sockets --------------------------------------------------------------------------

def test_a_thousand_concurrent_scrapes_are_all_answered(trace):
    with Daemon("--replay", trace) as d:
        d.wait_ready()
        conns = []
        for _ in range(1000):
            s = socket.create_connection(("127.0.0.1", d.metrics_port), timeout=30)
            conns.append(s)
        for s in conns:
            s.sendall(b"GET /metrics HTTP/1.0\r\nHost: x\r\n\r\n")
        answered = 0
        for s in conns:
            head = s.recv(12)
            answered += head.startswith(b"HTTP/1.0 200") or head.startswith(b"HTTP/1.1 200")
            s.close()
        assert answered == 1000


class RawSubscriber:
    """A ZeroMQ SUB peer spoken by hand (ZMTP 3.0, NULL security), so that
    the test, not a library, decides what goes on the wire."""

    def __init__(self, port: int, timeout: float = 10.0):
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
        greeting = b"\xff" + b"\0" * 7 + b"\x01\x7f" + bytes([3, 0]) + b"NULL".ljust(20, b"\0")
        self.sock.sendall(greeting + b"\0" * 32)     # as-server, filler
        ready = b"\x05READY" + b"\x0bSocket-Type" + struct.pack(">I", 3) + b"SUB"
        self.sock.sendall(b"\x04" + bytes([len(ready)]) + ready)

    def send_frame(self, body: bytes) -> None:
        head = (b"\x00" + bytes([len(body)]) if len(body) < 256
                else b"\x02" + struct.pack(">Q", len(body)))
        self.sock.sendall(head + body)

    def close(self) -> None:
        self.sock.close()


#: The flood's length, and the bound on the daemon's growth under it.  One
#: connection holds at most its 16 KiB of subscriptions, 8 messages and what
#: the kernel buffered for it (about 2 MB of topics at 35 bytes a byte); the
#: rest is the churn of connections cut and made again (up to 100 a second
#: here), freed and handed back four times a second.  45-238 MB were seen,
#: more the faster the client reconnects; the memory that stays is the check
#: that nothing leaks.
FLOOD_S = 30
FLOOD_BOUND = 320 * 2**20
#: Memory that may stay once the flood is over, within AFTER_S (the guard
#: hands freed memory back for a few seconds after the last connection; on a
#: loaded host that takes longer).
LEFT_AFTER = 96 * 2**20
AFTER_S = 20.0
#: The most the second half of the flood's resident memory may sit above the
#: first's, median against median: it must flatten, not climb.  Medians, not
#: peaks: peaks come and go with the connections' churn (on loaded CI hosts
#: one run's second half peaked 67 MB above its first, another's 128.5 MB,
#: and each came back within LEFT_AFTER after).
SECOND_HALF_ABOVE_FIRST = 64 * 2**20


def test_a_subscription_flood_holds_memory_under_a_bound(trace):
    """Four 1 MB subscriptions, then 30 s of distinct subscriptions as long as
    a message may be, reconnecting whenever cut off or stalled: the daemon's
    resident memory grows by less than FLOOD_BOUND, not much more in the second
    half than in the first, comes back down once the flood ends, and it serves on
    (before, it grew by 110-313 MB in 10 s and kept it; without the guard by
    850 MB in 2.5 s)."""
    with Daemon("--replay", trace) as d:
        lines = collect_stderr(d)
        d.wait_ready()
        time.sleep(1.0)
        before = rss_bytes(d.proc.pid)
        for _ in range(4):
            sub = RawSubscriber(d.zmq_port)
            try:
                sub.send_frame(b"\x01" + os.urandom(1 << 20))
            except OSError:
                pass                                # cut off mid-frame: as meant
            sub.close()
        sent, cut, halves = 0, 0, ([before], [before])
        started = time.monotonic()
        sub = RawSubscriber(d.zmq_port, timeout=0.5)
        while (elapsed := time.monotonic() - started) < FLOOD_S:
            topic = b"%012d" % sent + b"t" * (MAX_MESSAGE_BYTES - 13)
            try:
                if sub is None:                     # cut off even as it greeted: again
                    sub = RawSubscriber(d.zmq_port, timeout=0.5)
                sub.send_frame(b"\x01" + topic)
                sent += 1
            except OSError:                         # cut off or stalled: come back
                cut += 1
                if sub is not None:
                    sub.close()
                sub = None
            if sent % 128 == 0:
                half = int(elapsed * 2 >= FLOOD_S)
                halves[half].append(rss_bytes(d.proc.pid))
        if sub is not None:
            sub.close()
        ended = time.monotonic()
        while (after := rss_bytes(d.proc.pid)) - before >= LEFT_AFTER \
                and time.monotonic() - ended < AFTER_S:
            time.sleep(1.0)
        peak = max(*halves[0], *halves[1], after)
        first, second = (statistics.median(h) for h in halves)
        print(f"subscription flood: {sent} subscriptions of {MAX_MESSAGE_BYTES} bytes over "
              f"{cut + 1} connections in {FLOOD_S} s; resident memory {before / 2**20:.0f} MB -> "
              f"peak {peak / 2**20:.0f} MB; median {first / 2**20:.0f} MB in the first half, "
              f"{second / 2**20:.0f} MB in the second (peaks {max(halves[0]) / 2**20:.0f} and "
              f"{max(halves[1]) / 2**20:.0f} MB), {after / 2**20:.0f} MB "
              f"{time.monotonic() - ended:.0f} s after")
        assert sent * MAX_MESSAGE_BYTES > 20 * PEER_BYTES and cut > 10
        assert peak - before < FLOOD_BOUND
        assert second - first < SECOND_HALF_ABOVE_FIRST
        assert after - before < LEFT_AFTER
        assert any("subscriptions: its connection was closed" in line for line in lines), lines
        closed = [line for line in lines if "closed" in line]
        assert any("more connections closed" in line for line in closed), closed
        assert len(closed) <= 2 * (FLOOD_S // SAY_EVERY_S + 2), closed     # said, not flooded
        assert d.proc.poll() is None
        d.metrics_text()


# --- a recording of a run that started from its catalogue's phases ------------------

def test_a_replayed_recording_with_known_phases_is_served_by_the_daemons_own_ids(tmp_path):
    """A recording of a program's second run keeps the phases the run started
    from (``known_phases``); the daemon, which seeds each target from its own
    catalogue, seeded the replayed target from both and died of a
    ValueError."""
    phasewatch = Path(sys.executable).parent / "phasewatch"
    for name in ("first.arrow", "second.arrow"):
        done = subprocess.run([str(phasewatch), "run", "-q", "--interval-ms", "20", "--catalog",
                               str(tmp_path / "c.sqlite"), "--record", str(tmp_path / name), "--",
                               sys.executable, "-c", "sum(i * i for i in range(2_000_000))"],
                              capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr
    assert "known_phases" in TraceReader(str(tmp_path / "second.arrow")).metadata
    for catalog in (["--no-catalog"], ["--catalog", tmp_path / "daemon.sqlite"]):
        with Daemon("--replay", tmp_path / "second.arrow", "--replay-speed", "0", *catalog) as d:
            lines = collect_stderr(d)
            d.wait_ready()
            wait_for_line(d, lines, "the source ended")
            assert d.metric("phasewatch_intervals_total") > 0
            code = lines.terminate()
        assert code == 0, lines
        assert "Traceback" not in "\n".join(lines)


# --- a NUL character in a config's text ---------------------------------------------

NUL_KEYS = [("source", "trace"), ("source", "msr_path"), ("source", "powercap_root"),
            ("targets", "commands"), ("targets", "cgroups"), ("metrics", "certfile"),
            ("catalog", "path"), ("zmq", "endpoint"), ("zmq", "curve_secret_key"),
            ("record", "dir")]


@pytest.mark.parametrize("table,key", NUL_KEYS)
def test_a_nul_character_in_a_configs_text_is_one_line_naming_the_key(tmp_path, table, key):
    """TOML's \\u0000 is a string's NUL: a path or endpoint holding one
    reached the system calls (a cgroup, a ZeroMQ bind) and the daemon died of
    a ValueError, or its line showed the raw byte."""
    value = '"/tmp/a\\u0000b"'
    text = f"[{table}]\n{key} = {f'[{value}]' if table == 'targets' else value}\n"
    if key == "certfile":
        text += 'keyfile = "k.pem"\n'
    config = tmp_path / "nul.toml"
    config.write_text(text)
    line = refused("--config", config, "--metrics", f"127.0.0.1:{free_port()}",
                   "--zmq", f"tcp://127.0.0.1:{free_port()}", timeout=60)
    assert f"[{table}] {key} = " in line and "NUL" in line and "\x00" not in line, line
