"""Prediction beside classification: the tap that predicts each stream's
phases as the driver hands them on, and the scores of its predictions.

:class:`PredictionTap` is a sink put before the others: it gives each
classified block of intervals its :class:`~.predict.Predictions`
(``intervals.prediction``), which the results file, the daemon's events and
the report read, and keeps a :class:`PredictionScore` per stream.

A prediction is scored when what it predicted is known:

- the next interval's phase, on every interval that has a next one;
- at a change (the next interval's phase differs), the phase after the
  change as predicted on the last interval before it, and whether the next
  interval itself was foreseen;
- the remaining intervals, when the run ends: the relative error
  ``|predicted - true| / (true + 1)`` (the remaining length counting the
  interval itself; the last run of a stream, cut off, is not scored).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable, Iterable

import numpy as np

from .predict import MAX_PHASES, NONE, PhasePredictor, Predictions
from .source import Sink

if TYPE_CHECKING:
    from .source import Classified

#: Relative errors of the remaining length are counted in bins this wide, up
#: to :data:`ERROR_CAP` (beyond: one bin); the median is read from them.
ERROR_BIN = 0.002
ERROR_CAP = 4.0
#: Predictions of the remaining length waiting for their run to end, at most
#: (a longer run keeps every second one, then every fourth, ...).
PENDING = 4096


class PredictionScore:
    """Right and wrong of one stream's predictions, in bounded memory."""

    def __init__(self):
        self.next_right = self.next_wrong = 0
        self.change_right = self.change_wrong = 0       # the phase after a change
        self.foreseen = 0                               # changes the next-interval prediction named
        self.errors = np.zeros(int(ERROR_CAP / ERROR_BIN) + 1, np.int64)
        self.phase = NONE               # the last interval's phase
        self.last_next = self.last_after = NONE     # and what was predicted on it
        self.run = 0                    # intervals in the current run so far
        self.pending_at: list[np.ndarray] = []      # positions in the run, predicted remaining
        self.pending_left: list[np.ndarray] = []
        self.pending = 0
        self.stride = 1

    def add(self, phases: np.ndarray, predicted: Predictions) -> np.ndarray:
        """The phases of the next intervals and the predictions made on
        them; whether each interval's phase was the one predicted on the
        interval before (1, 0; -1 where there was none to score)."""
        phases = np.asarray(phases, np.int64)
        before = np.empty(len(phases), np.int64)
        before[0], before[1:] = self.phase, phases[:-1]
        said = np.empty(len(phases), np.int64)
        said[0], said[1:] = self.last_next, predicted.next_phase[:-1]
        scored = (phases >= 0) & (before >= 0)
        right = (said == phases) & scored
        change = phases != before
        scored_count, right_count = int(np.count_nonzero(scored)), int(np.count_nonzero(right))
        self.next_right += right_count
        self.next_wrong += scored_count - right_count
        changes = np.flatnonzero(change & scored)
        if len(changes):
            self._changes(changes, phases, right, predicted.after_change)
        self._runs(phases, np.flatnonzero(change), predicted.remaining)
        self.phase = int(phases[-1])
        self.last_next = int(predicted.next_phase[-1])
        self.last_after = int(predicted.after_change[-1])
        return right.view(np.int8) - (~scored).view(np.int8)

    def _changes(self, changes: np.ndarray, phases: np.ndarray, right: np.ndarray,
                 after_change: np.ndarray) -> None:
        """The changes at ``changes``: foreseen where the next interval was
        predicted right, and the phase after each as said on the interval before."""
        said = after_change[changes - 1]
        if changes[0] == 0:
            said[0] = self.last_after
        after_right = int(np.count_nonzero(said == phases[changes]))
        self.foreseen += int(np.count_nonzero(right[changes]))
        self.change_right += after_right
        self.change_wrong += len(changes) - after_right

    def _runs(self, phases: np.ndarray, starts: np.ndarray, remaining: np.ndarray) -> None:
        """Each run's predictions of its remaining length kept until it
        ends.  ``starts``: where a run starts in the block (its first
        interval's phase differs from the one before).  The run going on
        from the block before and the one going on into the next are kept
        pending; the runs wholly inside the block are scored at once."""
        n = len(phases)
        first = int(starts[0]) if len(starts) else n
        if first and phases[0] >= 0:
            self._extend(remaining[:first], first)
        if not len(starts):
            return
        predicted, true = self._run_ended()
        if len(starts) > 1:
            inside = self._inside(phases, starts, remaining)
            predicted, true = [*predicted, inside[0]], [*true, inside[1]]
        if predicted:
            self._count_errors(np.concatenate(predicted), np.concatenate(true))
        last = int(starts[-1])
        if phases[last] >= 0:
            self._extend(remaining[last:], n - last)

    def _extend(self, remaining: np.ndarray, count: int) -> None:
        """The current run goes on for ``count`` intervals."""
        if self.stride == 1:
            self._pend(np.arange(self.run + 1, self.run + 1 + count), remaining)
        else:
            at = np.arange(self.run + 1, self.run + 1 + count)
            keep = at % self.stride == 0
            self._pend(at[keep], remaining[keep])
        self.run += count

    @staticmethod
    def _inside(phases: np.ndarray, starts: np.ndarray,
                remaining: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The runs that start and end within the block: each interval's
        predicted and true remaining length; a run of :data:`PENDING`
        intervals or more thinned to every second one, as its predictions
        would have been pending."""
        lo, hi = int(starts[0]), int(starts[-1])
        lengths = np.diff(starts)
        true = np.repeat(starts[1:] - 1, lengths) - np.arange(lo, hi)
        keep = phases[lo:hi] >= 0
        if lengths.max() >= PENDING:
            at = np.repeat(lengths, lengths) - true        # the position in the run, from 1
            keep &= (np.repeat(lengths, lengths) < PENDING) | (at % 2 == 0)
        return remaining[lo:hi][keep], true[keep]

    def _count_errors(self, predicted: np.ndarray, true: np.ndarray) -> None:
        error = np.abs(predicted.astype(np.float64) - true) / (true + 1.0)
        bins = np.minimum((error / ERROR_BIN).astype(np.int64), len(self.errors) - 1)
        self.errors += np.bincount(bins, minlength=len(self.errors))

    def _pend(self, at: np.ndarray, left: np.ndarray) -> None:
        self.pending_at.append(at)
        self.pending_left.append(left)
        self.pending += len(at)
        if self.pending >= PENDING:
            at, left = np.concatenate(self.pending_at), np.concatenate(self.pending_left)
            keep = at % (2 * self.stride) == 0
            self.pending_at, self.pending_left = [at[keep]], [left[keep]]
            self.pending, self.stride = int(keep.sum()), 2 * self.stride

    def _run_ended(self) -> tuple[list[np.ndarray], list[np.ndarray]]:
        """The run going on has ended: its pending predictions of the
        remaining length and the true ones."""
        out: tuple[list, list] = ([], [])
        if self.pending:
            at = np.concatenate(self.pending_at)
            out = ([np.concatenate(self.pending_left)], [self.run - at])
        self.pending_at, self.pending_left, self.pending = [], [], 0
        self.stride, self.run = 1, 0
        return out

    @property
    def next_accuracy(self) -> float | None:
        return _share(self.next_right, self.next_wrong)

    @property
    def change_accuracy(self) -> float | None:
        return _share(self.change_right, self.change_wrong)

    @property
    def median_remaining_error(self) -> float | None:
        total = int(self.errors.sum())
        if not total:
            return None
        at = int(np.searchsorted(np.cumsum(self.errors), (total + 1) // 2))
        return round((at + 0.5) * ERROR_BIN, 4) if at < len(self.errors) - 1 else ERROR_CAP

    def summary(self) -> dict:
        """What ``run --json`` and replay tell of the predictions."""
        changes = self.change_right + self.change_wrong
        return {"next_accuracy": self.next_accuracy,
                "next_scored": self.next_right + self.next_wrong,
                "change_accuracy": self.change_accuracy, "changes": changes,
                "changes_foreseen": self.foreseen,
                "median_remaining_error": self.median_remaining_error,
                "remaining_scored": int(self.errors.sum())}


def _share(right: int, wrong: int) -> float | None:
    return right / (right + wrong) if right + wrong else None


class PredictionTap(Sink):
    """Predicts each stream's intervals as they are classified, and scores
    the predictions.  ``live_phases``, where given, tells a stream's live
    phase ids; the predictor forgets the others after each block."""

    def __init__(self, max_phases: int = MAX_PHASES,
                 live_phases: Callable[[str], Iterable[int] | None] | None = None):
        self.max_phases = max_phases
        self.live_phases = live_phases
        self.predictors: dict[str, PhasePredictor] = {}
        self.scores: dict[str, PredictionScore] = {}

    def classified(self, c: Classified) -> None:
        iv = c.intervals
        if iv.partial or len(iv) == 0:
            return
        predictor, score = self._stream(c.stream)
        phase = iv.phase
        opens = iv.new_phase.copy()
        opens[0] = True
        opens[1:] |= phase[1:] != phase[:-1]
        starts = np.flatnonzero(opens).tolist()
        phase_at, new_phase = phase.tolist(), iv.new_phase.tolist()
        spans: list = []
        for start, end in zip(starts, [*starts[1:], len(phase)]):
            if new_phase[start]:        # an id opened afresh (a daemon's slot taken again)
                predictor.forget(phase_at[start])
            predictor.observe_spans(phase_at[start], end - start, spans)
        iv.prediction = Predictions.of_spans(spans, (iv.t_end_ns - iv.t_start_ns) / 1e9)
        iv.prediction.outcome = score.add(phase, iv.prediction)
        if self.live_phases is not None:
            live = self.live_phases(c.stream)
            if live is not None:
                predictor.retain(live)

    @classmethod
    def for_pipeline(cls, pipeline, memory: dict | None = None) -> "PredictionTap":
        """The tap of a command's one pipeline: bounded as its classifier,
        forgetting the phases the classifier retires, and started from
        ``memory`` (a recording's ``prediction_memory``) of the phases the
        classifier starts from."""
        classifier = pipeline.classifier
        retired = [classifier.retired]

        def live(stream: str):
            if classifier.retired == retired[0]:
                return None
            retired[0] = classifier.retired
            ids = classifier.ids
            return ids[ids >= 0].tolist()
        tap = cls(classifier.params.max_phases, live)
        if memory:
            ids = classifier.ids
            tap.seed("", memory, ids[ids >= 0].tolist())
        return tap

    def forget_stream(self, name: str) -> None:
        """The stream has gone, or its phases were all retired (a daemon's
        target): its predictor with it."""
        self.predictors.pop(name, None)
        self.scores.pop(name, None)

    def forget_all(self) -> None:
        self.predictors.clear()
        self.scores.clear()

    def seed(self, stream: str, memory: dict, known: Iterable[int]) -> bool:
        """Start the stream's predictor from an earlier run's memory."""
        return self._stream(stream)[0].seed(memory, known)

    def memory(self, stream: str, phases: Iterable[int]) -> dict | None:
        """What the stream's predictor learnt of ``phases``, to be kept."""
        predictor = self.predictors.get(stream)
        return predictor.memory_dict(phases) if predictor is not None else None

    def summary(self, stream: str = "") -> dict | None:
        score = self.scores.get(stream)
        return score.summary() if score is not None else None

    def _stream(self, name: str) -> tuple[PhasePredictor, PredictionScore]:
        predictor = self.predictors.get(name)
        if predictor is None:
            predictor = self.predictors[name] = PhasePredictor(self.max_phases)
            self.scores[name] = PredictionScore()
        return predictor, self.scores[name]
