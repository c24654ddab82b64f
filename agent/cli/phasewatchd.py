"""``phasewatchd``: the host daemon's command line and entry point; the
service itself is :mod:`phasewatch.daemon.service`."""

from __future__ import annotations

import signal
import threading

# A SIGHUP (reload) that comes while the daemon is still starting is kept for
# later, not left to its default action (ending the process).  The
# `phasewatchd` command (a compiled launcher, phasewatchd_launcher.c) starts
# the interpreter with SIGHUP blocked: it stays blocked in every thread, and
# one thread takes each with sigwait, one sent before that thread existed
# included.  A Python handler would run nested in itself under a storm of
# SIGHUPs until the stack overflows.  Started otherwise (python -m), or
# imported by another program (whose children would inherit a blocked
# SIGHUP), the module leaves the mask alone and handles SIGHUP in Python.
RELOAD = threading.Event()


def _take_sighups() -> None:
    while True:
        signal.sigwait({signal.SIGHUP})
        RELOAD.set()


from ..daemon.heap import limit_arenas  # noqa: E402  (before the first thread starts)

limit_arenas()

if signal.SIGHUP in signal.pthread_sigmask(signal.SIG_BLOCK, ()):
    threading.Thread(target=_take_sighups, name="sighup", daemon=True).start()
else:
    signal.signal(signal.SIGHUP, lambda *_: RELOAD.set())

# Closed standard descriptors get /dev/null before the imports below open files.
from ..console import guard_stdio, silence_stdout, start_up  # noqa: E402

guard_stdio()

from .blas import load_numpy  # noqa: E402

load_numpy()

import argparse  # noqa: E402
import os  # noqa: E402
import sys  # noqa: E402

from .. import __version__  # noqa: E402
from ..core.detectors import SAMPLE_DETECTORS  # noqa: E402
from ..daemon.service import DEFAULT_CONFIG, Daemon, load_config, log  # noqa: E402
from ..errors import UserError  # noqa: E402
from .arguments import RECORDED, add_detector_arguments  # noqa: E402


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="phasewatchd", description=(
        "The phasewatch host daemon: phases per target, Prometheus metrics, ZeroMQ events."))
    p.add_argument("--version", action="version", version=f"phasewatchd {__version__}")
    p.add_argument("--config", metavar="FILE",
                   help=f"TOML config (default {DEFAULT_CONFIG} if it exists)")
    p.add_argument("--replay", metavar="TRACE",
                   help="take the samples from TRACE (trace format or raw CSV) instead of the host")
    p.add_argument("--replay-speed", type=float, metavar="X",
                   help="replay X times real time (1 = real time, 0 = as fast as possible)")
    p.add_argument("--metrics", metavar="ADDR:PORT", help="serve Prometheus metrics here")
    p.add_argument("--zmq", metavar="ENDPOINT", help="publish events on this ZeroMQ endpoint")
    p.add_argument("--zmq-samples", action="store_true",
                   help="also publish raw sample batches (topics sample.<cpu>)")
    p.add_argument("--record", metavar="DIR", help="write the raw samples as traces in DIR")
    p.add_argument("--powercap-root", metavar="DIR",
                   help="RAPL energy counters' folder, for energy per phase "
                        "(default /sys/class/powercap, used where readable)")
    catalog = p.add_mutually_exclusive_group()
    catalog.add_argument("--catalog", metavar="FILE",
                         help="the phase catalogue: known phases keep their ids and names across "
                              "program and daemon restarts (default $STATE_DIRECTORY/catalog.sqlite, "
                              "else $XDG_STATE_HOME/phasewatch/catalog.sqlite)")
    catalog.add_argument("--no-catalog", action="store_true",
                         help="neither read nor write the phase catalogue: ids in order of "
                              "appearance, from 0 at each start")
    add_detector_arguments(p, output=False, names=SAMPLE_DETECTORS,
                           default="the config's; with --replay " + RECORDED)
    return p


def parsed(argv: list[str] | None):
    """The arguments; --help, --version and a usage error exit here, their
    text flushed first, so that a standard output that refuses it is one line."""
    try:
        return build_parser().parse_args(argv)
    except SystemExit:
        sys.stdout.flush()
        raise


def main(argv: list[str] | None = None) -> int:
    try:
        args = parsed(argv)
    except BrokenPipeError:         # the reader went away, as with `| head`
        silence_stdout()
        return 0
    except OSError as exc:          # /dev/full
        log(f"cannot write standard output: {exc.strerror}")
        silence_stdout()
        return 2
    try:
        if (cannot := start_up()) is not None:
            raise UserError(cannot)
        RELOAD.clear()      # the config read next is the newest
        config = load_config(args)
        path = args.config or (DEFAULT_CONFIG if os.path.exists(DEFAULT_CONFIG) else None)
        code = Daemon(config, path, args, reload=RELOAD).run()
    except UserError as exc:
        log(str(exc))
        return exc.exit_code
    except KeyboardInterrupt:
        return 130
    # Everything is closed and flushed by now.  The interpreter's own teardown
    # of the compiled-kernel libraries takes about a second more, which would
    # break the promise to stop within two seconds of SIGTERM: skip it.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    sys.exit(main())
