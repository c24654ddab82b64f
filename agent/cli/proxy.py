"""``phasewatch proxy``: many hosts' publishers joined into one endpoint.

ZeroMQ's own XSUB/XPUB proxy: the XSUB side connects to each daemon, the
XPUB side binds where subscribers connect; subscriptions flow upstream, so
each daemon only sends what someone wants.  A subscriber that stalls at the
proxy loses only its own messages (the proxy's XPUB drops per subscriber),
and the daemons never see it.

The proxy runs in a thread of its own (``zmq.proxy_steerable``); the main
thread waits for SIGTERM or SIGINT and then tells it to stop over its control
socket.  A signal cannot be left unseen inside the proxy's poll, as it could
be when the proxy ran in the main thread and the signal came while it was
forwarding a message rather than waiting for one.
"""

from __future__ import annotations

import signal
import threading

import zmq

from ..errors import UserError
from ..formats.outputs import check_ipc_endpoint

DEFAULT_BIND = "tcp://127.0.0.1:5557"
CONTROL = "inproc://phasewatch-proxy-control"


def add_arguments(parser) -> None:
    parser.add_argument("--connect", action="append", required=True, metavar="E",
                        help="a phasewatchd endpoint to join (repeat for each host)")
    parser.add_argument("--bind", default=DEFAULT_BIND, metavar="E",
                        help=f"where subscribers connect (default {DEFAULT_BIND})")
    parser.add_argument("--hwm", type=int, default=1000, metavar="N",
                        help="messages queued per subscriber before it loses some (default 1000)")


def run(args) -> int:
    if args.hwm <= 0:
        raise UserError(f"--hwm {args.hwm}: give a positive count")
    ctx = zmq.Context()
    upstream, downstream = ctx.socket(zmq.XSUB), ctx.socket(zmq.XPUB)
    control, steer = ctx.socket(zmq.PAIR), ctx.socket(zmq.PAIR)
    downstream.setsockopt(zmq.SNDHWM, args.hwm)
    sockets = (upstream, downstream, control, steer)
    for s in sockets:
        s.setsockopt(zmq.LINGER, 0)
    try:
        for endpoint in args.connect:
            try:
                upstream.connect(endpoint)
            except zmq.ZMQError as exc:
                raise UserError(f"--connect {endpoint}: {exc.strerror}") from None
        check_ipc_endpoint(args.bind, "--bind")
        try:
            downstream.bind(args.bind)
        except zmq.ZMQError as exc:
            raise UserError(f"--bind {args.bind}: cannot bind: {exc.strerror}") from None
        control.bind(CONTROL)
        steer.connect(CONTROL)
        forward(upstream, downstream, control, steer)
    finally:
        for s in sockets:
            s.close()
        ctx.term()
    return 0


def forward(upstream, downstream, control, steer) -> None:
    """Run the proxy until SIGTERM or SIGINT, then stop it and wait for it."""
    stop = threading.Event()
    failed: list[zmq.ZMQError] = []
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())

    def proxy():
        try:
            zmq.proxy_steerable(upstream, downstream, None, control)
        except zmq.ZMQError as exc:
            failed.append(exc)

    thread = threading.Thread(target=proxy, name="phasewatch-proxy", daemon=True)
    thread.start()
    while thread.is_alive() and not stop.wait(0.5):
        pass
    if thread.is_alive():
        steer.send(b"TERMINATE")
        thread.join()
    if failed:
        raise UserError(f"the proxy stopped: {failed[0].strerror}")
