"""One pipeline per target, and what the daemon counts of each.

A target is a CPU watched system-wide (``cpu<N>``, also each CPU of a replayed
trace) or a watched process (``pid:<PID>``, ``comm:<NAME>``, ``cgroup:<PATH>``).
:class:`Targets` is the driver's :class:`~phasewatch.core.driver.Streams`
with one pipeline per target (built by ``Pipeline.for_trace``, as ``run``
and ``replay`` build theirs), and a sink keeping the few counters the
metrics report.

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

import math
import threading
import time
from dataclasses import dataclass, field, replace

import numpy as np

from ..core.driver import Classified, Streams
from ..core.params import Params
from ..core.pipeline import Intervals, Pipeline
from ..core.source import Sink

DEFAULT_MAX_PHASES = 64
DEFAULT_GRACE_S = 300.0


def live_phases(pipeline: Pipeline) -> int:
    """Phases the target's classifier keeps now (retired ones not counted)."""
    return pipeline.classifier.live


def slots_of(classifier, phase_ids: np.ndarray) -> np.ndarray:
    """The classifier's slot of each phase id.  A phase retired within the
    same batch has lost its slot already: its id modulo ``max_phases`` stands
    in (still within the bound)."""
    live = classifier.ids
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
    phase: int = -1                 # current phase id (slot), -1 before the first interval
    intervals: int = 0
    phase_changes: int = 0
    phases_retired: int = 0
    samples: int = 0
    retired_base: int = 0           # retired by earlier classifier generations
    phase_intervals: dict[int, int] = field(default_factory=dict)
    last_seen: float = 0.0
    # the phase predictions (core.prediction): the last interval's expected
    # remaining seconds, and the next-interval predictions right and wrong
    expected_remaining_s: float = math.nan
    predictions_right: int = 0
    predictions_wrong: int = 0

    @property
    def phases(self) -> int:
        """Phases currently kept by the classifier."""
        return live_phases(self.pipeline)


class Targets(Streams, Sink):
    """The targets' pipelines (rows routed by CPU, or all to the fixed
    ``target``), and, as a sink, their counters, read by scrapes on other
    threads through :meth:`snapshot`."""

    def __init__(self, meta: dict, params: Params, *, target: str | None = None,
                 grace_s: float = DEFAULT_GRACE_S, lock: threading.Lock | None = None):
        super().__init__(self._new_target, name=target, on_rows=self._took)
        self.meta = meta
        self.params = params
        self.target = target
        self.grace_s = grace_s
        self.lock = lock or threading.Lock()
        self.by_name: dict[str, TargetState] = {}
        self.samples = 0
        self.forgotten = 0
        # Held while a batch is fed (the first loads the kernels, which may take
        # longer than the grace period): no target is forgotten under its feed.
        self._feeding = threading.Lock()
        self._fed: set[str] = set()

    def _new_target(self, name: str) -> Pipeline:
        pipeline = Pipeline.for_trace(self.meta, self.params)
        with self.lock:
            self.by_name[name] = TargetState(name, pipeline)
        return pipeline

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

    def ids(self, pipeline: Pipeline, intervals: Intervals) -> np.ndarray:
        return slots_of(pipeline.classifier, intervals.phase)

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
            add_phase_counts(state.phase_intervals, iv.phase, iv.new_phase)
            state.phase = int(iv.phase[-1])
            state.phases_retired = state.retired_base + int(state.pipeline.classifier.retired)
            count_predictions(state, iv)

    # --- housekeeping --------------------------------------------------------

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
            state.expected_remaining_s = math.nan
            state.pipeline = fresh
        self.pipelines[state.name] = fresh
        self.last_phase.pop(state.name, None)

    def set_params(self, params: Params) -> None:
        """New detector settings: every target starts a new classifier with them."""
        self.params = params
        for state in list(self.by_name.values()):
            self._retire(state)

    def forget_ended(self, now: float | None = None) -> list[str]:
        """Drop targets that sent nothing for ``grace_s`` seconds; their names."""
        if not self._feeding.acquire(blocking=False):
            return []           # a batch is being fed: at the next look
        try:
            now = time.monotonic() if now is None else now
            gone = [n for n, t in self.by_name.items() if now - t.last_seen > self.grace_s]
            with self.lock:
                for name in gone:
                    del self.by_name[name]
            self.forget(gone)
        finally:
            self._feeding.release()
        self.forgotten += len(gone)
        return gone

    def snapshot(self) -> list[TargetState]:
        """Copies of the targets' counters, for a scrape on another thread."""
        with self.lock:
            return [replace(t, phase_intervals=dict(t.phase_intervals))
                    for t in self.by_name.values()]
