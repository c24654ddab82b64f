"""The sampler's tick loop in compiled code (``tick_loop.c``), called through ctypes.

A Python loop pays the interpreter on every tick: a wake-up, a GIL hand-off
and a few dozen bytecodes per register, 30-40 µs a tick.  The compiled loop
sleeps to each deadline, preads every register and stamps the tick without
the interpreter; Python runs once per batch of ticks to scatter the values
into the sampler's blocks.  ctypes releases the GIL for the call.

The shared library is built with the package (``python -m
phasewatch.cli.aot_build``, run by ``make install``) into this folder.
Where it is missing or older than its source, :func:`load` returns None and
the sampler keeps its Python loop.
"""

from __future__ import annotations

import ctypes
import os
from pathlib import Path

import numpy as np

SOURCE = Path(__file__).resolve().with_name("tick_loop.c")
LIBRARY = SOURCE.with_name("_tick_loop.so")
#: Kinds of op (tick_loop.c): 8 bytes at an offset, or a decimal number at offset 0.
KIND_BINARY, KIND_DECIMAL = 0, 1

_P = ctypes.c_void_p
_ARGTYPES = [_P, _P, _P, ctypes.c_int32, ctypes.c_int64, ctypes.c_int64, ctypes.c_int32,
             _P, _P, _P, _P, _P, _P, _P]


def build(out: Path = LIBRARY) -> Path:
    """Compile tick_loop.c into ``out``; raises OSError where no C compiler runs."""
    import shutil
    import subprocess
    cc = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        raise OSError("no C compiler (cc or gcc) on PATH")
    result = subprocess.run([cc, "-O2", "-shared", "-fPIC", "-o", str(out), str(SOURCE)],
                            capture_output=True, text=True)
    if result.returncode != 0:
        raise OSError(f"{cc} failed: {result.stderr.strip()}")
    return out


def load(path: Path = LIBRARY):
    """The library's ``pw_ticks``, or None where it is not built from the current source."""
    try:
        if path.stat().st_mtime < SOURCE.stat().st_mtime:
            return None
        fn = ctypes.CDLL(str(path)).pw_ticks
    except OSError:
        return None
    fn.restype = ctypes.c_int32
    fn.argtypes = _ARGTYPES
    return fn


class CompiledTicks:
    """Runs ticks of ``ops`` ((fd, kind, offset) each) in compiled code.

    After :meth:`run`, ``times[:done]`` holds each tick's CLOCK_MONOTONIC time,
    ``values[:done]`` and ``errnos[:done]`` each op's value and errno (0: read).
    """

    def __init__(self, fn, capacity: int):
        self._fn = fn
        self.capacity = capacity
        self.times = np.zeros(capacity, np.int64)
        self.stop = np.zeros(1, np.int32)
        self.missed = np.zeros(1, np.int64)
        self.max_late_ns = np.zeros(1, np.int64)
        self.next_k = np.zeros(1, np.int64)
        self.set_ops([])

    def set_ops(self, ops) -> None:
        self.fds = np.array([o[0] for o in ops], np.int32)
        self.kinds = np.array([o[1] for o in ops], np.int32)
        self.offsets = np.array([o[2] for o in ops], np.int64)
        self.values = np.zeros((self.capacity, max(len(ops), 1)), np.uint64)
        self.errnos = np.zeros((self.capacity, max(len(ops), 1)), np.int32)

    def run(self, start_ns: int, period_ns: int, nticks: int) -> int:
        """Up to ``nticks`` ticks (at most ``capacity``); returns how many were done.
        Fewer after a tick in which an op failed, or once ``stop`` is set."""
        p = _pointer
        return self._fn(p(self.fds), p(self.kinds), p(self.offsets), len(self.fds),
                        start_ns, period_ns, min(nticks, self.capacity), p(self.next_k),
                        p(self.times), p(self.values), p(self.errnos), p(self.stop),
                        p(self.missed), p(self.max_late_ns))


def _pointer(array: np.ndarray):
    return array.ctypes.data_as(_P)
