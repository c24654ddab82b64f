"""Starting and supervising real child processes (phasewatch.live.child, .command,
.cpu_choice and .signal_catcher)."""

from __future__ import annotations

import os
import pty
import select
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from phasewatch.errors import CommandNotExecutable, CommandNotFound, UserError
from phasewatch.live.child import Child
from phasewatch.live.command import resolve_command
from phasewatch.live.cpu_choice import choose_cpu, cpu_busy_fractions, format_cpu_list, least_loaded
from phasewatch.live.process_tree import thread_ids

# An agent in miniature: starts CMD under supervision with signal forwarding,
# prints how CMD ended and what the agent received, exits with CMD's status.
AGENT = textwrap.dedent("""
    import sys
    from phasewatch.live.child import Child
    child = Child.start(sys.argv[1:], pin=False)
    child.release()
    with child.forward_signals() as forwarder:
        print("watching", flush=True)
        status = child.wait()
    print(f"status={status} received={forwarder.received} forwarded={forwarder.forwarded}",
          flush=True)
    sys.exit(status)
""")

def run_to_end(argv, **kwargs) -> int:
    child = Child.run(argv, **kwargs)
    try:
        return child.wait(timeout=30)
    finally:
        child.close()


# ---------------------------------------------------------------------------
# exit statuses


def test_exit_code_of_the_command_is_returned(abab):
    assert run_to_end([abab, "0", "--exit", "3"]) == 3
    assert run_to_end([abab, "0"]) == 0


def test_death_by_signal_maps_to_128_plus_signal_number():
    assert run_to_end(["sh", "-c", "kill -TERM $$"]) == 128 + signal.SIGTERM
    assert run_to_end(["sh", "-c", "kill -SEGV $$"]) == 128 + signal.SIGSEGV


def test_command_not_found_is_127_with_one_line_message(tmp_path):
    with pytest.raises(CommandNotFound) as excinfo:
        Child.start(["phasewatch-no-such-command"], pin=False)
    assert excinfo.value.exit_code == 127
    message = str(excinfo.value)
    assert "phasewatch-no-such-command" in message and "\n" not in message
    with pytest.raises(CommandNotFound):
        Child.start([tmp_path / "missing"], pin=False)


def test_command_found_but_not_executable_is_126(tmp_path):
    script = tmp_path / "script.sh"
    script.write_text("echo hi\n")
    script.chmod(0o644)
    with pytest.raises(CommandNotExecutable) as excinfo:
        Child.start([script], pin=False)
    assert excinfo.value.exit_code == 126
    with pytest.raises(CommandNotExecutable):
        Child.start([tmp_path], pin=False)


@pytest.mark.parametrize("mode", [0o644, 0o755])
def test_a_fifo_given_as_the_command_is_said_to_be_one(tmp_path, mode):
    """Not "make it executable": chmod +x would not make a FIFO a program."""
    fifo = tmp_path / "F"
    os.mkfifo(fifo, mode)
    with pytest.raises(CommandNotExecutable) as excinfo:
        Child.start([fifo], pin=False)
    assert str(excinfo.value) == f"{fifo}: a FIFO, not a program; give the program's file"
    assert excinfo.value.exit_code == 126


def test_exec_failure_after_release_is_reported_like_a_shell(tmp_path):
    garbage = tmp_path / "garbage"
    garbage.write_bytes(b"\x7fELF not really")
    garbage.chmod(0o755)
    child = Child.start([garbage], pin=False)
    with pytest.raises(CommandNotExecutable):
        child.release()
    assert child.returncode == 126

    bad_interpreter = tmp_path / "bad-interpreter"
    bad_interpreter.write_text("#!/nonexistent/interpreter\n")
    bad_interpreter.chmod(0o755)
    child = Child.start([bad_interpreter], pin=False)
    with pytest.raises(CommandNotFound):
        child.release()
    assert child.returncode == 127


def test_path_lookup_finds_the_first_executable(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    shadowed = tmp_path / "a" / "tool"
    shadowed.write_text("#!/bin/sh\n")
    shadowed.chmod(0o644)
    real = tmp_path / "b" / "tool"
    real.write_text("#!/bin/sh\n")
    real.chmod(0o755)
    env = {"PATH": f"{tmp_path / 'a'}:{tmp_path / 'b'}"}
    assert resolve_command("tool", env) == str(real)
    real.chmod(0o644)
    with pytest.raises(CommandNotExecutable):
        resolve_command("tool", env)


# ---------------------------------------------------------------------------
# stopped before exec


def test_command_does_not_run_before_release(tmp_path):
    marker = tmp_path / "ran"
    child = Child.start(["touch", marker], pin=False)
    try:
        time.sleep(0.2)
        assert not marker.exists()
        assert os.readlink(f"/proc/{child.pid}/exe") == os.readlink("/proc/self/exe")
        child.release()
        assert child.wait(timeout=10) == 0
        assert marker.exists()
    finally:
        child.close()


def test_pid_is_the_same_before_and_after_exec(abab):
    child = Child.start([abab, "2"], pin=False)
    pid = child.pid
    try:
        child.release()
        assert child.pid == pid
        assert Path(os.readlink(f"/proc/{pid}/exe")) == abab
    finally:
        assert child.stop(signal.SIGKILL) == 128 + signal.SIGKILL


def test_abandoned_child_never_runs_the_command(tmp_path):
    marker = tmp_path / "ran"
    child = Child.start(["touch", marker], pin=False)
    status = child.stop()
    assert status == 125
    assert not marker.exists()


# ---------------------------------------------------------------------------
# pinning


def allowed_list(pid: int) -> str:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("Cpus_allowed_list:"):
            return line.split(":", 1)[1].strip()
    raise AssertionError("no Cpus_allowed_list")


def test_pinned_to_the_requested_cpu_before_and_after_exec(abab):
    cpu = max(os.sched_getaffinity(0))
    child = Child.start([abab, "5"], cpu=cpu)
    try:
        assert child.cpu == cpu
        assert os.sched_getaffinity(child.pid) == {cpu}
        child.release()
        assert allowed_list(child.pid) == str(cpu)
    finally:
        child.stop(signal.SIGKILL)


def test_pinned_by_default_to_an_allowed_cpu(abab):
    child = Child.run([abab, "5"])
    try:
        assert child.cpu in os.sched_getaffinity(0)
        assert os.sched_getaffinity(child.pid) == {child.cpu}
    finally:
        child.stop(signal.SIGKILL)


def test_no_pin_keeps_the_agents_affinity(abab):
    child = Child.run([abab, "5"], pin=False)
    try:
        assert child.cpu is None
        assert os.sched_getaffinity(child.pid) == os.sched_getaffinity(0)
    finally:
        child.stop(signal.SIGKILL)


def test_cpu_outside_the_allowed_set_is_a_user_error():
    outside = max(os.sched_getaffinity(0)) + 1
    with pytest.raises(UserError) as excinfo:
        choose_cpu(outside)
    assert f"--cpu {outside}" in str(excinfo.value)
    assert "--no-pin" in str(excinfo.value)


def test_least_loaded_prefers_idle_cpus_and_breaks_ties_away_from_cpu0():
    assert least_loaded({0, 1, 2, 3}, {0: 0.9, 1: 0.1, 2: 0.5, 3: 0.1}) == 3
    assert least_loaded({0, 1, 2}, {0: 0.0, 1: 0.0, 2: 0.7}) == 1
    assert least_loaded({2}, {0: 0.0, 2: 1.0}) == 2
    assert format_cpu_list({0, 1, 2, 5, 7, 8}) == "0-2,5,7-8"


def test_busy_fractions_see_a_cpu_kept_busy(abab):
    """/proc/stat shows the CPU a pinned spinner runs on as fully busy, and the
    default choice is one of the allowed CPUs.  (Which one depends on what else
    this host runs, so the choice itself is checked above, on given loads.)"""
    busy_cpu = max(os.sched_getaffinity(0))
    spinner = Child.run([abab, "10"], cpu=busy_cpu)
    try:
        time.sleep(0.1)
        assert cpu_busy_fractions(0.2)[busy_cpu] >= 0.9
        assert choose_cpu() in os.sched_getaffinity(0)
    finally:
        spinner.stop(signal.SIGKILL)


# ---------------------------------------------------------------------------
# watching and stopping


def test_wait_with_timeout_returns_none_while_running():
    """wait(0.1) returns after its timeout (no sooner), long before the
    command's 30 s are up (a bound that holds however loaded the host)."""
    child = Child.run(["sleep", "30"], pin=False)
    started = time.monotonic()
    assert child.wait(timeout=0.1) is None
    assert child.poll() is None
    assert 0.09 <= time.monotonic() - started < 15
    assert child.stop(signal.SIGTERM, grace=5) == 128 + signal.SIGTERM
    assert child.poll() == 128 + signal.SIGTERM
    quick = Child.run(["true"], pin=False)
    assert quick.wait(timeout=30) == 0 and quick.poll() == 0


def test_threads_are_listed(abab):
    child = Child.run([abab, "3", "--threads", "3"], pin=False)
    try:
        deadline = time.monotonic() + 5
        while len(child.threads()) < 4 and time.monotonic() < deadline:
            time.sleep(0.02)
        tids = child.threads()
        assert len(tids) == 4 and child.pid in tids
    finally:
        child.stop(signal.SIGKILL)
    assert child.threads() == []


def test_a_zombie_lists_its_main_thread_and_a_reaped_process_none(zombie):
    """psutil's errors for a process that has gone read as no threads, never a traceback."""
    assert thread_ids(zombie.pid) == [zombie.pid]
    zombie.wait()
    assert thread_ids(zombie.pid) == []


def test_stop_forwards_then_escalates_to_sigkill():
    child = Child.run(["sleep", "30"], pin=False)
    assert child.stop(signal.SIGTERM, grace=5) == 128 + signal.SIGTERM

    stubborn = Child.run(["sh", "-c", "trap '' TERM; exec sleep 30"], pin=False)
    time.sleep(0.2)  # let the trap be set before signalling
    started = time.monotonic()
    assert stubborn.stop(signal.SIGTERM, grace=0.3) == 128 + signal.SIGKILL
    assert time.monotonic() - started >= 0.3


# ---------------------------------------------------------------------------
# signals to the agent


def start_agent(tmp_path, *cmd) -> subprocess.Popen:
    script = tmp_path / "agent.py"
    script.write_text(AGENT)
    # A new session: no controlling terminal, so signals reach the agent alone.
    return subprocess.Popen([sys.executable, script, *map(str, cmd)], stdout=subprocess.PIPE,
                            text=True, start_new_session=True)


def wait_until_watching(agent: subprocess.Popen) -> None:
    assert agent.stdout.readline() == "watching\n"


def test_sigint_to_the_agent_is_forwarded_and_the_agent_finishes(tmp_path):
    agent = start_agent(tmp_path, "sleep", "30")
    wait_until_watching(agent)
    agent.send_signal(signal.SIGINT)
    out, _ = agent.communicate(timeout=10)
    assert agent.returncode == 128 + signal.SIGINT
    assert out.splitlines()[-1] == "status=130 received=[2] forwarded=[2]"


def test_sigterm_to_the_agent_is_forwarded(tmp_path):
    agent = start_agent(tmp_path, "sleep", "30")
    wait_until_watching(agent)
    agent.send_signal(signal.SIGTERM)
    out, _ = agent.communicate(timeout=10)
    assert agent.returncode == 128 + signal.SIGTERM
    assert out.splitlines()[-1] == "status=143 received=[15] forwarded=[15]"


def test_second_signal_escalates_to_sigkill(tmp_path):
    agent = start_agent(tmp_path, "sh", "-c", "trap '' INT; exec sleep 30")
    wait_until_watching(agent)
    time.sleep(0.2)
    agent.send_signal(signal.SIGINT)
    time.sleep(0.3)
    assert agent.poll() is None  # the command ignores SIGINT, so it runs on
    agent.send_signal(signal.SIGINT)
    out, _ = agent.communicate(timeout=10)
    assert agent.returncode == 128 + signal.SIGKILL
    assert out.splitlines()[-1] == "status=137 received=[2, 2] forwarded=[2, 9]"


def test_ctrl_c_on_a_terminal_reaches_the_command_once(tmp_path):
    """The command shares the terminal's foreground group with the agent; the
    terminal delivers Ctrl-C to both, and the agent must not add a second one."""
    (tmp_path / "agent.py").write_text(AGENT)
    pid, master = pty.fork()  # the agent gets the new terminal as its controlling one
    if pid == 0:
        os.execv(sys.executable, [sys.executable, str(tmp_path / "agent.py"), "sleep", "30"])
    output = b""
    try:
        output = read_until(master, b"watching")
        os.write(master, b"\x03")  # Ctrl-C, as typed
        output += read_until(master, b"]", after=b"forwarded=")
    finally:
        _, wait_status = os.waitpid(pid, 0)
        os.close(master)
    assert b"status=130 received=[2] forwarded=[]" in output, output
    assert os.waitstatus_to_exitcode(wait_status) == 130


def read_until(fd: int, token: bytes, after: bytes = b"", timeout: float = 10) -> bytes:
    """Read from ``fd`` until ``token`` appears (after ``after``, if given)."""
    data = b""
    deadline = time.monotonic() + timeout
    while after not in data or token not in data[data.index(after) + len(after):]:
        remaining = deadline - time.monotonic()
        if remaining <= 0 or not select.select([fd], [], [], remaining)[0]:
            raise AssertionError(f"no {token!r} in {data!r}")
        try:
            data += os.read(fd, 1024)
        except OSError:  # EIO: the terminal's other end has closed
            raise AssertionError(f"no {token!r} in {data!r}") from None
    return data


def test_command_gets_default_sigpipe_although_python_ignores_it():
    # If SIGPIPE stayed ignored, the shell would survive the kill and exit 3.
    assert run_to_end(["sh", "-c", "kill -PIPE $$; exit 3"], pin=False) == 128 + signal.SIGPIPE


def test_start_from_a_thread_other_than_main():
    statuses = []
    worker = threading.Thread(
        target=lambda: statuses.append(run_to_end(["sh", "-c", "exit 4"], pin=False)))
    worker.start()
    worker.join(timeout=30)
    assert statuses == [4]
