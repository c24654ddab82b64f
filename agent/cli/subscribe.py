"""``phasewatch subscribe [TOPIC…]``: print phasewatchd's events as they come.

One line per message: the topic, then the event as JSON (for a sample batch,
its header with the row count).  Topics match by prefix, as ZeroMQ does:
``phase.`` is every target's phase changes, ``interval.cpu3`` one CPU's
intervals; no topic is ``phase.``.
"""

from __future__ import annotations

import json

import zmq

from ..core.batch import SampleBatch
from ..daemon.publish import decode_message
from ..errors import UserError
from ..formats.inputs import check_regular

DEFAULT_ENDPOINT = "tcp://127.0.0.1:5556"


def add_arguments(parser) -> None:
    parser.add_argument("topics", nargs="*", metavar="TOPIC",
                        help="topic prefixes: phase., interval.<target>, sample.<cpu> "
                             "(default: phase.)")
    parser.add_argument("--endpoint", default=DEFAULT_ENDPOINT, metavar="E",
                        help=f"the daemon's (or a proxy's) endpoint (default {DEFAULT_ENDPOINT})")
    parser.add_argument("--count", type=int, metavar="N", help="exit after N messages")
    parser.add_argument("--curve-server-key", metavar="FILE",
                        help="the server's public key file, for a CurveZMQ endpoint")
    parser.add_argument("--curve-key", metavar="FILE",
                        help="this client's secret key file, for a CurveZMQ endpoint")


def open_subscriber(ctx: zmq.Context, args) -> zmq.Socket:
    sub = ctx.socket(zmq.SUB)
    sub.setsockopt(zmq.LINGER, 0)
    if args.curve_server_key or args.curve_key:
        secure(sub, args)
    for topic in args.topics or ["phase."]:
        sub.setsockopt_string(zmq.SUBSCRIBE, topic)
    try:
        sub.connect(args.endpoint)
    except zmq.ZMQError as exc:
        sub.close()
        raise UserError(f"--endpoint {args.endpoint}: {exc.strerror}") from None
    return sub


def secure(sub: zmq.Socket, args) -> None:
    import zmq.auth
    if not (args.curve_server_key and args.curve_key):
        raise UserError("CurveZMQ needs both --curve-server-key and --curve-key")
    check_regular(args.curve_server_key, "CurveZMQ key")
    check_regular(args.curve_key, "CurveZMQ key")
    try:
        server_public, _ = zmq.auth.load_certificate(args.curve_server_key)
        public, secret = zmq.auth.load_certificate(args.curve_key)
    except (OSError, ValueError) as exc:
        raise UserError(f"cannot read a CurveZMQ key: {exc}") from None
    if secret is None:
        raise UserError(f"--curve-key {args.curve_key}: not a secret key file")
    sub.curve_serverkey, sub.curve_publickey, sub.curve_secretkey = server_public, public, secret


def line(frames: list[bytes]) -> str:
    """One message as a line; ValueError (or another error of its kind) if
    it is not a phasewatch message."""
    topic, body = decode_message(frames)
    if not isinstance(body, (dict, SampleBatch)):
        raise ValueError("not a JSON object")
    if isinstance(body, dict):
        return f"{topic} {json.dumps(body)}"
    header = json.loads(frames[1])
    header.pop("columns", None)
    return f"{topic} {json.dumps(header)}"


def run(args) -> int:
    ctx = zmq.Context()
    sub = open_subscriber(ctx, args)
    seen = 0
    try:
        while args.count is None or seen < args.count:
            frames = sub.recv_multipart()
            try:
                text = line(frames)
            except (ValueError, IndexError, KeyError, TypeError, AttributeError,
                    RecursionError):
                text = f"{frames[0][:64]!r} (not a phasewatch message: skipped)"
            print(text, flush=True)
            seen += 1
    except KeyboardInterrupt:
        pass
    finally:
        sub.close()
        ctx.term()
    return 0
