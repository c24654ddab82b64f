"""One pipeline per target, and what the daemon counts of each.

A target is a CPU watched system-wide (``cpu<N>``, also each CPU of a replayed
trace) or a watched process (``pid:<PID>``, ``comm:<NAME>``, ``cgroup:<PATH>``).
:class:`Targets` is the driver's :class:`~phasewatch.core.driver.Streams`
with one pipeline per target (built by ``Pipeline.for_trace``, as ``run``
and ``replay`` build theirs), and a sink keeping the few counters the
metrics report.

Phases are spoken of by stable ids and names (:mod:`.phase_ids`): the
program's catalogue ids where the target has a catalogue, else ids in order
of appearance that the daemon never gives twice.  Memory and the metrics'
series stay bounded: each target keeps at most ``max_phases`` live phases
(the classifier retires the least recently used, and the daemon counts what
it retired), and a retired phase's series leave the exposition
``retired_seconds`` after it was retired.  New detector settings (a reload)
start each target's classifier afresh: its phases are retired and counted
in ``phases_retired``.  A target that has sent no samples for ``grace_s``
seconds is forgotten.
"""

from __future__ import annotations

import math
import threading
import time
from dataclasses import dataclass, field, replace
from typing import Callable

import numpy as np

from ..core.driver import Classified, Streams
from ..core.params import Params
from ..core.pipeline import Intervals, Pipeline
from ..core.source import Sink
from .phase_ids import ProgramPhases, TargetPhases, known_kept

DEFAULT_MAX_PHASES = 64
DEFAULT_GRACE_S = 300.0


def live_phases(pipeline: Pipeline) -> int:
    """Phases the target's classifier keeps now (retired ones not counted)."""
    return pipeline.classifier.live


def in_memory_book(name: str, pipeline: Pipeline) -> TargetPhases:
    """A target's phases without a catalogue: ids in order of appearance,
    never given twice while the daemon runs."""
    return TargetPhases(ProgramPhases(name, name, pipeline.profile,
                                      keep=known_kept(pipeline)))


def count_predictions(state: "TargetState", iv: Intervals) -> None:
    """The predictions' outcomes and the latest expected remaining seconds."""
    pr = iv.prediction
    if pr is None:
        return
    if pr.outcome is not None:
        state.predictions_right += int((pr.outcome == 1).sum())
        state.predictions_wrong += int((pr.outcome == 0).sum())
    state.expected_remaining_s = float(pr.remaining_s[-1])


@dataclass
class TargetState:
    """What the daemon keeps about one target between batches."""

    name: str
    pipeline: Pipeline
    book: TargetPhases | None = None
    phase: int = -1                 # current phase's stable id, -1 before the first interval
    intervals: int = 0
    phase_changes: int = 0
    phases_retired: int = 0
    samples: int = 0
    retired_base: int = 0           # retired by earlier classifier generations
    phase_intervals: dict[int, int] = field(default_factory=dict)
    #: Stable ids whose series are shown (live, or retired within
    #: ``retired_seconds``), and the names of those phases.
    shown: frozenset = frozenset()
    names: dict[int, str] = field(default_factory=dict)
    last_seen: float = 0.0
    # the phase predictions (core.prediction): the last interval's expected
    # remaining seconds, and the next-interval predictions right and wrong
    expected_remaining_s: float = math.nan
    predictions_right: int = 0
    predictions_wrong: int = 0
    # a process target's code map: mapping rows and processes kept, processes
    # seen to end (-1: not a process target learning from perf's records)
    mapping_rows: int = -1
    processes: int = -1
    processes_exited: int = -1

    @property
    def phases(self) -> int:
        """Phases currently kept by the classifier."""
        return live_phases(self.pipeline)


class Targets(Streams, Sink):
    """The targets' pipelines (rows routed by CPU, or all to the fixed
    ``target``), and, as a sink, their counters, read by scrapes on other
    threads through :meth:`snapshot`."""

    def __init__(self, meta: dict, params: Params, *, target: str | None = None,
                 grace_s: float = DEFAULT_GRACE_S, lock: threading.Lock | None = None,
                 books=in_memory_book):
        """``books(name, pipeline)``: the :class:`TargetPhases` of a new
        target's pipeline, which it seeds."""
        super().__init__(self._new_target, name=target, on_rows=self._took)
        # The daemon's ids are its own catalogue's: a replayed recording's
        # known_phases (those its run started from, another catalogue's) are
        # not seeded, or a target would be seeded twice.
        self.meta = {key: value for key, value in meta.items() if key != "known_phases"}
        self.params = params
        self.target = target
        self.grace_s = grace_s
        self.lock = lock or threading.Lock()
        self.by_name: dict[str, TargetState] = {}
        self.samples = 0
        self.forgotten = 0
        self.books = books
        #: Whether targets name their phases from their code (their rows go
        #: to their namers before the pipelines see them).
        self.named = False
        #: A process target's (mapping rows, processes, processes ended), or None.
        self.kept_mappings: Callable[[], tuple[int, int, int]] | None = None
        #: Told (target, stable ids) of phases whose series left the exposition.
        self.on_dropped = lambda target, phases: None
        # Held while a batch is fed (the first loads the kernels, which may take
        # longer than the grace period): no target is forgotten under its feed.
        self._feeding = threading.Lock()
        self._fed: set[str] = set()

    def _new_target(self, name: str) -> Pipeline:
        pipeline = Pipeline.for_trace(self.meta, self.params)
        book = self.books(name, pipeline)
        book.seed(pipeline)
        with self.lock:
            self.by_name[name] = TargetState(name, pipeline, book, last_seen=time.monotonic())
        return pipeline

    def open(self, name: str) -> Pipeline:
        """The pipeline of target ``name``, made now if it has none yet."""
        if name not in self.pipelines:
            self.pipelines[name] = self._new_target(name)
        return self.pipelines[name]

    def _took(self, name: str, rows: int) -> None:
        state = self.by_name[name]
        state.samples += rows
        state.last_seen = time.monotonic()
        self.samples += rows
        self._fed.add(name)

    def feed(self, batch) -> list[Classified]:
        """The batch's intervals; each target in it counts as seen when its
        rows have gone through its pipeline too."""
        with self._feeding:
            out = super().feed(batch)
            now = time.monotonic()
            for name in self._fed:
                self.by_name[name].last_seen = now
            self._fed.clear()
        return out

    def ids(self, name: str, pipeline: Pipeline, intervals: Intervals) -> np.ndarray:
        return self.by_name[name].book.ids(pipeline, intervals)

    def names(self, name: str, phases: np.ndarray) -> dict[int, str]:
        return self.by_name[name].book.names(phases)

    def batch(self, batch) -> None:
        """Each target's IPs, to name its phases from."""
        if not self.named or len(batch) == 0:
            return
        for name, rows in self._split(batch):
            self.open(name)
            namer = self.by_name[name].book.namer
            if namer is not None:
                namer.batch(rows)

    # --- as a sink: the counters ---------------------------------------------

    def classified(self, c: Classified) -> None:
        iv = c.intervals
        if iv.partial:
            return
        state = self.by_name.get(c.stream)
        if state is None:       # forgotten since (after the grace period)
            return
        with self.lock:
            state.intervals += len(iv)
            state.phase_changes += int(((iv.phase != c.previous) & (c.previous >= 0)).sum())
            for p, n in zip(*np.unique(iv.phase, return_counts=True)):
                state.phase_intervals[int(p)] = state.phase_intervals.get(int(p), 0) + int(n)
            state.phase = int(iv.phase[-1])
            state.phases_retired = state.retired_base + int(state.pipeline.classifier.retired)
            count_predictions(state, iv)
            self._show(state)

    def _show(self, state: TargetState) -> None:
        """Which of the target's phases the metrics show, with their names."""
        state.shown = frozenset(state.book.shown())
        state.names = {p: n for p, n in state.book.named.items() if p in state.shown}

    # --- housekeeping --------------------------------------------------------

    def _retire(self, state: TargetState) -> None:
        """Start the target's classifier afresh: its phases are retired."""
        kept = live_phases(state.pipeline)
        old = state.pipeline
        state.book.close(old)
        fresh = Pipeline.for_trace(self.meta, self.params)
        # Interval splitting and decoding carry on; only the phases are new.
        fresh.decoder, fresh.accumulator, fresh.count = old.decoder, old.accumulator, old.count
        fresh.samples, fresh.text_range = old.samples, old.text_range
        fresh.mappings = old.mappings
        book = self.books(state.name, fresh)
        book.seed(fresh)
        with self.lock:
            state.phases_retired += kept
            state.retired_base = state.phases_retired
            state.phase_intervals = {}
            state.phase = -1
            state.expected_remaining_s = math.nan
            state.pipeline, state.book = fresh, book
            self._show(state)
        self.pipelines[state.name] = fresh
        self.last_phase.pop(state.name, None)
        self.on_new_pipeline(state.name, fresh)

    def on_new_pipeline(self, name: str, pipeline: Pipeline) -> None:
        """A target's pipeline was made afresh (the process's mappings follow it)."""

    def set_params(self, params: Params) -> None:
        """New detector settings: every target starts a new classifier with them."""
        self.params = params
        for state in list(self.by_name.values()):
            self._retire(state)

    def forget_ended(self, now: float | None = None) -> list[str]:
        """Drop targets that sent nothing for ``grace_s`` seconds (their
        phases saved first), and the series of phases retired more than
        ``retired_seconds`` ago; the names of the targets dropped."""
        if not self._feeding.acquire(blocking=False):
            return []           # a batch is being fed: at the next look
        try:
            now = time.monotonic() if now is None else now
            gone = [n for n, t in self.by_name.items() if now - t.last_seen > self.grace_s]
            for name in gone:
                self.by_name[name].book.close(self.by_name[name].pipeline)
            with self.lock:
                for name in gone:
                    del self.by_name[name]
                expired = {name: self._expire(state) for name, state in self.by_name.items()}
            self.forget(gone)
        finally:
            self._feeding.release()
        for name, phases in expired.items():
            if phases:
                self.on_dropped(name, phases)
        self.forgotten += len(gone)
        return gone

    def _expire(self, state: TargetState) -> list[int]:
        gone = state.book.expire()
        for p in gone:
            state.phase_intervals.pop(p, None)
        if gone:
            self._show(state)
        return gone

    def save(self) -> None:
        """Every target's phases into the catalogue (at the end of its source,
        or the daemon's)."""
        with self._feeding:
            for state in list(self.by_name.values()):
                state.book.save(state.pipeline)

    def snapshot(self) -> list[TargetState]:
        """Copies of the targets' counters, for a scrape on another thread."""
        kept = self.kept_mappings() if self.kept_mappings is not None else (-1, -1, -1)
        with self.lock:
            return [replace(t, phase_intervals={p: n for p, n in t.phase_intervals.items()
                                                if p in t.shown},
                            **(dict(zip(("mapping_rows", "processes", "processes_exited"), kept))
                               if t.name == self.target else {}))
                    for t in self.by_name.values()]
