"""The kernel's perf ``msr`` PMU: TSC, APERF, MPERF and PPERF as perf counters.

It needs neither the msr module nor CAP_SYS_RAWIO (only perf_event_paranoid
permission for CPU-wide events), and it counts only: no voltage.  One group
per CPU, read with one ``read(2)`` per CPU per tick.  The counters start at
zero when opened, which the decoder's deltas do not mind.
"""

from __future__ import annotations

import os

import numpy as np

from phasewatch.core.batch import MISSING

from . import perf_event as pe

PMU = "msr"
#: batch column -> the PMU's event name
EVENT_COLUMNS = {"tsc": "tsc", "aperf": "aperf", "mperf": "mperf", "pperf": "pperf"}


def available_columns(sys_root: str = "/sys") -> tuple[str, ...]:
    """Batch columns the msr PMU exposes on this host (may be empty)."""
    if pe.pmu_type(PMU, sys_root) is None:
        return ()
    events = pe.pmu_events(PMU, sys_root)
    return tuple(c for c, e in EVENT_COLUMNS.items() if e in events)


def refusal(cpu: int, columns, sys_root: str = "/sys") -> str | None:
    """None if ``columns`` open CPU-wide on ``cpu`` (perf_event_paranoid
    above 0 keeps them from a user), else the reason and fix."""
    try:
        PerfMsrReader([cpu], columns, sys_root).close()
    except OSError as exc:
        return pe.advice(exc, "counting CPU-wide", allowed_at=pe.ALLOWED_AT["cpu"])
    return None


class PerfMsrReader:
    """Counts ``columns`` on ``cpus``; ``read(out)`` fills (cpus, columns)."""

    kind = "perf-msr"

    def __init__(self, cpus, columns=None, sys_root: str = "/sys"):
        self.cpus = list(cpus)
        self.columns = tuple(columns) if columns is not None else available_columns(sys_root)
        ptype = pe.pmu_type(PMU, sys_root)
        events = pe.pmu_events(PMU, sys_root)
        missing = [c for c in self.columns if EVENT_COLUMNS.get(c) not in events]
        if ptype is None or missing:
            raise FileNotFoundError(f"the perf msr PMU does not expose {', '.join(missing) or PMU}")
        self._fds: list[int] = []
        self._leaders: list[int] = []
        try:
            for cpu in self.cpus:
                self._open_group(ptype, events, cpu)
        except OSError:
            self.close()
            raise
        self.alive = np.ones(len(self.cpus), bool)
        self.read_errors = 0

    def _open_group(self, ptype: int, events: dict[str, int], cpu: int) -> None:
        leader = -1
        for col in self.columns:
            attr = pe.Attr(ptype, events[EVENT_COLUMNS[col]],
                           read_format=pe.FORMAT_GROUP if leader < 0 else 0)
            fd = pe.perf_event_open(attr, -1, cpu, leader)
            self._fds.append(fd)
            if leader < 0:
                leader = fd
                self._leaders.append(fd)

    def read(self, out: np.ndarray) -> None:
        n = len(self.columns)
        for row, fd in enumerate(self._leaders):
            try:
                out[row] = pe.read_group(fd, n)
            except (OSError, ValueError):
                out[row] = MISSING
                self.read_errors += 1

    def stats(self) -> dict[str, int]:
        return {"errors": self.read_errors}

    def close(self) -> None:
        for fd in self._fds:
            os.close(fd)
        self._fds, self._leaders = [], []
