"""JIT code named by its runtime: ``/tmp/perf-PID.map``, the file node
(``--perf-basic-prof``), the JVM (perf-map-agent) and Python 3.12
(``-X perf``) write for ``perf report``.

Each line is ``START SIZE NAME`` (hex start and size).  The file grows while
the process runs: it is read again whenever its size changes.  As perf does,
a file not owned by the process's user (or root) is not read.
"""

from __future__ import annotations

import os

import numpy as np

#: Where runtimes write the map of process PID.
PATH = "/tmp/perf-{pid}.map"


class PerfMap:
    """The JIT symbols of one process, read from its perf map where it has one."""

    def __init__(self, pid: int, path: str | None = None):
        self.pid = pid
        self.path = path or PATH.format(pid=pid)
        self._size = -1
        self.starts = np.zeros(0, np.uint64)
        self.ends = np.zeros(0, np.uint64)
        self.names = np.zeros(0, object)

    def lookup(self, ips: np.ndarray) -> np.ndarray:
        """The JIT function's name for each address, or None."""
        self._refresh()
        out = np.full(ips.shape, None, dtype=object)
        if not len(self.starts):
            return out
        index = np.searchsorted(self.starts, ips, side="right") - 1
        inside = (index >= 0) & (ips < self.ends[np.maximum(index, 0)])
        out[inside] = self.names[index[inside]]
        return out

    def _refresh(self) -> None:
        try:
            st = os.stat(self.path)
            if st.st_size == self._size:
                return
            if st.st_uid not in (self._owner(), os.geteuid(), 0):
                return
            with open(self.path, "rb") as f:
                data = f.read()
        except OSError:
            return
        self._size = st.st_size
        self._parse(data)

    def _owner(self) -> int:
        try:
            return os.stat(f"/proc/{self.pid}").st_uid
        except OSError:             # ended: its files are judged by ours
            return os.geteuid()

    def _parse(self, data: bytes) -> None:
        starts, sizes, names = [], [], []
        for line in data.splitlines():
            fields = line.split(b" ", 2)
            if len(fields) < 3:
                continue        # a line still being written
            try:
                start, size = int(fields[0], 16), int(fields[1], 16)
            except ValueError:
                continue
            starts.append(start)
            sizes.append(size)
            names.append(fields[2].split(b" ", 1)[0].decode("utf-8", "backslashreplace"))
        order = np.argsort(np.array(starts, np.uint64), kind="stable")
        self.starts = np.array(starts, np.uint64)[order]
        self.ends = self.starts + np.array(sizes, np.uint64)[order]
        self.names = np.array(names, object)[order]
