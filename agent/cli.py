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
}


def build_parser(argv: list[str] | None = None) -> argparse.ArgumentParser:
    """The parser; given ``argv``, only the subcommand it names gets its
    options, so that only that subcommand's module is imported."""
    chosen = next((a for a in argv if a in COMMANDS), None) if argv is not None else None
    parser = argparse.ArgumentParser(
        prog="phasewatch",
        description="Online program-phase detection from core voltage, frequency and IPs.")
    parser.add_argument("--version", action="version", version=f"phasewatch {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name, (module, help_text) in COMMANDS.items():
        command = sub.add_parser(name, help=help_text, description=help_text)
        if chosen in (None, name):
            importlib.import_module(f".{module}", __package__).add_arguments(command)
    return parser


def main(argv: list[str] | None = None) -> int:
    if argv is None:
        argv = sys.argv[1:]
    parser = build_parser(argv)
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
