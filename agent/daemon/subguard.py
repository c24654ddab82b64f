"""A bound on what subscribers may make the daemon's event socket hold.

libzmq keeps every topic a subscriber asks for in a trie (about 35 bytes per
topic byte) and reads a connection's subscriptions for as long as it sends
them, so one local client could grow the daemon without bound.  This guard
watches the socket's TCP connections from a thread of its own (through the
socket's monitor) and shuts down any connection that has sent more than
:data:`PEER_BYTES` (a handshake and subscriptions; real subscribers send a few
hundred bytes), and any connection beyond :data:`MAX_PEERS`.  A shut-down
connection's subscriptions are freed with it.  Only TCP endpoints are guarded.
The first connection closed for each reason is said at once; later ones are
counted and said at most every :data:`SAY_EVERY_S` (a flood closes hundreds a
second, which would flood the journal in turn).

glibc's malloc keeps what a cut connection freed (its topics, pipes and
buffers, scattered over the arenas of the threads that used the socket)
instead of handing it back: resident memory would climb with every cut and
stay up.  So while connections come and go the guard asks malloc to return
its free pages (``malloc_trim``), four times a second, and for a while after
the last has gone, until ZeroMQ has freed its memory.
"""

from __future__ import annotations

import collections
import os
import socket
import struct
import threading
import time

import zmq
from zmq.utils.monitor import recv_monitor_message

from . import heap

#: Bytes a subscriber may send over its connection in all.
PEER_BYTES = 16 << 10
#: Subscribers connected at once.
MAX_PEERS = 256
#: Connections closed after the first for a reason are said this seldom.
SAY_EVERY_S = 10.0
#: How often connections are checked: often while some subscriber is sending,
#: seldom while all are quiet, never while none is connected.
CHECK_BUSY_S = 0.01
CHECK_QUIET_S = 0.1
#: Freed memory is handed back at most this often, until this long after a
#: connection last went (ZeroMQ frees a gone connection once the socket is
#: next used, and a busy socket falls behind).
TRIM_EVERY_S = 0.25
TRIM_AFTER_S = 5.0
#: ``tcpi_bytes_received`` in Linux's ``struct tcp_info``.
_BYTES_RECEIVED = struct.Struct("=Q")
_BYTES_RECEIVED_AT = 128
_TCP_INFO_SIZE = 232

_EVENTS = zmq.EVENT_ACCEPTED | zmq.EVENT_DISCONNECTED | zmq.EVENT_CLOSED


class SubscriberGuard:
    """Shuts down subscriber connections that send too much, or too many."""

    def __init__(self, sock: zmq.Socket, port: int, say=lambda msg: None):
        self.port = port
        self.say = say
        self.cut = 0
        self._peers: dict[int, bool] = {}       # fd -> cut already
        self._received: dict[int, int] = {}
        self._busy = False
        self._last_gone, self._last_trim = float("-inf"), 0.0
        self._said: set[str] = set()
        self._unsaid: collections.Counter[str] = collections.Counter()
        self._last_said = float("-inf")
        self._stop = threading.Event()
        self._monitor = sock.get_monitor_socket(_EVENTS)
        self._thread = threading.Thread(target=self._run, name="phasewatchd-subguard",
                                        daemon=True)
        self._thread.start()

    def _run(self) -> None:
        poller = zmq.Poller()
        poller.register(self._monitor, zmq.POLLIN)
        try:
            while not self._stop.is_set():
                self._trim()
                self._say_unsaid()
                wait = (CHECK_BUSY_S if self._busy else CHECK_QUIET_S) if self._peers else 0.5
                if poller.poll(wait * 1000):
                    self._event(recv_monitor_message(self._monitor))
                    continue
                self._check()
        except zmq.ZMQError:
            pass                                # the context or socket is closing
        finally:
            self._monitor.close(0)

    def _event(self, event: dict) -> None:
        fd = event["value"]
        if event["event"] == zmq.EVENT_ACCEPTED:
            self._peers[fd] = False
            if len(self._peers) > MAX_PEERS:
                self._shut(fd, f"more than {MAX_PEERS} subscribers at once")
        else:
            self._peers.pop(fd, None)
            self._received.pop(fd, None)
            self._last_gone = time.monotonic()

    def _check(self) -> None:
        busy = False
        for fd, done in list(self._peers.items()):
            if done:
                continue
            received = _bytes_received(fd, self.port)
            busy |= received != self._received.get(fd)
            self._received[fd] = received
            if received > PEER_BYTES:
                self._shut(fd, f"a subscriber sent more than {PEER_BYTES // 1024} KiB of "
                               f"subscriptions")
        self._busy = busy

    def _shut(self, fd: int, why: str) -> None:
        self._peers[fd] = True
        try:
            dup = socket.socket(fileno=_dup(fd))
        except OSError:
            return
        try:
            if dup.getsockname()[1] == self.port:
                dup.shutdown(socket.SHUT_RDWR)
                self.cut += 1
                self._last_gone = time.monotonic()
                self._tell(why)
        except (OSError, IndexError, TypeError):
            pass
        finally:
            dup.close()

    def _tell(self, why: str) -> None:
        if why in self._said:
            self._unsaid[why] += 1
        else:
            self._said.add(why)
            self._last_said = time.monotonic()
            self.say(f"{why}: its connection was closed")

    def _say_unsaid(self) -> None:
        now = time.monotonic()
        if not self._unsaid or now < self._last_said + SAY_EVERY_S:
            return
        self._last_said = now
        for why, n in sorted(self._unsaid.items()):
            self.say(f"{why}: {n} more connection{'s' if n != 1 else ''} closed")
        self._unsaid.clear()

    def _trim(self) -> None:
        """Hand the memory cut connections freed back to the system."""
        now = time.monotonic()
        if now < self._last_trim + TRIM_EVERY_S or self._last_trim > self._last_gone + TRIM_AFTER_S:
            return
        self._last_trim = now
        heap.trim()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(1.0)


def _dup(fd: int) -> int:
    return os.dup(fd)


def _bytes_received(fd: int, port: int) -> int:
    """What the connection on ``fd`` has received, if it is one of ours; else 0."""
    try:
        sock = socket.socket(fileno=_dup(fd))
    except OSError:
        return 0
    try:
        if sock.getsockname()[1] != port:
            return 0
        info = sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, _TCP_INFO_SIZE)
    except (OSError, IndexError, TypeError):
        return 0
    finally:
        sock.close()
    if len(info) < _BYTES_RECEIVED_AT + 8:
        return 0
    return _BYTES_RECEIVED.unpack_from(info, _BYTES_RECEIVED_AT)[0]
