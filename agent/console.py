"""The standard streams, in one form for every command and the daemon:
descriptors 0-2 guarded at start-up, bytes that are not UTF-8 shown escaped,
and rich consoles that never read markup in what they print."""

from __future__ import annotations

import codecs
import fcntl
import os
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


def guard_stdio() -> None:
    """Put ``/dev/null`` on any of descriptors 0, 1, 2 that the caller left
    closed, before anything else opens a file: else the next file opened
    (a pipe to the command, a trace) would take its number, and be read or
    written as standard input or output.  Then give Python streams on all
    three that show undecodable bytes escaped.  With standard error closed,
    phasewatch's own messages go nowhere: never into standard output."""
    for fd in (0, 1, 2):
        try:
            os.fstat(fd)
        except OSError:
            null = os.open(os.devnull, os.O_RDWR)
            if null != fd:
                os.dup2(null, fd)
                os.close(null)
            os.set_inheritable(fd, True)        # the command gets it too
    if sys.stdin is None:
        sys.stdin = open(0, encoding="utf-8", errors="surrogateescape", closefd=False)
    for name, fd in (("stdout", 1), ("stderr", 2)):
        stream = getattr(sys, name)
        if stream is None or not _writable(fd):
            # Opened read-only ('1</dev/null'): phasewatch's own output goes
            # nowhere, and the command still gets the descriptor it was given.
            target = fd if _writable(fd) else os.devnull
            setattr(sys, name, open(target, "w", encoding="utf-8", errors=ESCAPE_BYTES,
                                    closefd=target != fd, buffering=1 if fd == 2 else -1))
        elif hasattr(stream, "reconfigure"):
            stream.reconfigure(errors=ESCAPE_BYTES)
    if not isinstance(sys.stderr, _Messages):
        sys.stderr = _Messages(sys.stderr)


class _Messages:
    """Standard error, where phasewatch's own messages go: a write it refuses
    (``2>/dev/full``, a full disk, a reader gone) loses the messages from
    then on, never the command's outcome or exit status."""

    def __init__(self, stream):
        self._stream = stream
        self._dropped: list = []        # kept, so that nothing flushes them at exit

    def write(self, text: str) -> int:
        try:
            return self._stream.write(text)
        except OSError:
            self._lose()
            return len(text)

    def flush(self) -> None:
        try:
            self._stream.flush()
        except OSError:
            self._lose()

    def _lose(self) -> None:
        self._dropped.append(self._stream)
        self._stream = open(os.devnull, "w", encoding="utf-8")

    def __getattr__(self, name: str):
        return getattr(self._stream, name)


def silence_stdout() -> None:
    """Standard output's reader has gone (or its disk is full): drop what is
    still buffered, so that the interpreter's final flush does not fail
    again at exit."""
    try:
        fd = sys.stdout.fileno()
    except (AttributeError, ValueError, OSError):
        return                      # not a real file (captured in tests)
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, fd)
    os.close(devnull)


def _writable(fd: int) -> bool:
    return fcntl.fcntl(fd, fcntl.F_GETFL) & os.O_ACCMODE != os.O_RDONLY


def start_up() -> str | None:
    """What each entry point does first: guard the standard descriptors.
    Returns why phasewatch cannot start here, if it cannot: a working folder
    that has been deleted (every relative path would fail later, and with a
    traceback)."""
    guard_stdio()
    try:
        os.getcwd()
    except FileNotFoundError:
        return "the working folder has been deleted: cd to a folder that exists and start again"
    return None


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
