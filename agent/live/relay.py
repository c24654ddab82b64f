"""CMD's terminal output, relayed so that the status line never shares a line
with it.

Where ``run`` draws its status line (stdout and stderr are terminals), CMD's
stdout and stderr are each a pseudo-terminal of their own (so CMD still sees a
terminal, of the same size), whose output a thread copies, byte for byte, to
the agent's real stdout and stderr through :meth:`StatusLine.write_above`:
the status line is taken down before CMD's text, and drawn again only after
CMD's text ends a line.  Elsewhere (stdout or stderr a file or pipe) nothing is
relayed and CMD writes where it was given to.
"""

from __future__ import annotations

import fcntl
import os
import select
import termios
import threading
from typing import Callable

READ_BYTES = 65536
POLL_S = 0.1


def wanted() -> bool:
    """Whether a status line will be drawn: stdout and stderr are terminals
    and the terminal is not a dumb one (as :func:`.status.status_wanted`)."""
    return (os.isatty(1) and os.isatty(2)
            and os.environ.get("TERM", "") not in ("dumb", "unknown"))


class TerminalRelay:
    """Pseudo-terminals standing in for the agent's terminal ``fds`` for CMD."""

    def __init__(self, fds=(1, 2)):
        self.masters: dict[int, int] = {}        # the agent's fd -> pty master
        self.slaves: dict[int, int] = {}         # the agent's fd -> pty slave, for CMD
        for fd in fds:
            master, slave = os.openpty()
            _copy_size(fd, slave)
            self.masters[fd], self.slaves[fd] = master, slave
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        #: Where CMD's output goes: straight through until a status line takes it.
        self.write: Callable[[int, bytes], None] = write_all

    def started(self) -> None:
        """CMD has its copies of the slaves: the agent closes its own."""
        for slave in self.slaves.values():
            os.close(slave)
        self.slaves = {}

    def start(self) -> "TerminalRelay":
        """Copy CMD's output to ``self.write(fd, data)`` on a thread, until :meth:`stop`."""
        self._thread = threading.Thread(target=self._copy, name="phasewatch-relay", daemon=True)
        self._thread.start()
        return self

    def _copy(self) -> None:
        open_masters = dict(self.masters)
        while open_masters:
            try:
                ready, _, _ = select.select(list(open_masters.values()), [], [], POLL_S)
            except (OSError, ValueError):    # closed by stop() after its wait
                break
            if not ready and self._stop.is_set():
                break
            for fd, master in list(open_masters.items()):
                if master not in ready:
                    continue
                try:
                    data = os.read(master, READ_BYTES)
                except OSError:             # EIO: every writer has closed its end
                    data = b""
                if data:
                    self.write(fd, data)
                else:
                    del open_masters[fd]

    def stop(self, timeout: float = 2.0) -> None:
        """Copy what CMD wrote last (waiting at most ``timeout`` for writers
        it left behind), then close the masters."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)
        for slave in self.slaves.values():
            os.close(slave)
        for master in self.masters.values():
            os.close(master)
        self.masters, self.slaves = {}, {}


def write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def _copy_size(source: int, target: int) -> None:
    try:
        fcntl.ioctl(target, termios.TIOCSWINSZ, fcntl.ioctl(source, termios.TIOCGWINSZ, b"\0" * 8))
    except OSError:
        pass
