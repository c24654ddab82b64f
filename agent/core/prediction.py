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

from .predict import MAX_PHASES, NONE, UNKNOWN, PhasePredictor, Prediction, Predictions
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
        self.phase = NONE
        self.last: Prediction = UNKNOWN
        self.run = 0
        self.pending: list[tuple[int, int]] = []        # (position in the run, predicted remaining)
        self.stride = 1

    def add(self, phase: int, prediction: Prediction) -> bool | None:
        """The next interval's phase and the prediction made on it; whether
        the prediction made on the interval before was right (None: there
        was none to score)."""
        right = None
        if phase >= 0 and self.phase >= 0:
            right = self.last.next_phase == phase
            self.next_right += right
            self.next_wrong += not right
            if phase != self.phase:
                self.foreseen += right
                changed_right = self.last.after_change == phase
                self.change_right += changed_right
                self.change_wrong += not changed_right
        if phase != self.phase:
            self._run_ended()
        if phase >= 0:
            self.run += 1
            if self.run % self.stride == 0:
                self._pend(prediction.remaining)
        self.phase, self.last = phase, prediction
        return right

    def _pend(self, remaining: int) -> None:
        self.pending.append((self.run, remaining))
        if len(self.pending) >= PENDING:
            self.pending = self.pending[1::2]
            self.stride *= 2

    def _run_ended(self) -> None:
        if self.pending:
            at, predicted = np.array(self.pending, np.float64).T
            true = self.run - at
            error = np.abs(predicted - true) / (true + 1)
            bins = np.minimum((error / ERROR_BIN).astype(np.int64), len(self.errors) - 1)
            self.errors += np.bincount(bins, minlength=len(self.errors))
        self.pending, self.stride, self.run = [], 1, 0

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
        return {"next_accuracy": self.next_accuracy, "next_scored": self.next_right + self.next_wrong,
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
        rows, outcome = [], []
        for phase, opened in zip(iv.phase.tolist(), iv.new_phase.tolist()):
            if opened:      # an id opened afresh (a daemon's slot taken again): nothing of old
                predictor.forget(phase)
            prediction = predictor.observe(phase)
            right = score.add(phase, prediction)
            rows.append(prediction)
            outcome.append(-1 if right is None else int(right))
        iv.prediction = Predictions.of(rows, (iv.t_end_ns - iv.t_start_ns) / 1e9, outcome)
        if self.live_phases is not None:
            live = self.live_phases(c.stream)
            if live is not None:
                predictor.retain(live)

    @classmethod
    def for_pipeline(cls, pipeline) -> "PredictionTap":
        """The tap of a command's one pipeline: bounded as its classifier,
        and forgetting the phases the classifier retires."""
        classifier = pipeline.classifier
        retired = [classifier.retired]

        def live(stream: str):
            if classifier.retired == retired[0]:
                return None
            retired[0] = classifier.retired
            ids = classifier.ids
            return ids[ids >= 0].tolist()
        return cls(classifier.params.max_phases, live)

    def forget_stream(self, name: str) -> None:
        """The stream has gone, or its phases were all retired (a daemon's
        target): its predictor with it."""
        self.predictors.pop(name, None)
        self.scores.pop(name, None)

    def forget_all(self) -> None:
        self.predictors.clear()
        self.scores.clear()

    def retire(self, stream: str, phases: Iterable[int]) -> None:
        predictor = self.predictors.get(stream)
        if predictor is not None:
            for phase in phases:
                predictor.forget(phase)

    def summary(self, stream: str = "") -> dict | None:
        score = self.scores.get(stream)
        return score.summary() if score is not None else None

    def _stream(self, name: str) -> tuple[PhasePredictor, PredictionScore]:
        predictor = self.predictors.get(name)
        if predictor is None:
            predictor = self.predictors[name] = PhasePredictor(self.max_phases)
            self.scores[name] = PredictionScore()
        return predictor, self.scores[name]
