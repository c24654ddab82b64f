"""Man pages and bash completion, generated from the commands' own parsers:
``python -m phasewatch.cli.manpages DIR`` writes ``DIR/man/man1/phasewatch.1``,
``phasewatch-COMMAND.1`` for each command and ``phasewatchd.1`` beside it,
and ``DIR/bash-completion/completions/phasewatch`` and ``phasewatchd`` (with
argparse-manpage and shtab), so that they always say what the parsers take.
``make install`` installs them under the venv's ``share``."""

from __future__ import annotations

import argparse
import os
import sys

from .. import __version__
from ..formats.outputs import open_output
from . import main as cli_main, phasewatchd


def parsers() -> dict[str, argparse.ArgumentParser]:
    """Each page's name and its parser: the top command, each subcommand
    (with only its own options), and the daemon."""
    top = cli_main.build_parser()
    pages = {"phasewatch": top}
    for action in top._actions:
        if isinstance(action, argparse._SubParsersAction):
            pages.update({f"phasewatch-{name}": sub for name, sub in action.choices.items()})
    pages["phasewatchd"] = phasewatchd.build_parser()
    return pages


def man_page(name: str, parser: argparse.ArgumentParser) -> str:
    from argparse_manpage.manpage import Manpage
    page = Manpage(parser)
    page.prog = name                 # the page's title: phasewatch-run(1)
    page.source = f"phasewatch {__version__}"
    page.manual = "phasewatch manual"
    page.description = parser.description or ""
    return str(page)


def completion(parser: argparse.ArgumentParser) -> str:
    import shtab
    return shtab.complete(parser, shell="bash")


def write(path: str, text: str) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open_output(path) as out:
        out.stream.write(text)
    if out.failure:
        raise SystemExit(f"phasewatch: {out.failure}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m phasewatch.cli.manpages",
                                 description=__doc__.splitlines()[0])
    ap.add_argument("dir", help="the share directory to write man/man1/ and bash-completion/ in")
    args = ap.parse_args(argv)
    pages = parsers()
    for name, parser in pages.items():
        write(os.path.join(args.dir, "man", "man1", f"{name}.1"), man_page(name, parser))
    for name in ("phasewatch", "phasewatchd"):
        write(os.path.join(args.dir, "bash-completion", "completions", name),
              completion(pages[name]))
    print(f"phasewatch: {len(pages)} man pages and 2 bash completions in {args.dir}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
