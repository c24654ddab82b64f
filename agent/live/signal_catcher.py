"""Signals to the agent caught while it watches a command, so that it can still
print its summary and close its files.

The command stays in the agent's process group, so a terminal's Ctrl-C already
reaches it; ``SignalForwarder`` then does not send it a second SIGINT.
Signals sent to the agent alone (``kill -INT``/``kill -TERM`` of its pid) are
forwarded.  A repeated signal escalates to SIGKILL.
"""

from __future__ import annotations

import os
import signal
from typing import Protocol, Sequence


class Signalled(Protocol):
    """What a forwarder sends signals to (a :class:`~.child.Child`)."""

    def send_signal(self, signum: int) -> bool: ...


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

    def __init__(self, child: Signalled, signals: Sequence[int]):
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
