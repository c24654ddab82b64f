"""The standard streams, in one form for every command and the daemon:
bytes that are not UTF-8 shown escaped, and rich consoles that never read
markup in what they print."""

from __future__ import annotations

import codecs
import sys

#: The codec error handler that writes an undecodable byte (kept by Python as a
#: lone surrogate, PEP 383) as ``\\xNN``, and any other character the stream's
#: encoding lacks as ``\\uNNNN``.
ESCAPE_BYTES = "phasewatch-escape"


def _escape_bytes(exc: UnicodeError) -> tuple[str, int]:
    if not isinstance(exc, UnicodeEncodeError):
        raise exc
    shown = [f"\\x{ord(c) - 0xDC00:02x}" if 0xDC80 <= ord(c) <= 0xDCFF else
             c.encode("ascii", "backslashreplace").decode("ascii")
             for c in exc.object[exc.start:exc.end]]
    return "".join(shown), exc.end


codecs.register_error(ESCAPE_BYTES, _escape_bytes)


def escaped(text: str) -> str:
    """``text`` as valid UTF-8: each byte of a name that was not UTF-8 as ``\\xNN``."""
    return text.encode("utf-8", ESCAPE_BYTES).decode("utf-8")


def warn(msg: str) -> None:
    """A warning: phasewatch goes on."""
    print(f"phasewatch: warning: {msg}", file=sys.stderr)


def one_line(message: str) -> str:
    """``message`` with line breaks shown as escapes: a file name or option
    value may hold them, and an error is one line."""
    return message.replace("\r", "\\r").replace("\n", "\\n")


def rich_console(file=None, *, stderr: bool = False, soft_wrap: bool = True):
    """The one way phasewatch makes a rich console (on standard output by
    default).  It reads no markup and highlights nothing: the paths, command
    lines and function names it prints are the user's, and a ``[`` in them is
    text (rich would take ``[/]`` for a closing tag and fail)."""
    from rich.console import Console     # rich: only where something is drawn

    class _Console(Console):
        def on_broken_pipe(self) -> None:
            """Leave a closed pipe to the command's caller (rich would exit 1)."""
            raise BrokenPipeError

    return _Console(file=file, stderr=stderr, markup=False, highlight=False, emoji=False,
                    soft_wrap=soft_wrap)
