"""What the CPU is: /proc/cpuinfo, the online CPU list and the base frequency.

Roots are parameters so that tests can point them at a tmp tree.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from phasewatch.core import cpumodels


@dataclass(frozen=True)
class CpuInfo:
    """What /proc/cpuinfo says of the first CPU."""

    vendor: str = ""
    family: int | None = None
    model: int | None = None
    model_name: str = ""
    mhz: float | None = None
    flags: frozenset[str] = field(default_factory=frozenset)

    @property
    def hypervisor(self) -> bool:
        return "hypervisor" in self.flags

    def cpu_model(self) -> cpumodels.CpuModel:
        return cpumodels.lookup(self.vendor, self.family, self.model, self.hypervisor,
                                self.flags)


def read_cpuinfo(proc: str = "/proc") -> CpuInfo:
    """The first processor's entry of ``/proc/cpuinfo``."""
    fields: dict[str, str] = {}
    for line in Path(proc, "cpuinfo").read_text().splitlines():
        if not line.strip():
            if fields:
                break
            continue
        key, _, value = line.partition(":")
        fields.setdefault(key.strip(), value.strip())
    return CpuInfo(
        vendor=fields.get("vendor_id", ""),
        family=_int(fields.get("cpu family")),
        model=_int(fields.get("model")),
        model_name=fields.get("model name", ""),
        mhz=_float(fields.get("cpu MHz")),
        flags=frozenset(fields.get("flags", "").split()),
    )


def parse_cpu_list(text: str) -> list[int]:
    """``0-3,8,10-11`` -> [0, 1, 2, 3, 8, 10, 11]"""
    cpus: list[int] = []
    for part in text.strip().split(","):
        if not part:
            continue
        lo, _, hi = part.partition("-")
        cpus.extend(range(int(lo), int(hi or lo) + 1))
    return cpus


def online_cpus(sys_root: str = "/sys") -> list[int]:
    try:
        return parse_cpu_list(Path(sys_root, "devices/system/cpu/online").read_text())
    except OSError:
        import os
        return sorted(os.sched_getaffinity(0))


def base_frequency_khz(cpu: int = 0, sys_root: str = "/sys") -> int | None:
    """cpufreq's ``base_frequency`` (intel_pstate), else None."""
    path = Path(sys_root, f"devices/system/cpu/cpu{cpu}/cpufreq/base_frequency")
    try:
        return int(path.read_text())
    except (OSError, ValueError):
        return None


def base_frequency_hz(cpu: int = 0, sys_root: str = "/sys", proc: str = "/proc") -> tuple[float, str]:
    """The base (TSC) frequency and where it came from: cpufreq's
    ``base_frequency``, else cpuinfo's MHz on a CPU whose TSC is constant,
    else :data:`cpumodels.FALLBACK_BASE_HZ`."""
    khz = base_frequency_khz(cpu, sys_root)
    if khz:
        return khz * 1e3, "cpufreq base_frequency"
    try:
        info = read_cpuinfo(proc)
    except OSError:
        return cpumodels.FALLBACK_BASE_HZ, "unknown: assumed"
    if info.mhz and "constant_tsc" in info.flags:
        return info.mhz * 1e6, "cpuinfo MHz (constant TSC)"
    if info.mhz:
        return info.mhz * 1e6, "cpuinfo MHz"
    return cpumodels.FALLBACK_BASE_HZ, "unknown: assumed"


def package_of(cpu: int, sys_root: str = "/sys") -> int:
    path = Path(sys_root, f"devices/system/cpu/cpu{cpu}/topology/physical_package_id")
    try:
        return int(path.read_text())
    except (OSError, ValueError):
        return 0


def _int(text: str | None) -> int | None:
    try:
        return int(text) if text is not None else None
    except ValueError:
        return None


def _float(text: str | None) -> float | None:
    try:
        return float(text) if text is not None else None
    except ValueError:
        return None
