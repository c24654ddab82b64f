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

from .kernels import kernel
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


# The score's counts (int64): right and wrong of the next interval and of the
# phase after a change, changes foreseen, then the last interval's phase and
# what was predicted on it, the current run's length so far, its pending
# predictions of the remaining length and their stride.
(N_RIGHT, N_WRONG, C_RIGHT, C_WRONG, FORESEEN, LAST_PHASE, LAST_NEXT, LAST_AFTER, RUN, PENDED,
 STRIDE) = range(11)
_COUNTS = {"next_right": N_RIGHT, "next_wrong": N_WRONG, "change_right": C_RIGHT,
           "change_wrong": C_WRONG, "foreseen": FORESEEN, "pending": PENDED}


class PredictionScore:
    """Right and wrong of one stream's predictions, in bounded memory."""

    def __init__(self):
        self.counts = np.zeros(11, np.int64)
        self.counts[[LAST_PHASE, LAST_NEXT, LAST_AFTER]] = NONE
        self.counts[STRIDE] = 1
        self.errors = np.zeros(int(ERROR_CAP / ERROR_BIN) + 1, np.int64)
        #: The current run's predictions of its remaining length, at the
        #: positions in the run that are multiples of the stride (grown as
        #: a block needs, to :data:`PENDING` and a block more).
        self.pended = np.zeros(256, np.int64)

    def add(self, phases: np.ndarray, predicted: Predictions) -> np.ndarray:
        """The phases of the next intervals and the predictions made on
        them; whether each interval's phase was the one predicted on the
        interval before (1, 0; -1 where there was none to score)."""
        phases = _plain(phases)
        n = len(phases)
        if len(self.pended) < self.counts[PENDED] + n:
            grown = np.zeros(max(2 * len(self.pended), int(self.counts[PENDED]) + n), np.int64)
            grown[:len(self.pended)] = self.pended
            self.pended = grown
        outcome = np.empty(n, np.int8)
        _score_block(self.counts, self.errors, self.pended, phases, _plain(predicted.next_phase),
                    _plain(predicted.after_change), _plain(predicted.remaining), outcome)
        return outcome

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


def _count(name: str) -> property:
    at = _COUNTS[name]

    def get(self) -> int:
        return int(self.counts[at])

    def put(self, value: int) -> None:
        self.counts[at] = value
    return property(get, put)


for _name in _COUNTS:
    setattr(PredictionScore, _name, _count(_name))


def _plain(a, dtype=np.int64) -> np.ndarray:
    """``a`` as the kernels take it: of ``dtype``, whole and writable."""
    a = np.asarray(a, dtype)
    return a if a.flags.c_contiguous and a.flags.writeable else a.copy()


@kernel(cache=True, nogil=True)
def score_block(counts, errors, pended, phases, said_next, said_after, remaining, outcome):
    """Scores a block (see PredictionScore): each interval's phase against
    the one predicted on the interval before, each change's against the
    phase predicted after it, and each run's predicted remaining lengths when
    it ends (a run going on past the block pends them; one of
    :data:`PENDING` or more keeps every second, then every fourth, ...)."""
    n = len(phases)
    before, expected, after = counts[LAST_PHASE], counts[LAST_NEXT], counts[LAST_AFTER]
    first = n                   # the first change of phase in the block
    for i in range(n):
        phase = phases[i]
        scored = phase >= 0 and before >= 0
        right = scored and expected == phase
        outcome[i] = 1 if right else (0 if scored else -1)
        if scored:
            counts[N_RIGHT if right else N_WRONG] += 1
        if phase != before:
            if first == n:
                first = i
            if scored:
                counts[C_RIGHT if after == phase else C_WRONG] += 1
                if right:
                    counts[FORESEEN] += 1
        before, expected, after = phase, said_next[i], said_after[i]
    counts[LAST_PHASE], counts[LAST_NEXT], counts[LAST_AFTER] = before, expected, after
    if first > 0 and phases[0] >= 0:
        _extend(counts, pended, remaining, 0, first)
    if first == n:
        return
    _run_ended(counts, errors, pended)
    start = first
    for i in range(first + 1, n + 1):
        if i < n and phases[i] == phases[i - 1]:
            continue
        if i == n:
            if phases[start] >= 0:
                _extend(counts, pended, remaining, start, n)
            break
        if phases[start] >= 0:      # a run wholly inside the block
            length = i - start
            for k in range(start, i):
                if length < PENDING or (k - start + 1) % 2 == 0:
                    _count_error(errors, remaining[k], i - 1 - k)
        start = i


@kernel(cache=True, nogil=True)
def _extend(counts, pended, remaining, lo, hi):
    """The current run goes on for ``remaining[lo:hi]``."""
    run, stride, count = counts[RUN], counts[STRIDE], counts[PENDED]
    for k in range(lo, hi):
        run += 1
        if run % stride == 0:
            pended[count] = remaining[k]
            count += 1
    if count >= PENDING:        # only the multiples of twice the stride stay
        for k in range(count // 2):
            pended[k] = pended[2 * k + 1]
        count //= 2
        stride *= 2
    counts[RUN], counts[STRIDE], counts[PENDED] = run, stride, count


@kernel(cache=True, nogil=True)
def _run_ended(counts, errors, pended):
    """The run going on has ended: its pending predictions scored."""
    run, stride = counts[RUN], counts[STRIDE]
    for k in range(counts[PENDED]):
        _count_error(errors, pended[k], run - stride * (k + 1))
    counts[RUN], counts[STRIDE], counts[PENDED] = 0, 1, 0


@kernel(cache=True, nogil=True)
def _count_error(errors, predicted, true):
    error = abs(float(predicted) - float(true)) / (float(true) + 1.0)
    at = int(error / ERROR_BIN)
    errors[min(at, len(errors) - 1)] += 1


#: The call from Python, its argument types always the same.
_score_block = score_block.fixed()


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
        phase = _plain(iv.phase)
        iv.prediction = predictor.observe_block(phase, _plain(iv.new_phase, np.bool_),
                                                _plain(iv.t_start_ns), _plain(iv.t_end_ns))
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
