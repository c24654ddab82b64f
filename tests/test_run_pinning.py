"""``run`` pins CMD to one CPU only while CMD runs one thread at a time: a
command with two busy threads is unpinned at once, so that pinning never
halves its speed; a single-threaded one stays pinned."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

BIN = Path(sys.executable).parent / "phasewatch"
ALLOWED = set(os.sched_getaffinity(0))

pytestmark = pytest.mark.skipif(len(ALLOWED) < 2, reason="needs two CPUs to pin and unpin")


def affinity_over_time(abab, *args, watch_s: float = 2.0) -> tuple[list[set[int]], str]:
    """The CPUs each thread of the command may use, sampled until ``watch_s``
    after it started (the union over its threads, at the last look), and
    the agent's stderr."""
    agent = subprocess.Popen([str(BIN), "run", "--", str(abab), *args],
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    seen: list[set[int]] = []
    try:
        deadline = time.monotonic() + 60
        command = None
        while command is None and time.monotonic() < deadline and agent.poll() is None:
            command = next((c for c in psutil.Process(agent.pid).children()
                            if c.name() == "abab"), None)
            time.sleep(0.02)
        assert command is not None, "the command did not start"
        started = time.monotonic()
        while time.monotonic() - started < watch_s:
            try:
                seen.append({cpu for t in command.threads()
                             for cpu in os.sched_getaffinity(t.id)})
            except (psutil.NoSuchProcess, ProcessLookupError):
                break
            time.sleep(0.1)
        _, err = agent.communicate(timeout=120)
    finally:
        agent.kill()
    assert agent.returncode == 0, err
    return seen, err


def test_two_busy_threads_are_unpinned(abab):
    seen, err = affinity_over_time(abab, "1", "--threads", "2")
    assert seen and seen[-1] == ALLOWED, seen
    assert "no longer pinned" in err


def test_one_thread_stays_pinned(abab):
    seen, err = affinity_over_time(abab, "1")
    assert seen and all(len(cpus) == 1 for cpus in seen), seen
    assert "no longer pinned" not in err
