"""Idle-state residency from cpuidle sysfs, where the C-state MSRs cannot be read.

Each ``cpuN/cpuidle/stateK`` has a ``name`` and a cumulative ``time`` (µs
spent in that state) and ``usage`` (entries).  Comparable to the residency
MSRs in meaning (time per state), not in resolution.
"""

from __future__ import annotations

from pathlib import Path

DEFAULT_ROOT = "/sys/devices/system/cpu"


def state_dirs(cpu: int, root: str = DEFAULT_ROOT) -> list[Path]:
    base = Path(root, f"cpu{cpu}", "cpuidle")
    try:
        return sorted((p for p in base.iterdir() if p.name.startswith("state")),
                      key=lambda p: int(p.name[5:]))
    except OSError:
        return []


def residency_us(cpu: int, root: str = DEFAULT_ROOT) -> dict[str, int]:
    """State name -> cumulative µs in that state, for one CPU."""
    states = {}
    for path in state_dirs(cpu, root):
        try:
            states[(path / "name").read_text().strip()] = int((path / "time").read_text())
        except (OSError, ValueError):
            continue
    return states
