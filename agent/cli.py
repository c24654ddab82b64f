"""The ``phasewatch`` command: one subcommand per module ``cmd_<name>``."""

from __future__ import annotations

import argparse
import importlib
import sys

from . import __version__
from .errors import UserError

#: subcommand -> (module, one-line help)
COMMANDS = {
    "run": ("cmd_run", "start a command, watch it and tell its phases"),
    "replay": ("cmd_replay", "detect phases in a recorded trace (project format or CSV)"),
    "convert": ("cmd_convert", "convert a raw CSV to the trace format"),
    "probe": ("cmd_probe", "tell which signals this host offers, and why not"),
    "subscribe": ("cmd_subscribe", "print phasewatchd's ZeroMQ events as they come"),
    "proxy": ("cmd_proxy", "join many phasewatchd publishers into one ZeroMQ endpoint"),
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="phasewatch",
        description="Online program-phase detection from core voltage, frequency and IPs.")
    parser.add_argument("--version", action="version", version=f"phasewatch {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name, (module, help_text) in COMMANDS.items():
        mod = importlib.import_module(f".{module}", __package__)
        mod.add_arguments(sub.add_parser(name, help=help_text, description=help_text))
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    mod = importlib.import_module(f".{COMMANDS[args.command][0]}", __package__)
    try:
        return mod.run(args)
    except UserError as exc:
        print(f"phasewatch {args.command}: {exc}", file=sys.stderr)
        return exc.exit_code
    except BrokenPipeError:
        return 0
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
