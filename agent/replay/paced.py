"""A recorded trace replayed at a chosen speed: the daemon's replay source.

Batches are cut into slices of about half a second of wall time (live
sources wake the daemon about as often), and each slice is handed on when
the replay clock reaches its last sample: at
speed 1 a trace replays in real time, at speed 100 a hundred times faster,
and at speed 0 as fast as the reader goes.  ``clock_ns`` maps a sample's
time to the monotonic time it was due, so that the daemon can tell its lag.
"""

from __future__ import annotations

import threading
import time
from typing import Iterator

import numpy as np

from ..core.batch import SampleBatch

SLICE_S = 0.5


class PacedReplay:
    """A :class:`~phasewatch.core.source.Source` over another source, paced."""

    def __init__(self, source, speed: float = 1.0):
        self.source = source
        self.speed = float(speed)
        self.metadata = source.metadata
        self.signals = tuple(getattr(source, "signals", ()))
        self._stop = threading.Event()
        self._origin: tuple[int, int] | None = None      # (first t_ns, monotonic ns then)

    def clock_ns(self, t_ns: int) -> int:
        """The monotonic time at which the sample taken at ``t_ns`` was due."""
        if self._origin is None:
            return time.monotonic_ns()
        if self.speed <= 0:
            return self._last_due
        t0, m0 = self._origin
        return m0 + int((t_ns - t0) / self.speed)

    def batches(self) -> Iterator[SampleBatch]:
        self._last_due = time.monotonic_ns()
        for batch in self.source.batches():
            if self._stop.is_set():
                return
            if len(batch) == 0:
                continue
            if self._origin is None:
                self._origin = (int(batch["t_ns"][0]), time.monotonic_ns())
            if self.speed <= 0:
                self._last_due = time.monotonic_ns()
                yield batch
                continue
            yield from self._paced(batch)

    def _paced(self, batch: SampleBatch) -> Iterator[SampleBatch]:
        t = batch["t_ns"]
        step = int(SLICE_S * 1e9 * self.speed)
        cuts = np.searchsorted(t, np.arange(int(t[0]) + step, int(t[-1]) + 1, step), side="right")
        start = 0
        for stop in [*cuts.tolist(), len(t)]:
            if stop <= start:
                continue
            wait = (self.clock_ns(int(t[stop - 1])) - time.monotonic_ns()) / 1e9
            if wait > 0 and self._stop.wait(wait):
                return
            yield batch.slice(start, stop)
            start = stop

    def stats(self) -> dict[str, int]:
        return self.source.stats()

    def stop(self) -> None:
        """End the replay at the next slice (from another thread)."""
        self._stop.set()

    def close(self) -> None:
        self.stop()
        self.source.close()
