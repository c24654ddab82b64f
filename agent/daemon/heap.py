"""What the daemon asks of glibc's malloc.

glibc gives each thread that meets contention an arena of its own (up to
eight per CPU), and memory freed in one arena serves only that arena.  The
daemon's threads (ZeroMQ's I/O thread, the subscriber guard, the metrics
server, the workers) then each keep what a burst made them allocate: after a
subscriber flood, hundreds of MB stayed resident, free but scattered, and
what stayed varied from run to run by 200 MB.  With two arenas it comes back
within a second or two.  :func:`limit_arenas` must run before the process
starts its first thread; glibc fixes the limit when it makes its first arena.
"""

from __future__ import annotations

import ctypes

#: Arenas the daemon's threads share.
ARENAS = 2
#: ``M_ARENA_MAX`` in glibc's ``malloc.h``.
_M_ARENA_MAX = -8

_LIBC = ctypes.CDLL(None)


def limit_arenas(arenas: int = ARENAS) -> None:
    """``mallopt(M_ARENA_MAX, arenas)``; nothing where the C library has none."""
    mallopt = getattr(_LIBC, "mallopt", None)
    if mallopt is not None:
        mallopt(_M_ARENA_MAX, arenas)


def trim() -> None:
    """``malloc_trim(0)``: free pages of every arena back to the system;
    nothing where the C library has none."""
    malloc_trim = getattr(_LIBC, "malloc_trim", None)
    if malloc_trim is not None:
        malloc_trim(0)
