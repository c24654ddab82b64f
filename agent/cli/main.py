"""The ``phasewatch`` command: one subcommand per module of this package."""

from __future__ import annotations

import argparse
import atexit
import errno
import importlib
import os
import sys

from .. import __version__
from ..console import one_line, silence_stdout, start_up
from ..errors import UserError
from .blas import load_numpy

#: subcommand (and its module here) -> one-line help
COMMANDS = {
    "run": "start a command, watch it and tell its phases",
    "replay": "detect phases in a recorded trace (project format or CSV)",
    "convert": "convert a raw CSV to the trace format",
    "probe": "tell which signals this host offers, and why not",
    "report": "draw the phases of a run: an HTML page and a PNG",
    "eval": "compare two phase labellings (results, labels, SimPoint labels)",
    "diff": "pair the phases of two recordings of a program and tell what changed",
    "export": "write phases in another tool's format (SimPoint)",
    "subscribe": "print phasewatchd's ZeroMQ events as they come",
    "proxy": "join many phasewatchd publishers into one ZeroMQ endpoint",
    "catalog": "list, show, export, import or merge the phase catalogue",
}


class Parser(argparse.ArgumentParser):
    """argparse, with its errors in one line (the usage is one --help away).
    Options no parser took are found by the top parser, after the
    subcommand's has run: they point to the subcommand's --help."""

    chosen: str | None = None

    def error(self, message: str):
        prog = f"{self.prog} {self.chosen}" if self.chosen else self.prog
        self.exit(2, one_line(f"{prog}: {message} (see {prog} --help)") + "\n")


def build_parser(argv: list[str] | None = None) -> argparse.ArgumentParser:
    """The parser; given ``argv``, only the subcommand it names is made, so
    that only that subcommand's module is imported (the top parser's own
    ``--help`` before it lists every one)."""
    word = _first_word(argv) if argv is not None else None
    chosen = word if word in COMMANDS else None
    parser = Parser(
        prog="phasewatch",
        description="Online program-phase detection from core voltage, frequency and IPs.")
    parser.chosen = chosen
    parser.add_argument("--version", action="version", version=f"phasewatch {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name, help_text in COMMANDS.items():
        if chosen in (None, name) and word != "--version":   # the version needs no command
            command = sub.add_parser(name, help=help_text, description=help_text)
            importlib.import_module(f".{name}", __package__).add_arguments(command)
    return parser


def _first_word(argv: list[str]) -> str | None:
    """The subcommand ``argv`` names, or the top parser's option that comes first."""
    for arg in argv:
        if arg in COMMANDS or arg in ("-h", "--help", "--version"):
            return arg
    return None


def main(argv: list[str] | None = None) -> int:
    command = "phasewatch"
    if argv is None:
        argv = sys.argv[1:]
    try:
        if (cannot := start_up()) is not None:
            raise UserError(cannot)
        load_numpy()
        args = build_parser(argv).parse_args(argv)
        command = f"phasewatch {args.command}"
        mod = importlib.import_module(f".{args.command}", __package__)
        status = mod.run(args)
        sys.stdout.flush()
        return status
    except UserError as exc:
        print(one_line(f"{command}: {exc}"), file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        return 130
    except (MemoryError, ImportError) as exc:
        print(one_line(f"{command}: {_load_failure(exc)}"), file=sys.stderr)
        return 2
    except RuntimeError as exc:
        if "can't start new thread" not in str(exc):
            raise
        print(one_line(f"{command}: out of memory (cannot start a thread): raise the memory "
                       f"limit (ulimit -v)"), file=sys.stderr)
        return 2
    except BrokenPipeError:         # the reader went away, as with `| head`
        silence_stdout()
        return 0
    except OSError as exc:
        # Every output file is written through phasewatch.formats.outputs, which keeps
        # its errors; what reaches here is standard output.
        if exc.errno not in (errno.ENOSPC, errno.EIO, errno.EDQUOT, errno.EFBIG):
            raise
        print(f"{command}: cannot write standard output: {exc.strerror}", file=sys.stderr)
        silence_stdout()
        return 2


def _load_failure(exc: BaseException) -> str:
    """Why memory or a library ran out: under an address-space limit
    (ulimit -v) a library fails to map as often as an allocation fails."""
    text = str(exc)
    if isinstance(exc, MemoryError) or "map segment" in text or "allocate memory" in text:
        return (f"out of memory ({text or type(exc).__name__}): raise the memory limit "
                f"(ulimit -v)")
    return f"cannot load a library ({text}): install phasewatch again (make install)"


def entry() -> None:
    """The ``phasewatch`` command: ``main``, then a quick exit.  Every output
    is closed by the time a command returns; what the interpreter would still
    do is tear down the modules (numpy's, Arrow's), 40-70 ms for nothing.
    atexit handlers still run."""
    status = main()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    atexit._run_exitfuncs()
    os._exit(status if isinstance(status, int) else 1)


if __name__ == "__main__":
    entry()
