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

A command may start processes that outlive it (a daemon: ``setsid CMD &``);
they inherit its perf events, but the watch ends with the command itself.
With ``adopt_orphans`` the agent is their *subreaper*
(``PR_SET_CHILD_SUBREAPER``): orphaned there, they become its children, so
that :meth:`Child.left_running` can name them.  The command is followed by a
pidfd where the kernel has one, so that its end is seen at once and never
confused with a later process that takes its number.

The command never outlives the agent: before exec it asks the kernel
(``prctl(PR_SET_PDEATHSIG, SIGKILL)``) to kill it when the agent's thread that
started it ends, so an agent killed by any signal, SIGKILL included, takes
the command with it.  Start it from the main thread, which lives as long as
the agent.

The command stays in the agent's process group, so on a terminal it behaves as
if started directly: it can read the terminal, and Ctrl-C / Ctrl-Z reach it.
How signals to the agent reach the command is :mod:`.signal_catcher`'s.

Between fork and exec the new process runs only ``os``-level calls, so it may
be started from any thread; still, start it before the agent's own threads
hold locks that matter (as with any fork of a threaded program).

Exit statuses follow the shell (:mod:`.command`).
"""

from __future__ import annotations

import ctypes
import errno
import os
import select
import signal
import threading
import time
from typing import Mapping, Sequence

from .command import exec_error, exit_status, resolve_command
from .cpu_choice import choose_cpu
from .process_tree import descendants, ended, thread_ids
from .signal_catcher import SignalForwarder

#: Python ignores these at start-up, and an ignored signal stays ignored across
#: exec; the command must get the defaults, as from a shell.
_RESET_TO_DEFAULT = (signal.SIGPIPE, signal.SIGXFSZ)

_GATE_OPEN = b"x"

#: prctl(2) options: the signal a process gets when its parent thread ends;
#: orphaned descendants reparented to this process rather than to init.
PR_SET_PDEATHSIG = 1
PR_SET_CHILD_SUBREAPER = 36
_LIBC = ctypes.CDLL(None, use_errno=True)   # loaded before any fork


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
        self._not_its: set[int] = set()     # processes of this one's own, not the command's

    # -- starting ------------------------------------------------------------

    @classmethod
    def start(cls, argv: Sequence[str], *, cpu: int | None = None, pin: bool = True,
              env: Mapping[str, str] | None = None, cwd: str | None = None,
              stdio: Mapping[int, int] | None = None, adopt_orphans: bool = False) -> "Child":
        """Fork a process for ``argv``, pinned to ``cpu`` (or the least loaded
        allowed CPU) unless ``pin`` is false, and stop it just before exec.
        ``stdio`` gives descriptors to put in place of some of its 0, 1, 2.
        ``adopt_orphans`` makes this process the subreaper of the command's
        processes (see :meth:`left_running`); it stays so.

        The returned child's ``pid`` is valid now; call ``release()`` to run it.
        Raises ``CommandNotFound`` / ``CommandNotExecutable`` before forking
        when the command cannot be run."""
        argv = [os.fspath(a) for a in argv]
        env = dict(os.environ if env is None else env)
        path = resolve_command(argv[0] if argv else "", env)
        cpu = choose_cpu(cpu) if pin else None
        if adopt_orphans:
            _LIBC.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
        not_its = set(descendants(os.getpid()))
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
        child = cls(pid, argv, path, cpu, gate_w, err_r)
        child._not_its = not_its
        return child

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
            error = exec_error(self.path, int(report))
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

    def left_running(self) -> list[int]:
        """The processes the ended command left running (a daemon it
        started), where it was started with ``adopt_orphans``: orphaned,
        they are this process's children now, and their own descendants."""
        agent = os.getpid()
        return [pid for pid in descendants(agent)
                if pid not in self._not_its and pid not in (agent, self.pid) and not ended(pid)]

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
    """Close every inherited descriptor from 3 up but ``keep`` (as subprocess's close_fds).
    0, 1 and 2 are the command's, whatever ``keep`` holds."""
    low = 3
    for fd in sorted(k for k in keep if k >= 3):
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
