"""A SIGHUP sent while phasewatchd is still starting does not end it.

The ``phasewatchd`` command starts the interpreter with SIGHUP blocked and
the daemon keeps it blocked, taking it with sigwait, so a reload asked for
during the tens of milliseconds Python takes to start waits instead of
ending the process (exit 129).  Each delay is tried several times, from the
moment the launcher has run its first instruction (seen as SIGHUP in the
process's blocked set; before that no program can guard itself, and on a
loaded host the kernel may not have run it for milliseconds) to well after
Python is up; every start must survive, serve, and reload on a later SIGHUP.
"""

from __future__ import annotations

import signal
import time
from pathlib import Path

import pytest

from daemonutil import Daemon, write_trace
from test_daemon_hostile import collect_stderr, wait_for_line

DELAYS_MS = (0, 1, 2, 5, 10, 20, 50)
TRIES = 3
MISSES_ALLOWED = 3


@pytest.fixture(scope="module")
def trace(tmp_path_factory) -> Path:
    return write_trace(tmp_path_factory.mktemp("startup") / "one-cpu.arrow", samples=60_000)


def sighup_state(pid: int) -> str:
    """"blocked" (the launcher ran), "caught" (the daemon's handler is in) or ""."""
    hup = 1 << (signal.SIGHUP - 1)
    with open(f"/proc/{pid}/status") as status:
        masks = dict(line.split(":", 1) for line in status if line.startswith(("SigBlk", "SigCgt")))
    if int(masks["SigBlk"], 16) & hup:
        return "blocked"
    return "caught" if int(masks["SigCgt"], 16) & hup else ""


def wait_for_the_launcher(d: Daemon) -> bool:
    """Wait until SIGHUP is blocked; False if the daemon caught it before we looked."""
    deadline = time.monotonic() + 10
    while (state := sighup_state(d.proc.pid)) != "blocked":
        if state == "caught":
            return False
        assert d.proc.poll() is None and time.monotonic() < deadline, "the launcher never ran"
    return True


def sighup_after(d: Daemon, delay_ms: float) -> bool:
    if not wait_for_the_launcher(d):
        return False
    if delay_ms:
        time.sleep(delay_ms / 1000)
    d.proc.send_signal(signal.SIGHUP)
    return True


@pytest.mark.slow
@pytest.mark.parametrize("delay_ms", DELAYS_MS)
def test_a_sighup_during_start_up_is_survived_and_reloads_come_after(trace, tmp_path, delay_ms):
    config = tmp_path / "phasewatch.toml"
    config.write_text("[detector]\nthreshold = 0.25\n")
    survived = missed = 0
    while survived < TRIES:
        d = Daemon("--config", config, "--replay", trace, "--replay-speed", "1")
        try:
            if not sighup_after(d, delay_ms):
                missed += 1     # this test was off the CPU for all of Python's start-up
                assert missed <= MISSES_ALLOWED, "SIGHUP was never blocked during start-up"
                continue
            lines = collect_stderr(d)
            d.wait_ready()          # raises, with the exit status, if the SIGHUP ended it
            reloads = sum("config reloaded" in line for line in lines)
            d.proc.send_signal(signal.SIGHUP)
            deadline = time.monotonic() + 30
            while sum("config reloaded" in line for line in lines) <= reloads:
                assert time.monotonic() < deadline, f"no reload after a SIGHUP: {lines}"
                assert d.proc.poll() is None, lines
                time.sleep(0.05)
            wait_for_line(d, lines, "watching")
            assert d.proc.poll() is None
            code = lines.terminate()
        finally:
            if d.proc.poll() is None:
                d.proc.kill()
                d.proc.wait()
        assert code == 0 and not any("Traceback" in line for line in lines), lines
        survived += 1


def test_importing_the_entry_point_leaves_the_signal_mask_alone():
    """Another program importing the module (the docs, the layer check) does
    not block SIGHUP in itself: its children would inherit it blocked, and a
    SIGHUP would no longer end them."""
    import subprocess
    import sys
    code = ("import signal; import phasewatch.cli.phasewatchd; "
            "print(signal.SIGHUP in signal.pthread_sigmask(signal.SIG_BLOCK, ()))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and out.stdout.strip() == "False", out.stderr
