"""Current clock frequency from cpufreq sysfs, where APERF/MPERF cannot be read.

``scaling_cur_freq`` is the kernel's own estimate (from APERF/MPERF on x86,
averaged over the last tick or so): coarser than reading the MSRs, but it
needs no privilege and no msr module.
"""

from __future__ import annotations

from pathlib import Path

DEFAULT_ROOT = "/sys/devices/system/cpu"


def cpufreq_dir(cpu: int, root: str = DEFAULT_ROOT) -> Path:
    return Path(root, f"cpu{cpu}", "cpufreq")


def scaling_cur_freq(cpu: int, root: str = DEFAULT_ROOT) -> int | None:
    """kHz, or None where cpufreq is absent (most virtual machines)."""
    return _read_int(cpufreq_dir(cpu, root) / "scaling_cur_freq")


def scaling_max_freq(cpu: int, root: str = DEFAULT_ROOT) -> int | None:
    return _read_int(cpufreq_dir(cpu, root) / "scaling_max_freq")


def scaling_driver(cpu: int, root: str = DEFAULT_ROOT) -> str | None:
    try:
        return (cpufreq_dir(cpu, root) / "scaling_driver").read_text().strip()
    except OSError:
        return None


def _read_int(path: Path) -> int | None:
    try:
        return int(path.read_text())
    except (OSError, ValueError):
        return None
