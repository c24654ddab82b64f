"""Core voltage from hwmon, for CPUs whose voltage no MSR documents (AMD Zen:
the k10temp driver's ``Vcore`` input, SVI2 telemetry)."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from phasewatch.core.batch import MISSING

from .tick_loop import KIND_DECIMAL

DEFAULT_ROOT = "/sys/class/hwmon"


def find_input(driver: str, label: str, root: str = DEFAULT_ROOT) -> Path | None:
    """The ``inN_input`` file whose ``inN_label`` is ``label`` under the
    hwmon device named ``driver``."""
    try:
        devices = sorted(Path(root).iterdir())
    except OSError:
        return None
    for dev in devices:
        try:
            if (dev / "name").read_text().strip() != driver:
                continue
        except OSError:
            continue
        for lab in sorted(dev.glob("in*_label")):
            try:
                if lab.read_text().strip() == label:
                    return lab.with_name(lab.name.replace("_label", "_input"))
            except OSError:
                continue
    return None


def read_volts(path: Path) -> float:
    """hwmon voltages are in millivolts."""
    return int(path.read_text()) / 1000.0


class VoltageReader:
    """Core voltage for the ``vcore_mv`` column: one hwmon input, read each
    tick and copied to every CPU's row.  k10temp reports one voltage per
    socket; on a host with several, the first socket's stands for all."""

    kind = "hwmon"
    columns = ("vcore_mv",)

    def __init__(self, ncpus: int, path: Path):
        self.path = Path(path)
        self.ncpus = ncpus
        self._fds = [os.open(self.path, os.O_RDONLY | os.O_CLOEXEC)]
        self.read_errors = 0

    def read(self, out: np.ndarray) -> None:
        """Fill ``out`` (shape (cpus, 1)) with the core voltage in mV."""
        try:
            value = int(os.pread(self._fds[0], 32, 0))
        except (OSError, ValueError):
            value = MISSING
            self.read_errors += 1
        out[:, 0] = value

    def ops(self) -> list[tuple[int, int, int]]:
        """(fd, kind, offset) of the input, for the compiled tick loop."""
        return [(self._fds[0], KIND_DECIMAL, 0)]

    def scatter(self, values: np.ndarray, errnos: np.ndarray, out: np.ndarray) -> None:
        """The compiled loop's ``values`` (ticks, 1) into ``out`` (ticks, cpus, 1)."""
        failed = errnos != 0
        self.read_errors += int(failed.sum())
        out[:, :, 0] = np.where(failed, MISSING, values)[:, [0]]

    def stats(self) -> dict[str, int]:
        return {"errors": self.read_errors}

    def close(self) -> None:
        for fd in self._fds:
            os.close(fd)
        self._fds = []
