"""Phase prediction for one stream, from the classifier's decisions.

Fed each interval's phase, :class:`PhasePredictor` says for the interval:
the phase of the next interval, the phase that follows when the current one
ends, how many more intervals the current phase lasts, and a confidence for
each.  It holds no I/O and no clock: seconds are the caller's.

The stream is read as runs (run-length encoding, as Sherwood et al.'s phase
predictors read it): a run is a phase and the intervals it lasted.  For each
phase, in each *context* (the phases of the :data:`ORDER` runs before it),
the predictor keeps its last :data:`KEPT` runs as (length, successor) pairs.
While a run of phase ``p`` has lasted ``n`` intervals, the *runs alike* are
those of ``p`` in the most specific context with at least :data:`SUPPORT`
runs that lasted ``n`` or more (a Markov table over the last runs, backing
off to shorter contexts).  From them:

- the share that ended at exactly ``n`` (the hazard) decides the next
  interval: a change only where more than half ended here (a confidence
  gate, as in Vandeputte et al.'s two-level predictor), the current phase
  otherwise (last-value, which is also what it says where nothing is known);
- the phase after the change is the most frequent successor of the runs
  alike.  Since these are the runs that lasted at least ``n``, a short run
  that went to one phase and a long one that went to another are told apart
  as the run grows (the key is the phase, its run length so far and the
  phases before it);
- the remaining intervals are the median of ``length - n`` over them.

Where no run of ``p`` lasted ``n`` intervals, the next interval is ``p``'s
and the run is expected to last as long again as it has (the median of the
remaining time where only the time elapsed is known).

Memory is bounded: :data:`KEPT` runs per context, :data:`CONTEXTS` contexts
per phase, ``max_phases`` phases (the least recently seen dropped first, as
the classifier retires them).  What it learnt can be kept beyond the run
(:meth:`PhasePredictor.memory_dict`; ``run`` keeps it in the phase
catalogue beside the phases) and a later run started from it
(:meth:`PhasePredictor.seed`).  A phase's memory goes when it is retired
(:meth:`PhasePredictor.forget`, which also drops the runs that name it as
context and its name as successor).
"""

from __future__ import annotations

import functools
from bisect import bisect_left, bisect_right
from collections import OrderedDict, deque
from dataclasses import dataclass
from typing import Iterable, NamedTuple

import numpy as np

#: Runs before the current one that key its memory (order of the Markov table).
ORDER = 2
#: Runs kept per phase and context.
KEPT = 16
#: Contexts kept per phase, the least recently used dropped first.
CONTEXTS = 8
#: Runs alike needed to use a context; fewer, and a shorter context is used.
SUPPORT = 2
#: A change is predicted for the next interval where more than this share of
#: the runs alike ended at the current length.
CHANGE_SHARE = 0.5
#: A remaining length counts as right within this share of the true one.
TOLERANCE = 0.3
#: The confidence in a return to the phase before, where the phase's own
#: runs name no successor.
RETURN_GUESS = 0.5
#: Where a phase's own runs say nothing of how long it lasts, the remaining
#: length is the median of what remains of the stream's recent runs of any
#: phase that lasted as long (1), or as long again as it has lasted (0).
PRIOR = 1
#: Phases kept by default (the classifier's own default bound).
MAX_PHASES = 256
#: The form of :meth:`PhasePredictor.memory_dict`.
MEMORY_VERSION = 1
#: "No phase" in the columns: before the first phase, or nothing known.
NONE = -1


class Prediction(NamedTuple):
    """What is expected after one interval."""

    next_phase: int             # the next interval's phase
    after_change: int           # the phase after the current one ends (NONE: unknown)
    remaining: int              # intervals after this one still in the current phase
    confidence_next: float
    confidence_after_change: float
    confidence_remaining: float


#: The prediction for an interval without a phase (before the first).
UNKNOWN = Prediction(NONE, NONE, NONE, 0.0, 0.0, 0.0)


@dataclass
class Predictions:
    """The predictions of a block of intervals, as columns (NONE and NaN where
    an interval has no phase)."""

    next_phase: np.ndarray
    after_change: np.ndarray
    remaining: np.ndarray
    remaining_s: np.ndarray
    confidence_next: np.ndarray
    confidence_after_change: np.ndarray
    confidence_remaining: np.ndarray
    #: Whether the prediction made on the interval before came true: 1, 0, or
    #: -1 where there was none to score (core.prediction.PredictionScore).
    outcome: np.ndarray | None = None

    def __len__(self) -> int:
        return len(self.next_phase)

    @classmethod
    def of(cls, rows, seconds_each) -> "Predictions":
        """Columns from per-interval predictions (or rows of their fields);
        seconds are the remaining intervals times ``seconds_each`` (each
        interval's own duration)."""
        table = np.asarray(rows, np.float64).reshape(len(rows), len(Prediction._fields))
        return cls._of_table(table, seconds_each)

    @classmethod
    def of_spans(cls, spans: list, seconds_each) -> "Predictions":
        """Columns from :data:`Span` s (:meth:`PhasePredictor.observe_spans`)."""
        return cls._of_table(cls.rows_of(spans), seconds_each)

    @staticmethod
    def rows_of(spans: list) -> np.ndarray:
        """The per-interval rows of :class:`Prediction`'s fields that
        :data:`Span` s stand for."""
        table = np.array(spans, np.float64).reshape(len(spans), 8)
        takes = table[:, 0].astype(np.int64)
        rows = np.repeat(table[:, (1, 2, 3, 5, 6, 7)], takes, axis=0)
        if len(spans) > 1 or table[0, 4]:
            steps = np.repeat(table[:, 4], takes)
            starts = np.repeat(np.cumsum(takes) - takes, takes)
            rows[:, 2] += steps * (np.arange(len(rows)) - starts)
        return rows

    @classmethod
    def _of_table(cls, table: np.ndarray, seconds_each) -> "Predictions":
        remaining = table[:, 2].astype(np.int64)
        remaining_s = np.where(remaining >= 0, remaining * seconds_each, np.nan)
        return cls(table[:, 0].astype(np.int64), table[:, 1].astype(np.int64), remaining,
                   remaining_s, table[:, 3], table[:, 4], table[:, 5])


#: A stretch of intervals of one run whose predictions differ only in the
#: remaining length: (intervals, next phase, phase after the change, remaining
#: intervals after the first, step of the remaining per interval, the three
#: confidences).
Span = tuple


class _Runs:
    """The (length, successor) pairs of one phase in one context, the last
    :data:`KEPT`, and the same sorted (and their lengths) for the look-ups."""

    __slots__ = ("pairs", "ordered", "lengths")

    def __init__(self):
        self.pairs: deque[tuple[int, int]] = deque(maxlen=KEPT)
        self.ordered: list[tuple[int, int]] = []      # the pairs sorted
        self.lengths: list[int] = []

    def add(self, length: int, successor: int) -> None:
        if len(self.pairs) == KEPT:
            at = bisect_left(self.ordered, self.pairs[0])
            del self.ordered[at], self.lengths[at]
        pair = (length, successor)
        self.pairs.append(pair)
        at = bisect_right(self.ordered, pair)
        self.ordered.insert(at, pair)
        self.lengths.insert(at, length)

    def names(self, phase: int) -> bool:
        """Whether ``phase`` is the successor of one of the runs."""
        return any(s == phase for _, s in self.pairs)

    def drop_successor(self, phase: int) -> None:
        """A retired successor is unknown from now on; the lengths stay."""
        self.pairs = deque(((n, NONE if s == phase else s) for n, s in self.pairs), maxlen=KEPT)
        self._sort()

    def _sort(self) -> None:
        self.ordered = sorted(self.pairs)
        self.lengths = [n for n, _ in self.ordered]


class _Outlook:
    """What the runs alike say for a run of one phase.  ``levels`` are its
    runs by context, the most specific first; where none names a successor,
    it is the phase before (a return: A, B, A), a guess.

    The runs alike change only where ``n`` passes a length: between two
    lengths the prediction is the same but for the remaining intervals,
    which count down (beyond every length, or where too few of the phase's
    own runs lasted n: up, as long again).  So each prediction is kept with
    the span of ``n`` it holds for."""

    __slots__ = ("phase", "levels", "back", "prior", "cache", "horizon", "span", "kept")

    def __init__(self, phase: int, levels: list[_Runs], back: int, prior: _Runs | None = None):
        self.phase = phase
        self.levels = levels
        self.back = back              # the phase of the run before (NONE: none)
        self.prior = prior            # the stream's recent runs, any phase (None: not used)
        self.cache: dict[tuple[int, int, bool], tuple] = {}
        self.horizon = max((runs.lengths[-1] for runs in levels if runs.lengths), default=0)
        self.span = (1, 0)            # the n the kept prediction holds for (none yet)
        self.kept: tuple = ()         # (prediction's fields, remaining at n = 0, step per n)

    def at(self, n: int) -> Prediction:
        p, base, step = self.kept_at(n)
        return Prediction(p[0], p[1], base + step * n, p[3], p[4], p[5])

    def kept_at(self, n: int) -> tuple[tuple, int, int]:
        """The prediction's fields for a run of ``n`` intervals so far (the
        remaining length the kept one's: ``base + step * n``); :attr:`span`
        the n it holds for."""
        lo, hi = self.span
        if lo <= n <= hi:
            return self.kept
        p, step = self._at(n)
        self.span = (n, self._stop(n, self.levels if step > 0 or p[5] or self.prior is None
                                   else [*self.levels, self.prior]))
        self.kept = (p, p[2] - step * n, step)
        return self.kept

    def _stop(self, n: int, every: list[_Runs]) -> int:
        """The last n before the runs alike in ``every`` change: n itself
        where a run lasted exactly n, else the next length less one (none:
        never)."""
        stop = 1 << 62
        for runs in every:
            lengths = runs.lengths
            at = bisect_left(lengths, n)
            if at < len(lengths) and lengths[at] <= stop:
                if lengths[at] == n:
                    return n
                stop = lengths[at] - 1
        return stop

    def _at(self, n: int) -> tuple[tuple, int]:
        """The prediction's fields at ``n``, and how its remaining length
        moves with n."""
        after, share = self._successor(n)
        if n <= self.horizon:
            last = len(self.levels) - 1
            for level, runs in enumerate(self.levels):
                first = bisect_left(runs.lengths, n)
                alike = len(runs.lengths) - first
                if alike >= SUPPORT or (alike and level == last):
                    return self._from(level, runs, first, n, after, share), -1
        # Too little of this phase lasted this long: what remained of the
        # stream's recent runs that lasted as long (the prediction with no
        # confidence at all that counts down), else as long again as it has
        # lasted.  Neither comes back once it has gone: the runs that lasted
        # n only grow fewer as n grows.
        if self.prior is not None:
            lengths = self.prior.lengths
            first = bisect_left(lengths, n)
            if len(lengths) - first >= SUPPORT:
                median = lengths[first + (len(lengths) - first - 1) // 2]
                return (self.phase, after, median - n, 1.0, share, 0.0), -1
        return (self.phase, after, n, 1.0, share, 0.0), 1

    def _successor(self, n: int) -> tuple[int, float]:
        for level, runs in enumerate(self.levels):
            first = bisect_left(runs.lengths, n)
            if first == len(runs.lengths):
                first = 0           # none lasted this long: what any of them went to
            found = self.cache.get((level, first, True))
            if found is None:
                found = self.cache[level, first, True] = _most_frequent(runs.ordered, first,
                                                                        self.phase)
            if found[0] != NONE:
                return found
        return (self.back, RETURN_GUESS) if self.back != NONE else (NONE, 0.0)

    def _from(self, level: int, runs: _Runs, first: int, n: int, after: int,
              share: float) -> tuple:
        found = self.cache.get((level, first, False))
        if found is None:
            found = self.cache[level, first, False] = _alike(runs.lengths, first)
        alike, shortest, shortest_count, median, near = found
        hazard = shortest_count / alike if shortest == n else 0.0
        if alike >= SUPPORT and hazard > CHANGE_SHARE and after != NONE:
            return (after, after, median - n, hazard * share, share, near)
        return (self.phase, after, median - n, 1.0 - hazard, share, near)


def _alike(lengths: list[int], first: int) -> tuple[int, int, int, int, float]:
    """Of the lengths of the runs alike (``lengths[first:]``, sorted): how
    many, the shortest and how many have it, the (lower) median, and the
    share within :data:`TOLERANCE` of the median."""
    alike = len(lengths) - first
    median = lengths[first + (alike - 1) // 2]
    within = int(TOLERANCE * median)    # an integer distance d is within where d <= within
    near = (bisect_right(lengths, median + within, first)
            - bisect_left(lengths, median - within, first))
    shortest = lengths[first]
    return alike, shortest, bisect_right(lengths, shortest, first) - first, median, near / alike


def _most_frequent(ordered: list[tuple[int, int]], first: int, phase: int) -> tuple[int, float]:
    """Of the successors of ``ordered[first:]``: the most frequent known one
    other than ``phase`` and its share of them all (the latest among equals:
    behaviour that changed counts)."""
    counts: dict[int, int] = {}
    for _, s in ordered[first:]:
        if s != NONE and s != phase:
            counts[s] = counts.get(s, 0) + 1
    if not counts:
        return NONE, 0.0
    best = max(counts.values())
    latest = next(s for _, s in reversed(ordered) if counts.get(s) == best)
    return latest, best / (len(ordered) - first)


class PhasePredictor:
    """The online predictor of one stream: :meth:`observe` each interval's
    phase in order, and get what follows it."""

    def __init__(self, max_phases: int = MAX_PHASES):
        if max_phases < 1:
            raise ValueError(f"max_phases {max_phases}: at least 1")
        self.max_phases = max_phases
        self.phase = NONE           # the current run's phase
        self.length = 0             # intervals in the current run so far
        self.before: tuple[int, ...] = ()      # the phases of the runs before, latest last
        self.memory: OrderedDict[int, OrderedDict[tuple[int, ...], _Runs]] = OrderedDict()
        self.lately = _Runs()       # the stream's last runs, any phase (their lengths)
        self.outlook: _Outlook | None = None

    def observe(self, phase: int) -> Prediction:
        """The interval's phase (NONE: no phase yet); what is expected after it."""
        if phase < 0:
            return UNKNOWN
        if phase == self.phase:
            self.length += 1
        else:
            self._end_run(phase)
        return self.outlook.at(self.length)

    def observe_run(self, phase: int, count: int) -> np.ndarray:
        """``count`` intervals of ``phase`` in a row: what :meth:`observe`
        says after each, as rows of :class:`Prediction`'s fields."""
        spans: list[tuple] = []
        self.observe_spans(phase, count, spans)
        return Predictions.rows_of(spans)

    def observe_spans(self, phase: int, count: int, spans: list) -> None:
        """``count`` intervals of ``phase`` in a row, told in spans: appends
        to ``spans`` one :data:`Span` per stretch of intervals whose
        predictions differ only in the remaining length (which moves by a
        step of -1, 0 or +1 an interval).  The work is per span, not per
        interval: a span ends only where the run passes a length seen before."""
        if phase < 0:
            spans.append((count, *UNKNOWN[:2], UNKNOWN[2], 0, *UNKNOWN[3:]))
            return
        if phase == self.phase:
            self.length += 1
        else:
            self._end_run(phase)
        n, end, outlook = self.length, self.length + count - 1, self.outlook
        while True:
            p, base, step = outlook.kept_at(n)
            hi = min(outlook.span[1], end)
            spans.append((hi - n + 1, p[0], p[1], base + step * n, step, p[3], p[4], p[5]))
            if hi == end:
                break
            n = hi + 1
        self.length = end

    def forget(self, phase: int) -> None:
        """The phase is retired: drop what is kept of it and of its runs as
        the context or successor of others."""
        self.memory.pop(phase, None)
        for contexts in self.memory.values():
            for context in [c for c in contexts if phase in c]:
                del contexts[context]
            for runs in contexts.values():
                if runs.names(phase):
                    runs.drop_successor(phase)
        self._settle(phase)

    def _settle(self, phase: int) -> None:
        """The current run and its context without ``phase``."""
        self.before = tuple(p for p in self.before if p != phase)
        if self.phase == phase:
            self.phase, self.length = NONE, 0
        self.outlook = None if self.phase == NONE else self._outlook(self.phase)

    def retain(self, live: Iterable[int]) -> None:
        """Forget every phase not in ``live`` (the classifier's phases now)."""
        keep = set(live)
        for phase in [p for p in self.memory if p not in keep]:
            self.forget(phase)

    def memory_dict(self, phases: Iterable[int] | None = None) -> dict:
        """What the predictor learnt of ``phases`` (default: all it keeps),
        JSON-ready, to be given to :meth:`seed` of a later run."""
        keep = set(self.memory) if phases is None else set(phases)
        return {"version": MEMORY_VERSION, "phases": [
            [phase, [[list(context), [list(pair) for pair in runs.pairs]]
                     for context, runs in contexts.items() if keep.issuperset(context)]]
            for phase, contexts in self.memory.items() if phase in keep]}

    def seed(self, memory: dict, known: Iterable[int]) -> bool:
        """Start from what an earlier run learnt, of the phases ``known``
        (ids that mean the same behaviour now: a catalogue's), before the
        first interval; False (and nothing kept) where ``memory`` is not one
        :meth:`memory_dict` wrote."""
        known = set(known)
        try:
            if memory.get("version") != MEMORY_VERSION:
                return False
            for phase, contexts in memory["phases"]:
                if int(phase) not in known:
                    continue
                for context, pairs in contexts:
                    if not known.issuperset(context) or len(context) > ORDER:
                        continue
                    runs = self._contexts(int(phase)).setdefault(
                        tuple(int(p) for p in context), _Runs())
                    for length, successor in pairs[-KEPT:]:
                        runs.pairs.append((max(int(length), 1),
                                           int(successor) if successor in known else NONE))
                    runs._sort()
            while len(self.memory) > self.max_phases:
                self.memory.popitem(last=False)
            for contexts in self.memory.values():
                while len(contexts) > CONTEXTS:
                    contexts.popitem(last=False)
        except (KeyError, TypeError, ValueError, AttributeError):
            self.memory.clear()
            return False
        return True

    @property
    def runs_kept(self) -> int:
        """Runs held in memory, every phase and context (bounded)."""
        return sum(
            len(runs.pairs) for contexts in self.memory.values() for runs in contexts.values())

    def _end_run(self, phase: int) -> None:
        if self.phase != NONE:
            contexts = self._contexts(self.phase)
            for context in self._keys(self.before):
                runs = contexts.get(context)
                if runs is None:
                    runs = contexts[context] = _Runs()
                runs.add(self.length, phase)
                contexts.move_to_end(context)
            while len(contexts) > CONTEXTS:
                contexts.popitem(last=False)
            self.lately.add(self.length, NONE)
            self.before = (self.before + (self.phase,))[len(self.before) + 1 - ORDER:]
        self.phase, self.length = phase, 1
        self._seen(phase)
        self.outlook = self._outlook(phase)

    def _outlook(self, phase: int) -> _Outlook:
        contexts = self.memory.get(phase, {})
        levels = [contexts[c] for c in self._keys(self.before) if c in contexts]
        return _Outlook(phase, levels, self.before[-1] if self.before else NONE,
                        self.lately if PRIOR else None)

    @staticmethod
    @functools.lru_cache(maxsize=1024)
    def _keys(before: tuple[int, ...]) -> tuple[tuple[int, ...], ...]:
        """The contexts of a run, the most specific first."""
        return tuple(before[len(before) - k:] if k else () for k in range(len(before), -1, -1))

    def _contexts(self, phase: int) -> OrderedDict[tuple[int, ...], _Runs]:
        contexts = self.memory.get(phase)
        if contexts is None:
            contexts = self.memory[phase] = OrderedDict()
        return contexts

    def _seen(self, phase: int) -> None:
        """The phase is the most recent; beyond ``max_phases``, the least
        recent one's memory is dropped."""
        self._contexts(phase)
        self.memory.move_to_end(phase)
        while len(self.memory) > self.max_phases:
            # its mentions in the others' runs go with their own bounds
            self._settle(self.memory.popitem(last=False)[0])
