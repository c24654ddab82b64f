"""``phasewatch proxy``: many hosts' publishers joined into one endpoint.

ZeroMQ's own XSUB/XPUB proxy: the XSUB side connects to each daemon, the
XPUB side binds where subscribers connect; subscriptions flow upstream, so
each daemon only sends what someone wants.  A subscriber that stalls at the
proxy loses only its own messages (the proxy's XPUB drops per subscriber),
and the daemons never see it.
"""

from __future__ import annotations

import signal

import zmq

from ..errors import UserError

DEFAULT_BIND = "tcp://127.0.0.1:5557"


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
    downstream.setsockopt(zmq.SNDHWM, args.hwm)
    for s in (upstream, downstream):
        s.setsockopt(zmq.LINGER, 0)
    try:
        for endpoint in args.connect:
            try:
                upstream.connect(endpoint)
            except zmq.ZMQError as exc:
                raise UserError(f"--connect {endpoint}: {exc.strerror}") from None
        try:
            downstream.bind(args.bind)
        except zmq.ZMQError as exc:
            raise UserError(f"--bind {args.bind}: cannot bind: {exc.strerror}") from None
        signal.signal(signal.SIGTERM, signal.default_int_handler)
        try:
            zmq.proxy(upstream, downstream)
        except KeyboardInterrupt:
            pass
    finally:
        upstream.close()
        downstream.close()
        ctx.term()
    return 0
