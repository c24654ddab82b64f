"""The executable mappings of a watched process, learnt while it runs, and
recorded beside its trace so that replay sees the same code map.

The maps read right after CMD's exec apply from the start (sampling begins at
that exec).  Before each batch reaches the pipeline, its user-space IPs are checked against
the mappings known so far; if any falls outside them (the program exec'd,
dlopen'ed a library or generated code), ``/proc/PID/maps`` is read again and
the new executable mappings are added, each with ``t_ns``: the time from which
it applies, later than every sample already classified.  Replay of the
recording applies each mapping from the same ``t_ns`` and so classifies
exactly as the live run did.

The list grows in the side table ``TRACE.mappings.jsonl`` (one JSON object a
line, keys as in trace metadata's ``"mappings"``), since the trace's metadata
is written before the run starts.

The code map is one address space: where CMD starts other processes, their
mappings are read from ``/proc/TID/maps`` of the sampled threads and merged
in, a later mapping taking over the addresses of an earlier one it overlaps.
"""

from __future__ import annotations

from typing import Callable

import numpy as np

from ..core.batch import SampleBatch
from ..core.distinct import distinct
from ..core.source import Sink
from .maps import Mapping, read_maps

#: Threads whose maps are read at one refresh, at most.
MAX_TIDS = 8


def mapping_row(m: Mapping, t_ns: int | None) -> dict:
    row = {"start": m.start, "end": m.end, "offset": m.offset,
           "path": "[anon]" if not m.path else m.path}
    if t_ns is not None:
        row["t_ns"] = int(t_ns)
    return row


class ProcessMappings(Sink):
    """Keeps a pipeline's code map in step with a live process's mappings: a
    sink that takes each batch before the pipeline does."""

    def __init__(self, pid: int, pipeline, record=None,
                 read: Callable[[int], list[Mapping]] = read_maps, just_execd: bool = False):
        """``record``: the :class:`~phasewatch.formats.trace.TraceWriter` whose
        side table gets the mappings learnt, if any."""
        self.pid = pid
        self.pipeline = pipeline
        self.read = read
        self.rows: list[dict] = list(pipeline.mappings or [])
        self.known: set[tuple] = {self._key(r) for r in self.rows}
        self.last_t = np.iinfo(np.int64).min
        self.rereads = 0
        self.record = record
        if just_execd:
            self.refresh(None)

    def batch(self, batch: SampleBatch) -> None:
        """Learn the mappings the batch's IPs need, before the pipeline sees it."""
        if "ip" not in batch or len(batch) == 0:
            return
        t_ns = batch["t_ns"]
        unknown = self.pipeline.code_map.unknown(batch["ip"], t_ns)
        if unknown.any():
            tids = distinct(batch["tid"][unknown])[:MAX_TIDS] if "tid" in batch else ()
            self.refresh(max(int(t_ns[unknown].min()), self.last_t + 1), [int(t) for t in tids])
        self.last_t = max(self.last_t, int(t_ns.max()))

    def refresh(self, t_ns: int | None, tids=()) -> bool:
        """Re-read the maps of the process and of the threads ``tids`` (children
        it started have their own); add what is new from ``t_ns`` on (from the
        start if None: read right after exec, before any sample)."""
        self.rereads += 1
        new = {}
        for pid in dict.fromkeys([self.pid, *tids]):
            for m in self.read(pid):
                row = mapping_row(m, t_ns)
                new.setdefault(self._key(row), row)
        new = [r for k, r in new.items() if k not in self.known]
        if not new:
            return False
        self.known.update(self._key(r) for r in new)
        self.rows += new
        self.pipeline.set_mappings(self.rows)
        if self.record is not None:
            self.record.add_mappings(new)
        return True

    @staticmethod
    def _key(row: dict) -> tuple:
        return (int(row["start"]), int(row["end"]), int(row.get("offset", 0)), row.get("path", ""))
