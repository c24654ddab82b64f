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

Where every reader offers its reads as plain preads (the MSR device, RAPL's
sysfs counter) the ticks run in compiled code (:mod:`.tick_loop`), a batch
of them per call, and Python only scatters each batch's values into the
blocks.  What is left per tick is the wake-up itself, which on a virtual
machine costs tens of µs (the timer is virtualised): :meth:`Sampler.tick_cost`
measures it, and :mod:`.budget` lowers the rate where 1 kHz does not fit.
"""

from __future__ import annotations

import collections
import ctypes
import queue
import statistics
import threading
import time
from typing import Iterator, Sequence

import numpy as np

from phasewatch.core.batch import SampleBatch

from . import budget, tick_loop

CLOCK_MONOTONIC, TIMER_ABSTIME = 1, 1
#: What :meth:`Sampler.next_batch` returns once the sampler has ended.
END = "end"
#: A sampler with a budget hands over a batch about this many times a second,
#: and checks its own CPU time every ADAPT_WINDOW_S.
BATCHES_PER_S = 1
ADAPT_WINDOW_S = 1.0
#: The rest of the agent's CPU time is taken as the median of this many
#: windows (start-up and the odd window with two batches left out), and only
#: once that many have passed.
REST_WINDOWS = 3


def batch_ticks_at(rate_hz: int) -> int:
    return max(1, rate_hz // BATCHES_PER_S)
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
    ``share``: the share of a core per CPU the sampler may take: while it
    runs it measures its own CPU time and lowers its rate where it takes more
    (:func:`.budget.lower_rate`); None keeps the rate.
    ``compiled``: tick in compiled code (:mod:`.tick_loop`) where every reader
    offers its reads as ops and the library is built; the Python loop otherwise.
    """

    def __init__(self, cpus: Sequence[int], readers: Sequence, rate_hz: int = 1000,
                 batch_ticks: int = 64, max_ticks: int | None = None,
                 queue_batches: int = 256, metadata: dict | None = None,
                 compiled: bool = True, share: float | None = None):
        if not readers:
            raise ValueError("a sampler needs at least one reader")
        self.cpus = np.asarray(list(cpus), np.int32)
        self.readers = list(readers)
        self.period_ns = int(round(1e9 / rate_hz))
        #: the longest period ticked at so far: readings up to this far apart
        self.longest_period_ns = self.period_ns
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
        self._flush = threading.Event()
        self._thread: threading.Thread | None = None
        self._lost_at: dict[int, int] = {}     # cpu -> first tick without it
        self.ticks = 0
        self._next_k = 0
        self._known_lost = 0
        self._start_ns = 0
        self._slices: list[slice] = []
        self.compiled = compiled
        self._loop = None
        self.rate_hz = rate_hz
        self.share = share
        self.register_rate: budget.RegisterRate | None = None
        self._window: tuple[float, float, float, int] | None = None
        self._rest: collections.deque = collections.deque(maxlen=REST_WINDOWS)
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
        loop = self._loop = self._compiled()
        times, blocks = self._blocks()
        i = 0
        self._start_ns = time.monotonic_ns() + self.period_ns
        while not self._stop.is_set():
            want = self.batch_ticks - i
            if self.max_ticks is not None:
                want = min(want, self.max_ticks - self.ticks)
            if loop is not None and not (self._stop.is_set() or self._flush.is_set()):
                loop.stop[0] = 0        # a flush handed over: tick on
            done = self._ticks(loop, times, blocks, i, want)
            i += done
            self.ticks += done
            self._check_lost()
            if self._flush.is_set():
                self._flush.clear()
                if i:
                    self._emit(times[:i], [b[:i] for b in blocks])
                    times, blocks = self._blocks()
                    i = 0
            elif i == self.batch_ticks or self.ticks == self.max_ticks:
                self._emit(times[:i], [b[:i] for b in blocks])
                self._adapt()
                times, blocks = self._blocks()
                i = 0
            if self.ticks == self.max_ticks:
                break
        if i:
            self._emit(times[:i], [b[:i] for b in blocks])
        self._queue.put(None)

    def _compiled(self):
        """The compiled tick loop over every reader's ops, or None where a
        reader has none (the perf msr PMU, a substituted pread) or the library
        is not built: the Python loop then reads."""
        if not self.compiled:
            return None
        fn = tick_loop.load()
        if fn is None or not all(hasattr(r, "ops") and r.ops() is not None for r in self.readers):
            return None
        loop = tick_loop.CompiledTicks(fn, self.batch_ticks)
        self._plan(loop)
        return loop

    def _plan(self, loop) -> None:
        """Give ``loop`` every reader's ops; remember each reader's slice of them."""
        ops, self._slices = [], []
        for reader in self.readers:
            mine = reader.ops()
            self._slices.append(slice(len(ops), len(ops) + len(mine)))
            ops += mine
        loop.set_ops(ops)

    def _ticks(self, loop, times, blocks, i: int, want: int) -> int:
        """Up to ``want`` ticks into rows ``i``... of the blocks; how many were done."""
        if loop is None:
            return self._python_ticks(times, blocks, i, want)
        loop.next_k[0] = self._next_k
        done = loop.run(self._start_ns, self.period_ns, want)
        self._next_k = int(loop.next_k[0])
        self.missed_ticks, self.max_late_ns = int(loop.missed[0]), int(loop.max_late_ns[0])
        times[i:i + done] = loop.times[:done]
        lost_before = self._lost_count()
        for reader, block, part in zip(self.readers, blocks, self._slices):
            reader.scatter(loop.values[:done, part], loop.errnos[:done, part], block[i:i + done])
        if self._lost_count() != lost_before:
            self._plan(loop)
        return done

    def _python_ticks(self, times, blocks, i: int, want: int) -> int:
        clock, period, readers = time.monotonic_ns, self.period_ns, self.readers
        k = self._next_k
        for row in range(i, i + want):
            if self._stop.is_set() or self._flush.is_set():
                self._next_k = k
                return row - i
            deadline = self._start_ns + k * period
            sleep_until(deadline)
            now = clock()
            late = now - deadline
            if late >= period:                      # woke past the next deadline
                skipped = late // period
                self.missed_ticks += skipped
                k += skipped
            elif late > self.max_late_ns:
                self.max_late_ns = late
            times[row] = now
            for reader, block in zip(readers, blocks):
                reader.read(block[row])
            k += 1
            if self._lost_count() != self._known_lost:     # a CPU went: end the chunk here
                self._next_k = k
                return row + 1 - i
        self._next_k = k
        return want

    def _lost_count(self) -> int:
        return sum(len(r.lost_cpus) for r in self.readers if hasattr(r, "lost_cpus"))

    def _check_lost(self) -> None:
        lost = self._lost_count()
        if lost != self._known_lost:
            self._known_lost = lost
            self._note_lost([r for r in self.readers if hasattr(r, "lost_cpus")], self.ticks - 1)

    def set_rate(self, rate_hz: int, batch_ticks: int | None = None) -> None:
        """Tick at ``rate_hz`` from the next tick on (between batches)."""
        self.rate_hz = rate_hz
        self.period_ns = int(round(1e9 / rate_hz))
        self.longest_period_ns = max(self.longest_period_ns, self.period_ns)
        self.metadata["sample_rate_hz"] = rate_hz
        if batch_ticks is not None:
            self.batch_ticks = batch_ticks
        self._start_ns = time.monotonic_ns() + self.period_ns
        self._next_k = 0

    def _adapt(self) -> None:
        """Every ADAPT_WINDOW_S: the sampler thread's own CPU time per CPU,
        and the rest of the agent's; a lower rate where the sampler takes
        more than what the budget leaves it, a step higher where the rest has
        left room again (after start-up, say)."""
        if self.share is None:
            return
        now, own, process = time.monotonic(), time.thread_time(), time.process_time()
        if self._window is None:
            self._window = (now, own, process, self.ticks)
            return
        wall = now - self._window[0]
        if wall < ADAPT_WINDOW_S:
            return
        used, everything = own - self._window[1], process - self._window[2]
        ticks = self.ticks - self._window[3]
        self._window = (now, own, process, self.ticks)
        cpus = len(self.cpus)
        share = used / wall / cpus
        self._rest.append(max(0.0, everything - used) / wall / cpus)
        if self.register_rate is not None:
            self.register_rate.tick_cost_s = used / max(ticks, 1)
        allowed = self._allowed_share()
        if self.register_rate is not None:
            self.register_rate.allowed_share = allowed
        rate = budget.lower_rate(self.rate_hz, share, allowed) if share > allowed else \
            budget.higher_rate(self.rate_hz, self._requested_hz(), share, allowed)
        if rate != self.rate_hz:
            self._change_rate(rate)
        self._describe_rate()

    def _allowed_share(self) -> float:
        """What the rest of the agent leaves of ``share``: as measured, once
        it has been, and as assumed before."""
        if len(self._rest) < REST_WINDOWS:
            return budget.register_share(share=self.share)
        return budget.register_share(statistics.median(self._rest), self.share)

    def _requested_hz(self) -> int:
        return self.register_rate.requested_hz if self.register_rate is not None else self.rate_hz

    def _change_rate(self, rate_hz: int) -> None:
        self.set_rate(rate_hz, batch_ticks=batch_ticks_at(rate_hz))
        if self.register_rate is not None:
            self.register_rate.rate_hz = rate_hz
            self.register_rate.tick_cost_s = 0.0

    def set_register_rate(self, chosen: budget.RegisterRate) -> None:
        """Start at ``chosen``'s rate; the metadata says why."""
        self.register_rate = chosen
        self.set_rate(chosen.rate_hz, batch_ticks=batch_ticks_at(chosen.rate_hz))
        self._describe_rate()

    def _describe_rate(self) -> None:
        if self.register_rate is not None:
            self.metadata["register_rate"] = {**self.register_rate.as_dict(),
                                              "said": self.register_rate.describe()}

    def tick_cost(self, ticks: int = 50) -> float:
        """CPU seconds one tick costs this thread at ``rate_hz``: the wake-up,
        the reads and the loop, measured over ``ticks`` ticks before the run
        starts (so that the rate can be lowered to fit the budget)."""
        loop = self._compiled()
        times, blocks = np.empty(ticks, np.int64), [np.empty((ticks,) + b.shape[1:], np.uint64)
                                                    for b in self._blocks()[1]]
        if loop is not None and ticks > loop.capacity:
            loop = tick_loop.CompiledTicks(loop._fn, ticks)
            self._plan(loop)
        self._start_ns = time.monotonic_ns() + self.period_ns
        t0 = time.thread_time()
        done = self._ticks(loop, times, blocks, 0, ticks)
        cost = (time.thread_time() - t0) / max(done, 1)
        self._next_k, self.missed_ticks, self.max_late_ns = 0, 0, 0
        return cost

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

    def flush(self) -> None:
        """Hand over the ticks taken so far now, not at the end of the batch."""
        self._flush.set()
        self._stop_compiled()

    def next_batch(self, timeout: float | None = None):
        """The next batch; None if none came within ``timeout`` (0: do not
        wait); :data:`END` once the sampler has ended."""
        self.start()
        try:
            batch = self._queue.get(timeout=timeout) if timeout else self._queue.get_nowait()
        except queue.Empty:
            return None
        if batch is None:
            self._queue.put(None)      # for the next caller too
            return END
        return batch

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
        self._stop_compiled()

    def _stop_compiled(self) -> None:
        if self._loop is not None:
            self._loop.stop[0] = 1

    def close(self) -> None:
        self.stop()
        if self._thread is not None:
            self._thread.join(timeout=2)
        for reader in self.readers:
            reader.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

