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

Where the source gives perf's records of the watched tree (``records``: the
perf source's ``take_records``), the mappings come from them instead, as
``perf record`` takes them: each executable mapping a process makes
(``PERF_RECORD_MMAP2``) becomes a row with its ``pid`` and the record's
time, and a process forked (``PERF_RECORD_FORK``) starts with a copy of its
parent's rows, so a child that lived 5 ms has its samples placed in its own
mappings, by file and offset.  ``/proc`` is then read only once, for what
the first process had mapped before the watch began (rows without a pid,
which every process falls back to).  The records also go to ``tree`` (the
:class:`~.tree_symbolizer.TreeSymbolizer` naming functions), so names come
from the same mappings.

A watched tree may start processes without end (a shell loop, ``make``, a
server forking a child per request, watched by the daemon for weeks), so
the rows of an ended process (its ``PERF_RECORD_EXIT``) go once no sample
can still need them (:meth:`ProcessMappings._prune`), at most
:data:`MAX_PROCESSES` processes' rows are kept, and the code map is rebuilt
only for a batch with a sample of a process whose rows changed, from the
rows of the processes still running and of those sampled.  The recording's
side table keeps every row: replay places every sample as the live run did.

Without records the code map is one address space: where CMD starts other
processes, their mappings are read from ``/proc/TID/maps`` of the sampled
threads and merged in, a later mapping taking over the addresses of an
earlier one it overlaps.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Callable

import numpy as np

from ..collectors.perf_records import ExecRecord, MapRecord, TaskRecord
from ..core.batch import SampleBatch
from ..core.distinct import distinct
from ..core.source import Sink
from .maps import Mapping, read_maps

#: Threads whose maps are read at one refresh, at most.
MAX_TIDS = 8

#: Sample time an ended process's rows are kept after its EXIT record.
EXIT_GRACE_NS = 100_000_000

#: Processes whose rows are kept, at most.
MAX_PROCESSES = 1024


def mapping_row(m: Mapping, t_ns: int | None, pid: int | None = None) -> dict:
    row = {"start": m.start, "end": m.end, "offset": m.offset,
           "path": "[anon]" if not m.path else m.path}
    if t_ns is not None:
        row["t_ns"] = int(t_ns)
    if pid is not None:
        row["pid"] = int(pid)
    return row


def task_records_of(source):
    """What gives the perf records of the watched tree that ``source`` reads
    (its ``take_records``), or None where it reads none (``kmod``, or a
    source opened without ``task_records``)."""
    meta = source.metadata
    if any(part.get("task_records") for part in [meta, *meta.get("parts", [])]):
        return getattr(source, "take_records", None)
    return None


def overlaps(a: dict, b: dict) -> bool:
    return int(a["start"]) < int(b["end"]) and int(b["start"]) < int(a["end"])


class ProcessMappings(Sink):
    """Keeps a pipeline's code map in step with a live process's mappings: a
    sink that takes each batch before the pipeline does."""

    def __init__(self, pid: int, pipeline, record=None,
                 read: Callable[[int], list[Mapping]] = read_maps, just_execd: bool = False,
                 records: Callable[[], list] | None = None, tree=None,
                 max_processes: int = MAX_PROCESSES):
        """``record``: the :class:`~phasewatch.formats.trace.TraceWriter` whose
        side table gets the mappings learnt, if any.  ``records``: what gives
        the perf records read since it was last called (see the module
        docstring); ``tree``: what else learns from them (``learn_record``)."""
        self.pid = pid
        self.records = records
        self.tree = tree
        #: Each process's mappings now (rows learnt from records), to copy at a fork.
        self.current: dict[int, list[dict]] = {}
        self.dropped_forks = 0
        self.pipeline = pipeline
        self.read = read
        #: Rows of no process (read from /proc), and each process's own,
        #: those heard of least recently first.
        self.shared: list[dict] = []
        self.rows_of: OrderedDict[int, list[dict]] = OrderedDict()
        self.known_of: dict[int | None, set[tuple]] = {}
        self.row_count = 0
        #: Processes ended (their EXIT record): pid -> the record's time.
        self.ended_at: OrderedDict[int, int] = OrderedDict()
        self.exited = 0
        self.max_processes = max_processes
        #: Processes whose rows changed since the code map was last built
        #: (None: those of no process), and those whose rows it holds.
        self.stale: set[int | None] = set()
        self.record = record
        self._add(list(pipeline.mappings or []), new=False)
        self.mapped = set(self.rows_of)
        self.last_t = np.iinfo(np.int64).min
        self.rereads = 0
        if just_execd:
            self.refresh(None)

    @property
    def rows(self) -> list[dict]:
        """Every mapping kept: those of no process, then each process's."""
        return self.shared + [row for rows in self.rows_of.values() for row in rows]

    @property
    def processes(self) -> int:
        """Processes whose own mappings are kept."""
        return len(self.rows_of)

    def batch(self, batch: SampleBatch) -> None:
        """Learn the mappings the batch's IPs need, before the pipeline sees it."""
        if self.records is not None:
            self.take(self.records())
            if len(batch):
                t_ns = batch["t_ns"]
                pids = batch["pid"] if "pid" in batch else None
                self._prune(max(int(t_ns.min()), self.last_t), int(t_ns.max()), pids)
                self.sync(pids)
                self.last_t = max(self.last_t, int(t_ns.max()))
            return
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
        if not self._add(list(new.values())):
            return False
        self.sync()
        return True

    def take(self, records: list) -> None:
        """Apply perf's records: each mapping from its time (never before a
        sample already classified, so that replay places every sample as
        this run did), each new process from a copy of its parent's, each
        ended process noted (its rows go once no sample can need them).  The
        code map is rebuilt by :meth:`sync`."""
        new = []
        for r in records:
            if isinstance(r, MapRecord):
                row = mapping_row(Mapping(r.start, r.end, r.offset, r.path, r.inode),
                                  self._from(r.t_ns), r.pid)
                self._now(r.pid, row)
                new.append(row)
            elif isinstance(r, TaskRecord) and r.kind == "fork" and r.pid != r.ppid:
                if r.pid in self.ended_at:     # the ended one's rows, kept so far, go first
                    self._add(new)
                    new = []
                new += self._forked(r)
            elif isinstance(r, ExecRecord):
                self.current.pop(r.pid, None)     # its address space was replaced
            elif isinstance(r, TaskRecord) and r.kind == "exit" and r.pid == r.tid:
                self.current.pop(r.pid, None)
                self.ended_at[r.pid] = int(r.t_ns)
                self.ended_at.move_to_end(r.pid)
                self.exited += 1
        if self.tree is not None:
            self.tree.learn_records(records)
        self._add(new)
        self._bound()

    def sync(self, pids: np.ndarray | None = None) -> bool:
        """Rebuild the code map if the rows of a process in ``pids`` (the
        batch's; None: every process's) changed since it was built, or are
        not in it; whether it was.  It holds the rows of no process, of the
        processes that have not ended, and of those in ``pids``: an ended
        process's rows are not built in again but for its own samples."""
        if pids is None:
            wanted = set(self.rows_of)
        else:
            sampled = set(distinct(np.asarray(pids)).tolist())
            wanted = sampled & self.rows_of.keys()
            if None not in self.stale and wanted <= self.mapped and self.stale.isdisjoint(sampled):
                return False
            wanted |= self.rows_of.keys() - self.ended_at.keys()
        self.mapped = wanted
        # still to build in: the rows of ended processes not sampled since
        self.stale = {pid for pid in self.stale if pid in self.rows_of and pid not in wanted}
        self.pipeline.set_mappings(self.shared + [row for pid in wanted
                                                  for row in self.rows_of[pid]])
        return True

    def _add(self, rows: list[dict], new: bool = True) -> bool:
        """Keep the rows not kept yet; ``new`` ones (not yet in the code map
        nor the recording) are written beside the recording."""
        fresh = []
        for row in rows:
            pid = row.get("pid")
            known = self.known_of.setdefault(pid, set())
            key = self._key(row)
            if key in known:
                continue
            known.add(key)
            if pid is None:
                self.shared.append(row)
            else:
                self.rows_of.setdefault(pid, []).append(row)
                self.rows_of.move_to_end(pid)
            fresh.append(row)
        self.row_count += len(fresh)
        if not new:
            return bool(fresh)
        self.stale.update(row.get("pid") for row in fresh)
        if fresh and self.record is not None:
            self.record.add_mappings(fresh)
        return bool(fresh)

    def _prune(self, t_first: int, t_last: int, pids: np.ndarray | None) -> None:
        """Drop the rows of processes that ended more than :data:`EXIT_GRACE_NS`
        before ``t_first`` (the first sample of this batch, or the last of
        those classified), and of those with no sample in this batch (pids
        ``pids``) that ended that long before ``t_last``, its last sample.
        Every sample of a process is taken before its EXIT record, and is in
        its CPU's ring by then; every ring is read at each wake-up, so a
        sample taken that long before one already read was read with it or
        earlier: none of the process's samples is left to come but this
        batch's."""
        first, last = t_first - EXIT_GRACE_NS, t_last - EXIT_GRACE_NS
        sampled = set() if pids is None else set(distinct(np.asarray(pids)).tolist())
        for pid, ended in list(self.ended_at.items()):
            if ended >= last:
                break
            if ended < first or (pids is not None and pid not in sampled):
                del self.ended_at[pid]
                self._drop(pid)

    def _bound(self) -> None:
        """At most ``max_processes`` processes' rows (and ended ones waiting):
        past it, those heard of least recently go (an EXIT record lost, or
        a tree that large)."""
        while len(self.ended_at) > self.max_processes:
            self._drop(self.ended_at.popitem(last=False)[0])
        while len(self.rows_of) > self.max_processes:
            pid = next(iter(self.rows_of))
            if pid == self.pid:
                self.rows_of.move_to_end(pid)
                pid = next(iter(self.rows_of))
            self.ended_at.pop(pid, None)
            self._drop(pid)

    def _drop(self, pid: int) -> None:
        """Forget ``pid``'s rows; if the code map holds them, it is rebuilt
        before a sample of a process given the same number is placed."""
        rows = self.rows_of.pop(pid, None)
        self.known_of.pop(pid, None)
        self.current.pop(pid, None)
        if rows:
            self.row_count -= len(rows)
        if pid in self.mapped:
            self.stale.add(pid)
        else:
            self.stale.discard(pid)

    def _from(self, t_ns: int) -> int:
        return max(int(t_ns), self.last_t + 1)

    def _now(self, pid: int, row: dict) -> None:
        """``row`` is among ``pid``'s mappings now, in place of those it overlaps."""
        rows = self.current.setdefault(pid, [])
        rows[:] = [old for old in rows if not overlaps(old, row)] + [row]

    def _forked(self, r: TaskRecord) -> list[dict]:
        """A new process's rows: its parent's, from the fork.  An ended
        process's number taken again: its rows go now."""
        if self.ended_at.pop(r.pid, None) is not None:
            self._drop(r.pid)
        copies = [{**row, "pid": r.pid, "t_ns": self._from(r.t_ns)}
                  for row in self.current.get(r.ppid, ())]
        if copies:
            self.current[r.pid] = list(copies)
        return copies

    @staticmethod
    def _key(row: dict) -> tuple:
        return (row["start"], row["end"], row.get("offset", 0), row.get("path", ""),
                row.get("pid"))
