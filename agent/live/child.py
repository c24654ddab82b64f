"""Starting and supervising the watched command.

How the command is started
--------------------------
``Child.start`` forks and pins the new process to the chosen CPU (from the
parent, so the affinity is in force when ``start`` returns); the new process
restores default signal handling, then blocks reading a *gate* pipe.  Its pid is known
and stable at that point, so perf counters (with ``enable_on_exec``) and other
per-task probes can be attached to it before the command runs a single
instruction.  ``release()`` writes to the gate, the process calls ``execve``,
and ``release()`` returns only once the exec has happened (or raises if it
failed): a close-on-exec error pipe reports either EOF (exec succeeded) or the
``errno`` of the failed exec, which is how ``subprocess`` does it too.  If the
agent dies before releasing, the gate reads EOF and the process exits without
running the command.

The command never outlives the agent: before exec it asks the kernel
(``prctl(PR_SET_PDEATHSIG, SIGKILL)``) to kill it when the agent's thread that
started it ends, so an agent killed by any signal, SIGKILL included, takes
the command with it.  Start it from the main thread, which lives as long as
the agent.

The command stays in the agent's process group, so on a terminal it behaves as
if started directly: it can read the terminal, and Ctrl-C / Ctrl-Z reach it.
Because a terminal's Ctrl-C already reaches the command, ``SignalForwarder``
does not send it a second SIGINT in that case; signals sent to the agent alone
(``kill -INT``/``kill -TERM`` of its pid) are forwarded.  A repeated signal
escalates to SIGKILL.

Between fork and exec the new process runs only ``os``-level calls, so it may
be started from any thread; still, start it before the agent's own threads
hold locks that matter (as with any fork of a threaded program).

Exit statuses follow the shell: the command's own exit code, 128 + N when
signal N killed it, 127 for a command that cannot be found, 126 for one found
but not executable.
"""

from __future__ import annotations

import ctypes
import errno
import os
import select
import signal
import threading
import time
from pathlib import Path
from typing import Iterable, Mapping, Sequence

from ..errors import CommandNotExecutable, CommandNotFound, UserError

#: Python ignores these at start-up, and an ignored signal stays ignored across
#: exec; the command must get the defaults, as from a shell.
_RESET_TO_DEFAULT = (signal.SIGPIPE, signal.SIGXFSZ)

_GATE_OPEN = b"x"

#: prctl(2) option: the signal a process gets when its parent thread ends.
PR_SET_PDEATHSIG = 1
_LIBC = ctypes.CDLL(None, use_errno=True)   # loaded before any fork


# ----------------------------------------------------------------------------
# exit statuses


def exit_status(wait_status: int) -> int:
    """The shell's exit status for a ``waitpid`` status: the exit code, or
    128 + N for death by signal N."""
    code = os.waitstatus_to_exitcode(wait_status)
    return code if code >= 0 else 128 - code


# ----------------------------------------------------------------------------
# finding the command


def resolve_command(name: str, env: Mapping[str, str] | None = None) -> str:
    """The path ``name`` runs, looked up in PATH as a shell would.

    Raises ``CommandNotFound`` (exit 127) or ``CommandNotExecutable`` (126)."""
    if not name:
        raise CommandNotFound("no command given; put it after '--', e.g. phasewatch run -- ./prog")
    if "/" in name:
        return _check_executable(name)
    search_path = (env if env is not None else os.environ).get("PATH", os.defpath)
    not_executable = None
    for directory in search_path.split(os.pathsep):
        candidate = os.path.join(directory or ".", name)
        if os.path.isfile(candidate):
            if os.access(candidate, os.X_OK):
                return candidate
            not_executable = not_executable or candidate
    if not_executable:
        return _check_executable(not_executable)
    raise CommandNotFound(f"{name}: command not found; check the name or PATH, or give its path")


def _check_executable(path: str) -> str:
    if not os.path.exists(path):
        raise CommandNotFound(f"{path}: no such file; check the path")
    if os.path.isdir(path):
        raise CommandNotExecutable(f"{path}: is a directory; give the program inside it")
    if not os.access(path, os.X_OK):
        raise CommandNotExecutable(f"{path}: permission denied; make it executable (chmod +x)")
    return path


def _exec_error(path: str, err: int) -> UserError:
    if err == errno.ENOENT:  # the file exists, so its interpreter or loader does not
        return CommandNotFound(
            f"{path}: cannot execute: its interpreter or loader was not found; check its #! line")
    if err == errno.ENOEXEC:
        return CommandNotExecutable(
            f"{path}: cannot execute: not a program for this machine, nor a script with a #! line")
    return CommandNotExecutable(f"{path}: cannot execute: {os.strerror(err)}")


# ----------------------------------------------------------------------------
# choosing the CPU


def allowed_cpus() -> set[int]:
    """The CPUs this process may run on."""
    return set(os.sched_getaffinity(0))


def cpu_busy_ticks() -> dict[int, tuple[int, int]]:
    """Per CPU, (busy, total) clock ticks since boot, from /proc/stat."""
    ticks = {}
    for line in Path("/proc/stat").read_text().splitlines():
        if line.startswith("cpu") and line[3:4].isdigit():
            name, *values = line.split()
            numbers = [int(v) for v in values]
            idle = numbers[3] + (numbers[4] if len(numbers) > 4 else 0)  # idle + iowait
            total = sum(numbers[:8])  # guest time is already counted in user
            ticks[int(name[3:])] = (total - idle, total)
    return ticks


def cpu_busy_fractions(window_s: float = 0.1) -> dict[int, float]:
    """Per CPU, the fraction of the last ``window_s`` seconds it was busy."""
    before = cpu_busy_ticks()
    time.sleep(window_s)
    after = cpu_busy_ticks()
    fractions = {}
    for cpu, (busy1, total1) in after.items():
        busy0, total0 = before.get(cpu, (busy1, total1))
        fractions[cpu] = (busy1 - busy0) / (total1 - total0) if total1 > total0 else 0.0
    return fractions


def least_loaded(allowed: Iterable[int], busy: Mapping[int, float]) -> int:
    """The allowed CPU with the lowest busy fraction; ties go to the highest
    number, away from CPU 0, which usually takes most interrupts."""
    candidates = sorted(allowed)
    if not candidates:
        raise UserError("this process may run on no CPU; check its affinity (taskset -p)")
    return min(candidates, key=lambda cpu: (busy.get(cpu, 0.0), -cpu))


def choose_cpu(requested: int | None = None) -> int:
    """The CPU to pin the command to: ``requested`` (``--cpu N``) if this
    process may use it, else the least loaded allowed CPU."""
    allowed = allowed_cpus()
    if requested is None:
        return least_loaded(allowed, cpu_busy_fractions())
    if requested not in allowed:
        raise UserError(
            f"--cpu {requested}: not a CPU this process may use ({format_cpu_list(allowed)}); "
            "pick one of those, or use --no-pin")
    return requested


def format_cpu_list(cpus: Iterable[int]) -> str:
    """``{0,1,2,5}`` -> ``"0-2,5"``, the kernel's cpulist notation."""
    parts, run = [], []
    for cpu in sorted(cpus):
        if run and cpu != run[-1] + 1:
            parts.append(_cpu_run(run))
            run = []
        run.append(cpu)
    if run:
        parts.append(_cpu_run(run))
    return ",".join(parts)


def _cpu_run(run: list[int]) -> str:
    return str(run[0]) if len(run) == 1 else f"{run[0]}-{run[-1]}"


# ----------------------------------------------------------------------------
# threads


def thread_ids(pid: int) -> list[int]:
    """The thread ids of process ``pid``, ascending; empty once it has gone."""
    try:
        return sorted(int(tid) for tid in os.listdir(f"/proc/{pid}/task"))
    except (FileNotFoundError, ProcessLookupError):
        return []


# ----------------------------------------------------------------------------
# the child


class Child:
    """One started command.  Create with ``Child.start``."""

    def __init__(self, pid: int, argv: list[str], path: str, cpu: int | None,
                 gate_w: int, err_r: int):
        self.pid = pid
        self.argv = argv
        self.path = path
        self.cpu = cpu
        self.returncode: int | None = None
        self.started_ns: int | None = None
        self.ended_ns: int | None = None
        self._gate_w = gate_w
        self._err_r = err_r
        # Re-entrant: a signal handler (SignalForwarder) may run in the main
        # thread while that thread is inside _reap.
        self._reap_lock = threading.RLock()
        self._pidfd = _pidfd_open(pid)

    # -- starting ------------------------------------------------------------

    @classmethod
    def start(cls, argv: Sequence[str], *, cpu: int | None = None, pin: bool = True,
              env: Mapping[str, str] | None = None, cwd: str | None = None,
              stdio: Mapping[int, int] | None = None) -> "Child":
        """Fork a process for ``argv``, pinned to ``cpu`` (or the least loaded
        allowed CPU) unless ``pin`` is false, and stop it just before exec.
        ``stdio`` gives descriptors to put in place of some of its 0, 1, 2.

        The returned child's ``pid`` is valid now; call ``release()`` to run it.
        Raises ``CommandNotFound`` / ``CommandNotExecutable`` before forking
        when the command cannot be run."""
        argv = [os.fspath(a) for a in argv]
        env = dict(os.environ if env is None else env)
        path = resolve_command(argv[0] if argv else "", env)
        cpu = choose_cpu(cpu) if pin else None
        gate_r, gate_w = os.pipe()
        err_r, err_w = os.pipe()
        parent = os.getpid()
        pid = os.fork()
        if pid == 0:  # the child: never returns
            _child_after_fork(path, argv, env, cwd, gate_r, gate_w, err_r, err_w, parent,
                              dict(stdio or {}))
        os.close(gate_r)
        os.close(err_w)
        if cpu is not None:  # set from here, so it is in force when start() returns
            os.sched_setaffinity(pid, {cpu})
        return cls(pid, argv, path, cpu, gate_w, err_r)

    @classmethod
    def run(cls, argv: Sequence[str], **kwargs) -> "Child":
        """``start`` and ``release`` at once, for when nothing must attach first."""
        child = cls.start(argv, **kwargs)
        child.release()
        return child

    def release(self) -> None:
        """Let the stopped child exec the command; return once it has.

        Raises ``CommandNotFound`` (127) or ``CommandNotExecutable`` (126) if
        the exec failed; the child has then been reaped with that status."""
        if self._gate_w < 0:
            return
        try:
            os.write(self._gate_w, _GATE_OPEN)
        except BrokenPipeError:
            pass  # it died before the gate opened; wait() reports how
        finally:
            os.close(self._gate_w)
            self._gate_w = -1
        report = _read_all(self._err_r)
        os.close(self._err_r)
        self.started_ns = time.monotonic_ns()
        if report:
            error = _exec_error(self.path, int(report))
            self.wait()
            self.returncode = error.exit_code
            raise error

    @property
    def released(self) -> bool:
        return self._gate_w < 0

    # -- watching ------------------------------------------------------------

    def poll(self) -> int | None:
        """The exit status if the command has ended, else None.  Never blocks."""
        return self._reap()

    def wait(self, timeout: float | None = None) -> int | None:
        """Wait up to ``timeout`` seconds (forever if None) for the command to
        end; its exit status, or None if it is still running."""
        if self.returncode is not None:
            return self.returncode
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            status = self._reap()
            remaining = None if deadline is None else deadline - time.monotonic()
            if status is not None or (remaining is not None and remaining <= 0):
                return status
            self._sleep_until_exit(remaining)

    def threads(self) -> list[int]:
        """Thread ids of the running command (empty once it has ended)."""
        return thread_ids(self.pid) if self.returncode is None else []

    @property
    def running(self) -> bool:
        return self.poll() is None

    # -- stopping ------------------------------------------------------------

    def send_signal(self, signum: int) -> bool:
        """Send ``signum`` unless the command has already been reaped; whether it was sent."""
        with self._reap_lock:
            if self.returncode is not None:
                return False
            try:
                if self._pidfd is not None:
                    signal.pidfd_send_signal(self._pidfd, signum)
                else:
                    os.kill(self.pid, signum)
            except ProcessLookupError:
                return False
            return True

    def stop(self, signum: int = signal.SIGTERM, grace: float = 3.0) -> int:
        """Send ``signum``, wait ``grace`` seconds, then SIGKILL; the exit status."""
        if not self.released:
            self._abandon()
        elif self.send_signal(signum):
            status = self.wait(grace)
            if status is not None:
                return status
            self.send_signal(signal.SIGKILL)
        return self.wait()

    def _abandon(self) -> None:
        """Give up a child that was never released: it exits without exec."""
        os.close(self._gate_w)
        os.close(self._err_r)
        self._gate_w = -1

    def forward_signals(self, signals: Sequence[int] = (signal.SIGINT, signal.SIGTERM)):
        """A context manager that forwards ``signals`` sent to the agent to the
        command instead of stopping the agent; see ``SignalForwarder``."""
        return SignalForwarder(self, signals)

    def close(self) -> None:
        """Close the descriptors this object holds; an unreleased child is abandoned."""
        if not self.released:
            self._abandon()
        if self._pidfd is not None:
            os.close(self._pidfd)
            self._pidfd = None

    def __enter__(self) -> "Child":
        return self

    def __exit__(self, *exc) -> None:
        if self.returncode is None:
            self.stop(signal.SIGKILL, grace=0)
        self.close()

    # -- internals -----------------------------------------------------------

    def _reap(self) -> int | None:
        with self._reap_lock:
            if self.returncode is not None:
                return self.returncode
            try:
                pid, status = os.waitpid(self.pid, os.WNOHANG)
            except ChildProcessError:  # reaped elsewhere (SIGCHLD ignored?)
                pid, status = self.pid, 0xFF00  # report 255: the status is lost
            if pid == 0:
                return None
            self.returncode = exit_status(status)
            self.ended_ns = time.monotonic_ns()
            return self.returncode

    def _sleep_until_exit(self, timeout: float | None) -> None:
        if self._pidfd is None:
            time.sleep(0.01 if timeout is None else min(timeout, 0.01))
            return
        poller = select.poll()
        poller.register(self._pidfd, select.POLLIN)
        poller.poll(None if timeout is None else max(1, int(timeout * 1000)))


class SignalCatcher:
    """While active, ``signals`` sent to the agent are caught instead of
    ending it.  ``received`` lists the signals that arrived, so the caller
    knows it was interrupted and can still print its summary and close its
    files; what each signal does is :meth:`_caught`'s."""

    def __init__(self, signals: Sequence[int]):
        self.signals = tuple(signals)
        self.received: list[int] = []
        self._previous: dict[int, object] = {}

    def __enter__(self):
        for signum in self.signals:
            self._previous[signum] = signal.signal(signum, self._handle)
        return self

    def __exit__(self, *exc) -> None:
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)
        self._previous.clear()

    @property
    def interrupted(self) -> bool:
        return bool(self.received)

    def _handle(self, signum, frame) -> None:
        self.received.append(int(signum))
        self._caught(int(signum), len(self.received))

    def _caught(self, signum: int, count: int) -> None:
        """The ``count``-th signal caught, ``signum``, has arrived."""
        raise NotImplementedError


class SignalForwarder(SignalCatcher):
    """While active, SIGINT/SIGTERM to the agent go to the command instead.

    ``forwarded`` lists what was sent on.  The first signal is passed on (a
    terminal's Ctrl-C is not: the command, being in the terminal's foreground
    process group, got it already); a second escalates to SIGKILL."""

    def __init__(self, child: Child, signals: Sequence[int]):
        super().__init__(signals)
        self.child = child
        self.forwarded: list[int] = []

    def _caught(self, signum: int, count: int) -> None:
        if count > 1:
            self._forward(signal.SIGKILL)
        elif not (signum == signal.SIGINT and _in_terminal_foreground()):
            self._forward(signum)

    def _forward(self, signum: int) -> None:
        if self.child.send_signal(signum):
            self.forwarded.append(int(signum))


def _in_terminal_foreground() -> bool:
    """Whether this process's group is its controlling terminal's foreground
    group, i.e. whether a terminal-generated signal reached the command too."""
    try:
        fd = os.open("/dev/tty", os.O_RDONLY | os.O_NOCTTY)
    except OSError:
        return False
    try:
        return os.tcgetpgrp(fd) == os.getpgrp()
    except OSError:
        return False
    finally:
        os.close(fd)


def _child_after_fork(path, argv, env, cwd, gate_r, gate_w, err_r, err_w, parent, stdio):
    """In the forked child: tie its life to the agent's, reset signals, wait at
    the gate, exec.  Only ``os``-level calls here, and never a return: the
    child must not run the parent's Python code after fork."""
    code = 127
    try:
        _LIBC.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        if os.getppid() != parent:  # the agent died before prctl took effect
            code = 125
            return
        os.close(gate_w)
        os.close(err_r)
        for signum in _RESET_TO_DEFAULT:
            signal.signal(signum, signal.SIG_DFL)
        signal.pthread_sigmask(signal.SIG_SETMASK, ())
        for target, fd in stdio.items():
            os.dup2(fd, target)
        _close_fds_except(gate_r, err_w)
        if cwd is not None:
            os.chdir(cwd)
        if os.read(gate_r, 1) != _GATE_OPEN:
            code = 125  # the agent went away without releasing: do not run
            return
        os.execve(path, argv, env)
    except OSError as exc:
        os.write(err_w, str(exc.errno or errno.EIO).encode())
    except BaseException:
        os.write(err_w, str(errno.EIO).encode())
    finally:
        os._exit(code)


def _close_fds_except(*keep: int) -> None:
    """Close every inherited descriptor from 3 up but ``keep`` (as subprocess's close_fds)."""
    low = 3
    for fd in sorted(keep):
        os.closerange(low, fd)
        low = fd + 1
    os.closerange(low, os.sysconf("SC_OPEN_MAX"))


def _read_all(fd: int) -> bytes:
    chunks = []
    while chunk := os.read(fd, 64):
        chunks.append(chunk)
    return b"".join(chunks)


def _pidfd_open(pid: int) -> int | None:
    try:
        return os.pidfd_open(pid)
    except (AttributeError, OSError):
        return None
