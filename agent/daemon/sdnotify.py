"""systemd's notification protocol: readiness, watchdog pings, reload and stop.

A datagram to the socket in $NOTIFY_SOCKET (``@`` for the abstract
namespace); without it, every call does nothing.
"""

from __future__ import annotations

import os
import socket


class Notifier:
    def __init__(self, environ=os.environ):
        path = environ.get("NOTIFY_SOCKET", "")
        self.address = "\0" + path[1:] if path.startswith("@") else path
        usec = environ.get("WATCHDOG_USEC", "")
        self.watchdog_s = int(usec) / 1e6 if usec.isdigit() and int(usec) > 0 else None

    @property
    def enabled(self) -> bool:
        return bool(self.address)

    def notify(self, state: str) -> None:
        if not self.address:
            return
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC) as s:
            try:
                s.sendto(state.encode(), self.address)
            except OSError:
                pass    # systemd gone or not listening: nothing to tell

    def ready(self, status: str = "") -> None:
        self.notify("READY=1" + (f"\nSTATUS={status}" if status else ""))

    def watchdog(self) -> None:
        self.notify("WATCHDOG=1")

    def reloading(self) -> None:
        self.notify("RELOADING=1")

    def stopping(self) -> None:
        self.notify("STOPPING=1")
