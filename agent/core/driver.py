"""The one driver from every source to every sink.

A :class:`Driver` takes sample batches, from a live source or a trace alike,
hands each to its sinks (a trace, the process maps, per-phase functions),
then through :class:`Streams` (one pipeline, or one per CPU) and the
classified intervals of each stream to the sinks again.  Commands and the
daemon choose a source, the settings and a table of sinks; none of them
feeds a pipeline itself.
"""

from __future__ import annotations

from typing import Callable, Iterable, Sequence

import numpy as np

from .batch import SampleBatch
from .distinct import distinct
from .pipeline import Intervals, Pipeline
from .source import Classified, Sink


def cpu_stream(cpu: int) -> str:
    return f"cpu{cpu}"


class Streams:
    """One pipeline per stream: every row in one stream ``name``, or, without
    a name, each CPU's rows in a stream of their own (``cpu<N>``), each
    pipeline made by ``make`` when its first row comes."""

    def __init__(self, make: Callable[[str], Pipeline], name: str | None = "",
                 on_rows: Callable[[str, int], None] | None = None):
        self.make = make
        self.name = name
        self.on_rows = on_rows          # told each stream's rows as they come
        self.pipelines: dict[str, Pipeline] = {}
        self.last_phase: dict[str, int] = {}

    @classmethod
    def of(cls, pipeline: Pipeline) -> "Streams":
        """One stream through ``pipeline``."""
        streams = cls(lambda name: pipeline)
        streams.pipelines[""] = pipeline
        return streams

    @property
    def pipeline(self) -> Pipeline:
        """The pipeline of a one-stream run."""
        return self.pipelines[self.name]

    @property
    def count(self) -> int:
        return sum(p.count for p in self.pipelines.values())

    @property
    def n_phases(self) -> int:
        return sum(p.n_phases for p in self.pipelines.values())

    def implausible(self) -> int:
        return sum(sum(p.implausible().values()) for p in self.pipelines.values())

    def feed(self, batch: SampleBatch) -> list[Classified]:
        if len(batch) == 0:
            return []
        out = []
        for name, rows in self._split(batch):
            pipeline = self.pipelines.get(name)
            if pipeline is None:
                pipeline = self.pipelines[name] = self.make(name)
            if self.on_rows is not None:
                self.on_rows(name, len(rows))
            intervals = pipeline.feed(rows)
            if len(intervals):
                out.append(self._classified(name, pipeline, intervals))
        return out

    def flush(self) -> list[Classified]:
        """Each stream's interval held for a decision, as it stands."""
        out = []
        for name, pipeline in self.pipelines.items():
            held = pipeline.flush()
            if len(held):
                out.append(self._classified(name, pipeline, held))
        return out

    def finish(self) -> list[Classified]:
        """Each stream's interval held for a decision, then its trailing
        partial interval (phase -1), if it has samples."""
        out = self.flush()
        for name, pipeline in self.pipelines.items():
            tail = pipeline.finish()
            if len(tail):
                out.append(Classified(name, tail, np.full(len(tail), self.last_phase.get(name, -1))))
        return out

    def forget(self, names: Iterable[str]) -> None:
        for name in names:
            self.pipelines.pop(name, None)
            self.last_phase.pop(name, None)

    def ids(self, name: str, pipeline: Pipeline, intervals: Intervals) -> np.ndarray:
        """The phase ids the sinks see; the classifier's own here."""
        return intervals.phase

    def names(self, name: str, phases: np.ndarray) -> dict[int, str] | None:
        """The names of the phase ids ``phases`` of stream ``name`` (those of
        the intervals and the one before them); none here."""
        return None

    def _classified(self, name: str, pipeline: Pipeline, intervals: Intervals) -> Classified:
        intervals.phase = self.ids(name, pipeline, intervals)
        previous = np.empty(len(intervals), np.int64)
        previous[0] = self.last_phase.get(name, -1)
        previous[1:] = intervals.phase[:-1]
        self.last_phase[name] = int(intervals.phase[-1])
        return Classified(name, intervals, previous,
                          self.names(name, np.append(intervals.phase, previous[0])))

    def _split(self, batch: SampleBatch):
        if self.name is not None:
            yield self.name, batch
            return
        cpus = batch["cpu"]
        if (cpus == cpus[0]).all():
            yield cpu_stream(int(cpus[0])), batch
            return
        for cpu in distinct(cpus):
            rows = np.flatnonzero(cpus == cpu)
            yield cpu_stream(int(cpu)), SampleBatch({n: c[rows] for n, c in batch.columns.items()})


class Driver:
    """Batches through the streams to the sinks, in the sinks' order."""

    def __init__(self, streams: Streams | Pipeline, sinks: Sequence[Sink] = ()):
        self.streams = streams if isinstance(streams, Streams) else Streams.of(streams)
        self.sinks = list(sinks)

    def take(self, batch: SampleBatch) -> list[Classified]:
        """One batch: to every sink, through the pipelines, and what it
        completed to every sink."""
        for sink in self.sinks:
            sink.batch(batch)
        done = self.streams.feed(batch)
        for c in done:
            self.deliver(c)
        return done

    def run(self, batches: Iterable[SampleBatch]) -> None:
        for batch in batches:
            self.take(batch)

    def flush(self) -> list[Classified]:
        """Hand on the intervals held for a decision: the source has ended."""
        held = self.streams.flush()
        for c in held:
            self.deliver(c)
        for sink in self.sinks:
            sink.ended()
        return held

    def finish(self) -> list[Classified]:
        """Hand the streams' held intervals and trailing partial intervals on
        (phase -1, for the summaries; outputs leave them out)."""
        tails = self.streams.finish()
        for c in tails:
            self.deliver(c)
        return tails

    def close(self, complete: bool = True) -> list[str]:
        """Close every sink; the failures of those whose output could not be written."""
        for sink in self.sinks:
            sink.close(complete)
        return [sink.failure for sink in self.sinks if sink.failure]

    def deliver(self, c: Classified) -> None:
        """Classified intervals to every sink (from the streams, or from a
        detector of another kind of input: a .bb file's)."""
        for sink in self.sinks:
            sink.classified(c)
