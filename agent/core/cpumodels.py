"""What each CPU model offers and how to decode it: the one table for that.

Every per-model decision (is there PPERF, where does core voltage come from,
what histogram ranges fit its voltages and clocks) is read from here and from
nowhere else.
"""

from __future__ import annotations

from dataclasses import dataclass, replace


@dataclass(frozen=True)
class CpuModel:
    key: str
    description: str
    vendor: str                 # as /proc/cpuinfo's vendor_id says
    family: int | None          # None matches any
    models: tuple[int, ...]     # empty matches any
    has_aperf_mperf: bool
    has_pperf: bool
    has_cstate_residency: bool
    voltage_source: str         # "perf_status" (IA32_PERF_STATUS 47:32), "hwmon" or "none"
    voltage_range_mv: tuple[float, float]
    freq_max_mhz: float         # upper end of the productive-frequency histogram
    virtual: bool = False
    #: batch columns the MSR device can fill on this model, in read order
    msr_columns: tuple[str, ...] = ()
    #: hwmon driver and input label that report core voltage (voltage_source "hwmon")
    hwmon_voltage: tuple[str, str] | None = None

    def matches(self, vendor: str, family: int | None, model: int | None) -> bool:
        if self.vendor != vendor:
            return False
        if self.family is not None and family != self.family:
            return False
        return not self.models or model in self.models


# Intel family 6 model numbers, from the kernel's arch/x86/include/asm/intel-family.h.
#: Decoded values outside these bounds are not measurements (a wrong register,
#: a wrong device, a garbled trace): core voltage in mV, clocks in MHz.
PLAUSIBLE_VOLTAGE_MV = (500.0, 1600.0)
MAX_PLAUSIBLE_MHZ = 10_000.0
#: The base frequency assumed where neither cpufreq nor cpuinfo tells it: it
#: turns a sampling rate into a cycles period, and APERF/PPERF ratios into MHz.
FALLBACK_BASE_HZ = 3e9

_SKYLAKE_AND_LATER = (
    0x4E, 0x5E, 0x55, 0x8E, 0x9E, 0x66, 0x7D, 0x7E, 0x6A, 0x6C, 0xA5, 0xA6,
    0x8C, 0x8D, 0xA7, 0x97, 0x9A, 0xB7, 0xBA, 0xBF, 0x8F, 0xAA, 0xAC, 0xC5, 0xC6,
)

SKYLAKE = CpuModel(
    key="intel-skylake+",
    description="Intel Skylake or later (HWP, PPERF)",
    vendor="GenuineIntel", family=6, models=_SKYLAKE_AND_LATER,
    has_aperf_mperf=True, has_pperf=True, has_cstate_residency=True,
    voltage_source="perf_status",
    # The thesis's ranges, measured on a Xeon E3-1220 v5 pinned at 3.0 GHz.
    voltage_range_mv=(962.0, 1080.0), freq_max_mhz=3000.0,
    msr_columns=("perf_status", "aperf", "mperf", "pperf", "tsc", "c3", "c6", "c7"),
)

INTEL_PRE_SKYLAKE = CpuModel(
    key="intel-pre-skylake",
    description="Intel before Skylake (no PPERF)",
    vendor="GenuineIntel", family=6, models=(),
    has_aperf_mperf=True, has_pperf=False, has_cstate_residency=True,
    voltage_source="perf_status",
    voltage_range_mv=(700.0, 1300.0), freq_max_mhz=4000.0,
    msr_columns=("perf_status", "aperf", "mperf", "tsc", "c3", "c6", "c7"),
)

# Zen, Zen+ and Zen 2 (family 0x17), Zen 3 and 4 (0x19), Zen 5 (0x1A).  No
# architectural MSR reports core voltage; k10temp exports the SVI2 telemetry
# as hwmon input "Vcore" on the parts where AMD documents it.
AMD_ZEN = CpuModel(
    key="amd-zen",
    description="AMD Zen (APERF/MPERF, no PPERF; voltage from k10temp hwmon where present)",
    vendor="AuthenticAMD", family=None, models=(),
    has_aperf_mperf=True, has_pperf=False, has_cstate_residency=False,
    voltage_source="hwmon",
    voltage_range_mv=(700.0, 1500.0), freq_max_mhz=5000.0,
    msr_columns=("aperf", "mperf", "tsc"),
    hwmon_voltage=("k10temp", "Vcore"),
)
_ZEN_FAMILIES = (0x17, 0x19, 0x1A)

AMD_PRE_ZEN = CpuModel(
    key="amd-pre-zen",
    description="AMD before Zen (APERF/MPERF only)",
    vendor="AuthenticAMD", family=None, models=(),
    has_aperf_mperf=True, has_pperf=False, has_cstate_residency=False,
    voltage_source="none",
    voltage_range_mv=(700.0, 1500.0), freq_max_mhz=4000.0,
    msr_columns=("aperf", "mperf", "tsc"),
)

VIRTUAL = CpuModel(
    key="virtual",
    description="virtual machine (no MSRs, no hardware PMU, as far as the hypervisor tells)",
    vendor="", family=None, models=(),
    has_aperf_mperf=False, has_pperf=False, has_cstate_residency=False,
    voltage_source="none",
    voltage_range_mv=(962.0, 1080.0), freq_max_mhz=3000.0, virtual=True,
)

UNKNOWN = CpuModel(
    key="unknown",
    description="unknown CPU: thesis ranges, IA32_PERF_STATUS voltage assumed",
    vendor="", family=None, models=(),
    has_aperf_mperf=False, has_pperf=False, has_cstate_residency=False,
    voltage_source="perf_status",
    voltage_range_mv=(962.0, 1080.0), freq_max_mhz=3000.0,
)

#: First match wins, so specific entries come before catch-alls.
TABLE: tuple[CpuModel, ...] = (SKYLAKE, INTEL_PRE_SKYLAKE, AMD_ZEN)


def lookup(vendor: str, family: int | None, model: int | None,
           hypervisor: bool = False, flags=None) -> CpuModel:
    """The table's entry for this CPU; VIRTUAL under a hypervisor.

    ``flags`` (cpuinfo flags) only refine a match: a CPU that does not list
    ``aperfmperf`` gets no APERF/MPERF columns whatever its model.
    """
    if hypervisor:
        return VIRTUAL
    entry = _match(vendor, family, model)
    if flags is not None and entry.has_aperf_mperf and "aperfmperf" not in flags:
        entry = replace(entry, has_aperf_mperf=False, has_pperf=False,
                        msr_columns=tuple(c for c in entry.msr_columns
                                          if c not in ("aperf", "mperf", "pperf")))
    return entry


def _match(vendor: str, family: int | None, model: int | None) -> CpuModel:
    if vendor == "AuthenticAMD":
        return AMD_ZEN if family in _ZEN_FAMILIES else AMD_PRE_ZEN
    for entry in TABLE:
        if entry.matches(vendor, family, model):
            return entry
    return UNKNOWN


def by_key(key: str) -> CpuModel:
    for entry in TABLE + (AMD_PRE_ZEN, VIRTUAL, UNKNOWN):
        if entry.key == key:
            return entry
    return UNKNOWN
