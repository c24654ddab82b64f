"""Each phase's IP samples as a pprof profile, labelled by phase, interval,
thread and CPU.

As a sink, :class:`PhaseProfile` takes every batch before the pipeline sees
it, and the intervals that batch completed.  Interval k holds the next
``samples[k]`` rows after those of interval k-1 (as in :mod:`.phase_functions`),
so rows wait until their interval is classified; then they are counted per
(interval, phase, IP, thread, CPU).  Rows of the trailing partial interval
belong to no phase and are left out, as in the phase table.

:meth:`PhaseProfile.build` symbolizes the IPs the way the phase table does
(:class:`~.symbols.Symbolizer`) and gives a
:class:`~phasewatch.formats.pprof.ProfileBuilder`: sample types ``samples``
(count) and ``cpu`` (nanoseconds: samples times the sampling period), plus
``energy`` (microjoules) where each interval's energy is known, shared among
its samples.  Given a path, closing the sink writes the profile there.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable
from typing import Mapping as MappingType

import numpy as np

from ..core.batch import KERNEL_START, SampleBatch
from ..core.pipeline import Intervals
from ..core.source import Sink
from ..errors import UserError
from .sample_names import each_process, naming
from .symbolizer import KERNEL, Symbolizer

if TYPE_CHECKING:   # the pprof writer loads with --pprof (run needs only realtime_offset_ns)
    from ..formats.pprof import ProfileBuilder, ProfileMapping
    from ..core.source import Classified

ROW = np.dtype([("interval", np.int64), ("phase", np.int64), ("ip", np.uint64),
                ("tid", np.int64), ("cpu", np.int64), ("pid", np.int64)])
#: Columns a trace must give for a profile.
COLUMNS = ("ip", "tid", "cpu")


@dataclass
class ProfileFile:
    """Where a profile goes and what it is built with, when the run ends:
    the symbolizer and each interval's energy (µJ by index, or None) as
    they are then."""

    path: str
    symbolizer: Callable[[], Symbolizer]
    energy_uj: Callable[["PhaseProfile"], MappingType[int, float] | None] = lambda profile: None
    realtime_offset_ns: int | None = None
    comments: list[str] = field(default_factory=list)
    inputs: list = field(default_factory=list)
    #: Each phase's name (``run``: from the catalogue or its top functions).
    names: Callable[[], MappingType[int, str]] = lambda: {}


class PhaseProfile(Sink):
    """Per-interval IP sample counts, fed alongside the pipeline."""

    columns = COLUMNS + ("pid",)

    def __init__(self, period_ns: int, file: ProfileFile | None = None):
        self.period_ns = int(period_ns)
        self.file = file
        self._pending: list[np.ndarray] = []   # (ip, tid, cpu) rows not yet in an interval
        self._counted: list[tuple[np.ndarray, np.ndarray]] = []  # unique ROW rows, counts
        self.first_ns: int | None = None
        self.last_ns: int | None = None
        self.times: dict[int, tuple[int, int]] = {}   # interval -> (t_start_ns, t_end_ns)

    @staticmethod
    def check_columns(signals, where: str) -> None:
        missing = [name for name in COLUMNS if name not in signals]
        if missing:
            raise UserError(f"--pprof needs {where}'s {', '.join(missing)} column: "
                            f"record it with 'phasewatch run --record'")

    def batch(self, batch: SampleBatch) -> None:
        rows = np.empty(len(batch), ROW)
        for name in COLUMNS:
            rows[name] = batch[name]
        rows["pid"] = batch["pid"] if "pid" in batch else 0
        self._pending.append(rows)

    def classified(self, c: Classified) -> None:
        self.write(c.intervals)

    def write(self, intervals: Intervals) -> None:
        if len(intervals) == 0 or intervals.partial:
            return
        rows = np.concatenate(self._pending)
        end = int(np.sum(intervals.samples))
        assigned, self._pending = rows[:end], [rows[end:]]
        assigned["interval"] = np.repeat(intervals.index, intervals.samples)
        assigned["phase"] = np.repeat(intervals.phase, intervals.samples)
        unique, counts = np.unique(assigned, return_counts=True)
        self._counted.append((unique, counts))
        self.times.update(zip(intervals.index.tolist(),
                              zip(intervals.t_start_ns.tolist(), intervals.t_end_ns.tolist())))
        if self.first_ns is None:
            self.first_ns = int(intervals.t_start_ns[0])
        self.last_ns = int(intervals.t_end_ns[-1])

    def close(self, complete: bool = True) -> None:
        f = self.file
        if f is None or not complete:
            return
        builder = self.build(f.symbolizer(), realtime_offset_ns=f.realtime_offset_ns,
                             energy_uj=f.energy_uj(self), comments=f.comments, names=f.names())
        from ..formats.pprof import write_profile
        self.failure = write_profile(f.path, builder, inputs=f.inputs)

    def recorded_energy(self, table: dict[int, tuple[int, int, float]] | None) -> dict | None:
        """Microjoules by interval from a recording's energy table, if every
        interval matches a row of it (index and times); else None."""
        if not table or not self.times:
            return None
        if any(table.get(i, (None, None))[:2] != t for i, t in self.times.items()):
            return None
        return {i: table[i][2] for i in self.times}

    def rows(self) -> tuple[np.ndarray, np.ndarray]:
        """Every counted (interval, phase, ip, tid, cpu) row and its sample count."""
        if not self._counted:
            return np.empty(0, ROW), np.empty(0, np.int64)
        return (np.concatenate([u for u, _ in self._counted]),
                np.concatenate([c for _, c in self._counted]))

    def build(self, symbolizer: Symbolizer, *, realtime_offset_ns: int | None = None,
              energy_uj: MappingType[int, float] | None = None,
              comments=(), names: MappingType[int, str] | None = None) -> ProfileBuilder:
        """The profile; ``realtime_offset_ns`` turns the sample clock into
        CLOCK_REALTIME for the profile's start time, ``energy_uj`` gives
        intervals' energy (by interval index), ``names`` each phase's name
        (the ``phase_name`` label beside the id in ``phase``)."""
        from ..formats.pprof import ProfileBuilder
        rows, counts = self.rows()
        types = [("samples", "count"), ("cpu", "nanoseconds")]
        if energy_uj is not None:
            types.append(("energy", "microjoules"))
        start = self.first_ns if self.first_ns is not None else 0
        builder = ProfileBuilder(
            types, period_type=("cpu", "nanoseconds"), period=self.period_ns,
            time_nanos=start + realtime_offset_ns if realtime_offset_ns is not None else 0,
            duration_nanos=(self.last_ns or start) - start, comments=comments)
        location_of = _locations(builder, symbolizer, rows["pid"], rows["ip"])
        shares = _energy_shares(rows["interval"], counts, energy_uj) if energy_uj else None
        for i, (row, n) in enumerate(zip(rows.tolist(), counts.tolist())):
            interval, phase, ip, tid, cpu, pid = row
            values = [n, n * self.period_ns]
            if energy_uj is not None:
                values.append(int(round(shares[i])) if shares is not None else 0)
            # phase as a number: pprof's -tagfocus phase=6 then takes 6, not 16
            # (a string label is matched as a regexp)
            labels = [("phase", phase), ("interval", str(interval)),
                      ("thread", str(tid)), ("cpu", str(cpu))]
            if names and phase in names:
                labels.append(("phase_name", names[phase]))
            builder.add((location_of[pid, ip],), values, tuple(labels))
        return builder


def _energy_shares(intervals: np.ndarray, counts: np.ndarray,
                   energy_uj: MappingType[int, float]) -> np.ndarray:
    """Each row's part of its interval's energy, by its share of the samples."""
    keys, inverse = np.unique(intervals, return_inverse=True)
    totals = np.bincount(inverse, weights=counts)[inverse]
    energy = np.array([energy_uj.get(int(k), 0.0) for k in keys.tolist()])[inverse]
    return energy * counts / totals


def _locations(builder: ProfileBuilder, symbolizer, pids: np.ndarray,
               ips: np.ndarray) -> dict[tuple[int, int], int]:
    """Location id by (process, IP): one location per address and mapping,
    named in the mappings of the sample's own process where ``symbolizer``
    knows processes apart (``of_process``: a watched tree, or a recording's
    mappings per process)."""
    of_process = getattr(symbolizer, "of_process", lambda pid: symbolizer)
    pairs = np.unique(np.stack([pids.astype(np.uint64), ips.astype(np.uint64)]), axis=1) \
        if len(ips) else np.zeros((2, 0), np.uint64)
    location_of = {}
    with naming(symbolizer):
        for pid, rows, process in each_process(of_process, pairs[0],
                                               first=(0, getattr(symbolizer, "pid", None))):
            location_of.update(((pid, ip), loc) for ip, loc in
                               _process_locations(builder, process, pairs[1][rows]).items())
    return location_of


def _process_locations(builder: ProfileBuilder, symbolizer: Symbolizer,
                       ips: np.ndarray) -> dict[int, int]:
    """Location id by IP of one process: its mapping and function."""
    names = symbolizer.names(ips, offsets=False)
    which = symbolizer.mapping_indices(ips)
    mappings = symbolizer.mappings
    exe = symbolizer.executable
    # mapping[0] is the main binary for pprof: give its ids out first.
    order = sorted(set(which[which >= 0].tolist()),
                   key=lambda i: (exe is None or (mappings[i].path, mappings[i].inode) != exe, i))
    mapping_ids = {i: builder.mapping(_profile_mapping(symbolizer, mappings[i])) for i in order}
    location_of = {}
    for ip, name, index in zip(ips.tolist(), names.tolist(), which.tolist()):
        if index >= 0:
            m = mappings[index]
            location_of[ip] = builder.location(ip, name, mapping_ids[index],
                                               m.path if m.is_file else "")
        else:
            location_of[ip] = builder.location(ip, KERNEL if ip >= KERNEL_START else name)
    return location_of


def _profile_mapping(symbolizer: Symbolizer, m) -> ProfileMapping:
    from ..formats.pprof import ProfileMapping
    return ProfileMapping(m.start, m.end, m.offset, m.path if m.is_file else m.path or "[anon]",
                          symbolizer.build_id(m))


def period_ns_of(sampling: dict | None) -> int:
    """Nanoseconds of CPU time one sample stands for, from the recorded
    sampling rate (1 ms where none was recorded)."""
    from ..formats.schema import Sampling        # msgspec: only where a profile is written
    return Sampling.of(sampling).period_ns


def realtime_offset_ns() -> int:
    """CLOCK_REALTIME minus CLOCK_MONOTONIC (the clock of the samples) now."""
    return time.time_ns() - time.monotonic_ns()
