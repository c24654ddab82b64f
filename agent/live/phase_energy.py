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
from collections import deque
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from ..collectors import powercap
from ..errors import UserError

if TYPE_CHECKING:  # the meter starts before the command does, ahead of numba
    from ..core.pipeline import Intervals

POLL_S = 0.01
#: Readings kept: ten minutes at POLL_S; intervals are settled long before.
KEEP_READINGS = 60_000
#: Instructions per "per 100M instructions" figure.
PER_INSTRUCTIONS = 100_000_000


class EnergyMeter:
    """The package zones under ``root``, read on a thread into a cumulative series."""

    def __init__(self, zones: list[powercap.RaplZone], poll_s: float = POLL_S):
        self.zones = zones
        self.poll_s = poll_s
        self._last: list[int | None] = [None] * len(zones)
        self._total_uj = 0
        self._t: deque[int] = deque(maxlen=KEEP_READINGS)
        self._uj: deque[int] = deque(maxlen=KEEP_READINGS)
        self._lock = threading.Lock()
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
        with self._lock:
            self._t.append(t)
            self._uj.append(self._total_uj)

    @property
    def last_ns(self) -> int | None:
        """When the latest reading was taken."""
        with self._lock:
            return self._t[-1] if self._t else None

    def series(self) -> tuple[np.ndarray, np.ndarray]:
        """Reading times (ns, CLOCK_MONOTONIC) and cumulative microjoules."""
        with self._lock:
            return np.array(self._t, np.int64), np.array(self._uj, np.float64)

    def between(self, t_start_ns: np.ndarray, t_end_ns: np.ndarray) -> np.ndarray:
        """Microjoules used between each pair of times (interpolated between
        readings; times outside the readings count from the nearest one)."""
        t, uj = self.series()
        if len(t) < 2:
            return np.full(len(t_start_ns), np.nan)
        return np.interp(t_end_ns, t, uj) - np.interp(t_start_ns, t, uj)


class PhaseEnergy:
    """A sink giving each complete interval its energy once the meter has
    read past the interval's end, and adding it to the interval's phase.

    ``clock_ns`` maps the samples' times to CLOCK_MONOTONIC (a paced
    replay's); as a listener of the daemon's targets (:meth:`listen`) the
    energy is kept per target and phase."""

    def __init__(self, meter: EnergyMeter, keep_intervals: bool = True):
        self.meter = meter
        self.keep_intervals = keep_intervals    # per-interval energy, for a profile
        self._pending: list[tuple] = []
        self._lock = threading.Lock()
        self.intervals: list[tuple[int, int, int, float]] = []  # index, t0, t1, µJ
        self.phase_uj: dict[tuple[str, int], float] = {}
        self.phase_instructions: dict[tuple[str, int], int] = {}
        self.phase_counted_uj: dict[tuple[str, int], float] = {}

    def write(self, intervals: Intervals, target: str = "", clock_ns=None) -> None:
        if len(intervals) == 0 or intervals.partial:
            return
        t0, t1 = intervals.t_start_ns.copy(), intervals.t_end_ns.copy()
        if clock_ns is not None:
            t0 = np.array([clock_ns(int(t)) for t in t0.tolist()], np.int64)
            t1 = np.array([clock_ns(int(t)) for t in t1.tolist()], np.int64)
        with self._lock:
            self._pending.append((target, intervals.index.copy(), intervals.phase.copy(),
                                  t0, t1, intervals.instructions.copy()))
        self.settle()

    def listen(self, target: str, intervals: Intervals, changes, previous, clock_ns=None) -> None:
        """The daemon's target listener."""
        self.write(intervals, target, clock_ns)

    def close(self) -> None:
        pass

    def settle(self) -> None:
        """Give their energy to the intervals that end before the latest reading."""
        last = self.meter.last_ns
        if last is None:
            return
        with self._lock:
            ready = [p for p in self._pending if p[4][-1] <= last]
            self._pending = [p for p in self._pending if p[4][-1] > last]
            for target, index, phase, t0, t1, instructions in ready:
                self._add(target, index, phase, t0, t1, instructions)

    def finish(self) -> None:
        """Stop the meter (a last reading) and settle every interval."""
        self.meter.stop()
        with self._lock:
            pending, self._pending = self._pending, []
            for target, index, phase, t0, t1, instructions in pending:
                self._add(target, index, phase, t0, t1, instructions)

    def _add(self, target, index, phase, t0, t1, instructions) -> None:
        uj = self.meter.between(t0, t1)
        for i, p, a, b, e, n in zip(index.tolist(), phase.tolist(), t0.tolist(), t1.tolist(),
                                    uj.tolist(), instructions.tolist()):
            if e != e:  # NaN: fewer than two readings
                continue
            key = (target, p)
            if self.keep_intervals:
                self.intervals.append((i, a, b, e))
            self.phase_uj[key] = self.phase_uj.get(key, 0.0) + e
            if n > 0:
                self.phase_instructions[key] = self.phase_instructions.get(key, 0) + n
                self.phase_counted_uj[key] = self.phase_counted_uj.get(key, 0.0) + e

    def per_interval_uj(self) -> dict[int, float]:
        """Microjoules by interval index."""
        with self._lock:
            return {i: e for i, _, _, e in self.intervals}

    def joules(self) -> dict[tuple[str, int], float]:
        """Joules by (target, phase) so far."""
        self.settle()
        with self._lock:
            return {key: uj / 1e6 for key, uj in self.phase_uj.items()}

    def per_phase(self, target: str = "") -> dict[int, dict]:
        """Per phase of ``target``: ``energy_j`` and, where instructions were
        counted, ``energy_j_per_100m``."""
        with self._lock:
            out = {}
            for (t, p), uj in self.phase_uj.items():
                if t != target:
                    continue
                n = self.phase_instructions.get((t, p), 0)
                out[p] = {"energy_j": uj / 1e6,
                          "energy_j_per_100m": (self.phase_counted_uj[(t, p)] / 1e6
                                                * PER_INSTRUCTIONS / n if n else None)}
            return out
