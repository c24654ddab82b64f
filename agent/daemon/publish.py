"""The ZeroMQ publisher and its wire format (version 1).

Every message is multipart; the first frame is the topic, which subscribers
filter on by prefix:

``interval.<target>``
    one JSON frame per classified interval::

        {"v": 1, "type": "interval", "host": "...", "target": "cpu0", "seq": 17,
         "index": 41, "t_start_ns": ..., "t_end_ns": ..., "instructions": ...,
         "cycles": ..., "samples": ..., "distance": 0.031, "phase": 2,
         "name": "fa", "new_phase": false, "t_start_unix_ns": ..., "t_end_unix_ns": ...,
         "predicted_next": 2, "predicted_after_change": 0,
         "expected_remaining_intervals": 7, "expected_remaining_s": 0.7,
         "confidence": {"next": 0.86, "after_change": 1.0, "remaining": 0.75}}

    ``phase`` is the phase's stable id and ``name`` its name (docs/daemon.md):
    an id never names two behaviours.

    The prediction keys are the results file's (docs/formats.md,
    docs/prediction.md): what is expected after this interval, null where
    nothing is.  ``t_start_ns`` and ``t_end_ns`` are CLOCK_MONOTONIC, the samples' clock;
    the ``_unix_ns`` fields are the same instants in CLOCK_REALTIME
    (nanoseconds since the epoch), to line events up across hosts.  (For a
    replayed trace: when its samples were due in the replay.)

``phase.<target>``
    one JSON frame per phase change (an interval whose phase differs from the
    previous interval's)::

        {"v": 1, "type": "phase", "host": "...", "target": "cpu0", "seq": 3,
         "index": 41, "t_ns": <end of the interval>, "phase": 2, "name": "fa",
         "previous": 0, "previous_name": "fb", "new_phase": false,
         "t_unix_ns": <t_ns in CLOCK_REALTIME>}

    ``previous`` and ``previous_name`` are null for a target's first interval.

``sample.<cpu>`` (opt-in)
    a raw sample batch as columns: frame 2 is a JSON header
    ``{"v": 1, "type": "samples", "host": ..., "cpu": 0, "seq": ..., "rows": N,
    "columns": [["t_ns", "<i8"], ["cpu", "<i4"], ...]}`` and each further
    frame is one column's N values, little-endian, in the header's order
    (``numpy.frombuffer(frame, dtype)`` reads one).

A phase event follows the interval event of the same interval.  ``seq``
counts the messages of each topic from 0, so a subscriber can tell
what it missed.  ``v`` changes only when a field changes meaning or goes away.

The socket is an XPUB with a send high-water mark and ``XPUB_NODROP``: a
send that would exceed a subscriber's high-water mark fails at once instead
of blocking, and the message is counted as dropped.  ZeroMQ then sends it to
no subscriber, so while one subscriber is stalled with a full queue the others
miss the same messages; the drops, and ``seq``, say so.  ``phasewatch proxy``
between the daemon and many subscribers keeps them apart.

What a subscriber can make the daemon hold is bounded: a message longer than
:data:`MAX_MESSAGE_BYTES` (ZMQ_MAXMSGSIZE) ends that peer's connection, and
on TCP a connection that sends more than a budget of subscriptions, or one
beyond a number of connections, is shut down (:mod:`.subguard`).
"""

from __future__ import annotations

import ipaddress
import json
import math
import os
import platform
import sys
import threading
import time
from typing import Callable

import numpy as np
import zmq

from ..core.batch import SampleBatch
from ..core.source import Classified
from ..core.pipeline import Intervals
from ..core.source import Sink
from ..errors import UserError
from ..formats.inputs import check_regular
from ..formats.outputs import check_ipc_endpoint
from .subguard import SubscriberGuard

WIRE_VERSION = 1
DEFAULT_HWM = 1000
#: The longest message a subscriber may send: a subscription (real topics are
#: under 64 bytes) or a CurveZMQ handshake command (under 400).
MAX_MESSAGE_BYTES = 1024
#: Subscription messages queued per connection on the way in.
RECEIVE_HWM = 8
#: Subscription messages read at one call.  Each read lets ZeroMQ take in at
#: most RECEIVE_HWM more messages per connection, so reads outpace what they
#: let in and nothing piles up.
DRAIN_AT_ONCE = 4096
#: ... and before each event sent, so that a sending thread holds the
#: socket's lock only briefly.
DRAIN_AT_SEND = 64


def is_loopback_endpoint(endpoint: str) -> bool:
    """ipc:// and inproc:// endpoints, and tcp:// on a loopback address."""
    scheme, _, rest = endpoint.partition("://")
    if scheme in ("ipc", "inproc"):
        return True
    host = rest.rsplit(":", 1)[0].strip("[]")
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class Publisher:
    """Publishes interval and phase events (and, opt-in, sample batches)."""

    def __init__(self, endpoint: str, hwm: int = DEFAULT_HWM, samples: bool = False,
                 curve: dict | None = None, context: zmq.Context | None = None,
                 setting: str = "--zmq"):
        self.endpoint = endpoint
        self.setting = setting      # where the endpoint was given, for messages
        self.samples = samples
        self.host = platform.node()
        self.dropped = 0
        self.sent = 0
        self.subscriptions = 0
        self.bad_subscriptions = 0
        self.topics = 0             # distinct topics subscribed now
        self._hwm = hwm
        self._seq: dict[str, int] = {}
        self._lock = threading.Lock()
        self._auth = None
        self._keys = None
        self._context = context or zmq.Context.instance()
        if curve:
            self._secure(curve)
        self.socket = self._open_socket()
        self.guard = None
        if endpoint.startswith("tcp://"):
            port = int(self.socket.getsockopt_string(zmq.LAST_ENDPOINT).rsplit(":", 1)[1])
            self.guard = SubscriberGuard(self.socket, port, say=_log)

    def _open_socket(self) -> zmq.Socket:
        sock = self._context.socket(zmq.XPUB)
        sock.setsockopt(zmq.SNDHWM, self._hwm)
        sock.setsockopt(zmq.XPUB_NODROP, 1)
        sock.setsockopt(zmq.LINGER, 200)
        sock.setsockopt(zmq.MAXMSGSIZE, MAX_MESSAGE_BYTES)
        # A few subscription messages in flight per connection (a real
        # subscriber's all at once): ZeroMQ takes in more from a connection
        # only as the socket handles them, so a flood is taken in at the pace
        # the daemon uses the socket (each event sent, and once a second) and
        # the guard cuts it before it has made the daemon hold much (at 64
        # a flood was taken in several times faster).
        sock.setsockopt(zmq.RCVHWM, RECEIVE_HWM)
        sock.setsockopt(zmq.RCVBUF, 16 << 10)
        if self._keys is not None:
            sock.curve_publickey, sock.curve_secretkey = self._keys
            sock.curve_server = True
        try:
            check_ipc_endpoint(self.endpoint, self.setting)
            sock.bind(self.endpoint)
        except zmq.ZMQError as exc:
            sock.close(0)
            raise UserError(f"{self.setting} {self.endpoint}: cannot bind: {exc.strerror}") from None
        except UserError:
            sock.close(0)
            raise
        return sock

    def _secure(self, curve: dict) -> None:
        """CurveZMQ: the server's key pair, and the clients' public keys allowed."""
        import zmq.auth
        from zmq.auth.thread import ThreadAuthenticator
        check_regular(curve["secret_key"], "CurveZMQ key")
        keys = curve["authorized_keys"]
        for name in sorted(os.listdir(keys)) if os.path.isdir(keys) else ():
            if name.endswith(".key"):     # every one is read, by the authenticator's thread
                check_regular(os.path.join(keys, name), "CurveZMQ public key")
        try:
            public, secret = zmq.auth.load_certificate(curve["secret_key"])
        except (OSError, ValueError) as exc:
            raise UserError(f"{curve['secret_key']}: cannot read the CurveZMQ key ({exc})") from None
        if secret is None:
            raise UserError(f"{curve['secret_key']}: not a secret key file (make one with "
                            f"zmq.auth.create_certificates)")
        self._auth = ThreadAuthenticator(self._context)
        self._auth.start()
        self._auth.configure_curve(domain="*", location=curve["authorized_keys"])
        self._keys = (public, secret)

    # --- events --------------------------------------------------------------

    def sink(self, clock_ns: Callable[[int], int] = lambda t_ns: t_ns,
             samples: bool = False) -> "PublisherSink":
        """The sink of one of the daemon's workers: its intervals and phase
        changes, its raw batches too where ``samples`` (the CPU-wide
        source's, published by CPU); ``clock_ns`` maps its sample times to
        CLOCK_MONOTONIC (a paced replay's)."""
        return PublisherSink(self, clock_ns, samples)

    def intervals(self, target: str, iv: Intervals, changes: np.ndarray, previous: np.ndarray,
                  clock_ns: Callable[[int], int] = lambda t_ns: t_ns,
                  names: dict[int, str] | None = None) -> None:
        """Publish each interval, and a phase event for each change of phase;
        ``clock_ns`` maps a sample time to CLOCK_MONOTONIC (a paced replay's),
        ``names`` gives each phase id's name."""
        if iv.partial or len(iv) == 0:
            return
        names = names or {}
        realtime_offset = time.time_ns() - time.monotonic_ns()

        def unix_ns(t_ns: int) -> int:
            return clock_ns(t_ns) + realtime_offset
        cols = (iv.index.tolist(), iv.t_start_ns.tolist(), iv.t_end_ns.tolist(),
                iv.instructions.tolist(), iv.cycles.tolist(), iv.samples.tolist(),
                iv.distance.tolist(), iv.phase.tolist(), iv.new_phase.tolist())
        changed = set(changes.tolist())
        predicted = prediction_fields(iv)
        for row, (index, t0, t1, instr, cyc, n, dist, phase, new) in enumerate(zip(*cols)):
            self._send_json(f"interval.{target}", {
                "type": "interval", "target": target, "index": index, "t_start_ns": t0,
                "t_end_ns": t1, "instructions": instr, "cycles": cyc, "samples": n,
                "distance": _number(dist), "phase": phase, "name": names.get(phase),
                "new_phase": new, "t_start_unix_ns": unix_ns(t0), "t_end_unix_ns": unix_ns(t1),
                **predicted[row]})
            if row in changed:
                before = int(previous[row])
                self._send_json(f"phase.{target}", {
                    "type": "phase", "target": target, "index": index, "t_ns": t1,
                    "phase": phase, "name": names.get(phase),
                    "previous": before if before >= 0 else None,
                    "previous_name": names.get(before) if before >= 0 else None,
                    "new_phase": new, "t_unix_ns": unix_ns(t1)})

    def batch(self, batch: SampleBatch) -> None:
        """Publish a raw batch on sample.<cpu>, one message per CPU in it."""
        if not self.samples or len(batch) == 0:
            return
        cpus = batch["cpu"]
        for cpu in np.unique(cpus).tolist():
            rows = cpus == cpu
            cols = [np.ascontiguousarray(c[rows]) for c in batch.columns.values()]
            topic = f"sample.{cpu}"
            header = {"v": WIRE_VERSION, "type": "samples", "host": self.host, "cpu": cpu,
                      "seq": self._next(topic), "rows": int(rows.sum()),
                      "columns": [[n, c.dtype.newbyteorder("<").str]
                                  for n, c in zip(batch.columns, cols)]}
            frames = [topic.encode(), json.dumps(header).encode()]
            frames += [c.astype(c.dtype.newbyteorder("<"), copy=False) for c in cols]
            self._send(frames)

    def _send_json(self, topic: str, event: dict) -> None:
        body = {"v": WIRE_VERSION, "type": event.pop("type"), "host": self.host,
                "target": event.pop("target"), "seq": self._next(topic), **event}
        self._send([topic.encode(), json.dumps(body).encode()])

    def _next(self, topic: str) -> int:
        with self._lock:
            n = self._seq.get(topic, 0)
            self._seq[topic] = n + 1
        return n

    def _send(self, frames) -> None:
        with self._lock:
            self._drain_subscriptions(DRAIN_AT_SEND)
            try:
                self.socket.send_multipart(frames, flags=zmq.NOBLOCK, copy=False)
                self.sent += 1
            except zmq.Again:
                self.dropped += 1

    def _drain_subscriptions(self, at_most: int = DRAIN_AT_ONCE) -> None:
        """Read the subscription messages XPUB hands up, so they never pile up.
        A well-formed one is a byte 1 (subscribe) or 0 (unsubscribe) and a
        topic.  XPUB hands up a topic's first subscription and its last
        unsubscription only, so their difference is the distinct topics held.
        At most ``at_most`` a call: a client that keeps subscribing must not
        hold the caller, nor the lock from the main loop (which pings the
        watchdog)."""
        for _ in range(at_most):
            try:
                msg = self.socket.recv(zmq.NOBLOCK)
            except zmq.Again:
                return
            if msg[:1] == b"\x01":
                self.subscriptions += 1
                self.topics += 1
            elif msg[:1] == b"\x00":
                self.topics = max(self.topics - 1, 0)
            else:
                self.bad_subscriptions += 1

    def poll(self) -> None:
        """Handle subscriptions while there is nothing to send."""
        with self._lock:
            self._drain_subscriptions()

    def close(self) -> None:
        if self.guard is not None:
            self.guard.stop()
        with self._lock:
            self.socket.close()
        if self._auth is not None:
            self._auth.stop()


def _log(msg: str) -> None:
    print(f"phasewatchd: {msg}", file=sys.stderr, flush=True)


def prediction_fields(iv: Intervals) -> list[dict]:
    """Each interval's prediction keys (null where none was made)."""
    pr = iv.prediction
    if pr is None:
        none = {"predicted_next": None, "predicted_after_change": None,
                "expected_remaining_intervals": None, "expected_remaining_s": None,
                "confidence": None}
        return [none] * len(iv)

    def known(x: int):
        return x if x >= 0 else None
    return [{"predicted_next": known(nxt), "predicted_after_change": known(after),
             "expected_remaining_intervals": known(left), "expected_remaining_s": _number(secs),
             "confidence": {"next": round(c1, 4), "after_change": round(c2, 4),
                            "remaining": round(c3, 4)} if nxt >= 0 else None}
            for nxt, after, left, secs, c1, c2, c3 in zip(
                pr.next_phase.tolist(), pr.after_change.tolist(), pr.remaining.tolist(),
                pr.remaining_s.tolist(), pr.confidence_next.tolist(),
                pr.confidence_after_change.tolist(), pr.confidence_remaining.tolist())]


def _number(x: float):
    return None if math.isnan(x) else round(x, 6)


def decode_message(frames: list[bytes]) -> tuple[str, dict | SampleBatch]:
    """A received message as (topic, event dict or SampleBatch)."""
    topic = frames[0].decode()
    body = json.loads(frames[1])
    if not isinstance(body, dict):
        raise ValueError("not a phasewatch message: its body is not a JSON object")
    if body.get("type") != "samples":
        return topic, body
    cols = {name: np.frombuffer(frame, np.dtype(dtype))
            for (name, dtype), frame in zip(body["columns"], frames[2:])}
    return topic, SampleBatch(cols)



class PublisherSink(Sink):
    def __init__(self, publisher: Publisher, clock_ns: Callable[[int], int], samples: bool):
        self.publisher, self.clock_ns, self.samples = publisher, clock_ns, samples

    def batch(self, batch: SampleBatch) -> None:
        if self.samples:
            self.publisher.batch(batch)

    def classified(self, c: Classified) -> None:
        self.publisher.intervals(c.stream, c.intervals, c.changes, c.previous, self.clock_ns,
                                 c.names)
