"""Pinning that never slows a multithreaded command.

``run`` pins CMD to one CPU so that its register readings come from one core.
A command that runs two threads (or processes) at once would then share that
CPU among them and take up to twice as long.  So CMD stays pinned only while
it runs one thread at a time: once two threads of CMD's tree are runnable at
once (looked at by the tree watch, :mod:`.tree_watch`), or a batch of samples holds
two threads, the affinity of every thread of the tree is widened to all the
CPUs the agent may use; threads seen later get the same (one they start
inherits it).
"""

from __future__ import annotations

import os
import threading
from typing import Callable

import numpy as np

from ..collectors.procfs import state
from ..core.batch import SampleBatch
from ..core.distinct import distinct
from ..core.source import Sink
from .process_tree import descendants



class PinWhileSingleThreaded(Sink):
    """A sink on the batches of a run: unpins CMD's tree once it runs two threads."""

    def __init__(self, pid: int, cpu: int | None, cpus: set[int], say: Callable[[str], None]):
        self.pid = pid
        self.cpu = cpu
        self.cpus = set(cpus)
        self.say = say
        self.released = cpu is None or len(self.cpus) < 2
        self._widened: set[int] = set()
        self._lock = threading.Lock()

    def look(self, pids: list[int]) -> None:
        """Release CMD's tree, processes ``pids``, if two of its threads are
        runnable now (called on the tree watch's thread, :mod:`.tree_watch`)."""
        if self.released:
            return
        runnable = sum(state(pid, tid) == "R" for pid in pids for tid in _tasks(pid))
        if runnable > 1:
            self.release(runnable)

    def batch(self, batch: SampleBatch) -> None:
        if "tid" not in batch or len(batch) == 0:
            return
        tids = distinct(batch["tid"]).tolist()
        if not self.released and len(tids) > 1:
            self.release(len(tids))
        elif self.released and self.cpu is not None:
            self._widen([t for t in tids if t not in self._widened])

    def release(self, threads: int) -> None:
        with self._lock:
            if self.released:
                return
            self.released = True
        tasks = [int(tid) for pid in descendants(self.pid)
                 for tid in _tasks(pid)]
        self._widen(tasks)
        self.say(f"the command runs {threads} threads at once: no longer pinned to CPU "
                 f"{self.cpu}, so that they run in parallel")

    def _widen(self, tids) -> None:
        for tid in tids:
            self._widened.add(tid)
            try:
                os.sched_setaffinity(tid, self.cpus)
            except OSError:       # ended meanwhile
                pass


def _tasks(pid: int) -> list[str]:
    try:
        return os.listdir(f"/proc/{pid}/task")
    except OSError:
        return []
