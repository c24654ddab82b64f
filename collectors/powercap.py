"""RAPL energy counters from /sys/class/powercap (intel-rapl, also on AMD Zen).

Each zone ``intel-rapl:P`` is one package, ``intel-rapl:P:N`` its sub-domains
(``core``, ``uncore``, ``dram``).  ``energy_uj`` is cumulative and wraps at
``max_energy_range_uj``; batches keep it raw and :func:`energy_delta` undoes
the wrap.  Descriptors stay open and are re-read with ``pread`` at offset 0,
which makes sysfs produce a fresh value without a new open.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from phasewatch.core.batch import MISSING

from .sysfs_values import SysfsValues

DEFAULT_ROOT = "/sys/class/powercap"


@dataclass(frozen=True)
class RaplZone:
    """One RAPL zone of powercap's sysfs: its folder, name, package and counter range."""

    path: str
    name: str              # "package-0", "core", "dram", ...
    package: int
    max_energy_range_uj: int


def read_zone(path: Path) -> RaplZone | None:
    try:
        name = (path / "name").read_text().strip()
        max_range = int((path / "max_energy_range_uj").read_text())
    except (OSError, ValueError):
        return None
    package = int(path.name.split(":")[1])
    return RaplZone(str(path), name, package, max_range)


def rapl_zones(root: str = DEFAULT_ROOT) -> list[RaplZone]:
    """Every intel-rapl zone under ``root``, packages and sub-domains."""
    base = Path(root)
    try:
        paths = sorted(p for p in base.iterdir() if p.name.startswith("intel-rapl:"))
    except OSError:
        return []
    zones = [read_zone(p) for p in paths]
    return [z for z in zones if z is not None]


def package_zones(root: str = DEFAULT_ROOT) -> dict[int, RaplZone]:
    return {z.package: z for z in rapl_zones(root) if z.name.startswith("package")}


def core_zones(root: str = DEFAULT_ROOT) -> dict[int, RaplZone]:
    return {z.package: z for z in rapl_zones(root) if z.name == "core"}


def read_energy_uj(zone: RaplZone) -> int:
    """One read, for probing.  Raises PermissionError where only root may read
    (kernels since 5.10 restrict energy_uj, CVE-2020-8694)."""
    return int(Path(zone.path, "energy_uj").read_text())


def energy_delta(prev, cur, max_energy_range_uj):
    """Energy consumed between two raw readings, in µJ, across one wrap.
    Any MISSING reading gives a MISSING delta."""
    prev = np.asarray(prev, np.uint64)
    cur = np.asarray(cur, np.uint64)
    span = np.uint64(max_energy_range_uj)
    wrapped = cur < prev
    delta = np.where(wrapped, cur + (span - prev) + np.uint64(1), cur - prev)
    bad = (prev == MISSING) | (cur == MISSING)
    return np.where(bad, MISSING, delta)


class EnergyReader(SysfsValues):
    """Package energy for the ``energy_pkg_uj`` column: one read per package,
    copied to the rows of the CPUs on that package."""

    kind = "powercap"
    columns = ("energy_pkg_uj",)

    def __init__(self, cpu_packages: list[int], root: str = DEFAULT_ROOT):
        zones = package_zones(root)
        missing = sorted(set(cpu_packages) - set(zones))
        if missing:
            raise FileNotFoundError(f"no RAPL package zone for package {missing[0]} under {root}")
        self.packages = sorted(set(cpu_packages))
        self.zones = [zones[p] for p in self.packages]
        index = {p: i for i, p in enumerate(self.packages)}
        super().__init__([Path(z.path, "energy_uj") for z in self.zones],
                         [index[p] for p in cpu_packages])
