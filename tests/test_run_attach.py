"""``phasewatch run --pid PID`` attaches to a running process, as perf's
``-p``: it watches until the process ends, or until Ctrl-C, which ends the
watch and leaves the process running."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil

from phasewatch.live import attach

BIN = Path(sys.executable).parent / "phasewatch"
SPIN = "import time\nend = time.monotonic() + 60\nwhile time.monotonic() < end: pass\n"


def test_attach_watches_until_the_process_ends(abab, tmp_path):
    target = subprocess.Popen([str(abab), "1"], stdout=subprocess.DEVNULL)
    try:
        time.sleep(0.2)
        summary = tmp_path / "s.json"
        proc = subprocess.run([str(BIN), "run", "--pid", str(target.pid), "--json", str(summary)],
                              capture_output=True, text=True, timeout=120)
        assert proc.returncode == 0, proc.stderr
        assert target.poll() is not None            # it returned when abab ended
    finally:
        target.kill()
        target.wait()
    result = json.loads(summary.read_text())
    assert result["command"] == [str(abab), "1"] and not result["interrupted"]
    assert result["samples"] > 1000
    tops = {f["name"] for row in result["phases"] for f in row["top_functions"]}
    assert {"region_a", "region_b"} <= tops


def test_ctrl_c_ends_the_watch_and_leaves_the_process_running(tmp_path):
    target = subprocess.Popen([sys.executable, "-c", SPIN])
    try:
        agent = subprocess.Popen([str(BIN), "run", "--pid", str(target.pid), "--json",
                                  str(tmp_path / "s.json")], stdout=subprocess.PIPE,
                                 stderr=subprocess.PIPE, text=True)
        time.sleep(2.0)
        agent.send_signal(signal.SIGINT)
        _, err = agent.communicate(timeout=30)
        assert agent.returncode == 0, err
        assert target.poll() is None                  # still running: not the agent's to stop
        result = json.loads((tmp_path / "s.json").read_text())
        assert result["interrupted"] and result["samples"] > 200
    finally:
        target.kill()
        target.wait()


def test_a_pid_that_does_not_exist_is_one_line():
    proc = subprocess.run([str(BIN), "run", "--pid", "4194303"], capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 2
    assert proc.stderr.splitlines() == ["phasewatch run: --pid 4194303: no such process "
                                        "(check it with ps -p 4194303)"]


def test_a_pid_and_a_command_contradict():
    proc = subprocess.run([str(BIN), "run", "--pid", "1", "--", "true"], capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 2 and "not both" in proc.stderr


def test_the_executable_is_none_where_it_cannot_be_read(zombie, monkeypatch):
    """A process that has ended (zombie or reaped), a kernel thread, and one
    whose executable may not be read have none, never a traceback."""
    assert attach.executable(os.getpid()) == os.readlink("/proc/self/exe")
    assert attach.executable(zombie.pid) is None
    zombie.wait()
    assert attach.executable(zombie.pid) is None
    if Path("/proc/2/comm").is_file() and Path("/proc/2/comm").read_text() == "kthreadd\n":
        assert attach.executable(2) is None

    class Denied(psutil.Process):
        def exe(self):
            raise psutil.AccessDenied(self.pid)

    monkeypatch.setattr(psutil, "Process", Denied)
    assert attach.executable(os.getpid()) is None
