"""Decimal values in sysfs files, read every tick: one file per group of CPUs
(a package's energy counter, a socket's core voltage), its value copied to
the rows of the CPUs in the group.  Descriptors stay open and are re-read
with ``pread`` at offset 0, which makes sysfs produce a fresh value without
a new open.  A read that fails gives MISSING and is counted."""

from __future__ import annotations

import os

import numpy as np

from phasewatch.core.batch import MISSING

from .tick_loop import KIND_DECIMAL


class SysfsValues:
    """One column from ``paths``; ``row_file[r]`` is the file CPU row ``r`` takes."""

    kind = "sysfs"
    columns: tuple[str, ...] = ()

    def __init__(self, paths: list, row_file):
        self._fds = [os.open(p, os.O_RDONLY | os.O_CLOEXEC) for p in paths]
        self._row_file = np.asarray(row_file, np.intp)
        self._values = np.empty(len(paths), np.uint64)
        self.read_errors = 0

    def read(self, out: np.ndarray) -> None:
        """Fill ``out`` (shape (cpus, 1)) with each CPU's value."""
        for i, fd in enumerate(self._fds):
            try:
                self._values[i] = int(os.pread(fd, 32, 0))
            except (OSError, ValueError):
                self._values[i] = MISSING
                self.read_errors += 1
        out[:, 0] = self._values[self._row_file]

    def ops(self) -> list[tuple[int, int, int]]:
        """(fd, kind, offset) of each file, for the compiled tick loop."""
        return [(fd, KIND_DECIMAL, 0) for fd in self._fds]

    def scatter(self, values: np.ndarray, errnos: np.ndarray, out: np.ndarray) -> None:
        """The compiled loop's ``values`` (ticks, files) into ``out`` (ticks, cpus, 1)."""
        failed = errnos != 0
        self.read_errors += int(failed.sum())
        out[:, :, 0] = np.where(failed, MISSING, values)[:, self._row_file]

    def stats(self) -> dict[str, int]:
        return {"errors": self.read_errors}

    def close(self) -> None:
        for fd in self._fds:
            os.close(fd)
        self._fds = []
