"""The live loop of ``phasewatch run`` and of ``phasewatchd``'s workers:
source thread, bounded queue, driver.

The source thread only reads the sample source and queues each batch.  When
the queue is full it drops the batch and counts it, so a slow consumer (a
trace on a slow disk, a busy terminal) never stalls sampling.

The consumer runs on the calling thread (where signal handlers run) and
hands every batch to the driver (:class:`~phasewatch.core.driver.Driver`):
its sinks first (the trace among them), then the pipeline, then the
classified intervals to the sinks.  The trace thus holds exactly the samples
the pipeline saw, and replays to the same phases, interval for interval.
"""

from __future__ import annotations

import queue
import threading
import time
from typing import TYPE_CHECKING, Callable, Iterable, Iterator

from ..core.batch import SampleBatch

if TYPE_CHECKING:  # not imported at run time: a source thread starts before the kernels load
    from ..core.driver import Classified, Driver
    from .status import StatusLine

#: Batches the queue holds; about a minute of samples at 1 kHz, 64 per batch.
QUEUE_BATCHES = 1024
_END = object()
#: Seconds the consumer waits for a batch before it refreshes the status line
#: anyway: longer than the sources' one-second batches, so that a busy run
#: wakes once per batch and not also on a timeout that drifts beside it.
POLL_S = 1.5


class SourceThread:
    """Reads ``batches`` on a daemon thread into a bounded queue."""

    def __init__(self, batches: Iterable[SampleBatch], capacity: int = QUEUE_BATCHES):
        self._batches = batches
        self._queue: queue.Queue = queue.Queue(maxsize=capacity)
        self._thread = threading.Thread(target=self._read, name="phasewatch-source", daemon=True)
        self.dropped_batches = 0
        self.dropped_samples = 0
        self.error: BaseException | None = None

    def start(self) -> "SourceThread":
        self._thread.start()
        return self

    def _read(self) -> None:
        try:
            for batch in self._batches:
                try:
                    self._queue.put_nowait(batch)
                except queue.Full:
                    self.dropped_batches += 1
                    self.dropped_samples += len(batch)
        except BaseException as exc:  # handed to the consumer, which raises it
            self.error = exc
        finally:
            self._queue.put(_END)  # the consumer drains, so this finds room

    def get(self, timeout: float):
        """The next batch, None after ``timeout`` seconds without one, or
        ``StopIteration`` once the source has ended."""
        try:
            item = self._queue.get(timeout=timeout)
        except queue.Empty:
            return None
        if item is _END:
            if self.error is not None:
                raise self.error
            raise StopIteration
        return item

    def join(self, timeout: float | None = None) -> bool:
        """Whether the thread has ended (within ``timeout``)."""
        self._thread.join(timeout)
        return not self._thread.is_alive()


class LiveRun:
    """Hands one source's queued batches to a driver until the source ends."""

    def __init__(self, source: SourceThread, driver: Driver, *, status: StatusLine | None = None,
                 lost_samples: Callable[[], int] = lambda: 0):
        self.source = source
        self.driver = driver
        self.status = status
        self.lost_samples = lost_samples
        self.stopped = False

    def run(self, poll_s: float = POLL_S) -> None:
        self.driver.run(self.batches(poll_s))

    def batches(self, poll_s: float = POLL_S) -> Iterator[SampleBatch]:
        """The source's batches until it ends or :meth:`stop`; the status line
        is drawn again after each batch that completed intervals, and once a
        second anyway."""
        next_show = time.monotonic() + 1.0
        while not self.stopped:
            try:
                batch = self.source.get(timeout=poll_s)
            except StopIteration:
                return
            if batch is not None:
                count = self.driver.streams.count
                yield batch
                if self.driver.streams.count != count:
                    self._show()
            if time.monotonic() >= next_show:
                next_show = time.monotonic() + 1.0
                self._show()

    def stop(self) -> None:
        """End :meth:`run` within ``poll_s`` (from another thread or a signal handler)."""
        self.stopped = True

    def finish(self) -> list[Classified]:
        """Hand the trailing partial intervals to the sinks; return them."""
        tails = self.driver.finish()
        self._show()
        return tails

    @property
    def dropped_samples(self) -> int:
        return self.source.dropped_samples + self.lost_samples()

    def _show(self) -> None:
        streams = self.driver.streams
        if self.status is not None and self.status.enabled:
            self.status.update(intervals=streams.count, phase=streams.last_phase.get(streams.name),
                               phases=streams.n_phases, dropped=self.dropped_samples,
                               implausible=streams.implausible())
