"""The periodic sampler: every millisecond, read registers of every watched CPU.

One thread reads all watched CPUs, on absolute deadlines
(``clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME)`` at start + k·period), so
lateness never accumulates into drift; a tick that is already over when the
thread wakes is counted as missed and skipped, not made up.

Why one thread and not one pinned thread per CPU: the msr driver reads another
CPU's register with an inter-processor interrupt (a few µs on the target CPU,
per register), whereas a Python thread per CPU costs a wake-up, a GIL hand-off
and the per-tick interpreter work once per CPU.  At 1 kHz the second is the
larger cost, and msr-safe's batch ioctl reads all CPUs in one call anyway.
The kernel module (kmod/) is the way to sample on the CPU itself.

Each reader (MSR device, msr-safe, perf msr PMU, RAPL energy) fills a slice
of a preallocated ``(ticks, cpus, columns)`` block; every ``batch_ticks``
ticks the blocks become one :class:`SampleBatch` and new blocks are
allocated.  No Python object per value outlives a tick.
"""

from __future__ import annotations

import ctypes
import queue
import threading
import time
from typing import Iterator, Sequence

import numpy as np

from phasewatch.core.batch import SampleBatch

CLOCK_MONOTONIC, TIMER_ABSTIME = 1, 1
PR_SET_TIMERSLACK = 29

_libc = ctypes.CDLL(None, use_errno=True)


class _Timespec(ctypes.Structure):
    _fields_ = [("tv_sec", ctypes.c_long), ("tv_nsec", ctypes.c_long)]


def sleep_until(deadline_ns: int, ts: _Timespec = _Timespec()) -> None:
    """Sleep until CLOCK_MONOTONIC reaches ``deadline_ns`` (absolute)."""
    ts.tv_sec, ts.tv_nsec = divmod(deadline_ns, 1_000_000_000)
    _libc.clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, ctypes.byref(ts), None)


def _tighten_timer_slack() -> None:
    """Wake within ~1 µs of the deadline instead of the default 50 µs."""
    _libc.prctl(PR_SET_TIMERSLACK, 1000, 0, 0, 0)


class Sampler:
    """Samples ``readers`` for ``cpus`` at ``rate_hz`` in a background thread.

    ``readers``: :class:`phasewatch.core.source.Reader` objects, each filling a
    ``(len(cpus), len(columns))`` uint64 array per tick; a reader that can
    lose CPUs lists them in ``lost_cpus``.
    ``max_ticks`` ends the run after that many ticks (tests, benchmarks).
    """

    def __init__(self, cpus: Sequence[int], readers: Sequence, rate_hz: int = 1000,
                 batch_ticks: int = 64, max_ticks: int | None = None,
                 queue_batches: int = 256, metadata: dict | None = None):
        if not readers:
            raise ValueError("a sampler needs at least one reader")
        self.cpus = np.asarray(list(cpus), np.int32)
        self.readers = list(readers)
        self.period_ns = int(round(1e9 / rate_hz))
        self.batch_ticks = batch_ticks
        self.max_ticks = max_ticks
        self.columns = [c for r in self.readers for c in r.columns]
        self.signals = ("t_ns", "cpu") + tuple(self.columns)
        self.metadata = {
            "source": "msr",
            "readers": [r.kind for r in self.readers],
            "cpus": self.cpus.tolist(),
            "sample_rate_hz": rate_hz,
            "signals": {"t_ns": "sampler", "cpu": "sampler",
                        **{c: r.kind for r in self.readers for c in r.columns}},
            "counter_scope": "cpu",
            "clock": "CLOCK_MONOTONIC",
            **(metadata or {}),
        }
        self._queue: queue.Queue = queue.Queue(maxsize=queue_batches)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._lost_at: dict[int, int] = {}     # cpu -> first tick without it
        self.ticks = 0
        self.missed_ticks = 0
        self.dropped_batches = 0
        self.max_late_ns = 0

    # --- the sampling thread ------------------------------------------------

    def start(self) -> "Sampler":
        if self._thread is None:
            thread = threading.Thread(target=self._run, name="phasewatch-sampler", daemon=True)
            thread.start()
            self._thread = thread      # only once started: close() may run on another thread
        return self

    def _blocks(self):
        n, c = self.batch_ticks, len(self.cpus)
        return (np.empty(n, np.int64),
                [np.empty((n, c, len(r.columns)), np.uint64) for r in self.readers])

    def _run(self) -> None:
        _tighten_timer_slack()
        readers = self.readers
        losers = [r for r in readers if hasattr(r, "lost_cpus")]
        known_lost = 0
        clock = time.monotonic_ns
        period = self.period_ns
        times, blocks = self._blocks()
        i = 0
        start = clock() + period
        k = 0
        while not self._stop.is_set():
            deadline = start + k * period
            sleep_until(deadline)
            now = clock()
            late = now - deadline
            if late >= period:                      # woke past the next deadline
                skipped = late // period
                self.missed_ticks += skipped
                k += skipped
            elif late > self.max_late_ns:
                self.max_late_ns = late
            times[i] = now
            for reader, block in zip(readers, blocks):
                reader.read(block[i])
            k += 1
            i += 1
            self.ticks += 1
            lost = sum(len(r.lost_cpus) for r in losers) if losers else 0
            if lost != known_lost:
                known_lost = lost
                self._note_lost(losers, self.ticks - 1)
            if i == self.batch_ticks or self.ticks == self.max_ticks:
                self._emit(times[:i], [b[:i] for b in blocks])
                times, blocks = self._blocks()
                i = 0
            if self.ticks == self.max_ticks:
                break
        if i:
            self._emit(times[:i], [b[:i] for b in blocks])
        self._queue.put(None)

    def _note_lost(self, losers, tick: int) -> None:
        for reader in losers:
            for cpu in reader.lost_cpus:
                self._lost_at.setdefault(int(cpu), tick)

    def _emit(self, times: np.ndarray, blocks: list[np.ndarray]) -> None:
        batch = self._build(times, blocks)
        try:
            self._queue.put_nowait(batch)
        except queue.Full:
            self.dropped_batches += 1

    def _build(self, times: np.ndarray, blocks: list[np.ndarray]) -> SampleBatch:
        """Rows are tick-major: (tick 0, cpu 0), (tick 0, cpu 1), ..."""
        nticks, ncpu = len(times), len(self.cpus)
        cols = {"t_ns": np.repeat(times, ncpu), "cpu": np.tile(self.cpus, nticks)}
        for reader, block in zip(self.readers, blocks):
            flat = block.reshape(nticks * ncpu, len(reader.columns))
            for j, name in enumerate(reader.columns):
                cols[name] = flat[:, j]
        if self._lost_at:
            cols = self._drop_lost(cols, nticks)
        return SampleBatch(cols)

    def _drop_lost(self, cols: dict, nticks: int) -> dict:
        first_tick = self.ticks - nticks
        tick = np.repeat(np.arange(first_tick, first_tick + nticks), len(self.cpus))
        keep = np.ones(len(tick), bool)
        for cpu, lost_at in self._lost_at.items():
            keep &= ~((cols["cpu"] == cpu) & (tick >= lost_at))
        return {n: c[keep] for n, c in cols.items()}

    # --- the Source interface -------------------------------------------------

    def batches(self) -> Iterator[SampleBatch]:
        self.start()
        while True:
            batch = self._queue.get()
            if batch is None:
                return
            yield batch

    def stats(self) -> dict[str, int]:
        """``samples``: rows taken; ``lost_samples``: rows of missed ticks and of
        batches the queue had no room for; ``errors``: values the readers could
        not read (each reader's count also under ``<kind>_errors``)."""
        ncpu = len(self.cpus)
        out = {"samples": self.ticks * ncpu,
               "lost_samples": (self.missed_ticks + self.dropped_batches * self.batch_ticks) * ncpu,
               "errors": 0, "ticks": self.ticks, "missed_ticks": self.missed_ticks,
               "dropped_batches": self.dropped_batches, "max_late_ns": self.max_late_ns,
               "cpus_lost": len(self._lost_at)}
        for reader in self.readers:
            errors = reader.stats()["errors"]
            out["errors"] += errors
            out[f"{reader.kind}_errors"] = out.get(f"{reader.kind}_errors", 0) + errors
        return out

    @property
    def lost_cpus(self) -> list[int]:
        return sorted(self._lost_at)

    def stop(self) -> None:
        self._stop.set()

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=2)
        for reader in self.readers:
            reader.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

