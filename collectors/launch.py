"""Start a command paused before exec, so that its events can be opened first.

The child is a small interpreter that waits on a pipe and then execs the
command; events opened on the child's pid with ``enable_on_exec`` start
counting exactly at that exec, and ``inherit`` carries them into the
command's threads and children.  Same contract as ``perf record -- CMD``.
"""

from __future__ import annotations

import os
import subprocess
import sys
from typing import Sequence

# Exit codes as a shell's: 127 command not found, 126 not executable.
_SHIM = """\
import os, sys
fd = int(sys.argv[1]); os.read(fd, 1); os.close(fd)
try:
    os.execvp(sys.argv[2], sys.argv[2:])
except FileNotFoundError:
    sys.stderr.write(f"{sys.argv[2]}: command not found\\n"); os._exit(127)
except OSError as exc:
    sys.stderr.write(f"{sys.argv[2]}: {exc.strerror}\\n"); os._exit(126)
"""


class PausedChild:
    """A child waiting to exec ``argv``: ``pid``, ``release()``, ``popen``."""

    def __init__(self, argv: Sequence[str], **popen_kwargs):
        if not argv:
            raise ValueError("no command to run")
        read_end, self._write_end = os.pipe()
        try:
            self.popen = subprocess.Popen(
                [sys.executable, "-I", "-S", "-c", _SHIM, str(read_end), *argv],
                pass_fds=(read_end,), **popen_kwargs)
        finally:
            os.close(read_end)
        self.pid = self.popen.pid

    def release(self) -> None:
        """Let the command exec (and so start its enable_on_exec events)."""
        if self._write_end >= 0:
            os.write(self._write_end, b"\n")
            os.close(self._write_end)
            self._write_end = -1

    def kill(self) -> None:
        self.release()
        self.popen.kill()
        self.popen.wait()


def spawn_paused(argv: Sequence[str], **popen_kwargs) -> PausedChild:
    return PausedChild(argv, **popen_kwargs)
