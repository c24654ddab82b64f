"""What this host offers: one row per signal of the design, with its source,
rate and value, or the reason it is missing and the fix.

Every check really tries the thing (opens the device, reads the register,
opens the perf event) rather than guessing from the CPU model.
"""

from __future__ import annotations

import errno
import os
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from phasewatch.errors import UserError

from . import cpufreq, cpuidle, hwmon, msr, perf_event as pe, perf_msr, powercap
from .cpuinfo import base_frequency_hz, read_cpuinfo

SAMPLER_RATE = "1 kHz per CPU (sampler)"
PERF_RATE = "1 kHz (in each perf sample)"


@dataclass
class Row:
    signal: str
    key: str
    available: bool
    source: str | None = None
    rate: str | None = None
    value: object = None
    unit: str | None = None
    reason: str | None = None


@dataclass
class Roots:
    sys: str = "/sys"
    proc: str = "/proc"
    powercap: str = powercap.DEFAULT_ROOT
    hwmon: str = hwmon.DEFAULT_ROOT

    @property
    def cpu(self) -> str:
        return str(Path(self.sys, "devices/system/cpu"))


def probe(cpu: int = 0, msr_path: str = msr.DEFAULT_PATH, roots: Roots | None = None) -> dict:
    """The host description and one :class:`Row` per signal, as plain data."""
    roots = roots or Roots()
    try:
        info = read_cpuinfo(roots.proc)
    except OSError as exc:
        raise UserError(f"cannot read {roots.proc}/cpuinfo: {exc.strerror}") from None
    model = info.cpu_model()
    base_hz, base_from = base_frequency_hz(cpu, roots.sys, roots.proc)
    regs, msr_reason, msr_source = msr.read_registers(cpu, msr_path)
    perf = PerfChecks(cpu, info.hypervisor, roots.sys)
    rows = [voltage_row(regs, msr_reason, msr_source, model, info.hypervisor, roots)]
    rows += [counter_row(name, regs, msr_reason, msr_source, perf, model)
             for name in ("aperf", "mperf", "pperf", "tsc")]
    rows += [cstate_row(name, regs, msr_reason, msr_source, model) for name in ("c3", "c6", "c7")]
    rows += [perf.counter_row("instructions"), perf.counter_row("cycles"), perf.ip_row()]
    rows += [energy_row("package", roots, info.hypervisor), energy_row("core", roots, info.hypervisor)]
    rows += [cpufreq_row(cpu, roots), cpuidle_row(cpu, roots)]
    host = {
        "vendor": info.vendor, "family": info.family, "model": info.model,
        "model_name": info.model_name, "cpu_model": model.key,
        "cpu_model_description": model.description, "virtual": info.hypervisor,
        "base_frequency_hz": base_hz, "base_frequency_from": base_from,
        "perf_event_paranoid": pe.paranoid(roots.proc), "msr_path": msr_path,
    }
    return {"host": host, "signals": [asdict(r) for r in rows]}


# --- MSRs ----------------------------------------------------------------------

def voltage_row(regs, msr_reason, msr_source, model, virtual: bool, roots: Roots) -> Row:
    row = Row("core voltage", "voltage", False, unit="V")
    raw = regs.get("perf_status")
    if isinstance(raw, int):
        row.available, row.source, row.rate = True, f"{msr_source} 0x198 bits 47:32", SAMPLER_RATE
        row.value = float(msr.voltage_volts(raw))
        return row
    if model.voltage_source == "hwmon" and model.hwmon_voltage:
        found = hwmon.find_input(*model.hwmon_voltage, root=roots.hwmon)
        if found is not None:
            row.available, row.source, row.rate = True, f"hwmon {found}", "on demand (hwmon)"
            row.value = hwmon.read_volts(found)
            return row
        row.reason = (f"no {model.hwmon_voltage[0]} hwmon input {model.hwmon_voltage[1]!r}: "
                      f"load the driver (modprobe {model.hwmon_voltage[0]})")
        return row
    if model.voltage_source == "none" and not virtual:
        row.reason = f"{model.description}: no documented core-voltage register"
    elif isinstance(raw, OSError):
        row.reason = msr.register_failure("perf_status", raw, msr_source)
    else:
        row.reason = msr_reason
    if virtual:
        row.reason = f"{row.reason} (virtual machine: the hypervisor exposes no voltage)"
    return row


def counter_row(name, regs, msr_reason, msr_source, perf: "PerfChecks", model) -> Row:
    row = Row(name, name, False, unit="count")
    raw = regs.get(name)
    if isinstance(raw, int):
        row.available, row.source, row.rate, row.value = True, f"{msr_source} {msr.REGISTERS[name]:#x}", SAMPLER_RATE, raw
        return row
    pmu_value, pmu_reason = perf.msr_pmu(name)
    if pmu_value is not None:
        row.available, row.source, row.rate, row.value = True, f"perf msr PMU ({name})", PERF_RATE, pmu_value
        return row
    if name == "pperf" and not model.has_pperf and not model.virtual:
        row.reason = f"{model.description}: PPERF exists only on Intel Skylake and later"
    elif isinstance(raw, OSError):
        row.reason = msr.register_failure(name, raw, msr_source)
    else:
        row.reason = f"{msr_reason}; {pmu_reason}"
    return row


def cstate_row(name, regs, msr_reason, msr_source, model) -> Row:
    row = Row(f"{name} residency", name, False, unit="count")
    raw = regs.get(name)
    if isinstance(raw, int):
        row.available, row.source, row.rate, row.value = True, f"{msr_source} {msr.REGISTERS[name]:#x}", SAMPLER_RATE, raw
    elif isinstance(raw, OSError):
        row.reason = msr.register_failure(name, raw, msr_source)
    elif not model.has_cstate_residency and not model.virtual:
        row.reason = f"{model.description}: no core C-state residency MSRs; cpuidle sysfs is the fallback"
    else:
        row.reason = f"{msr_reason}; cpuidle sysfs is the fallback"
    return row


# --- perf_event ------------------------------------------------------------------

class PerfChecks:
    """Opens the perf events the agent would use, once each, and says why not."""

    def __init__(self, cpu: int, virtual: bool, sys_root: str):
        self.cpu = cpu
        self.virtual = virtual
        self.sys_root = sys_root
        self.level = pe.paranoid()

    def _try(self, attr: pe.Attr, pid: int = 0, cpu: int = -1) -> str | None:
        """None if the event opens, else the one-line reason and fix."""
        try:
            fd = pe.perf_event_open(attr, pid, cpu)
        except OSError as exc:
            return self.reason(exc)
        os.close(fd)
        return None

    def reason(self, exc: OSError) -> str:
        if exc.errno in (errno.EACCES, errno.EPERM):
            return (f"perf_event_paranoid={self.level}: run as root or lower it "
                    f"(sysctl kernel.perf_event_paranoid=1)")
        if exc.errno in (errno.ENOENT, errno.EOPNOTSUPP, errno.ENODEV):
            if self.virtual:
                return "no hardware PMU: virtual machine (enable PMU passthrough in the hypervisor)"
            return "no hardware PMU: the kernel has no driver for this CPU's counters"
        if exc.errno == errno.ENOSYS:
            return "perf_event_open is not available: kernel built without CONFIG_PERF_EVENTS"
        return f"perf_event_open failed: {exc.strerror}"

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


# --- sysfs -------------------------------------------------------------------

def energy_row(domain: str, roots: Roots, virtual: bool) -> Row:
    row = Row(f"{domain} energy", f"energy_{domain}", False, unit="uJ")
    zones = powercap.package_zones(roots.powercap) if domain == "package" else \
        powercap.core_zones(roots.powercap)
    if not zones:
        if not Path(roots.powercap).exists():
            row.reason = f"no {roots.powercap}: load the RAPL driver (modprobe intel_rapl_msr)"
        else:
            row.reason = f"no RAPL {domain} zone under {roots.powercap}"
        if virtual:
            row.reason += " (virtual machine: the hypervisor exposes no RAPL)"
        return row
    zone = zones[min(zones)]
    try:
        row.value = powercap.read_energy_uj(zone)
    except PermissionError:
        row.reason = f"{zone.path}/energy_uj is readable by root only: run as root"
        return row
    except (OSError, ValueError) as exc:
        row.reason = f"cannot read {zone.path}/energy_uj: {exc}"
        return row
    row.available, row.source, row.rate = True, f"powercap {zone.path}", SAMPLER_RATE
    return row


def cpufreq_row(cpu: int, roots: Roots) -> Row:
    khz = cpufreq.scaling_cur_freq(cpu, roots.cpu)
    if khz is None:
        return Row("clock frequency (cpufreq fallback)", "cpufreq", False, unit="kHz",
                   reason=f"no {cpufreq.cpufreq_dir(cpu, roots.cpu)}/scaling_cur_freq: "
                          f"no cpufreq driver (virtual machine, or load acpi-cpufreq)")
    return Row("clock frequency (cpufreq fallback)", "cpufreq", True,
               f"sysfs {cpufreq.cpufreq_dir(cpu, roots.cpu)}/scaling_cur_freq",
               "on demand (kernel estimate)", khz, "kHz")


def cpuidle_row(cpu: int, roots: Roots) -> Row:
    states = cpuidle.residency_us(cpu, roots.cpu)
    if not states:
        return Row("idle residency (cpuidle fallback)", "cpuidle", False, unit="us",
                   reason=f"no cpuidle states under {roots.cpu}/cpu{cpu}/cpuidle: "
                          f"kernel without CONFIG_CPU_IDLE")
    return Row("idle residency (cpuidle fallback)", "cpuidle", True,
               f"sysfs {roots.cpu}/cpu{cpu}/cpuidle ({', '.join(states)})",
               "on demand", states, "us")
