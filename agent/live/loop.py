"""The live loop of ``phasewatch run``: source thread, bounded queue, pipeline, sinks.

The source thread only reads the sample source and queues each batch.  When
the queue is full it drops the batch and counts it, so a slow consumer (a
trace on a slow disk, a busy terminal) never stalls sampling.

The consumer runs on the calling thread (where signal handlers run) and
hands every batch first to the trace, then to the pipeline, then the
classified intervals to the sinks.  The trace thus holds exactly the samples
the pipeline saw, and replays to the same phases, interval for interval.
"""

from __future__ import annotations

import queue
import threading
import time
from typing import TYPE_CHECKING, Callable, Iterable, Sequence

from ..core.batch import SampleBatch

if TYPE_CHECKING:  # not imported at run time: a source thread starts before the kernels load
    from ..core.pipeline import Intervals, Pipeline
    from ..core.source import Sink
    from ..formats.trace import TraceWriter
    from .phase_functions import PhaseFunctions
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
    """Feeds one source's batches through the pipeline to the sinks until the source ends."""

    def __init__(self, source: SourceThread, pipeline: Pipeline, *,
                 sinks: Sequence[Sink] = (), trace: TraceWriter | None = None,
                 functions: PhaseFunctions | None = None, status: StatusLine | None = None,
                 lost_samples: Callable[[], int] = lambda: 0,
                 taps: Sequence[Callable[[SampleBatch], None]] = ()):
        self.source = source
        self.pipeline = pipeline
        self.sinks = list(sinks)
        self.trace = trace
        self.functions = functions
        self.status = status
        self.lost_samples = lost_samples
        self.taps = list(taps)
        self.phase: int | None = None
        self.stopped = False

    def run(self, poll_s: float = POLL_S) -> None:
        next_show = time.monotonic() + 1.0
        while not self.stopped:
            try:
                batch = self.source.get(timeout=poll_s)
            except StopIteration:
                break
            if batch is not None:
                self.consume(batch)
            if time.monotonic() >= next_show:
                next_show = time.monotonic() + 1.0
                self._show()

    def stop(self) -> None:
        """End :meth:`run` within ``poll_s`` (from another thread or a signal handler)."""
        self.stopped = True

    def consume(self, batch: SampleBatch) -> None:
        if self.trace is not None:
            self.trace.write(batch)
        for tap in self.taps:
            tap(batch)
        intervals = self.pipeline.feed(batch)
        if self.functions is not None and "ip" in batch:
            self.functions.add(batch["ip"], intervals)
        self._deliver(intervals)

    def finish(self) -> Intervals:
        """Hand the trailing partial interval to the sinks; return it."""
        tail = self.pipeline.finish()
        self._deliver(tail)
        self._show()
        return tail

    @property
    def dropped_samples(self) -> int:
        return self.source.dropped_samples + self.lost_samples()

    def _deliver(self, intervals: Intervals) -> None:
        for sink in self.sinks:
            sink.write(intervals)
        if len(intervals) and not intervals.partial:
            self.phase = int(intervals.phase[-1])
            self._show()

    def _show(self) -> None:
        if self.status is not None and self.status.enabled:
            self.status.update(intervals=self.pipeline.count, phase=self.phase,
                               phases=self.pipeline.n_phases, dropped=self.dropped_samples,
                               implausible=sum(self.pipeline.implausible().values()))
