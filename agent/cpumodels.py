"""What each CPU model offers and how to decode it: the one table for that.

Every per-model decision (is there PPERF, where does core voltage come from,
what histogram ranges fit its voltages and clocks) is read from here and from
nowhere else.
"""

from __future__ import annotations

from dataclasses import dataclass


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
    voltage_source: str         # "perf_status" (IA32_PERF_STATUS 47:32) or "none"
    voltage_range_mv: tuple[float, float]
    freq_max_mhz: float         # upper end of the productive-frequency histogram
    virtual: bool = False

    def matches(self, vendor: str, family: int | None, model: int | None) -> bool:
        if self.vendor != vendor:
            return False
        if self.family is not None and family != self.family:
            return False
        return not self.models or model in self.models


# Intel family 6 model numbers, from the kernel's arch/x86/include/asm/intel-family.h.
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
)

INTEL_PRE_SKYLAKE = CpuModel(
    key="intel-pre-skylake",
    description="Intel before Skylake (no PPERF)",
    vendor="GenuineIntel", family=6, models=(),
    has_aperf_mperf=True, has_pperf=False, has_cstate_residency=True,
    voltage_source="perf_status",
    voltage_range_mv=(700.0, 1300.0), freq_max_mhz=4000.0,
)

AMD_ZEN = CpuModel(
    key="amd-zen",
    description="AMD Zen (APERF/MPERF, no PPERF, no documented core-voltage MSR)",
    vendor="AuthenticAMD", family=None, models=(),
    has_aperf_mperf=True, has_pperf=False, has_cstate_residency=False,
    voltage_source="none",
    voltage_range_mv=(700.0, 1500.0), freq_max_mhz=5000.0,
)

VIRTUAL = CpuModel(
    key="virtual",
    description="virtual machine (no MSRs, no hardware PMU)",
    vendor="", family=None, models=(),
    has_aperf_mperf=False, has_pperf=False, has_cstate_residency=False,
    voltage_source="none",
    voltage_range_mv=(962.0, 1080.0), freq_max_mhz=3000.0, virtual=True,
)

UNKNOWN = CpuModel(
    key="unknown",
    description="unknown CPU: thesis ranges assumed",
    vendor="", family=None, models=(),
    has_aperf_mperf=False, has_pperf=False, has_cstate_residency=False,
    voltage_source="none",
    voltage_range_mv=(962.0, 1080.0), freq_max_mhz=3000.0,
)

#: First match wins, so specific entries come before catch-alls.
TABLE: tuple[CpuModel, ...] = (SKYLAKE, INTEL_PRE_SKYLAKE, AMD_ZEN)


def lookup(vendor: str, family: int | None, model: int | None,
           hypervisor: bool = False) -> CpuModel:
    """The table's entry for this CPU; VIRTUAL under a hypervisor."""
    if hypervisor:
        return VIRTUAL
    for entry in TABLE:
        if entry.matches(vendor, family, model):
            return entry
    return UNKNOWN


def by_key(key: str) -> CpuModel:
    for entry in TABLE + (VIRTUAL, UNKNOWN):
        if entry.key == key:
            return entry
    return UNKNOWN
