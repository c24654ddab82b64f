"""The CPU to pin the command to: one this process may use, the least loaded
unless one is asked for."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Iterable, Mapping

from ..errors import UserError


def allowed_cpus() -> set[int]:
    """The CPUs this process may run on (its main thread's affinity, as psutil's
    ``cpu_affinity``, without loading psutil for it)."""
    return set(os.sched_getaffinity(os.getpid()))


# Ours: psutil's per-CPU lists go by position and skip offline CPUs, so an index is no CPU number.
def cpu_busy_ticks() -> dict[int, tuple[int, int]]:
    """Per CPU, (busy, total) clock ticks since boot, from /proc/stat."""
    ticks = {}
    for line in Path("/proc/stat").read_text().splitlines():
        if line.startswith("cpu") and line[3:4].isdigit():
            name, *values = line.split()
            numbers = [int(v) for v in values]
            idle = numbers[3] + (numbers[4] if len(numbers) > 4 else 0)  # idle + iowait
            total = sum(numbers[:8])  # guest time is already counted in user
            ticks[int(name[3:])] = (total - idle, total)
    return ticks


def cpu_busy_fractions(window_s: float = 0.1) -> dict[int, float]:
    """Per CPU, the fraction of the last ``window_s`` seconds it was busy."""
    before = cpu_busy_ticks()
    time.sleep(window_s)
    after = cpu_busy_ticks()
    fractions = {}
    for cpu, (busy1, total1) in after.items():
        busy0, total0 = before.get(cpu, (busy1, total1))
        fractions[cpu] = (busy1 - busy0) / (total1 - total0) if total1 > total0 else 0.0
    return fractions


def least_loaded(allowed: Iterable[int], busy: Mapping[int, float]) -> int:
    """The allowed CPU with the lowest busy fraction; ties go to the highest
    number, away from CPU 0, which usually takes most interrupts."""
    candidates = sorted(allowed)
    if not candidates:
        raise UserError("this process may run on no CPU; check its affinity (taskset -p)")
    return min(candidates, key=lambda cpu: (busy.get(cpu, 0.0), -cpu))


def choose_cpu(requested: int | None = None) -> int:
    """The CPU to pin the command to: ``requested`` (``--cpu N``) if this
    process may use it, else the least loaded allowed CPU."""
    allowed = allowed_cpus()
    if requested is None:
        return least_loaded(allowed, cpu_busy_fractions())
    if requested not in allowed:
        raise UserError(
            f"--cpu {requested}: not a CPU this process may use ({format_cpu_list(allowed)}); "
            "pick one of those, or use --no-pin")
    return requested


def format_cpu_list(cpus: Iterable[int]) -> str:
    """``{0,1,2,5}`` -> ``"0-2,5"``, the kernel's cpulist notation."""
    parts, run = [], []
    for cpu in sorted(cpus):
        if run and cpu != run[-1] + 1:
            parts.append(_cpu_run(run))
            run = []
        run.append(cpu)
    if run:
        parts.append(_cpu_run(run))
    return ",".join(parts)


def _cpu_run(run: list[int]) -> str:
    return str(run[0]) if len(run) == 1 else f"{run[0]}-{run[-1]}"
