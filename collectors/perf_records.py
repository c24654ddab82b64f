"""The records perf writes beside the samples of a watched process tree:
each executable mapping made (``PERF_RECORD_MMAP2``), each exec
(``PERF_RECORD_COMM`` marked exec), each new process or thread
(``PERF_RECORD_FORK``) and each end (``PERF_RECORD_EXIT``), as ``perf record``
takes them.  They come in the same ring as the samples, in time, so a child
that lives 5 ms has its mappings known before its samples are placed.

Records are few (tens a process), so each is decoded in Python into a small
named tuple; they wait in a bounded queue (:class:`TaskRecords`) for the
sink that keeps the process mappings, which takes them before each batch.
Every record ends in the ``sample_id`` fields of ``sample_id_all``; its time
is read there (the samples' clock)."""

from __future__ import annotations

import os
import struct
import threading
from collections import deque
from typing import NamedTuple

from . import perf_event as pe

#: Records kept waiting for the sink, at most; older ones are dropped and counted.
MAX_WAITING = 65536

#: What the kernel names anonymous executable memory in an MMAP2 record.
ANON_NAMES = ("//anon", "[anon]", "")

_MMAP2_HEAD = struct.Struct("<IIQQQIIQQII")    # pid tid addr len pgoff maj min ino gen prot flags
_TASK = struct.Struct("<IIIIQ")                # pid ppid tid ptid time
_PID_TID = struct.Struct("<II")


class MapRecord(NamedTuple):
    """An executable mapping made by process ``pid`` at ``t_ns``."""

    t_ns: int
    pid: int
    tid: int
    start: int
    end: int
    offset: int
    path: str       # "[anon]" for anonymous memory (JIT code), "[vdso]" and kin as named
    inode: int


class TaskRecord(NamedTuple):
    """A process or thread started (``fork``) or ended (``exit``); a new
    process where ``pid != ppid``, a new thread of ``pid`` otherwise."""

    kind: str       # "fork" or "exit"
    t_ns: int
    pid: int
    ppid: int
    tid: int
    ptid: int


class ExecRecord(NamedTuple):
    """Process ``pid`` exec'd a program named ``comm`` at ``t_ns``: its
    address space was replaced."""

    t_ns: int
    pid: int
    tid: int
    comm: str


def time_offset_from_end(sample_type: int) -> int:
    """Where the ``sample_id`` time sits, counted back from a record's end:
    the time, then any of id, stream id, cpu and identifier after it."""
    after = sum(8 for bit in (1 << 6, 1 << 9, pe.SAMPLE_CPU, 1 << 16) if sample_type & bit)
    return 8 + after


def decode(record: bytes, sample_type: int):
    """One record's tuple, or None for a kind not kept (an MMAP2 of data, a
    COMM that is only a rename)."""
    rtype, misc, size = struct.unpack_from("<IHH", record)
    t_end = size - time_offset_from_end(sample_type)
    t_ns = struct.unpack_from("<Q", record, t_end)[0] if sample_type & pe.SAMPLE_TIME else 0
    if rtype == pe.RECORD_MMAP2:
        (pid, tid, addr, length, pgoff, _maj, _min, ino, _gen, prot, _flags
         ) = _MMAP2_HEAD.unpack_from(record, 8)
        if not prot & 0x4:              # PROT_EXEC
            return None
        name = record[8 + _MMAP2_HEAD.size:t_end - _sample_id_head(sample_type)].split(b"\0", 1)[0]
        path = os.fsdecode(name)
        return MapRecord(t_ns, pid, tid, addr, addr + length, 0 if path in ANON_NAMES else pgoff,
                         "[anon]" if path in ANON_NAMES else path, ino)
    if rtype in (pe.RECORD_FORK, pe.RECORD_EXIT):
        pid, ppid, tid, ptid, time = _TASK.unpack_from(record, 8)
        return TaskRecord("fork" if rtype == pe.RECORD_FORK else "exit", time, pid, ppid, tid, ptid)
    if rtype == pe.RECORD_COMM and misc & pe.MISC_COMM_EXEC:
        pid, tid = _PID_TID.unpack_from(record, 8)
        name = record[16:t_end - _sample_id_head(sample_type)].split(b"\0", 1)[0]
        return ExecRecord(t_ns, pid, tid, name.decode("utf-8", "replace"))
    return None


def _sample_id_head(sample_type: int) -> int:
    """Bytes of ``sample_id`` before its time (the pid and tid)."""
    return 8 if sample_type & pe.SAMPLE_TID else 0


class TaskRecords:
    """Decoded records waiting for the sink that keeps the process mappings:
    the source appends on its reading thread, the sink takes on the
    pipeline's.  Bounded: past :data:`MAX_WAITING` the oldest go, counted
    in ``dropped``."""

    def __init__(self, sample_type: int, limit: int = MAX_WAITING):
        self.sample_type = sample_type
        self._waiting: deque = deque()
        self._limit = limit
        self._lock = threading.Lock()
        self.dropped = 0
        self.taken = 0

    def add(self, raw_records: list[bytes]) -> None:
        decoded = [r for r in (decode(b, self.sample_type) for b in raw_records) if r is not None]
        decoded.sort(key=lambda r: r.t_ns)      # the rings of several CPUs, one after another
        if not decoded:
            return
        with self._lock:
            self._waiting.extend(decoded)
            over = len(self._waiting) - self._limit
            for _ in range(max(over, 0)):
                self._waiting.popleft()
            self.dropped += max(over, 0)

    def take(self) -> list:
        """Every record waiting, in the order read (oldest first)."""
        with self._lock:
            out = list(self._waiting)
            self._waiting.clear()
        self.taken += len(out)
        return out
