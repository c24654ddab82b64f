"""The contracts between sources, readers and sinks.

A :class:`Source` produces sample batches (live: :mod:`phasewatch.collectors.registry`
opens them; recorded: traces and CSV files); a :class:`Reader` fills one tick
of the MSR sampler; a :class:`Sink` takes what the live loop hands on
(classified intervals, or raw batches for a trace).
"""

from __future__ import annotations

from typing import Any, Iterator, Protocol, Sequence, runtime_checkable

import numpy as np

from .batch import SampleBatch

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


@runtime_checkable
class Sink(Protocol):
    """Takes the live loop's output: classified intervals (results, the
    phase summary) or raw batches (the trace)."""

    def write(self, item: Any) -> None: ...

    def close(self) -> None: ...
