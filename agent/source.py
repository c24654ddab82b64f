"""The interface every source of sample batches offers, live or recorded."""

from __future__ import annotations

from typing import Any, Iterator, Protocol, runtime_checkable

from .batch import SampleBatch


@runtime_checkable
class Source(Protocol):
    """A producer of raw sample batches.

    ``metadata`` describes the host and how the samples were taken (the keys of
    :mod:`phasewatch.metadata`); ``batches()`` yields batches until the source
    ends or ``close()`` is called; ``stats()`` reports counts such as drops and
    missed ticks, as a flat mapping of name to integer.
    """

    metadata: dict[str, Any]

    def batches(self) -> Iterator[SampleBatch]: ...

    def stats(self) -> dict[str, int]: ...

    def close(self) -> None: ...
