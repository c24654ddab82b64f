"""The checks that really try a signal: the row the probe prints for it, and
the perf events the agent would use, opened once each (the probe's rows and
the source registry's perf offer both come from here)."""

from __future__ import annotations

import os
from dataclasses import dataclass

import numpy as np

from . import perf_event as pe, perf_msr

PERF_RATE = "1 kHz (in each perf sample)"


@dataclass
class Row:
    """One line of probe's table: a signal, whether it is there, and why not."""

    signal: str
    key: str
    available: bool
    source: str | None = None
    rate: str | None = None
    value: object = None
    unit: str | None = None
    reason: str | None = None
    #: Set when the value read cannot be a measurement; ``value`` is then None.
    implausible: str | None = None

    def check(self, low: float, high: float, scale: float = 1.0, unit: str = "") -> "Row":
        """Flag a value outside [low, high] (in ``value * scale`` ``unit``)."""
        if isinstance(self.value, (int, float)) and not low <= self.value * scale <= high:
            self.implausible = (f"read {self.value * scale:g} {unit}, outside the plausible "
                                f"{low:g}-{high:g} {unit}: not a measurement (a wrong device "
                                f"or register?)")
            self.value, self.available = None, False
            self.reason = f"{self.source}: {self.implausible}"
        return self



class PerfChecks:
    """Opens the perf events the agent would use, once each, and says why not."""

    def __init__(self, cpu: int, virtual: bool, sys_root: str):
        self.cpu = cpu
        self.virtual = virtual
        self.sys_root = sys_root

    def _try(self, attr: pe.Attr, pid: int = 0, cpu: int = -1) -> str | None:
        """None if the event opens, else the one-line reason and fix."""
        try:
            fd = pe.perf_event_open(attr, pid, cpu)
        except OSError as exc:
            return self.reason(exc)
        os.close(fd)
        return None

    def reason(self, exc: OSError) -> str:
        return pe.advice(exc, virtual=self.virtual)

    def counter_row(self, name: str) -> Row:
        config = pe.HW_INSTRUCTIONS if name == "instructions" else pe.HW_CPU_CYCLES
        why = self._try(pe.Attr(pe.TYPE_HARDWARE, config, flags={"exclude_kernel", "exclude_hv"}))
        if why:
            return Row(name, name, False, unit="count", reason=why)
        return Row(name, name, True, "perf hardware counter (group)", PERF_RATE, unit="count")

    def ip_row(self) -> Row:
        flags = {"exclude_kernel", "exclude_hv", "disabled"}
        st = pe.SAMPLE_IP | pe.SAMPLE_TID | pe.SAMPLE_TIME
        cycles = pe.Attr(pe.TYPE_HARDWARE, pe.HW_CPU_CYCLES, sample_period=3_000_000,
                         sample_type=st, flags=flags)
        why_cycles = self._try(cycles)
        if why_cycles is None:
            return Row("instruction pointer", "ip", True, "perf sampling of cycles", "1 kHz")
        clock = pe.Attr(pe.TYPE_SOFTWARE, pe.SW_CPU_CLOCK, sample_period=1_000_000,
                        sample_type=st, flags=flags)
        why_clock = self._try(clock)
        if why_clock is None:
            return Row("instruction pointer", "ip", True,
                       f"perf sampling of cpu-clock (cycles: {why_cycles})", "1 kHz")
        return Row("instruction pointer", "ip", False, reason=why_clock)

    def msr_pmu_in_process(self, name: str) -> str | None:
        """None if the msr PMU's ``name`` opens for this process, as the agent
        adds it to a process's samples; else the reason not."""
        ptype = pe.pmu_type(perf_msr.PMU, self.sys_root)
        event = pe.pmu_events(perf_msr.PMU, self.sys_root).get(perf_msr.EVENT_COLUMNS[name])
        if ptype is None or event is None:
            return f"perf msr PMU has no {name} event on this CPU"
        return self._try(pe.Attr(ptype, event))

    def msr_pmu(self, name: str) -> tuple[int | None, str]:
        """A first reading of the msr PMU's event on this CPU, or the reason not."""
        if pe.pmu_type(perf_msr.PMU, self.sys_root) is None:
            return None, "no perf msr PMU (kernel without CONFIG_PERF_EVENTS_MSR)"
        if name not in perf_msr.available_columns(self.sys_root):
            return None, f"perf msr PMU has no {name} event on this CPU"
        try:
            reader = perf_msr.PerfMsrReader([self.cpu], (name,), self.sys_root)
        except OSError as exc:
            return None, self.reason(exc)
        out = np.zeros((1, 1), np.uint64)
        try:
            reader.read(out)
        finally:
            reader.close()
        return int(out[0, 0]), ""
