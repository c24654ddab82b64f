"""Man pages and bash completion, generated from the commands' own parsers:
``python -m phasewatch.cli.manpages DIR`` writes ``DIR/man/man1/phasewatch.1``,
``phasewatch-COMMAND.1`` for each command and ``phasewatchd.1`` beside it,
and ``DIR/bash-completion/completions/phasewatch`` and ``phasewatchd`` (with
argparse-manpage and shtab), so that they always say what the parsers take.
``make install`` installs them under the venv's ``share``.
``python -m phasewatch.cli.manpages --markdown docs/commands.md`` (``make docs``)
renders the same parsers as one Markdown page, the option reference in docs/."""

from __future__ import annotations

import argparse
import os
import re
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


#: The width the synopses are wrapped at, whatever the terminal's.
MARKDOWN_WIDTH = 80

_MARKDOWN_SPECIAL = re.compile(r"([\\`*_<>|])")


def _markdown_text(text: str) -> str:
    """Help text as Markdown prose: characters Markdown would take for markup
    (``<cpu>`` for an HTML tag, ``*`` for emphasis) escaped."""
    return _MARKDOWN_SPECIAL.sub(r"\\\1", " ".join(text.split()))


def _formatter(parser: argparse.ArgumentParser) -> argparse.HelpFormatter:
    return argparse.HelpFormatter(prog=parser.prog, width=MARKDOWN_WIDTH)


def _synopsis(parser: argparse.ArgumentParser) -> str:
    formatter = _formatter(parser)
    formatter.add_usage(parser.usage, parser._actions, parser._mutually_exclusive_groups,
                        prefix="")
    return formatter.format_help().strip("\n")


def _markdown_section(parser: argparse.ArgumentParser) -> list[str]:
    """One parser: its synopsis, then each argument and option with its help."""
    formatter = _formatter(parser)
    lines = [f"## {parser.prog}", ""]
    if parser.description:
        lines += [_markdown_text(parser.description), ""]
    lines += ["```", _synopsis(parser), "```", ""]
    groups = (("Arguments", lambda a: not a.option_strings), ("Options", lambda a: a.option_strings))
    for title, belongs in groups:
        entries = []
        for action in parser._actions:
            if (not belongs(action) or action.help == argparse.SUPPRESS
                    or isinstance(action, argparse._HelpAction)):
                continue
            if isinstance(action, argparse._SubParsersAction):
                for choice in action._choices_actions:
                    entries.append(f"- `{choice.dest}`: {_markdown_text(choice.help or '')}")
                continue
            invocation = formatter._format_action_invocation(action)
            help_text = formatter._expand_help(action) if action.help else ""
            entries.append(f"- `{invocation}`" + (f": {_markdown_text(help_text)}" if help_text else ""))
        if entries:
            lines += [f"### {title}", ""] + entries + [""]
    return lines


def markdown(pages: dict[str, argparse.ArgumentParser] | None = None) -> str:
    """Every command's synopsis and options as one Markdown page, from the
    parsers (``--help`` and the man pages say the same)."""
    pages = parsers() if pages is None else pages
    lines = ["# Commands and their options", "",
             "Generated from the commands' own parsers, as `--help` and the man pages are",
             "(`make docs`, that is `python -m phasewatch.cli.manpages --markdown",
             "docs/commands.md`); edit the parsers in `agent/cli/`, not this file. What each",
             "command does, in prose: the [README](../README.md) and the other documents",
             "in this folder.", ""]
    lines += [f"- [`{parser.prog}`](#{parser.prog.replace(' ', '-')})" for parser in pages.values()]
    lines.append("")
    for parser in pages.values():
        lines += _markdown_section(parser)
    return "\n".join(lines).rstrip("\n") + "\n"


def write(path: str, text: str) -> None:
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    with open_output(path) as out:
        out.stream.write(text)
    if out.failure:
        raise SystemExit(f"phasewatch: {out.failure}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m phasewatch.cli.manpages",
                                 description=__doc__.splitlines()[0])
    ap.add_argument("dir", nargs="?",
                    help="the share directory to write man/man1/ and bash-completion/ in")
    ap.add_argument("--markdown", metavar="FILE",
                    help="write every command's synopsis and options to FILE as Markdown "
                         "(docs/commands.md)")
    args = ap.parse_args(argv)
    if args.dir is None and args.markdown is None:
        ap.error("give DIR, --markdown FILE, or both")
    pages = parsers()
    if args.markdown is not None:
        write(args.markdown, markdown(pages))
        print(f"phasewatch: {len(pages)} commands' options in {args.markdown}")
    if args.dir is None:
        return 0
    for name, parser in pages.items():
        write(os.path.join(args.dir, "man", "man1", f"{name}.1"), man_page(name, parser))
    for name in ("phasewatch", "phasewatchd"):
        write(os.path.join(args.dir, "bash-completion", "completions", name),
              completion(pages[name]))
    print(f"phasewatch: {len(pages)} man pages and 2 bash completions in {args.dir}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
