"""One pipeline per target: the daemon's router between a source and the pipelines.

A target is a CPU watched system-wide (``cpu<N>``, also each CPU of a replayed
trace) or a watched process (``pid:<PID>``, ``comm:<NAME>``, ``cgroup:<PATH>``).
Rows of a batch go to their target's own :class:`~phasewatch.core.pipeline.Pipeline`
(built by ``Pipeline.for_trace``, as ``run`` and ``replay`` build theirs), and
each target keeps the few counters the metrics and the publisher report.

:class:`Targets` offers the part of the Pipeline interface that
:class:`~phasewatch.live.loop.LiveRun` uses (``feed``, ``finish``, ``count``,
``n_phases``), so the daemon runs on the same live loop as ``run``.

Memory and the metrics' series stay bounded: each target keeps at most
``max_phases`` phases.  The classifier caps its phases itself
(``DetectorParams.max_phases``: it retires the least recently used), and the
daemon counts what it retired.  The daemon's phase ids are the classifier's
slots, 0 to ``max_phases`` - 1: a new phase that takes a retired phase's slot
takes its id too (its interval says ``new_phase``, and its count of
intervals starts again), so the ``phase`` label of the metrics has at most
``max_phases`` values per target however long the daemon runs.  New detector
settings (a reload) start each target's classifier afresh: its phases are
retired and counted in ``phases_retired``.  A target that has sent no samples
for ``grace_s`` seconds is forgotten.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field, replace
from typing import Callable

import numpy as np

from ..core.batch import SampleBatch
from ..core.params import Params
from ..core.pipeline import Intervals, Pipeline

DEFAULT_MAX_PHASES = 64
DEFAULT_GRACE_S = 300.0


def live_phases(pipeline: Pipeline) -> int:
    """Phases the target's classifier keeps now (retired ones not counted)."""
    return int(pipeline.classifier.count[0])


def slots_of(classifier, phase_ids: np.ndarray) -> np.ndarray:
    """The classifier's slot of each phase id.  A phase retired within the
    same batch has lost its slot already: its id modulo ``max_phases`` stands
    in (still within the bound)."""
    live = classifier.ids[:int(classifier.count[0])]
    order = np.argsort(live)
    at = np.searchsorted(live[order], phase_ids).clip(0, max(len(live) - 1, 0))
    found = (live[order][at] == phase_ids) if len(live) else np.zeros(len(phase_ids), bool)
    return np.where(found, order[at] if len(live) else 0,
                    phase_ids % classifier.params.max_phases).astype(np.int64)


def add_phase_counts(counts: dict[int, int], phase: np.ndarray, new_phase: np.ndarray) -> None:
    """Add the intervals of each phase id to ``counts``; an id whose phase
    opened in these intervals (a slot taken again) counts from its opening."""
    opened = {int(phase[i]): i for i in np.flatnonzero(new_phase).tolist()}
    for p, n in zip(*np.unique(phase, return_counts=True)):
        p = int(p)
        if p in opened:
            counts[p] = int((phase[opened[p]:] == p).sum())
        else:
            counts[p] = counts.get(p, 0) + int(n)


def cpu_target(cpu: int) -> str:
    return f"cpu{cpu}"


def _empty_intervals() -> Intervals:
    z = np.zeros(0, np.int64)
    f = np.zeros(0)
    return Intervals(z, z, z, z, z, z, f, z, np.zeros(0, np.bool_), f, f)


@dataclass
class TargetState:
    """What the daemon keeps about one target between batches."""

    name: str
    pipeline: Pipeline
    phase: int = -1                 # current phase id (slot), -1 before the first interval
    intervals: int = 0
    phase_changes: int = 0
    phases_retired: int = 0
    samples: int = 0
    retired_base: int = 0           # retired by earlier classifier generations
    phase_intervals: dict[int, int] = field(default_factory=dict)
    last_seen: float = 0.0

    @property
    def phases(self) -> int:
        """Phases currently kept by the classifier."""
        return live_phases(self.pipeline)


class Targets:
    """Routes batches to one pipeline per target and keeps per-target counters.

    ``target_of``: None to route rows by CPU (``cpu<N>``), or a fixed target
    name for a source that watches one process.  ``listeners`` are called with
    ``(target, intervals, changes)`` for every batch that completed intervals,
    where ``changes`` are the rows whose phase differs from the previous one.
    """

    def __init__(self, meta: dict, params: Params, *, target: str | None = None,
                 grace_s: float = DEFAULT_GRACE_S,
                 listeners: list[Callable] | None = None, lock: threading.Lock | None = None):
        self.meta = meta
        self.params = params
        self.target = target
        self.grace_s = grace_s
        self.listeners = listeners if listeners is not None else []
        self.lock = lock or threading.Lock()
        self.by_name: dict[str, TargetState] = {}
        self.count = 0
        self.samples = 0
        self.forgotten = 0

    # --- the part of the Pipeline interface LiveRun uses -------------------

    @property
    def n_phases(self) -> int:
        return sum(t.phases for t in self.by_name.values())

    def feed(self, batch: SampleBatch) -> Intervals:
        if len(batch) == 0:
            return _empty_intervals()
        self.samples += len(batch)
        parts = [self._feed_target(name, rows) for name, rows in self._split(batch)]
        parts = [p for p in parts if len(p)]
        return Intervals.join(parts) if parts else _empty_intervals()

    def finish(self) -> Intervals:
        """The targets' trailing partial intervals are left out, as in replay."""
        return _empty_intervals()

    # --- routing -----------------------------------------------------------

    def _split(self, batch: SampleBatch):
        if self.target is not None:
            yield self.target, batch
            return
        cpus = batch["cpu"]
        first = cpus[0]
        if (cpus == first).all():
            yield cpu_target(int(first)), batch
            return
        for cpu in np.unique(cpus):
            rows = np.flatnonzero(cpus == cpu)
            yield cpu_target(int(cpu)), SampleBatch({n: c[rows] for n, c in batch.columns.items()})

    def _state(self, name: str) -> TargetState:
        state = self.by_name.get(name)
        if state is None:
            state = TargetState(name, Pipeline.for_trace(self.meta, self.params))
            with self.lock:
                self.by_name[name] = state
        return state

    def _feed_target(self, name: str, batch: SampleBatch) -> Intervals:
        state = self._state(name)
        state.samples += len(batch)
        state.last_seen = time.monotonic()
        intervals = state.pipeline.feed(batch)
        if len(intervals) == 0:
            return intervals
        intervals.phase = slots_of(state.pipeline.classifier, intervals.phase)
        self._count(state, intervals)
        self._count_retired(state)
        return intervals

    def _count(self, state: TargetState, iv: Intervals) -> None:
        previous = np.concatenate([[state.phase], iv.phase[:-1]])
        changed = iv.phase != previous
        with self.lock:
            state.intervals += len(iv)
            state.phase_changes += int(changed[previous >= 0].sum()) if len(iv) else 0
            add_phase_counts(state.phase_intervals, iv.phase, iv.new_phase)
            state.phase = int(iv.phase[-1])
            self.count += len(iv)
        for listener in self.listeners:
            listener(state.name, iv, np.flatnonzero(changed), previous)

    def _count_retired(self, state: TargetState) -> None:
        """The phases the classifier retired itself (their slots' counts
        started again when a new phase took them)."""
        retired = state.retired_base + int(state.pipeline.classifier.retired)
        if retired != state.phases_retired:
            with self.lock:
                state.phases_retired = retired

    def _retire(self, state: TargetState) -> None:
        """Start the target's classifier afresh: its phases are retired."""
        kept = live_phases(state.pipeline)
        fresh = Pipeline.for_trace(self.meta, self.params)
        old = state.pipeline
        # Interval splitting and decoding carry on; only the phases are new.
        fresh.decoder, fresh.accumulator, fresh.count = old.decoder, old.accumulator, old.count
        fresh.samples, fresh.text_range = old.samples, old.text_range
        with self.lock:
            state.phases_retired += kept
            state.retired_base = state.phases_retired
            state.phase_intervals = {}
            state.phase = -1
            state.pipeline = fresh

    # --- housekeeping --------------------------------------------------------

    def set_params(self, params: Params) -> None:
        """New detector settings: every target starts a new classifier with them."""
        self.params = params
        for state in list(self.by_name.values()):
            self._retire(state)

    def forget_ended(self, now: float | None = None) -> list[str]:
        """Drop targets that sent nothing for ``grace_s`` seconds; their names."""
        now = time.monotonic() if now is None else now
        gone = [n for n, t in self.by_name.items() if now - t.last_seen > self.grace_s]
        with self.lock:
            for name in gone:
                del self.by_name[name]
        self.forgotten += len(gone)
        return gone

    def snapshot(self) -> list[TargetState]:
        """Copies of the targets' counters, for a scrape on another thread."""
        with self.lock:
            return [replace(t, phase_intervals=dict(t.phase_intervals))
                    for t in self.by_name.values()]
