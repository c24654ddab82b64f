"""Two sources as one batch stream on one clock.

The rows are the primary source's (perf's IP samples of the watched
program); each row is given the register values of the secondary source (the
MSR sampler) read last on the same CPU at or before the row's time, an "as
of" join.  Both sources stamp CLOCK_MONOTONIC, so their times compare
directly.  A row whose CPU has no register reading within ``tolerance_ns``
before it gets :data:`~phasewatch.core.batch.MISSING` values, which the decoder
drops like any unread value.

Primary rows newer than the newest secondary reading are held back until the
secondary has caught up (or has ended), so that no row is joined with a
reading older than the one a moment later would give it.
"""

from __future__ import annotations

import queue
import threading
import time
from typing import Iterator

import numpy as np

from phasewatch.core.batch import MISSING, RAW_DTYPES, SampleBatch, concat

from .sampler import END

#: Register readings kept per CPU for the join: far more than the time the
#: primary's rows can lag behind (one wake-up, about half a second).
KEEP_NS = 2_000_000_000
#: How long the end of the run waits for the secondary to pass the last rows.
CATCH_UP_S = 0.3
#: Counters a primary source may keep per thread.
THREAD_COUNTERS = ("instructions", "cycles")


def asof_join(rows: SampleBatch, regs: SampleBatch, columns, tolerance_ns: int) -> SampleBatch:
    """``rows`` with ``columns`` taken from the latest row of ``regs`` of the
    same CPU at or before each row's time (``regs`` in time order per CPU)."""
    n = len(rows)
    out = {name: rows[name] for name in rows.signals if name not in columns}
    joined = {name: np.full(n, MISSING, RAW_DTYPES[name]) for name in columns}
    if n and len(regs):
        t, cpu = rows["t_ns"], rows["cpu"]
        for c in np.unique(cpu):
            mine = np.flatnonzero(cpu == c)
            theirs = np.flatnonzero(regs["cpu"] == c)
            if not len(theirs):
                continue
            reg_t = regs["t_ns"][theirs]
            k = np.searchsorted(reg_t, t[mine], side="right") - 1
            ok = k >= 0
            ok[ok] = t[mine][ok] - reg_t[k[ok]] <= tolerance_ns
            src = theirs[k[ok]]
            for name in columns:
                joined[name][mine[ok]] = regs[name][src]
    out.update(joined)
    return SampleBatch(out)


class ThreadedSource:
    """Any source's batches read on a thread of its own, offered as a
    :class:`~.sampler.Sampler` offers them (``next_batch``)."""

    def __init__(self, source):
        self.source = source
        self.metadata, self.signals = source.metadata, source.signals
        self._queue: queue.Queue = queue.Queue()
        self._thread = threading.Thread(target=self._read, daemon=True, name="phasewatch-merge")

    def _read(self) -> None:
        try:
            for batch in self.source.batches():
                self._queue.put(batch)
        finally:
            self._queue.put(END)

    def start(self) -> None:
        self._thread.start()

    def next_batch(self, timeout: float | None = None):
        try:
            return self._queue.get(timeout=timeout) if timeout else self._queue.get_nowait()
        except queue.Empty:
            return None

    def flush(self) -> None:
        pass

    def stats(self) -> dict[str, int]:
        return self.source.stats()

    def close(self) -> None:
        self.source.close()
        self._thread.join(timeout=2)


class MergedSource:
    """The rows of ``primary`` with ``columns`` of ``secondary`` joined by
    time per CPU.  Ends when the primary ends; closes both.  The secondary is
    a :class:`~.sampler.Sampler`: its batches are taken as the primary's come,
    on the same thread, and at the end it is asked to hand over what it has."""

    def __init__(self, primary, secondary, columns, *, tolerance_ns: int = 20_000_000):
        self.primary = primary
        self.secondary = secondary
        self.columns = tuple(columns)
        self.tolerance_ns = tolerance_ns
        self.signals = tuple(n for n in RAW_DTYPES
                             if n in primary.signals or n in self.columns)
        self.metadata = {
            "source": f"{primary.metadata['source']}+{secondary.metadata['source']}",
            "signals": {**{n: s for n, s in primary.metadata["signals"].items()
                           if n not in self.columns},
                        **{n: secondary.metadata["signals"][n] for n in self.columns}},
            # The registers count per CPU; the primary's own counters (perf's
            # instructions and cycles) may follow threads, and then win.
            "counter_scope": primary.metadata.get("counter_scope", "cpu")
            if set(primary.signals) & set(THREAD_COUNTERS) else "cpu",
            "merged": {"rows_from": primary.metadata["source"],
                       "joined_from": secondary.metadata["source"],
                       "tolerance_ns": tolerance_ns},
            "parts": [primary.metadata, secondary.metadata],
            "not_taken": {**primary.metadata.get("not_taken", {}),
                          **secondary.metadata.get("not_taken", {})},
        }
        self._regs = SampleBatch.empty(("t_ns", "cpu") + self.columns)
        self._secondary_done = False
        self._samples = 0
        if not hasattr(secondary, "next_batch"):
            self.secondary = secondary = ThreadedSource(secondary)
        # Started now, so that the registers are being read before the
        # primary's first sample (the watched program starts after this).
        secondary.start()

    def _take_secondary(self, wait_s: float = 0.0) -> None:
        """The secondary's batches that have come (waiting up to ``wait_s`` for one)."""
        parts = []
        while not self._secondary_done:
            item = self.secondary.next_batch(wait_s if not parts else 0)
            if item is None:
                break
            if item is END:
                self._secondary_done = True
                break
            parts.append(SampleBatch({n: item[n] for n in ("t_ns", "cpu") + self.columns}))
        if parts:
            regs = concat([self._regs] + parts)
            keep = regs["t_ns"] >= regs["t_ns"][-1] - KEEP_NS
            self._regs = regs if keep.all() else SampleBatch({n: c[keep] for n, c in regs.columns.items()})

    def _watermark(self) -> int:
        if self._secondary_done:
            return np.iinfo(np.int64).max
        return int(self._regs["t_ns"][-1]) if len(self._regs) else -1

    def batches(self) -> Iterator[SampleBatch]:
        pending = None
        for batch in self.primary.batches():
            pending = batch if pending is None else concat([pending, batch])
            self._take_secondary()
            ready, pending = self._split(pending)
            if len(ready):
                yield self._join(ready)
        if pending is not None and len(pending):
            last = int(pending["t_ns"].max())
            deadline = time.monotonic() + CATCH_UP_S
            if self._watermark() < last:
                self.secondary.flush()
            while self._watermark() < last and time.monotonic() < deadline:
                self._take_secondary(wait_s=0.05)
            yield self._join(pending)

    def _split(self, pending: SampleBatch) -> tuple[SampleBatch, SampleBatch]:
        """Rows the secondary has caught up with, and the rest."""
        ready = pending["t_ns"] <= self._watermark()
        if ready.all():
            return pending, SampleBatch.empty(pending.signals)
        return (SampleBatch({n: c[ready] for n, c in pending.columns.items()}),
                SampleBatch({n: c[~ready] for n, c in pending.columns.items()}))

    def _join(self, rows: SampleBatch) -> SampleBatch:
        self._samples += len(rows)
        return asof_join(rows, self._regs, self.columns, self._tolerance())

    def _tolerance(self) -> int:
        """How late a reading may be: at least twice the longest period the
        sampler has ticked at, which its budget may lower while it runs."""
        longest = getattr(self.secondary, "longest_period_ns", 0)
        return max(self.tolerance_ns, 2 * longest)

    def stats(self) -> dict[str, int]:
        """The rows are the primary's, so its losses are the stream's; readings
        the secondary missed (a late tick) only leave rows without registers,
        and are counted apart."""
        first, second = self.primary.stats(), self.secondary.stats()
        return {"samples": self._samples,
                "lost_samples": first["lost_samples"],
                "register_readings_lost": second["lost_samples"],
                "errors": first["errors"] + second["errors"]}

    def take_records(self) -> list:
        """The primary's task records (perf's mappings, execs and forks), if it reads them."""
        take = getattr(self.primary, "take_records", None)
        return take() if take is not None else []

    def stop(self) -> None:
        """End the stream soon (the watched process ended, or the watch was
        interrupted): the primary stops, and the secondary keeps reading
        until it has caught up with the primary's last rows (:meth:`close`
        ends it)."""
        if hasattr(self.primary, "stop"):
            self.primary.stop()

    def close(self) -> None:
        self.primary.close()
        self.secondary.close()
