"""Opening input files so that none can hang a command or fill its memory.

An input must be a regular file: a FIFO would block until some process
writes to it, and a device such as ``/dev/zero`` never ends.  It is opened
without blocking, checked, and its size bounded before it is read."""

from __future__ import annotations

import io
import os
import stat

from ..errors import UserError

#: The largest labels or results file read whole (a billion intervals' labels).
MAX_TEXT_BYTES = 4 << 30


def open_regular(path: str, what: str = "input") -> io.BufferedReader:
    """``path`` opened for reading in binary, if it is a regular file."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        raise UserError(f"cannot read {what} {path}: {exc.strerror}") from None
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise UserError(f"{path}: {file_kind(mode)}, not a regular file: give the {what} "
                            f"as a file")
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return os.fdopen(fd, "rb")


def file_kind(mode: int) -> str:
    """What a file that is not a regular one is, from its ``st_mode``."""
    return ("a directory" if stat.S_ISDIR(mode) else "a FIFO" if stat.S_ISFIFO(mode)
            else "a device" if stat.S_ISCHR(mode) or stat.S_ISBLK(mode)
            else "a socket" if stat.S_ISSOCK(mode) else "not a file")


def check_regular(path: str, what: str = "input") -> None:
    open_regular(path, what).close()


def _read_at_most(f: io.BufferedReader, limit: int, chunk: int = 1 << 20) -> bytes | None:
    """The rest of ``f``, or None past ``limit`` bytes.  Not ``f.read(limit)``:
    that allocates ``limit`` bytes whatever the file holds (4 GiB, refused
    under a memory limit)."""
    chunks, total = [], 0
    while block := f.read(chunk):
        total += len(block)
        if total > limit:
            return None
        chunks.append(block)
    return b"".join(chunks)


def read_text(path: str, what: str = "input", limit: int = MAX_TEXT_BYTES) -> str:
    """A regular file of at most ``limit`` bytes, as UTF-8 text."""
    with open_regular(path, what) as f:
        size = os.fstat(f.fileno()).st_size
        if size > limit:
            raise UserError(f"{path}: {size:,} bytes, more than a {what} file may be "
                            f"({limit:,})")
        try:
            data = _read_at_most(f, limit)
        except OSError as exc:
            raise UserError(f"cannot read {what} {path}: {exc.strerror}") from None
        if data is None:
            raise UserError(f"{path}: grew past {limit:,} bytes while read, more than a {what} "
                            f"file may be")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise UserError(f"{path}: not UTF-8 text, so not a {what} file") from None
