"""The phase predictor as the tap runs it (a span of run lengths at a time,
core.predict) says, interval for interval, what a plain reading of its rules
says: each interval's prediction worked out afresh from the runs kept, with
no spans, caches or sorted look-ups."""

from __future__ import annotations

from collections import OrderedDict, deque

import numpy as np

from phasewatch.core import predict
from phasewatch.core.pipeline import Intervals
from phasewatch.core.prediction import PredictionTap
from phasewatch.core.source import Classified

NONE = -1


class ReferencePredictor:
    """docs/prediction.md's predictor, one interval at a time."""

    def __init__(self, max_phases: int):
        self.max_phases = max_phases
        self.phase, self.length, self.before = NONE, 0, ()
        self.memory: OrderedDict = OrderedDict()     # phase -> context -> deque of (length, successor)
        self.lately = deque(maxlen=predict.KEPT)     # the last runs' lengths, any phase

    def observe(self, phase: int) -> tuple:
        if phase < 0:
            return (NONE, NONE, NONE, 0.0, 0.0, 0.0)
        if phase == self.phase:
            self.length += 1
        else:
            self.new_run(phase)
        return self.predict(phase, self.length)

    def contexts(self) -> list[tuple]:
        order = min(len(self.before), predict.ORDER)
        return [tuple(self.before[len(self.before) - k:]) if k else () for k in range(order, -1, -1)]

    def new_run(self, phase: int) -> None:
        ended = self.phase
        if ended != NONE:
            kept = self.memory.setdefault(ended, OrderedDict())
            for context in self.contexts():
                kept.setdefault(context, deque(maxlen=predict.KEPT)).append((self.length, phase))
                kept.move_to_end(context)
            while len(kept) > predict.CONTEXTS:
                kept.popitem(last=False)
            self.lately.append(self.length)
            self.before = (self.before + (ended,))[-predict.ORDER:]
        self.phase, self.length = phase, 1
        self.memory.setdefault(phase, OrderedDict())
        self.memory.move_to_end(phase)
        while len(self.memory) > self.max_phases:
            dropped = self.memory.popitem(last=False)[0]
            self.before = tuple(p for p in self.before if p != dropped)

    def predict(self, phase: int, n: int) -> tuple:
        kept = self.memory.get(phase, {})
        levels = [sorted(kept[c]) for c in self.contexts() if c in kept]
        after, share = self.successor(phase, n, levels)
        if any(length >= n for runs in levels for length, _ in runs):
            for level, runs in enumerate(levels):
                lengths = [length for length, _ in runs if length >= n]
                last = level == len(levels) - 1
                if len(lengths) >= predict.SUPPORT or (lengths and last):
                    return self.from_lengths(phase, n, lengths, after, share)
        lasted = sorted(length for length in self.lately if length >= n)
        if len(lasted) >= predict.SUPPORT:
            return (phase, after, lasted[(len(lasted) - 1) // 2] - n, 1.0, share, 0.0)
        return (phase, after, n, 1.0, share, 0.0)

    def successor(self, phase: int, n: int, levels: list) -> tuple[int, float]:
        for runs in levels:
            lasted = [s for length, s in runs if length >= n] or [s for _, s in runs]
            counts = {s: lasted.count(s) for s in lasted if s not in (NONE, phase)}
            if counts:
                best = max(counts.values())
                latest = [s for s in lasted if counts.get(s) == best][-1]
                return latest, best / len(lasted)
        back = self.before[-1] if self.before else NONE
        return (back, predict.RETURN_GUESS) if back != NONE else (NONE, 0.0)

    @staticmethod
    def from_lengths(phase, n, lengths, after, share) -> tuple:
        alike = len(lengths)
        median = lengths[(alike - 1) // 2]
        near = len([x for x in lengths if abs(x - median) <= predict.TOLERANCE * median]) / alike
        ended_here = lengths.count(n) / alike if min(lengths) == n else 0.0
        if alike >= predict.SUPPORT and ended_here > predict.CHANGE_SHARE and after != NONE:
            return (after, after, median - n, ended_here * share, share, near)
        return (phase, after, median - n, 1.0 - ended_here, share, near)


def random_phases(rng, count: int) -> np.ndarray:
    """Runs of a few phases, some of fixed lengths (so that lengths repeat),
    some of random ones, some intervals without a phase, and now and then a
    phase not seen before (so that phases are dropped beyond the bound)."""
    out, fresh = [], 100
    while len(out) < count:
        kind = rng.integers(0, 10)
        if kind < 5:
            phase, length = int(rng.integers(0, 3)), 6 + 3 * int(rng.integers(0, 3))
        elif kind < 8:
            phase, length = int(rng.integers(0, 8)), int(rng.integers(1, 30))
        elif kind < 9:
            phase, length = -1, int(rng.integers(1, 3))
        else:
            fresh += 1
            phase, length = fresh, int(rng.integers(1, 12))
        out += [phase] * length
    return np.asarray(out[:count], np.int64)


def tap_columns(phases: np.ndarray, rng, max_phases: int) -> np.ndarray:
    """The tap's predictions of ``phases`` given in blocks of random sizes."""
    tap, columns = PredictionTap(max_phases), []
    cuts = np.unique(np.concatenate([[0, len(phases)], rng.integers(1, len(phases), 2000)]))
    for lo, hi in zip(cuts, cuts[1:]):
        n = hi - lo
        start = np.arange(lo, hi, dtype=np.int64) * 100_000_000
        z = np.zeros(n, np.int64)
        iv = Intervals(np.arange(lo, hi), start, start + 100_000_000, z, z, z, np.zeros(n),
                       phases[lo:hi].copy(), np.zeros(n, bool), np.zeros(n), np.zeros(n))
        tap.classified(Classified("", iv, iv.phase))
        pr = iv.prediction
        columns.append(np.column_stack([pr.next_phase, pr.after_change, pr.remaining,
                                        pr.confidence_next, pr.confidence_after_change,
                                        pr.confidence_remaining]))
    return np.concatenate(columns)


def test_the_tap_predicts_what_the_plain_rules_say_on_100000_random_intervals():
    rng = np.random.default_rng(35)
    phases = random_phases(rng, 100_000)
    max_phases = 12
    reference = ReferencePredictor(max_phases)
    expected = np.array([reference.observe(int(p)) for p in phases.tolist()], np.float64)
    said = tap_columns(phases, rng, max_phases)
    differ = np.flatnonzero((said != expected).any(axis=1))
    assert len(differ) == 0, (f"{len(differ)} intervals differ, the first at {differ[0]}: "
                              f"{said[differ[0]].tolist()} against {expected[differ[0]].tolist()}")
    one = predict.PhasePredictor(max_phases)
    np.testing.assert_array_equal(
        np.array([one.observe(int(p)) for p in phases[:20_000].tolist()], np.float64),
        expected[:20_000])
