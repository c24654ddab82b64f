"""Energy per phase from the RAPL package counters (``/sys/class/powercap``).

An :class:`EnergyMeter` reads every package zone's ``energy_uj`` on a thread
every ``POLL_S`` (500 ms) and keeps the running total in microjoules, each
counter's wrap at ``max_energy_range_uj`` undone (a wrap between two reads
at most: RAPL's counters wrap after a minute or more at full power).
Readings carry CLOCK_MONOTONIC times, the clock of the samples.

:class:`PhaseEnergy` is a sink: it splits each reading window's energy among
the phases of the intervals in it, by what it has learnt of their power, and
gives each complete interval and each phase its energy.  The energy is the
packages', not the program's alone: a phase's joules include whatever else
those packages ran.

Why not read every few milliseconds and interpolate: each reading is a
wake-up of a thread, and a hundred a second cost several per cent of a core
(``benchmarks/bench_run.py`` with ``--powercap-root``), against a budget of
0.5 % for everything the agent does.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from ..collectors import powercap
from ..core.source import Sink
from ..errors import UserError

if TYPE_CHECKING:  # the meter starts before the command does, ahead of numba
    from ..core.source import Classified
    from ..core.pipeline import Intervals

POLL_S = 0.5
#: What a target whose source ended has known about: all time to come.
ENDED = 2**62
#: Readings kept: ten minutes at POLL_S; intervals are settled long before.
KEEP_READINGS = 1_200
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

    def series(self) -> tuple[np.ndarray, np.ndarray]:
        """Reading times (ns, CLOCK_MONOTONIC) and cumulative microjoules."""
        with self._lock:
            return np.array(self._t, np.int64), np.array(self._uj, np.float64)


#: A phase takes part in a window's split as known once it has this much of
#: a window's time behind its power estimate (a sliver of a window says little).
MIN_ESTIMATE_SHARE = 0.1
#: Time outside every interval of a target (before its first, between a
#: daemon's targets' intervals) counts as a phase of its own, never kept.
OUTSIDE = None


class _Target:
    """One target's intervals waiting for their energy, and what is known of
    each of its phases' power."""

    def __init__(self):
        self.pending: list[list] = []   # [index, phase, t0, t1, instructions, µJ]
        self.known_until = 0            # the latest interval end received
        self.done_until: int | None = None    # the end of the last window split
        self.power: dict = {}           # phase -> [µJ, ns] of the windows it had alone


class PhaseEnergy(Sink):
    """A sink giving each complete interval its energy and adding it to the
    interval's phase.

    The meter reads the counters a few times a second, so a reading window
    spans several intervals, and where a phase changes inside one, how its
    energy divides is not read but estimated: each phase's power is learnt
    from the windows it had alone (or as the one phase of a window whose
    other phases' power is known), and each window's energy is split among
    the phases in it in proportion to their power times their time in it
    (by time alone among phases not yet known), then among each phase's
    intervals by their time.  A window's energy is split once, so totals only
    grow.  Exact where each phase draws a steady power; time outside the
    target's intervals takes its share and is dropped.

    Energy is kept per stream (a daemon's target) and phase (the daemon's
    stable ids: :meth:`drop` forgets a phase retired for good, :meth:`forget`
    a target gone).  One run's sink
    (``one_run``) keeps each interval's energy too (for a profile) and, when
    closed, stops the meter and settles every interval; the daemon's is
    shared by its workers, each through :meth:`bound`."""

    def __init__(self, meter: EnergyMeter, one_run: bool = True):
        self.meter = meter
        self.one_run = one_run
        self.keep_intervals = one_run      # per-interval energy, for a profile
        self._targets: dict[str, _Target] = {}
        self._lock = threading.Lock()
        self.intervals: list[tuple[int, int, int, float]] = []  # index, t0, t1, µJ
        self.phase_uj: dict[tuple[str, int], float] = {}
        self.phase_instructions: dict[tuple[str, int], int] = {}
        self.phase_counted_uj: dict[tuple[str, int], float] = {}
        self._finished = False

    def classified(self, c: Classified) -> None:
        self.write(c.intervals, c.stream)

    def bound(self, clock_ns=None) -> Sink:
        """A sink for one of the daemon's workers, whose samples' times
        ``clock_ns`` maps to CLOCK_MONOTONIC (a paced replay's); closing it
        leaves the meter running."""
        return _BoundEnergy(self, clock_ns)

    def write(self, intervals: Intervals, target: str = "", clock_ns=None) -> None:
        if len(intervals) == 0 or intervals.partial:
            return
        t0, t1 = intervals.t_start_ns.tolist(), intervals.t_end_ns.tolist()
        if clock_ns is not None:
            t0, t1 = [clock_ns(int(t)) for t in t0], [clock_ns(int(t)) for t in t1]
        with self._lock:
            state = self._targets.setdefault(target, _Target())
            if state.known_until == ENDED:      # its source ended, and another took its place
                state.known_until = 0
            for row in zip(intervals.index.tolist(), intervals.phase.tolist(), t0, t1,
                           intervals.instructions.tolist()):
                state.pending.append([*row, 0.0])
            state.known_until = max(state.known_until, max(t1))
        self.settle()

    def close(self, complete: bool = True) -> None:
        if self.one_run:
            self.finish()

    def settle(self, final: bool = False) -> None:
        """Split the windows whose intervals are all known (every window,
        ``final``), and hand over the intervals they complete."""
        t, uj = self.meter.series()
        with self._lock:
            for target, state in self._targets.items():
                self._split_windows(target, state, t, uj, final)

    def end(self, targets) -> None:
        """These targets' sources ended: their last windows are split as the
        readings after them come (:meth:`settle`, which the daemon's tick calls)."""
        with self._lock:
            for target in targets:
                if target in self._targets:
                    self._targets[target].known_until = ENDED
        self.settle()

    def drop(self, target: str, phases) -> None:
        """Forget what was learnt of these phases of ``target`` (retired
        for good: their ids will not come back in this target's series)."""
        with self._lock:
            state = self._targets.get(target)
            for p in phases:
                if state is not None:
                    state.power.pop(p, None)
                for kept in (self.phase_uj, self.phase_instructions, self.phase_counted_uj):
                    kept.pop((target, p), None)

    def forget(self, targets) -> None:
        """Forget every target in ``targets`` (ended, and gone from the metrics)."""
        targets = set(targets)
        with self._lock:
            for t in targets:
                self._targets.pop(t, None)
            for kept in (self.phase_uj, self.phase_instructions, self.phase_counted_uj):
                for key in [k for k in kept if k[0] in targets]:
                    del kept[key]

    def finish(self) -> None:
        """Stop the meter (a last reading) and settle every interval; once."""
        if self._finished:
            return
        self._finished = True
        self.meter.stop()
        self.settle(final=True)

    # --- splitting -------------------------------------------------------

    def _split_windows(self, target: str, state: _Target, t, uj, final: bool) -> None:
        if not state.pending or len(t) < 2:
            return
        if state.done_until is None:
            first = state.pending[0][2]
            state.done_until = int(t[max(0, np.searchsorted(t, first, side="right") - 1)])
        k = int(np.searchsorted(t, state.done_until, side="left"))
        while k + 1 < len(t) and (final or t[k + 1] <= state.known_until):
            self._split(state, int(t[k]), int(t[k + 1]), float(uj[k + 1] - uj[k]))
            state.done_until = int(t[k + 1])
            k += 1
        waiting = []
        for row in state.pending:
            if final or row[3] <= state.done_until:
                self._complete(target, *row)
            else:
                waiting.append(row)
        state.pending = waiting

    def _split(self, state: _Target, a: int, b: int, energy: float) -> None:
        overlap = [(row, min(row[3], b) - max(row[2], a)) for row in state.pending]
        overlap = [(row, ns) for row, ns in overlap if ns > 0]
        times: dict = {}
        for row, ns in overlap:
            times[row[1]] = times.get(row[1], 0) + ns
        outside = (b - a) - sum(times.values())
        if outside > (b - a) * 0.01:
            times[OUTSIDE] = outside
        shares = self._shares(state, times, energy, b - a)
        for row, ns in overlap:
            row[5] += shares[row[1]] * ns / times[row[1]]

    def _shares(self, state: _Target, times: dict, energy: float, window: int) -> dict:
        """Each phase's part of a window's ``energy`` (µJ), given its time in it."""
        power = {p: e / ns for p, (e, ns) in state.power.items()
                 if ns >= MIN_ESTIMATE_SHARE * window}
        known = {p: power[p] * ns for p, ns in times.items() if p in power}
        unknown = {p: ns for p, ns in times.items() if p not in power}
        expected = sum(known.values())
        if not unknown or expected > energy:    # scaled to what was read
            scale = energy / expected if expected > 0 else 0.0
            shares = {p: e * scale for p, e in known.items()}
            shares.update({p: 0.0 for p in unknown})
        else:
            left, unknown_ns = energy - expected, sum(unknown.values())
            shares = {**known, **{p: left * ns / unknown_ns for p, ns in unknown.items()}}
        if len(unknown) == 1 or len(times) == 1:   # what this window says of a power
            learnt = next(iter(unknown)) if len(unknown) == 1 else next(iter(times))
            if learnt is not OUTSIDE:
                sums = state.power.setdefault(learnt, [0.0, 0])
                sums[0] += shares[learnt]
                sums[1] += times[learnt]
        return shares

    def _complete(self, target, index, phase, t0, t1, instructions, e) -> None:
        key = (target, phase)
        if self.keep_intervals:
            self.intervals.append((index, t0, t1, e))
        self.phase_uj[key] = self.phase_uj.get(key, 0.0) + e
        if instructions > 0:
            self.phase_instructions[key] = self.phase_instructions.get(key, 0) + instructions
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


class _BoundEnergy(Sink):
    def __init__(self, energy: PhaseEnergy, clock_ns):
        self.energy, self.clock_ns = energy, clock_ns
        self.streams: set[str] = set()

    def classified(self, c: Classified) -> None:
        self.streams.add(c.stream)
        self.energy.write(c.intervals, c.stream, self.clock_ns)

    def ended(self) -> None:
        self.energy.end(self.streams)
