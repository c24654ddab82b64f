"""Energy per phase from the RAPL package counters (``/sys/class/powercap``).

An :class:`EnergyMeter` reads every package zone's ``energy_uj`` on a thread
every ``POLL_S`` (10 ms) and keeps the running total in microjoules, each
counter's wrap at ``max_energy_range_uj`` undone (a wrap between two reads
at most: at 10 ms that holds up to many kilowatts).  Readings carry
CLOCK_MONOTONIC times, the clock of the samples, so an interval's energy is
the total's rise between its start and end, interpolated between readings.

:class:`PhaseEnergy` is a sink: it keeps each complete interval's times,
phase and instructions, and once the meter has stopped gives the energy of
each interval and each phase.  The energy is the packages', not the
program's alone: a phase's joules include whatever else those packages ran.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from ..collectors import powercap
from ..errors import UserError

if TYPE_CHECKING:  # the meter starts before the command does, ahead of numba
    from ..core.pipeline import Intervals

POLL_S = 0.01
#: Instructions per "per 100M instructions" figure.
PER_INSTRUCTIONS = 100_000_000


class EnergyMeter:
    """The package zones under ``root``, read on a thread into a cumulative series."""

    def __init__(self, zones: list[powercap.RaplZone], poll_s: float = POLL_S):
        self.zones = zones
        self.poll_s = poll_s
        self._last: list[int | None] = [None] * len(zones)
        self._total_uj = 0
        self._t: list[int] = []
        self._uj: list[int] = []
        self.read_errors = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="phasewatch-energy", daemon=True)

    @classmethod
    def open(cls, root: str) -> "EnergyMeter":
        """The meter over every package zone under ``root``; a
        :class:`UserError` saying why where there is none or it cannot be read."""
        zones = sorted(powercap.package_zones(root).values(), key=lambda z: z.package)
        if not zones:
            raise UserError(f"no RAPL package zone (intel-rapl:N named package-N) under {root}: "
                            f"give the powercap folder with --powercap-root")
        for zone in zones:
            try:
                powercap.read_energy_uj(zone)
            except PermissionError:
                raise UserError(f"{zone.path}/energy_uj is readable by root only: run as root "
                                f"for energy per phase") from None
            except (OSError, ValueError) as exc:
                raise UserError(f"cannot read {zone.path}/energy_uj: {exc}") from None
        return cls(zones)

    def start(self) -> "EnergyMeter":
        self.read()
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop the thread and take a last reading."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()
        self.read()

    def _loop(self) -> None:
        while not self._stop.wait(self.poll_s):
            self.read()

    def read(self) -> None:
        """One reading of every zone, added to the series."""
        t = time.monotonic_ns()
        for i, zone in enumerate(self.zones):
            try:
                value = int(Path(zone.path, "energy_uj").read_text())
            except (OSError, ValueError):
                self.read_errors += 1
                continue
            last = self._last[i]
            if last is not None:
                self._total_uj += int(powercap.energy_delta(last, value, zone.max_energy_range_uj))
            self._last[i] = value
        self._t.append(t)
        self._uj.append(self._total_uj)

    def series(self) -> tuple[np.ndarray, np.ndarray]:
        """Reading times (ns, CLOCK_MONOTONIC) and cumulative microjoules."""
        return np.array(self._t, np.int64), np.array(self._uj, np.float64)

    def between(self, t_start_ns: np.ndarray, t_end_ns: np.ndarray) -> np.ndarray:
        """Microjoules used between each pair of times (interpolated between
        readings; times outside the readings count from the nearest one)."""
        t, uj = self.series()
        if len(t) < 2:
            return np.full(len(t_start_ns), np.nan)
        return np.interp(t_end_ns, t, uj) - np.interp(t_start_ns, t, uj)


@dataclass
class PhaseEnergy:
    """A sink keeping each complete interval, for energy per interval and phase."""

    meter: EnergyMeter
    _parts: list[tuple[np.ndarray, ...]] = field(default_factory=list)

    def write(self, intervals: Intervals) -> None:
        if len(intervals) and not intervals.partial:
            self._parts.append((intervals.index, intervals.phase, intervals.t_start_ns,
                                intervals.t_end_ns, intervals.instructions))

    def close(self) -> None:
        pass

    def _columns(self):
        if not self._parts:
            return (np.empty(0, np.int64),) * 5
        return tuple(np.concatenate(c) for c in zip(*self._parts))

    def per_interval_uj(self) -> dict[int, float]:
        """Microjoules by interval index (call after the meter has stopped)."""
        index, _, t0, t1, _ = self._columns()
        return dict(zip(index.tolist(), self.meter.between(t0, t1).tolist()))

    def per_phase(self) -> dict[int, dict]:
        """Per phase: ``energy_j`` and, where instructions were counted,
        ``energy_j_per_100m``."""
        index, phase, t0, t1, instructions = self._columns()
        energy = self.meter.between(t0, t1) / 1e6
        out = {}
        for p in np.unique(phase).tolist():
            mine = phase == p
            counted = mine & (instructions > 0)
            n = int(instructions[counted].sum())
            out[p] = {"energy_j": float(energy[mine].sum()),
                      "energy_j_per_100m": (float(energy[counted].sum()) * PER_INSTRUCTIONS / n
                                            if n else None)}
        return out
