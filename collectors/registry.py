"""Every source of samples, in one registry: what ``probe`` reports is what
``run --source`` and ``phasewatchd`` open.

Each entry registers, as node_exporter's collectors do, with a name, a
``check`` that says which batch columns it offers on this host (and why not,
where it offers nothing), and an ``open`` that starts it for a target.

``kmod``
    The phasewatch kernel module's rings (``/dev/phasewatch``): IPs and the
    MSRs, sampled on each CPU by the module itself.
``msr``
    The model-specific registers read by the 1 kHz sampler: ``/dev/cpu/N/msr``
    (msr-safe's batch device where installed), else the perf ``msr`` PMU for
    the counters it has; plus RAPL package energy where ``powercap`` offers it.
    Its readings are joined by time and CPU onto perf's IP samples
    (:mod:`.merge`), so every row has what the pipeline needs; where perf
    does not open, the sampler's rows go alone (the reason is recorded).
``perf``
    perf_event: IP samples at 1 kHz (cycles, else cpu-clock), instructions and
    cycles where there is a hardware PMU, tsc/aperf/mperf/pperf from the perf
    ``msr`` PMU where the kernel has it.  No voltage.
``powercap``
    RAPL package energy from sysfs: added to the ``msr`` sampler, not a
    source on its own.
``hwmon``
    Core voltage from hwmon (AMD Zen: k10temp's ``Vcore``), on CPUs whose
    voltage no register reports: added to the ``msr`` sampler likewise.

``auto`` takes ``kmod`` where the module is loaded, else ``msr`` where the MSR
device answers (with a register perf does not give), else ``perf``.

The public entry point, for ``phasewatch run`` and the daemon::

    source = open_source(choice, pid=None, cpus=None, msr_path=msr.DEFAULT_PATH,
                         rate_hz=1000, **perf_options)

``choice`` is ``"auto"``, ``"kmod"``, ``"msr"`` or ``"perf"``; ``pid`` a
process to watch (with its threads and children), ``cpus`` the CPUs to watch
(system-wide when ``pid`` is None; the CPUs whose registers are read when it
is given; default: all online).  ``perf_options`` go to
:class:`~.perf_source.PerfSource` (``enable_on_exec``, ``wakeup``, ``poll_ms``).
The source satisfies :class:`phasewatch.core.source.Source`; its ``signals`` are
its batch columns, and its ``metadata`` says what it took: ``source`` (the
entry, e.g. ``"perf+msr"``), ``signals`` (column -> the source it came from),
``counter_scope``, and ``not_taken`` (entry -> the reason it was passed over).
A choice that cannot open raises :class:`~phasewatch.errors.UserError` with
the reason.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path
from dataclasses import dataclass, field
from typing import Callable

from phasewatch.core import registers
from phasewatch.errors import UserError

from . import budget, hwmon, msr, perf_msr, powercap
from .cpuinfo import online_cpus, package_of, read_cpuinfo
from .kernel_modules import cannot_load, load_hint

#: The entries that can stand alone, in the order ``auto`` tries them.
AUTO_ORDER = ("kmod", "msr", "perf")
#: What ``run --source`` and the daemon's ``[source] kind`` take.
CHOICES = ("auto", *AUTO_ORDER)
IP_COLUMNS = ("t_ns", "cpu", "tid", "ip")
#: How late a register reading may be and still be joined onto an IP sample
#: (twice the register period where the rate is lowered below 100 Hz).
MERGE_TOLERANCE_NS = 20_000_000
#: Ticks the sampler runs before the run to measure their cost (a few to warm up first).
WARM_TICKS, MEASURED_TICKS = 5, 50


@dataclass
class Host:
    """Where to look: the device paths a check tries (fake trees in tests)."""

    cpu: int = 0
    msr_path: str = msr.DEFAULT_PATH
    kmod_device: str = "/dev/phasewatch"
    powercap_root: str = powercap.DEFAULT_ROOT
    hwmon_root: str = hwmon.DEFAULT_ROOT
    sys_root: str = "/sys"


@dataclass
class Offer:
    """What one entry offers on this host: batch columns, or the reason for none."""

    name: str
    columns: tuple[str, ...] = ()
    detail: str = ""
    reason: str | None = None

    @property
    def available(self) -> bool:
        return bool(self.columns)

    def as_dict(self) -> dict:
        return {"name": self.name, "available": self.available, "columns": list(self.columns),
                "detail": self.detail, "reason": self.reason}


@dataclass
class Target:
    """What a source watches: a process tree or CPUs, and at what rate."""

    pid: int | None = None
    cpus: list[int] | None = None
    rate_hz: int = 1000
    perf_options: dict = field(default_factory=dict)


@dataclass
class Entry:
    """One source in the registry: its check, and how it opens."""

    name: str
    description: str
    check: Callable[[Host], Offer]
    open: Callable[[Host, Target], object] | None     # None: adds to another entry only


REGISTRY: dict[str, Entry] = {}


def register(name: str, description: str):
    """Decorator for a check; the open function is attached with ``.opener``."""
    def wrap(check):
        REGISTRY[name] = Entry(name, description, check, None)

        def opener(fn):
            REGISTRY[name].open = fn
            return fn
        check.opener = opener
        return check
    return wrap


def survey(host: Host | None = None) -> dict[str, Offer]:
    """Every entry's offer on this host, in registry order."""
    host = host or Host()
    return {name: entry.check(host) for name, entry in REGISTRY.items()}


def candidates(offers: dict[str, Offer]) -> tuple[list[str], dict[str, str]]:
    """The entries ``auto`` would take, best first, and why the others were passed over."""
    taken, passed = [], {}
    for name in AUTO_ORDER:
        extra = set(offers[name].columns) - set(offers["perf"].columns)
        if offers[name].available and (name == "perf" or extra):
            taken.append(name)
        else:
            passed[name] = offers[name].reason or \
                f"adds nothing to perf ({', '.join(offers[name].columns[2:])}: {offers[name].detail})"
    return taken, passed


def open_source(choice: str = "auto", *, pid: int | None = None, cpus=None,
                msr_path: str = msr.DEFAULT_PATH, rate_hz: int = 1000,
                host: Host | None = None, **perf_options):
    """A live source for ``choice`` and the target; see the module docstring."""
    if choice not in CHOICES:
        raise UserError(f"unknown source {choice!r}: choose one of {', '.join(CHOICES)}")
    host = host or Host(msr_path=msr_path)
    if cpus is not None:
        check_online(cpus, host.sys_root)
    target = Target(pid, list(cpus) if cpus is not None else None, rate_hz, perf_options)
    if choice == "auto":
        taken, passed = candidates(survey(host))
    else:
        offer = REGISTRY[choice].check(host)
        if not offer.available:
            raise UserError(f"source {choice} is not available: {offer.reason}")
        taken, passed = [choice], {}
    for name in taken:
        try:
            source = REGISTRY[name].open(host, target)
        except (OSError, UserError) as exc:     # an entry that checked out but would not start
            passed[name] = f"did not open: {exc}"
            continue
        source.metadata.setdefault("not_taken", {}).update(
            {n: r for n, r in passed.items() if n != name})
        return source
    raise UserError("no source of samples opened: " +
                    "; ".join(f"{n}: {r}" for n, r in passed.items()))


def check_online(cpus, sys_root: str) -> None:
    """Refuse a CPU the host does not have online, naming the ones it has
    (every source would fail on it with no more than EINVAL)."""
    online = online_cpus(sys_root)
    for cpu in cpus:
        if cpu not in online:
            raise UserError(f"CPU {cpu}: not an online CPU of this host, whose CPUs are "
                            f"{cpu_list(online)}: give CPUs among those")


def cpu_list(cpus: list[int]) -> str:
    """``0-3,6``: the kernel's own form of a CPU list."""
    spans: list[list[int]] = []
    for cpu in sorted(cpus):
        if spans and cpu == spans[-1][1] + 1:
            spans[-1][1] = cpu
        else:
            spans.append([cpu, cpu])
    return ",".join(str(a) if a == b else f"{a}-{b}" for a, b in spans)


# --- kmod ----------------------------------------------------------------------

@register("kmod", "the phasewatch kernel module: IPs and MSRs sampled on each CPU")
def check_kmod(host: Host) -> Offer:
    path = host.kmod_device
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        installs = " (kmod/README.md installs it)" if cannot_load() is None else ""
        return Offer("kmod", reason=f"no {path}: {load_hint('phasewatch', 'kernel module')}"
                                    f"{installs}")
    except OSError as exc:
        return Offer("kmod", reason=f"cannot stat {path}: {exc.strerror}")
    if not stat.S_ISCHR(mode):
        return Offer("kmod", reason=f"{path} is not a character device: reload the module")
    if not os.access(path, os.R_OK | os.W_OK):
        return Offer("kmod", reason=f"cannot open {path}: run as root or install "
                                    f"kmod/99-phasewatch.rules")
    from .kmod_source import MSRS
    return Offer("kmod", IP_COLUMNS + MSRS, f"{path}, on-CPU timer")


@check_kmod.opener
def open_kmod(host: Host, target: Target):
    from .kmod_source import KmodSource
    return KmodSource(host.kmod_device, cpus=target.cpus, target_tgid=target.pid or 0,
                      period_ns=int(1e9 / target.rate_hz))


# --- msr -----------------------------------------------------------------------

@register("msr", "model-specific registers read by the 1 kHz sampler, IPs from perf")
def check_msr(host: Host) -> Offer:
    regs, reason, path = msr.read_registers(host.cpu, host.msr_path)
    readable = tuple(n for n, v in regs.items() if isinstance(v, int))
    if readable:
        return Offer("msr", ("t_ns", "cpu") + readable, path)
    pmu = perf_msr.available_columns(host.sys_root)
    refused = perf_msr.refusal(host.cpu, pmu, host.sys_root) if pmu else None
    if pmu and refused is None:
        return Offer("msr", ("t_ns", "cpu") + pmu, f"perf msr PMU (MSR device: {reason})")
    if refused:
        return Offer("msr", reason=f"{reason}; perf msr PMU: {refused}")
    if regs:
        reason = "; ".join(msr.register_failure(n, v, path) for n, v in regs.items())
    return Offer("msr", reason=f"{reason}; no perf msr PMU either")


@check_msr.opener
def open_msr(host: Host, target: Target):
    from .merge import MergedSource
    sampler = open_sampler(host, target)
    try:
        ips = open_perf(host, target, msr_pmu=False)
    except UserError as exc:
        sampler.metadata.setdefault("not_taken", {})["perf"] = str(exc)
        return sampler
    registers = tuple(c for c in sampler.signals if c not in ("t_ns", "cpu"))
    return MergedSource(ips, sampler, registers,
                        tolerance_ns=max(MERGE_TOLERANCE_NS, 2 * sampler.period_ns))


def open_sampler(host: Host, target: Target):
    """The sampler over the MSR device (else the perf msr PMU) and RAPL energy."""
    from .sampler import Sampler
    cpus = target.cpus if target.cpus is not None else online_cpus(host.sys_root)
    model = read_cpuinfo().cpu_model()
    offer = check_msr(host)
    wanted = [c for c in (model.msr_columns or registers.ALL_COLUMNS) if c in offer.columns] \
        or [c for c in offer.columns if c in registers.REGISTERS]
    not_taken: dict[str, str] = {}
    if offer.detail.startswith("perf msr PMU"):
        readers = [perf_msr.PerfMsrReader(cpus, wanted, host.sys_root)]
    else:
        readers = [msr.open_reader(cpus, wanted, host.msr_path)]
    energy = check_powercap(host)
    if energy.available:
        readers.append(powercap.EnergyReader([package_of(c, host.sys_root) for c in cpus],
                                             host.powercap_root))
    else:
        not_taken["powercap"] = energy.reason
    voltage = check_hwmon(host)
    if voltage.available:
        readers.append(hwmon.VoltageReader(len(cpus), Path(voltage.detail)))
    elif model.voltage_source == "hwmon":
        not_taken["hwmon"] = voltage.reason
    sampler = Sampler(cpus, readers, rate_hz=target.rate_hz,
                      metadata={"cpu_model": model.key, "not_taken": not_taken})
    fit_register_rate(sampler, target.rate_hz)
    return sampler


def fit_register_rate(sampler, requested_hz: int) -> None:
    """Measure what a tick costs here at ``requested_hz`` and start the sampler
    at the highest rate that fits the budget (:mod:`.budget`); it goes on
    measuring itself, and lowers the rate further where it has to."""
    sampler.tick_cost(WARM_TICKS)        # page faults, cold caches: not counted
    cost = sampler.tick_cost(MEASURED_TICKS)
    allowed = budget.register_share()
    rate = budget.fitting_rate(requested_hz, cost, len(sampler.cpus), allowed)
    sampler.share = budget.REGISTER_SHARE
    sampler.set_register_rate(budget.RegisterRate(requested_hz, rate, cost, len(sampler.cpus),
                                                  allowed_share=allowed))


def register_rate_of(source) -> dict | None:
    """The register sampler's rate, and why, in a source's metadata (None: no sampler)."""
    parts = source.metadata.get("parts", [source.metadata])
    return next((p["register_rate"] for p in parts if "register_rate" in p), None)


# --- perf ----------------------------------------------------------------------

@register("perf", "perf_event: IP sampling, instructions and cycles, the perf msr PMU")
def check_perf(host: Host) -> Offer:
    from .checks import PerfChecks
    checks = PerfChecks(host.cpu, read_cpuinfo().hypervisor, host.sys_root)
    ip = checks.ip_row()
    if not ip.available:
        return Offer("perf", reason=ip.reason)
    counters = tuple(n for n in ("instructions", "cycles") if checks.counter_row(n).available)
    pmu = tuple(n for n in perf_msr.available_columns(host.sys_root)
                if checks.msr_pmu_in_process(n) is None)
    return Offer("perf", IP_COLUMNS + counters + pmu + ("pid",), ip.source)


@check_perf.opener
def open_perf(host: Host, target: Target, msr_pmu: bool = True):
    from .perf_source import PerfSource
    cpus = target.cpus if target.pid is None else None
    return PerfSource(pid=target.pid, cpus=cpus, rate_hz=target.rate_hz, msr_pmu=msr_pmu,
                      **target.perf_options)


# --- powercap ------------------------------------------------------------------

@register("powercap", "RAPL package energy from sysfs, added to the msr sampler")
def check_powercap(host: Host) -> Offer:
    zones = powercap.package_zones(host.powercap_root)
    if not zones:
        return Offer("powercap", reason=f"no RAPL package zone under {host.powercap_root}: "
                                        f"{load_hint('intel_rapl_msr', 'RAPL driver')}")
    zone = zones[min(zones)]
    try:
        powercap.read_energy_uj(zone)
    except PermissionError:
        return Offer("powercap", reason=f"{zone.path}/energy_uj is readable by root only: "
                                        f"run as root")
    except (OSError, ValueError) as exc:
        return Offer("powercap", reason=f"cannot read {zone.path}/energy_uj: {exc}")
    return Offer("powercap", ("energy_pkg_uj",), zone.path)


# --- hwmon ---------------------------------------------------------------------

@register("hwmon", "core voltage from hwmon where no register reports it, added to the msr sampler")
def check_hwmon(host: Host) -> Offer:
    model = read_cpuinfo().cpu_model()
    if model.voltage_source != "hwmon" or not model.hwmon_voltage:
        return Offer("hwmon", reason=f"{model.description}: core voltage does not come from hwmon")
    driver, label = model.hwmon_voltage
    found = hwmon.find_input(driver, label, root=host.hwmon_root)
    if found is None:
        return Offer("hwmon", reason=f"no {driver} hwmon input {label!r} under {host.hwmon_root}: "
                                     f"{load_hint(driver, 'driver')}")
    try:
        hwmon.read_volts(found)
    except (OSError, ValueError) as exc:
        return Offer("hwmon", reason=f"cannot read {found}: {exc}")
    return Offer("hwmon", ("vcore_mv",), str(found))
