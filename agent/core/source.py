"""The contracts between sources, readers and sinks.

A :class:`Source` produces sample batches (live: :mod:`phasewatch.collectors.registry`
opens them; recorded: traces and CSV files); a :class:`Reader` fills one tick
of the MSR sampler; a :class:`Sink` takes what the driver hands on
(raw batches, classified intervals).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Iterator, Protocol, Sequence, runtime_checkable

import numpy as np

from .batch import SampleBatch

if TYPE_CHECKING:  # the pipeline loads numba; sources start before it
    from .pipeline import Intervals

#: The keys every ``stats()`` has: rows delivered, rows lost before delivery
#: (full rings, missed ticks, full queues), values that could not be read.
STATS_KEYS = ("samples", "lost_samples", "errors")


@runtime_checkable
class Source(Protocol):
    """A producer of raw sample batches.

    ``signals`` are the batch columns it yields.  ``metadata`` describes how
    the samples were taken, in the keys of :mod:`phasewatch.formats.metadata`:
    ``source`` (the registry entry), ``signals`` (column -> where it came
    from), ``counter_scope`` (``cpu`` or ``thread``), and the source's own.
    ``batches()`` yields batches until the source ends or ``close()`` is
    called; ``stats()`` maps at least :data:`STATS_KEYS` to integers.
    """

    metadata: dict[str, Any]

    @property
    def signals(self) -> Sequence[str]: ...

    def batches(self) -> Iterator[SampleBatch]: ...

    def stats(self) -> dict[str, int]: ...

    def close(self) -> None: ...


@runtime_checkable
class Reader(Protocol):
    """One kind of register read by the sampler on every tick.

    ``kind`` names it in metadata; ``read(out)`` fills ``out``, a
    ``(cpus, len(columns))`` uint64 array, with raw values (MISSING where a
    value could not be read); ``stats()`` has at least ``errors``.
    """

    kind: str
    columns: Sequence[str]

    def read(self, out: np.ndarray) -> None: ...

    def stats(self) -> dict[str, int]: ...

    def close(self) -> None: ...


@dataclass
class Classified:
    """The intervals one batch completed in one stream."""

    stream: str                 # "" for a command's one stream; a daemon's target name
    intervals: Intervals
    previous: np.ndarray        # the phase before each interval; -1 before the stream's first
    #: Each phase id's name, where the streams name their phases (the daemon's).
    names: dict[int, str] | None = None

    @property
    def changes(self) -> np.ndarray:
        """Rows whose phase differs from the one before."""
        return np.flatnonzero(self.intervals.phase != self.previous)


class Sink:
    """What every sink is: it may take each raw batch before the pipeline
    does (a trace, the process maps, per-phase functions), the classified
    intervals of each stream (results, the phase summary, pprof, energy,
    Prometheus, ZeroMQ), and is closed once at the end, ``complete`` false
    after an error (an output then leaves the old file in place).  A sink
    overrides only what it uses; ``failure``, where set, says why its output
    could not be written.  :class:`phasewatch.core.driver.Driver` calls them."""

    failure: str | None = None

    def batch(self, batch: SampleBatch) -> None:
        """A raw batch, before the pipeline sees it."""

    def classified(self, c: Classified) -> None:
        """The intervals a batch completed in one stream, classified."""

    def ended(self) -> None:
        """The source has ended: no interval will follow (a sink that serves
        on, as the daemon's do, settles what waited for more)."""

    def close(self, complete: bool = True) -> None:
        """The end: everything has been handed over (``complete``), or an error came."""
