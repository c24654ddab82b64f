"""The one batch type that flows from every source to every sink.

A :class:`SampleBatch` holds raw samples as columns: one numpy array per
signal, one row per CPU per tick.  Counters are kept as read (cumulative,
undecoded) so that traces can be decoded again by a better decoder later.

A signal the source does not sample is absent from the batch.  A single value
that could not be read (an EIO, a CPU that went offline) is stored as
:data:`MISSING`; the decoder drops every delta that touches it.
"""

from __future__ import annotations

from typing import Iterable, Mapping

import numpy as np

MISSING = np.uint64(0xFFFF_FFFF_FFFF_FFFF)
#: x86-64 kernel addresses start here (the canonical upper half).  An ``ip``
#: at or above it is no user-space code: a kernel address, or MISSING (the
#: kernel module's mark for a sample taken in kernel mode).
KERNEL_START = np.uint64(0xFFFF_8000_0000_0000)

#: Every raw column a batch may carry, with its dtype, in trace order.
RAW_DTYPES: dict[str, np.dtype] = {
    "t_ns": np.dtype(np.int64),
    "cpu": np.dtype(np.int32),
    "tid": np.dtype(np.int32),
    "ip": np.dtype(np.uint64),
    "perf_status": np.dtype(np.uint64),
    "aperf": np.dtype(np.uint64),
    "mperf": np.dtype(np.uint64),
    "pperf": np.dtype(np.uint64),
    "tsc": np.dtype(np.uint64),
    "instructions": np.dtype(np.uint64),
    "cycles": np.dtype(np.uint64),
    "c3": np.dtype(np.uint64),
    "c6": np.dtype(np.uint64),
    "c7": np.dtype(np.uint64),
    "energy_pkg_uj": np.dtype(np.uint64),
    "vcore_mv": np.dtype(np.uint64),      # core voltage from hwmon (AMD Zen: k10temp Vcore)
    "pid": np.dtype(np.int32),            # the sampled thread's process (perf); 0 where unknown
}

REQUIRED_COLUMNS = ("t_ns", "cpu")
#: Columns the CSV format must always carry (docs/formats.md); the rest are optional.
CSV_COLUMNS = ("t_ns", "cpu", "tid", "ip", "perf_status", "aperf", "mperf",
               "pperf", "tsc", "instructions", "cycles")
OPTIONAL_CSV_COLUMNS = ("c3", "c6", "c7", "energy_pkg_uj", "vcore_mv", "pid")
#: Columns that are counters or registers, where MISSING marks an unread value.
COUNTER_COLUMNS = tuple(n for n in RAW_DTYPES if n not in ("t_ns", "cpu", "tid", "pid"))
#: Valid ranges of the id columns: Linux's largest NR_CPUS, and PID_MAX_LIMIT.
ID_RANGES = {"cpu": (0, 8191), "tid": (0, 4_194_304), "pid": (0, 4_194_304)}


class BatchError(ValueError):
    """A batch whose columns break the contract."""


class SampleBatch:
    """Raw samples as columns.  Immutable once built; cheap to slice."""

    __slots__ = ("_columns", "_length")

    def __init__(self, columns: Mapping[str, np.ndarray]):
        missing = [n for n in REQUIRED_COLUMNS if n not in columns]
        if missing:
            raise BatchError(f"batch lacks required column(s): {', '.join(missing)}")
        unknown = [n for n in columns if n not in RAW_DTYPES]
        if unknown:
            raise BatchError(f"unknown column(s): {', '.join(unknown)}")
        length = len(columns["t_ns"])
        ordered = {}
        for name in RAW_DTYPES:
            if name not in columns:
                continue
            col = np.asarray(columns[name])
            if col.ndim != 1 or len(col) != length:
                raise BatchError(f"column {name!r} has shape {col.shape}, expected ({length},)")
            if col.dtype != RAW_DTYPES[name]:
                col = col.astype(RAW_DTYPES[name])
            ordered[name] = col
        self._columns = ordered
        self._length = length

    @classmethod
    def empty(cls, signals: Iterable[str] = REQUIRED_COLUMNS) -> "SampleBatch":
        names = set(signals) | set(REQUIRED_COLUMNS)
        return cls({n: np.empty(0, RAW_DTYPES[n]) for n in names})

    def __len__(self) -> int:
        return self._length

    def __getitem__(self, name: str) -> np.ndarray:
        return self._columns[name]

    def __contains__(self, name: str) -> bool:
        return name in self._columns

    def get(self, name: str, default=None):
        return self._columns.get(name, default)

    @property
    def signals(self) -> tuple[str, ...]:
        """Names of the columns present, in canonical order."""
        return tuple(self._columns)

    @property
    def columns(self) -> Mapping[str, np.ndarray]:
        return self._columns

    def slice(self, start: int, stop: int) -> "SampleBatch":
        return SampleBatch({n: c[start:stop] for n, c in self._columns.items()})

    def __repr__(self) -> str:
        return f"SampleBatch({self._length} rows, {', '.join(self.signals)})"


def first_bad_id(batch: SampleBatch) -> tuple[int, str, int] | None:
    """(row, column, value) of the first CPU or thread id outside
    :data:`ID_RANGES`, or None."""
    worst = None
    for name, (lo, hi) in ID_RANGES.items():
        col = batch.get(name)
        if col is None or len(col) == 0 or (lo <= col.min() and col.max() <= hi):
            continue
        row = int(np.flatnonzero((col < lo) | (col > hi))[0])
        if worst is None or row < worst[0]:
            worst = (row, name, int(col[row]))
    return worst


def id_problem(name: str, value: int) -> str:
    lo, hi = ID_RANGES[name]
    kind = {"cpu": "CPU", "tid": "thread"}.get(name, "process")
    return f"column {name!r}: {value} is not a {kind} id ({lo}..{hi})"


def concat(batches: Iterable[SampleBatch]) -> SampleBatch:
    """Join batches that carry the same signals."""
    batches = [b for b in batches]
    if not batches:
        return SampleBatch.empty()
    signals = batches[0].signals
    for b in batches[1:]:
        if b.signals != signals:
            raise BatchError(f"cannot join batches with signals {signals} and {b.signals}")
    return SampleBatch({n: np.concatenate([b[n] for b in batches]) for n in signals})
