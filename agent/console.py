"""What every command and the daemon say on standard error, in one form:
bytes that are not UTF-8 shown escaped."""

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
