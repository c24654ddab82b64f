"""Instruction pointers of a watched process tree to function names, each
resolved in the mappings of its own thread's process."""

from __future__ import annotations

import os
import threading
from collections import deque

import numpy as np

from ..collectors.perf_records import MapRecord, TaskRecord
from ..core.batch import KERNEL_START
from ..core.distinct import distinct
from .maps import Mapping
from .process_tree import descendants, process_of_thread
from .symbolizer import Symbolizer


def _locked(method):
    """``method`` under the tree's lock: the tree watch learns on its own thread."""
    def locked(self, *args, **kwargs):
        with self._lock:
            return method(self, *args, **kwargs)
    locked.__doc__ = method.__doc__
    return locked


#: Threads looked at per batch, at most (their maps are read only when their
#: IPs fall outside what is known of their process).
MAX_NEW_THREADS = 16

#: Processes, and threads, known at most where ended ones are forgotten.
MAX_KNOWN = 4096

#: Runs of mappings a process keeps unmerged, at most (then they are merged).
MAX_RUNS = 64


class _Learnt(list):
    """The mappings a process made, as perf's records gave them: runs of
    mappings not yet merged into a symbolizer, which is built when one of its
    IPs is first named (most children of a forking tree never are)."""


class TreeSymbolizer:
    """Resolves the IPs of a watched process tree, each thread's in the
    mappings of its own process: a child that exec'd another program (``sh -c
    'bzip2 …; perl …'``, a compiler driver's ``cc1``) is named from its own
    objects, not its parent's.  ``watch`` reads the maps of the threads of a
    batch whose IPs are new to their process while they still run;
    ``learn_tree`` reads those of each process as it starts or execs, and
    ``snapshot`` re-reads those of every live process of the tree (both from
    :mod:`.tree_watch`, once or twice a second).

    Where perf's records of the tree come (``learn_record``, from the
    process-mapping sink), they are how processes, threads and mappings are
    learnt, and ``/proc`` is no longer polled: the root's maps, read when
    it exec'd, hold what it mapped before the watch.

    ``keep_ended``: where the tree is watched for long (the daemon), the
    processes and threads that ended (their EXIT records) are forgotten once
    more than this many have ended since; their samples are named before
    that, when their intervals are classified.  None keeps every process
    (``run`` names at its end)."""

    #: Samples are told apart by thread (:mod:`.sample_names`): a ``kmod``
    #: source gives no process.
    owner_column = "tid"

    def __init__(self, root: Symbolizer, keep_ended: int | None = None):
        self.root = root
        self._by_pid: dict[int, Symbolizer | _Learnt] = {root.pid: root}
        self._pid_of: dict[int, int] = {root.pid: root.pid}
        self._exe_of: dict[int, str] = {}
        self.from_records = False
        self.keep_ended = keep_ended
        self._ended: deque[tuple] = deque()    # (pid, tid, its fork), oldest first
        self._forks = 0
        self._fork_of: dict[int, int] = {}      # pid -> the fork that made it (keep_ended)
        # learn_tree runs on a thread of its own (live.tree_watch)
        self._lock = threading.RLock()

    @_locked
    def learn_records(self, records: list) -> None:
        """Perf's records, in order (:meth:`learn_record`); the mappings a
        process makes one after another (an exec's) merged at once."""
        run: list = []
        for record in records:
            if run and not (isinstance(record, MapRecord) and record.pid == run[0].pid):
                self._learn_maps(run)
                run = []
            if isinstance(record, MapRecord):
                run.append(record)
            else:
                self.learn_record(record)
        if run:
            self._learn_maps(run)

    def _learn_maps(self, records: list[MapRecord]) -> None:
        self.from_records = True
        for record in records:
            self._pid_of.setdefault(record.tid, record.pid)
        pid = records[0].pid
        run = [Mapping(r.start, r.end, r.offset, r.path, r.inode) for r in records]
        known = self._by_pid.setdefault(pid, _Learnt())
        if isinstance(known, Symbolizer):
            known.add_mappings(run)
            return
        known.append(run)
        if len(known) > MAX_RUNS:
            self._built(pid)

    @_locked
    def learn_record(self, record) -> None:
        """One of perf's records (:mod:`phasewatch.collectors.perf_records`):
        a mapping goes to its process, a new thread to its process, a new
        process starts with its parent's mappings."""
        self.from_records = True
        if isinstance(record, MapRecord):
            self._learn_maps([record])
        elif isinstance(record, TaskRecord) and record.kind == "fork":
            self._pid_of[record.tid] = record.pid
            if self.keep_ended is not None and record.pid != record.ppid:
                self._by_pid.pop(record.pid, None)      # an ended process's number again
                self._forks += 1
                self._fork_of[record.pid] = self._forks
            if record.pid != record.ppid and record.pid not in self._by_pid:
                parent = self._by_pid.get(record.ppid)
                self._by_pid[record.pid] = (
                    _Learnt([parent.mappings]) if isinstance(parent, Symbolizer)
                    else _Learnt(parent or ()))
        elif isinstance(record, TaskRecord) and self.keep_ended is not None:
            self._ended.append((record.pid, record.tid, self._fork_of.get(record.pid)))
            self._forget_ended()

    def _forget_ended(self) -> None:
        """The oldest ended threads and processes beyond ``keep_ended``, and
        any beyond a bound where their EXIT records were lost."""
        while len(self._ended) > self.keep_ended:
            pid, tid, fork = self._ended.popleft()
            if self._pid_of.get(tid) == pid and tid != self.root.pid:
                del self._pid_of[tid]
            # not a new process given the same number since
            if pid == tid and pid != self.root.pid and self._fork_of.get(pid) == fork:
                self._by_pid.pop(pid, None)
                self._fork_of.pop(pid, None)
        for known in (self._pid_of, self._by_pid, self._fork_of):
            while len(known) > MAX_KNOWN:
                oldest = next(iter(known))
                if oldest == self.root.pid:
                    known[oldest] = known.pop(oldest)       # kept, now the newest
                else:
                    del known[oldest]

    @property
    def processes(self) -> int:
        """Processes whose mappings are known."""
        return len(self._by_pid)

    def learn_tree(self, pids: list[int]) -> bool:
        """Note every thread of the tree's processes ``pids`` (:func:`descendants`)
        and read the maps of each process new or exec'd since the last look:
        a child that ends before its samples reach the agent is still named
        from its own objects.  Whether any process was new or exec'd."""
        if self.from_records:
            return False
        changed = False
        for pid in pids:
            try:
                # Ours: psutil's exe() and threads() cost 8 times as much per process
                exe, tids = os.readlink(f"/proc/{pid}/exe"), os.listdir(f"/proc/{pid}/task")
            except OSError:
                continue
            with self._lock:
                for tid in tids:
                    self._pid_of.setdefault(int(tid), pid)
                if self._exe_of.get(pid) != exe:
                    self._exe_of[pid] = exe
                    self._of_process(pid).snapshot()
                    changed = True
        return changed

    @property
    def pid(self) -> int | None:
        return self.root.pid

    @property
    def lock(self) -> threading.RLock:
        """Held while names are read (:func:`.sample_names.naming`)."""
        return self._lock

    @_locked
    def watch(self, ips: np.ndarray, tids: np.ndarray) -> None:
        """Learn the mappings that a batch's IPs need, while their processes live."""
        if self.from_records:
            return
        user = np.asarray(ips, np.uint64) < np.uint64(KERNEL_START)
        for tid in distinct(np.asarray(tids)[user])[:MAX_NEW_THREADS].tolist():
            symbolizer = self.of_thread(tid)
            mine = user & (tids == tid)
            if not symbolizer.covers(ips[mine]).all():
                symbolizer.snapshot()

    @_locked
    def snapshot(self, pids: list[int] | None = None) -> bool:
        """Re-read the maps of the tree's processes ``pids`` (default: every
        live one); whether any changed."""
        if self.from_records:
            return False
        if pids is None:
            pids = descendants(self.root.pid) if self.root.pid is not None else []
        changed = False
        for pid in pids:
            changed |= self._of_process(pid).snapshot()
        return changed

    @_locked
    def of_thread(self, tid: int) -> Symbolizer:
        """The symbolizer of the process ``tid`` belongs to (the root's if it has gone)."""
        pid = self._pid_of.get(tid)
        if pid is None:
            pid = process_of_thread(tid) if tid else None
            if pid is None:
                return self.root
            self._pid_of[tid] = pid
        return self._of_process(pid)

    of_owner = of_thread

    def _of_process(self, pid: int) -> Symbolizer:
        if pid not in self._by_pid:
            self._by_pid[pid] = Symbolizer.from_pid(pid)
        return self._built(pid)

    def _built(self, pid: int) -> Symbolizer:
        """The symbolizer of known process ``pid``, its learnt runs merged in
        order (without reading its maps: its records gave them)."""
        known = self._by_pid[pid]
        if isinstance(known, Symbolizer):
            return known
        symbolizer = Symbolizer(pid, kernel_names=True)
        for run in known:
            symbolizer.add_mappings(run)
        self._by_pid[pid] = symbolizer
        return symbolizer

    @_locked
    def of_process(self, pid: int) -> Symbolizer:
        """The symbolizer of process ``pid`` (0, a sample of no known process: the root's)."""
        if not pid or pid == self.root.pid:
            return self.root
        if self.from_records:
            return self._built(pid) if pid in self._by_pid else self.root
        return self._of_process(pid)


class RecordedTree:
    """Names the IPs of a recording per process, as :class:`TreeSymbolizer`
    did live: each process's own mappings (rows with its ``pid``, learnt
    from perf's records) over those of every process (rows without one).
    A sample of no known process (pid 0, or a trace without the ``pid``
    column) is named over every row, one address space, as recordings were
    named before they had per-process rows."""

    #: Samples are told apart by process (:mod:`.sample_names`).
    owner_column = "pid"

    def __init__(self, meta: dict):
        rows = [m for m in meta.get("mappings") or [] if isinstance(m, dict)]
        self._all_rows = rows
        self._merged: Symbolizer | None = None
        self.root = Symbolizer.from_metadata(
            {"mappings": [m for m in rows if m.get("pid") is None]})
        self.pid = None
        self._rows_of: dict[int, list[dict]] = {}
        for m in rows:
            if m.get("pid") is not None:
                self._rows_of.setdefault(int(m["pid"]), []).append(m)
        self._by_pid: dict[int, Symbolizer] = {}

    def snapshot(self) -> bool:
        """Nothing to re-read: a recording's mappings are all known."""
        return False

    def of_process(self, pid: int) -> Symbolizer:
        if not pid:
            return self._every_process()
        if pid not in self._rows_of:
            return self.root
        if pid not in self._by_pid:
            own = Symbolizer.from_metadata({"mappings": sorted(
                self._rows_of[pid], key=lambda m: m.get("t_ns") or 0)})
            symbolizer = Symbolizer()
            symbolizer.add_mappings(self.root.mappings)
            symbolizer.add_mappings(own.mappings)
            self._by_pid[pid] = symbolizer
        return self._by_pid[pid]

    of_owner = of_process

    def _every_process(self) -> Symbolizer:
        if self._merged is None:
            self._merged = Symbolizer.from_metadata({"mappings": self._all_rows})
        return self._merged
