"""A running process that ``phasewatch run --pid PID`` attaches to, as perf's
``-p PID`` does: watched until it ends or the agent gets Ctrl-C (SIGINT) or
SIGTERM, and never signalled, since it is not the agent's.

:class:`Attached` answers what ``run`` asks of a :class:`~.child.Child`
(``pid``, ``argv``, ``cpu``, ``release``, ``wait``, ``stop``,
``forward_signals``, the start and end times), so that a run watches either
the same way.

The process is followed by a pidfd where the kernel has one (Linux 5.3), so
that the watch ends when it ends even if another process takes its number
at once; elsewhere by its number in /proc."""

from __future__ import annotations

import os
import select
import signal
import threading
import time
from typing import Callable, Sequence


from ..collectors.procfs import alive
from ..errors import UserError
from .signal_catcher import SignalCatcher

POLL_S = 0.1


class Attached:
    """A process that is not the agent's child; its exit status is not known,
    and is reported as 0."""

    cpu = None          # never pinned: it is not the agent's to move

    def __init__(self, pid: int):
        self.pid = pid
        self._pidfd = pidfd_of(pid)     # first: what is read next is this process's
        self.argv = command_line(pid)
        self.path = executable(pid)
        if self._ended():
            raise UserError(f"--pid {pid}: the process ended as it was attached to")
        self.started_ns = time.monotonic_ns()
        self.ended_ns: int | None = None
        self.returncode: int | None = None
        self.on_interrupt: list[Callable[[], None]] = []
        self._interrupted = threading.Event()

    def release(self) -> None:
        """Nothing to release: the process runs already."""

    def wait(self, timeout: float | None = None) -> int | None:
        """0 once the process has ended or the watch was interrupted; None
        if neither happened within ``timeout``."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.returncode is None:
            if self._interrupted.is_set() or self._ended():
                self.returncode = 0
                self.ended_ns = time.monotonic_ns()
                break
            if deadline is not None and time.monotonic() >= deadline:
                return None
            self._interrupted.wait(POLL_S)
        return self.returncode

    def stop(self, signum: int = signal.SIGTERM, grace: float = 0.0) -> int:
        """Stop watching; the process itself is left alone."""
        self._interrupted.set()
        return self.wait()

    def forward_signals(self, signals: Sequence[int] = (signal.SIGINT, signal.SIGTERM)):
        """While active, SIGINT/SIGTERM end the watch (not the process)."""
        return InterruptWatch(self, signals)

    def interrupt(self) -> None:
        self._interrupted.set()
        for callback in self.on_interrupt:
            callback()

    def _ended(self) -> bool:
        if self._pidfd is None:
            return not alive(self.pid)
        return bool(select.select([self._pidfd], [], [], 0)[0])

    def close(self) -> None:
        if self._pidfd is not None:
            os.close(self._pidfd)
            self._pidfd = None

    def __enter__(self) -> "Attached":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class InterruptWatch(SignalCatcher):
    """Catches ``signals`` for an :class:`Attached` watch: the first ends the
    watch (the summary is still printed), a second the agent."""

    def __init__(self, attached: Attached, signals: Sequence[int]):
        super().__init__(signals)
        self.attached = attached

    def _caught(self, signum: int, count: int) -> None:
        if count > 1:
            raise KeyboardInterrupt
        self.attached.interrupt()


def pidfd_of(pid: int) -> int | None:
    """A pidfd of ``pid`` (readable once it ends); None where the kernel has none."""
    try:
        return os.pidfd_open(pid)
    except ProcessLookupError:
        raise UserError(f"--pid {pid}: no such process (check it with ps -p {pid})") from None
    except (AttributeError, OSError):
        return None


# Ours: psutil's cmdline() keeps empty arguments and splits a title without NULs at spaces.
def command_line(pid: int) -> list[str]:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            raw = f.read()
    except FileNotFoundError:
        raise UserError(f"--pid {pid}: no such process (check it with ps -p {pid})") from None
    except PermissionError:
        raise UserError(f"--pid {pid}: permission denied: attach to your own processes, "
                        f"or run as root") from None
    argv = [os.fsdecode(part) for part in raw.split(b"\0") if part]
    if not argv:
        raise UserError(f"--pid {pid}: a kernel thread or a zombie: give a running "
                        f"user-space process")
    return argv


def executable(pid: int) -> str | None:
    """The path of the program ``pid`` runs; None if it has gone, is a kernel
    thread or may not be read."""
    import psutil   # loaded only where a process is attached to (~10 ms of a run's start)
    try:
        return psutil.Process(pid).exe() or None
    except psutil.Error:
        return None
