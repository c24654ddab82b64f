"""Core voltage from hwmon, for CPUs whose voltage no MSR documents (AMD Zen:
the k10temp driver's ``Vcore`` input, SVI2 telemetry)."""

from __future__ import annotations

from pathlib import Path

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
