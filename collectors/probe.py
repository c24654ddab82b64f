"""What this host offers: one row per signal of the design, with its source,
rate and value, or the reason it is missing and the fix.

Every check really tries the thing (opens the device, reads the register,
opens the perf event) rather than guessing from the CPU model.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path

from phasewatch.core.cpumodels import MAX_PLAUSIBLE_MHZ, PLAUSIBLE_VOLTAGE_MV
from phasewatch.core.registers import REGISTERS, voltage_volts
from phasewatch.errors import UserError

from . import cpufreq, cpuidle, hwmon, msr, perf_event as pe, powercap, registry
from .checks import PERF_RATE, PerfChecks, Row
from .cpuinfo import base_frequency_hz, read_cpuinfo
from .kernel_modules import load_hint

SAMPLER_RATE = "1 kHz per CPU (sampler)"


@dataclass
class Roots:
    sys: str = "/sys"
    proc: str = "/proc"
    powercap: str = powercap.DEFAULT_ROOT
    hwmon: str = hwmon.DEFAULT_ROOT
    kmod: str = "/dev/phasewatch"

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
        "base_frequency_implausible": bool(base_hz and base_hz / 1e6 > MAX_PLAUSIBLE_MHZ),
    }
    where = registry.Host(cpu, msr_path, roots.kmod, roots.powercap, roots.sys)
    offers = registry.survey(where)
    taken, passed = registry.candidates(offers)
    rate = register_rate(where, offers["msr"])
    for row in rows:
        if rate and row.rate == SAMPLER_RATE:
            row.rate = f"{rate['rate_hz']} Hz per CPU (sampler" + \
                (f", lowered from {rate['requested_hz']} Hz to fit the CPU budget)"
                 if rate["lowered"] else ")")
    return {"host": host, "signals": [asdict(r) for r in rows], "register_rate": rate,
            "sources": [{**offer.as_dict(), "description": registry.REGISTRY[name].description}
                        for name, offer in offers.items()],
            "auto": taken[0] if taken else None}


def register_rate(host: registry.Host, offer: registry.Offer) -> dict | None:
    """The rate the register sampler would start at on every online CPU (else
    on the CPU probed), as ``run --source msr`` and the daemon measure it
    (None: no sampler here)."""
    if not offer.available:
        return None
    for cpus in (None, [host.cpu]):     # every CPU, as the daemon; else the one probed
        try:
            sampler = registry.open_sampler(host, registry.Target(cpus=cpus))
            break
        except (OSError, UserError):
            continue
    else:
        return None
    try:
        return sampler.metadata.get("register_rate")
    finally:
        sampler.close()


# --- MSRs ----------------------------------------------------------------------

def voltage_row(regs, msr_reason, msr_source, model, virtual: bool, roots: Roots) -> Row:
    row = Row("core voltage", "voltage", False, unit="V")
    raw = regs.get("perf_status")
    if isinstance(raw, int):
        row.available, row.source, row.rate = True, f"{msr_source} {REGISTERS['perf_status']:#x} bits 47:32", SAMPLER_RATE
        row.value = float(voltage_volts(raw))
        return row.check(*PLAUSIBLE_VOLTAGE_MV, scale=1000.0, unit="mV")
    if model.voltage_source == "hwmon" and model.hwmon_voltage:
        found = hwmon.find_input(*model.hwmon_voltage, root=roots.hwmon)
        if found is not None:
            row.available, row.source, row.rate = True, f"hwmon {found}", "on demand (hwmon)"
            row.value = hwmon.read_volts(found)
            return row.check(*PLAUSIBLE_VOLTAGE_MV, scale=1000.0, unit="mV")
        row.reason = (f"no {model.hwmon_voltage[0]} hwmon input {model.hwmon_voltage[1]!r}: "
                      f"{load_hint(model.hwmon_voltage[0], 'driver')}")
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
        row.available, row.source, row.rate, row.value = True, f"{msr_source} {REGISTERS[name]:#x}", SAMPLER_RATE, raw
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
        row.available, row.source, row.rate, row.value = True, f"{msr_source} {REGISTERS[name]:#x}", SAMPLER_RATE, raw
    elif isinstance(raw, OSError):
        row.reason = msr.register_failure(name, raw, msr_source)
    elif not model.has_cstate_residency and not model.virtual:
        row.reason = f"{model.description}: no core C-state residency MSRs; cpuidle sysfs is the fallback"
    else:
        row.reason = f"{msr_reason}; cpuidle sysfs is the fallback"
    return row


# --- sysfs -------------------------------------------------------------------

def energy_row(domain: str, roots: Roots, virtual: bool) -> Row:
    row = Row(f"{domain} energy", f"energy_{domain}", False, unit="uJ")
    zones = powercap.package_zones(roots.powercap) if domain == "package" else \
        powercap.core_zones(roots.powercap)
    if not zones:
        if not Path(roots.powercap).exists():
            row.reason = f"no {roots.powercap}: {load_hint('intel_rapl_msr', 'RAPL driver')}"
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
                          f"no cpufreq driver (virtual machine, or "
                          f"{load_hint('acpi-cpufreq', 'driver')})")
    return Row("clock frequency (cpufreq fallback)", "cpufreq", True,
               f"sysfs {cpufreq.cpufreq_dir(cpu, roots.cpu)}/scaling_cur_freq",
               "on demand (kernel estimate)", khz, "kHz").check(0, MAX_PLAUSIBLE_MHZ, 1e-3, "MHz")


def cpuidle_row(cpu: int, roots: Roots) -> Row:
    states = cpuidle.residency_us(cpu, roots.cpu)
    if not states:
        return Row("idle residency (cpuidle fallback)", "cpuidle", False, unit="us",
                   reason=f"no cpuidle states under {roots.cpu}/cpu{cpu}/cpuidle: "
                          f"kernel without CONFIG_CPU_IDLE")
    return Row("idle residency (cpuidle fallback)", "cpuidle", True,
               f"sysfs {roots.cpu}/cpu{cpu}/cpuidle ({', '.join(states)})",
               "on demand", states, "us")
