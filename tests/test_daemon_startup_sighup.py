"""A SIGHUP sent while phasewatchd is still starting does not end it.

The ``phasewatchd`` command starts the interpreter with SIGHUP blocked and
the daemon unblocks it once its handler is in place, so a reload asked for
during the tens of milliseconds Python takes to start waits instead of
ending the process (exit 129).  Each delay is tried several times, from the
moment the launcher has run at all (the caller yields the CPU once after
``Popen`` returns, as any caller that does anything else does) to well after
Python is up; every start must survive, serve, and reload on a later SIGHUP.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest

from daemonutil import Daemon, write_trace
from test_daemon_hostile import collect_stderr, wait_for_line

DELAYS_MS = (0, 1, 2, 5, 10, 20, 50)
TRIES = 3


@pytest.fixture(scope="module")
def trace(tmp_path_factory) -> Path:
    return write_trace(tmp_path_factory.mktemp("startup") / "one-cpu.arrow", samples=60_000)


def sighup_after(d: Daemon, delay_ms: float) -> None:
    if delay_ms:
        time.sleep(delay_ms / 1000)
    else:
        os.sched_yield()        # the launcher's execve completes; nothing of ours runs yet
    d.proc.send_signal(signal.SIGHUP)


@pytest.mark.slow
@pytest.mark.parametrize("delay_ms", DELAYS_MS)
def test_a_sighup_during_start_up_is_survived_and_reloads_come_after(trace, tmp_path, delay_ms):
    config = tmp_path / "phasewatch.toml"
    config.write_text("[detector]\nthreshold = 0.25\n")
    for _ in range(TRIES):
        d = Daemon("--config", config, "--replay", trace, "--replay-speed", "1")
        try:
            sighup_after(d, delay_ms)
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
