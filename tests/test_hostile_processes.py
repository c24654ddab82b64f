"""A watched process is followed as a process, not as a number: by pidfd,
from the moment it is started or attached to.  ``run`` ends when the command
itself ends, whatever it left running (a daemon holding its inherited perf
events), and names what it left; SIGINT and SIGTERM always end it; ``run
--pid P`` ends when that process ends, even if another takes the number P at
once.  Each case is the real command with real processes."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

BIN = Path(sys.executable).parent / "phasewatch"
NS_LAST_PID = Path("/proc/sys/kernel/ns_last_pid")


def left_running(stderr: str) -> list[int]:
    """The pids ``run`` says the command left running."""
    said = re.search(r"left \d+ process\(es\) running, no longer watched: (.*)", stderr)
    assert said, stderr
    return [int(pid) for pid in re.findall(r"(\d+) \(", said.group(1))]


def kill_all(pids) -> None:
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def session_of(sid: int) -> list[int]:
    """The processes of session ``sid`` (one the test started)."""
    found = []
    for pid in psutil.pids():
        try:
            if os.getsid(pid) == sid:
                found.append(pid)
        except OSError:
            pass
    return found


def wait_for_perf_events(pid: int, timeout: float = 60.0) -> None:
    """Until process ``pid`` holds perf events: it is watching."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if any("perf_event" in os.readlink(f"/proc/{pid}/fd/{fd}")
                   for fd in os.listdir(f"/proc/{pid}/fd")):
                return
        except OSError:
            pass
        time.sleep(0.05)
    raise AssertionError(f"{pid} opened no perf event within {timeout} s")


# --- a command that daemonizes ---------------------------------------------------------

def test_a_daemonizing_command_ends_the_run_when_it_ends_and_is_named(tmp_path):
    summary = tmp_path / "s.json"
    daemon = "sleep 61.25"
    proc = subprocess.run([str(BIN), "run", "--no-pin", "--json", str(summary), "--", "sh", "-c",
                           f'setsid sh -c "{daemon}" >/dev/null 2>&1 </dev/null & exit 0'],
                          capture_output=True, text=True, timeout=120)
    pids = left_running(proc.stderr) if "left" in proc.stderr else []
    try:
        assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr
        # Still running when run returned: run did not wait for it.
        commands = {pid: " ".join(psutil.Process(pid).cmdline()) for pid in pids}
        assert daemon in commands.values(), (commands, proc.stderr)
        result = json.loads(summary.read_text())
        assert {p["pid"] for p in result["left_running"]} == set(pids)
    finally:
        kill_all(pids)


def test_a_command_that_leaves_nothing_running_names_nothing(tmp_path):
    proc = subprocess.run([str(BIN), "run", "--no-pin", "--", "sh", "-c", "sleep 0.2 & wait"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "no longer watched" not in proc.stderr


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_two_signals_end_run_though_the_command_ignores_them_and_leaves_a_child(tmp_path,
                                                                                  signum):
    ready = tmp_path / "ready"
    # Ignored signals stay ignored in the child: neither ends of its own.
    script = f'trap "" INT TERM; sleep 62.5 & touch {ready}; wait; wait'
    log = tmp_path / "stderr"          # not a pipe: what it left running holds that open
    agent = subprocess.Popen([str(BIN), "run", "--no-pin", "--", "sh", "-c", script],
                             stdout=subprocess.DEVNULL, stderr=log.open("w"),
                             start_new_session=True)
    pids = []
    try:
        deadline = time.monotonic() + 60
        while not ready.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert ready.exists(), "the command did not start"
        agent.send_signal(signum)
        time.sleep(0.5)
        assert agent.poll() is None         # the first is the command's, which ignores it
        agent.send_signal(signum)           # the second kills the command
        agent.wait(timeout=30)
        err = log.read_text()
        pids = left_running(err)
        assert "Traceback" not in err, err
        assert any("62.5" in " ".join(psutil.Process(p).cmdline()) for p in pids), err
    finally:
        if agent.poll() is None:
            agent.kill()
            agent.wait()
        kill_all(pids + session_of(agent.pid))


# --- PID reuse ----------------------------------------------------------------------------

def take_pid(pid: int, tries: int = 200) -> subprocess.Popen:
    """A new process with the number ``pid`` (free now), by setting the
    kernel's last pid just below it."""
    for _ in range(tries):
        NS_LAST_PID.write_text(str(pid - 1))
        proc = subprocess.Popen(["sleep", "63.75"])
        if proc.pid == pid:
            return proc
        proc.kill()
        proc.wait()
    pytest.fail(f"no new process took pid {pid} in {tries} tries")


@pytest.mark.skipif(os.geteuid() != 0, reason="setting ns_last_pid needs root")
def test_run_pid_ends_when_its_process_ends_though_the_number_is_taken_again():
    target = subprocess.Popen(["sleep", "60"])
    agent = subprocess.Popen([str(BIN), "run", "--pid", str(target.pid)],
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    successor = None
    try:
        wait_for_perf_events(agent.pid)
        os.kill(agent.pid, signal.SIGSTOP)      # it looks again only once the number is taken
        target.kill()
        target.wait()
        successor = take_pid(target.pid)
        os.kill(agent.pid, signal.SIGCONT)
        _, err = agent.communicate(timeout=30)
        assert agent.returncode == 0 and "Traceback" not in err, err
        assert successor.poll() is None         # the new process is not the agent's
    finally:
        if agent.poll() is None:
            os.kill(agent.pid, signal.SIGCONT)
            agent.kill()
            agent.wait()
        if successor is not None:
            successor.kill()
            successor.wait()


# --- what run says of a process it may not watch ------------------------------------------

@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("setpriv") is None,
                    reason="needs root and setpriv to become another user")
def test_run_pid_on_another_users_process_never_advises_a_setting_it_already_has(tmp_path):
    target = subprocess.Popen(["sleep", "60"])       # root's
    try:
        proc = subprocess.run(["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups",
                               "env", f"HOME={tmp_path}", str(BIN), "run", "--pid",
                               str(target.pid)], capture_output=True, text=True, timeout=120,
                              cwd="/")
    finally:
        target.kill()
        target.wait()
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    now = int(Path("/proc/sys/kernel/perf_event_paranoid").read_text())
    advised = [int(n) for n in re.findall(r"perf_event_paranoid=(-?\d+)\)", proc.stderr)]
    assert all(n < now for n in advised), (now, proc.stderr)
    assert f"pid {target.pid} is another user's process" in proc.stderr, proc.stderr
