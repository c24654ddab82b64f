"""What every command and the daemon say on standard error, in one form."""

from __future__ import annotations

import sys


def warn(msg: str) -> None:
    """A warning: phasewatch goes on."""
    print(f"phasewatch: warning: {msg}", file=sys.stderr)


def one_line(message: str) -> str:
    """``message`` with line breaks shown as escapes: a file name or option
    value may hold them, and an error is one line."""
    return message.replace("\r", "\\r").replace("\n", "\\n")
