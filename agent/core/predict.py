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
the classifier retires them).  It is held in fixed-size arrays (grown, up to
the bound, as phases come), worked on by compiled kernels (:mod:`.kernels`)
a block of intervals a call: the work is per run and per stretch of a run
whose prediction changes only in the remaining length.  What it learnt can
be kept beyond the run (:meth:`PhasePredictor.memory_dict`; ``run`` keeps
it in the phase catalogue beside the phases) and a later run started from
it (:meth:`PhasePredictor.seed`, before the first interval).  A phase's
memory goes when it is retired (:meth:`PhasePredictor.forget`, which also
drops the runs that name it as context and its name as successor).
"""

from __future__ import annotations

from collections import OrderedDict, deque
from dataclasses import dataclass
from typing import Iterable, NamedTuple

import numpy as np

from .kernels import kernel

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
#: Phase slots a predictor starts with; doubled as phases come, up to its bound.
FIRST_SLOTS = 8


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
        remaining = table[:, 2].astype(np.int64)
        remaining_s = np.where(remaining >= 0, remaining * seconds_each, np.nan)
        return cls(table[:, 0].astype(np.int64), table[:, 1].astype(np.int64), remaining,
                   remaining_s, table[:, 3], table[:, 4], table[:, 5])

    @classmethod
    def of_columns(cls, ints: np.ndarray, floats: np.ndarray) -> "Predictions":
        """Columns from the kernel's: next, after the change, remaining; the
        remaining seconds and the three confidences."""
        return cls(ints[0], ints[1], ints[2], floats[0], floats[1], floats[2], floats[3])


# -- the state, as arrays -------------------------------------------------------
#
# ``rules`` (float64): the constants above, read when a predictor is made.
R_ORDER, R_KEPT, R_CONTEXTS, R_SUPPORT, R_PRIOR, R_MAX_PHASES, R_CHANGE_SHARE, R_TOLERANCE, \
    R_RETURN_GUESS = range(9)
# ``state`` (int64): the current run, the order counter, and then the phases
# of the runs before (ORDER) and the stream's last runs' lengths (a ring of KEPT).
S_PHASE, S_LENGTH, S_CLOCK, S_USED, S_LATELY_COUNT, S_LATELY_HEAD, S_BEFORE_COUNT = range(7)
S_BEFORE = 7
# ``table`` (int64, a row per phase slot): the phase id (NONE: free), when last
# used (the order of an OrderedDict: the smallest is the least recent).
T_ID, T_USED = range(2)
# ``contexts`` (int64, slot x context x ...): when last used (0: free), the
# key's length, runs kept, the ring's head, then the key's phases.
C_USED, C_LENGTH, C_COUNT, C_HEAD, C_KEY = range(5)
# ``runs`` (int64, slot x context x KEPT x 2): (length, successor) pairs, a
# ring in the order they were added.


@kernel(cache=True, nogil=True)
def _slot_of(table, phase):
    for s in range(table.shape[0]):
        if table[s, T_ID] == phase:
            return s
    return -1


@kernel(cache=True, nogil=True)
def _tick(state):
    state[S_CLOCK] += 1
    return state[S_CLOCK]


@kernel(cache=True, nogil=True)
def _free_slot(state, table, contexts, s):
    table[s, T_ID] = NONE
    table[s, T_USED] = 0
    contexts[s, :, C_USED] = 0
    contexts[s, :, C_COUNT] = 0
    contexts[s, :, C_HEAD] = 0
    state[S_USED] -= 1


@kernel(cache=True, nogil=True)
def _slot_for(state, table, contexts, phase):
    """The phase's slot, made (as the most recent) if it has none."""
    s = _slot_of(table, phase)
    if s >= 0:
        return s
    s = _slot_of(table, NONE)
    table[s, T_ID] = phase
    table[s, T_USED] = _tick(state)
    contexts[s, :, C_USED] = 0
    contexts[s, :, C_COUNT] = 0
    contexts[s, :, C_HEAD] = 0
    state[S_USED] += 1
    return s


@kernel(cache=True, nogil=True)
def _context_of(contexts, s, state, k):
    """The context of slot ``s`` keyed by the last ``k`` runs before, or -1."""
    before = state[S_BEFORE_COUNT]
    for c in range(contexts.shape[1]):
        if contexts[s, c, C_USED] == 0 or contexts[s, c, C_LENGTH] != k:
            continue
        same = True
        for i in range(k):
            if contexts[s, c, C_KEY + i] != state[S_BEFORE + before - k + i]:
                same = False
                break
        if same:
            return c
    return -1


@kernel(cache=True, nogil=True)
def _settle(state, phase):
    """The current run and its context without ``phase``."""
    kept = 0
    for i in range(state[S_BEFORE_COUNT]):
        p = state[S_BEFORE + i]
        if p != phase:
            state[S_BEFORE + kept] = p
            kept += 1
    state[S_BEFORE_COUNT] = kept
    if state[S_PHASE] == phase:
        state[S_PHASE] = NONE
        state[S_LENGTH] = 0


@kernel(cache=True, nogil=True)
def _forget(state, table, contexts, runs, phase):
    """The phase is retired: what is kept of it goes, with the contexts that
    name it; runs that went to it went to a phase unknown."""
    s = _slot_of(table, phase)
    if s >= 0 and phase != NONE:
        _free_slot(state, table, contexts, s)
    for s in range(table.shape[0]):
        if table[s, T_ID] == NONE:
            continue
        for c in range(contexts.shape[1]):
            if contexts[s, c, C_USED] == 0:
                continue
            named = False
            for i in range(contexts[s, c, C_LENGTH]):
                if contexts[s, c, C_KEY + i] == phase:
                    named = True
            if named:
                contexts[s, c, C_USED] = 0
                contexts[s, c, C_COUNT] = 0
                contexts[s, c, C_HEAD] = 0
                continue
            for r in range(contexts[s, c, C_COUNT]):
                if runs[s, c, r, 1] == phase:
                    runs[s, c, r, 1] = NONE
    _settle(state, phase)


@kernel(cache=True, nogil=True)
def forget_phase(state, table, contexts, runs, phase):
    """:func:`_forget`, called from Python."""
    _forget(state, table, contexts, runs, phase)


@kernel(cache=True, nogil=True)
def _end_run(rules, state, table, contexts, runs, phase):
    """The current run has ended and a run of ``phase`` starts: the run is
    kept under each of its contexts, and ``phase`` is the most recent."""
    order, kept, most = int(rules[R_ORDER]), int(rules[R_KEPT]), int(rules[R_CONTEXTS])
    ended, length = state[S_PHASE], state[S_LENGTH]
    if ended != NONE:
        s = _slot_for(state, table, contexts, ended)
        before = state[S_BEFORE_COUNT]
        for k in range(before, -1, -1):
            c = _context_of(contexts, s, state, k)
            if c < 0:
                c = 0
                while contexts[s, c, C_USED] != 0:
                    c += 1
                contexts[s, c, C_LENGTH] = k
                contexts[s, c, C_COUNT] = 0
                contexts[s, c, C_HEAD] = 0
                for i in range(k):
                    contexts[s, c, C_KEY + i] = state[S_BEFORE + before - k + i]
            _add_run(contexts, runs, s, c, kept, length, phase)
            contexts[s, c, C_USED] = _tick(state)
        _trim_contexts(contexts, s, most)
        at = S_BEFORE + order
        count, head = state[S_LATELY_COUNT], state[S_LATELY_HEAD]
        if count < kept:
            state[at + (head + count) % kept] = length
            state[S_LATELY_COUNT] = count + 1
        else:
            state[at + head] = length
            state[S_LATELY_HEAD] = (head + 1) % kept
        # the phases of the runs before, as (before + (ended,))[before + 1 - order:]
        total = before + 1
        first = before + 1 - order
        if first < 0:
            first = max(first + total, 0)
        first = min(first, total)
        moved = 0
        for i in range(first, total):
            state[S_BEFORE + moved] = state[S_BEFORE + i] if i < before else ended
            moved += 1
        state[S_BEFORE_COUNT] = moved
    state[S_PHASE] = phase
    state[S_LENGTH] = 1
    s = _slot_for(state, table, contexts, phase)
    table[s, T_USED] = _tick(state)
    while state[S_USED] > int(rules[R_MAX_PHASES]):
        oldest = -1
        for t in range(table.shape[0]):
            if table[t, T_ID] != NONE and (oldest < 0 or table[t, T_USED] < table[oldest, T_USED]):
                oldest = t
        dropped = table[oldest, T_ID]
        _free_slot(state, table, contexts, oldest)
        _settle(state, dropped)


@kernel(cache=True, nogil=True)
def _add_run(contexts, runs, s, c, kept, length, successor):
    count, head = contexts[s, c, C_COUNT], contexts[s, c, C_HEAD]
    if count < kept:
        at = (head + count) % kept
        contexts[s, c, C_COUNT] = count + 1
    else:
        at = head
        contexts[s, c, C_HEAD] = (head + 1) % kept
    runs[s, c, at, 0] = length
    runs[s, c, at, 1] = successor


@kernel(cache=True, nogil=True)
def _trim_contexts(contexts, s, most):
    while True:
        used, oldest = 0, -1
        for c in range(contexts.shape[1]):
            if contexts[s, c, C_USED] != 0:
                used += 1
                if oldest < 0 or contexts[s, c, C_USED] < contexts[s, oldest, C_USED]:
                    oldest = c
        if used <= most:
            return
        contexts[s, oldest, C_USED] = 0
        contexts[s, oldest, C_COUNT] = 0
        contexts[s, oldest, C_HEAD] = 0


@kernel(cache=True, nogil=True)
def _levels(state, table, contexts, runs, phase, lengths, successors, counts):
    """The runs of ``phase`` by context, the most specific first, each sorted
    by (length, successor); how many contexts."""
    s = _slot_of(table, phase)
    if s < 0:
        return 0
    kept = runs.shape[2]
    levels = 0
    for k in range(state[S_BEFORE_COUNT], -1, -1):
        c = _context_of(contexts, s, state, k)
        if c < 0:
            continue
        count, head = contexts[s, c, C_COUNT], contexts[s, c, C_HEAD]
        for i in range(count):
            n = runs[s, c, (head + i) % kept, 0]
            x = runs[s, c, (head + i) % kept, 1]
            j = i
            while j > 0 and (lengths[levels, j - 1] > n or
                             (lengths[levels, j - 1] == n and successors[levels, j - 1] > x)):
                lengths[levels, j] = lengths[levels, j - 1]
                successors[levels, j] = successors[levels, j - 1]
                j -= 1
            lengths[levels, j] = n
            successors[levels, j] = x
        counts[levels] = count
        levels += 1
    return levels


@kernel(cache=True, nogil=True)
def _lately(rules, state, out):
    """The stream's last runs' lengths, sorted; how many."""
    at = S_BEFORE + int(rules[R_ORDER])
    count = state[S_LATELY_COUNT]
    for i in range(count):
        n = state[at + i]
        j = i
        while j > 0 and out[j - 1] > n:
            out[j] = out[j - 1]
            j -= 1
        out[j] = n
    return count


@kernel(cache=True, nogil=True)
def _first_at_least(lengths, lo, hi, n):
    """The first of ``lengths[lo:hi]`` (sorted) that is at least ``n`` (hi: none)."""
    while lo < hi and lengths[lo] < n:
        lo += 1
    return lo


@kernel(cache=True, nogil=True)
def _first_above(lengths, lo, hi, n):
    while lo < hi and lengths[lo] <= n:
        lo += 1
    return lo


@kernel(cache=True, nogil=True)
def _most_frequent(successors, first, count, phase):
    """Of the successors ``successors[first:count]``: the most frequent
    known one other than ``phase`` and its share of them all (among equals,
    the one of the longest run)."""
    best, found = 0, NONE
    for i in range(first, count):
        x = successors[i]
        if x == NONE or x == phase:
            continue
        times = 0
        for j in range(first, count):
            if successors[j] == x:
                times += 1
        if times >= best:
            best, found = times, x
    if found == NONE:
        return NONE, 0.0
    return found, best / (count - first)


@kernel(cache=True, nogil=True)
def _successor(rules, phase, back, n, lengths, successors, counts, levels):
    for level in range(levels):
        count = counts[level]
        first = _first_at_least(lengths[level], 0, count, n)
        if first == count:
            first = 0           # none lasted this long: what any of them went to
        found, share = _most_frequent(successors[level], first, count, phase)
        if found != NONE:
            return found, share
    if back != NONE:
        return back, rules[R_RETURN_GUESS]
    return NONE, 0.0


@kernel(cache=True, nogil=True)
def _predict_at(rules, phase, back, n, lengths, successors, counts, levels, lately, lately_count,
                out):
    """The prediction for a run of ``phase`` that has lasted ``n`` intervals:
    ``out`` gets next, after the change, remaining, the three confidences
    (as floats); returns how the remaining length moves with n (-1 or +1)."""
    after, share = _successor(rules, phase, back, n, lengths, successors, counts, levels)
    support = int(rules[R_SUPPORT])
    out[1] = after
    out[4] = share
    longest = 0
    for level in range(levels):
        if counts[level] and lengths[level, counts[level] - 1] > longest:
            longest = lengths[level, counts[level] - 1]
    if n <= longest:
        for level in range(levels):
            count = counts[level]
            first = _first_at_least(lengths[level], 0, count, n)
            alike = count - first
            if alike >= support or (alike > 0 and level == levels - 1):
                _from_alike(rules, phase, n, lengths[level], first, count, after, share, out)
                return -1
    # Too little of this phase lasted this long: what remained of the stream's
    # recent runs that lasted as long (no confidence), else as long again.
    out[0] = phase
    out[3] = 1.0
    out[5] = 0.0
    if rules[R_PRIOR]:
        first = _first_at_least(lately, 0, lately_count, n)
        if lately_count - first >= support:
            out[2] = lately[first + (lately_count - first - 1) // 2] - n
            return -1
    out[2] = n
    return 1


@kernel(cache=True, nogil=True)
def _from_alike(rules, phase, n, lengths, first, count, after, share, out):
    alike = count - first
    median = lengths[first + (alike - 1) // 2]
    within = int(rules[R_TOLERANCE] * median)   # an integer distance d is within where d <= within
    near = (_first_above(lengths, first, count, median + within)
            - _first_at_least(lengths, first, count, median - within))
    shortest = lengths[first]
    hazard = 0.0
    if shortest == n:
        hazard = (_first_above(lengths, first, count, shortest) - first) / alike
    out[2] = median - n
    out[4] = share
    out[5] = near / alike
    if alike >= int(rules[R_SUPPORT]) and hazard > rules[R_CHANGE_SHARE] and after != NONE:
        out[0] = after
        out[3] = hazard * share
    else:
        out[0] = phase
        out[3] = 1.0 - hazard


@kernel(cache=True, nogil=True)
def _span_end(n, end, lengths, counts, levels, lately, lately_count):
    """The last length from ``n`` (at most ``end``) before the runs alike
    change: ``n`` itself where a run lasted exactly n, else the next length
    less one."""
    stop = end
    for level in range(levels):
        at = _first_at_least(lengths[level], 0, counts[level], n)
        if at < counts[level]:
            if lengths[level, at] == n:
                return n
            stop = min(stop, lengths[level, at] - 1)
    at = _first_at_least(lately, 0, lately_count, n)
    if at < lately_count:
        if lately[at] == n:
            return n
        stop = min(stop, lately[at] - 1)
    return stop


@kernel(cache=True, nogil=True)
def predict_block(rules, state, table, contexts, runs, phase, new_phase, t_start, t_end, start,
                  ints, floats):
    """Each interval of the block from ``start`` on: its phase observed (a
    phase opened afresh, ``new_phase``, forgotten first), and what is
    expected after it into ``ints`` (next, after the change, remaining) and
    ``floats`` (remaining seconds, three confidences).  Returns where it
    stopped: the block's length, or a run that needs more phase slots."""
    n_all = len(phase)
    order, kept = int(rules[R_ORDER]), int(rules[R_KEPT])
    lengths = np.empty((order + 1, kept), np.int64)
    successors = np.empty((order + 1, kept), np.int64)
    counts = np.empty(order + 1, np.int64)
    lately = np.empty(kept, np.int64)
    said = np.empty(6, np.float64)
    room = int(rules[R_MAX_PHASES]) + 2
    i = start
    while i < n_all:
        p = phase[i]
        j = i + 1
        while j < n_all and phase[j] == p and not new_phase[j]:
            j += 1
        if p >= 0 and table.shape[0] - state[S_USED] < 2 and table.shape[0] < room:
            return i
        if new_phase[i]:        # an id opened afresh (a daemon's slot taken again)
            _forget(state, table, contexts, runs, p)
        if p < 0:
            for k in range(i, j):
                ints[0, k] = NONE
                ints[1, k] = NONE
                ints[2, k] = NONE
                floats[0, k] = np.nan
                floats[1, k] = 0.0
                floats[2, k] = 0.0
                floats[3, k] = 0.0
            i = j
            continue
        if p == state[S_PHASE]:
            state[S_LENGTH] += 1
        else:
            _end_run(rules, state, table, contexts, runs, p)
        levels = _levels(state, table, contexts, runs, p, lengths, successors, counts)
        lately_count = _lately(rules, state, lately)
        before = state[S_BEFORE_COUNT]
        back = state[S_BEFORE + before - 1] if before else NONE
        n = state[S_LENGTH]
        end = n + (j - i) - 1
        k = i
        while True:
            step = _predict_at(rules, p, back, n, lengths, successors, counts, levels, lately,
                               lately_count, said)
            hi = _span_end(n, end, lengths, counts, levels, lately, lately_count)
            nxt, aft, left = int(said[0]), int(said[1]), int(said[2])
            for m in range(n, hi + 1):
                remaining = left + step * (m - n)
                ints[0, k] = nxt
                ints[1, k] = aft
                ints[2, k] = remaining
                floats[0, k] = remaining * ((t_end[k] - t_start[k]) / 1e9)
                floats[1, k] = said[3]
                floats[2, k] = said[4]
                floats[3, k] = said[5]
                k += 1
            if hi == end:
                break
            n = hi + 1
        state[S_LENGTH] = end
        i = j
    return n_all


#: The calls from Python, their argument types always the same.
_predict_block, _forget_phase = predict_block.fixed(), forget_phase.fixed()


class _Runs:
    """The (length, successor) pairs of one phase in one context, the last
    :data:`KEPT` (the memory as Python sees it: :attr:`PhasePredictor.memory`)."""

    __slots__ = ("pairs",)

    def __init__(self, pairs=()):
        self.pairs: deque[tuple[int, int]] = deque(pairs, maxlen=KEPT)


class _Outlook:
    """What the runs kept say for the current run, worked out afresh."""

    def __init__(self, predictor: "PhasePredictor"):
        self.predictor = predictor

    def at(self, n: int) -> Prediction:
        return self._at(n)[0]

    def _at(self, n: int) -> tuple[Prediction, int]:
        """The prediction for the current run at ``n`` intervals so far, and
        how its remaining length moves from there (-1, 0 or +1)."""
        p = self.predictor
        copy = PhasePredictor(p.max_phases)
        copy.rules = p.rules
        copy.state, copy.table = p.state.copy(), p.table.copy()
        copy.contexts, copy.runs = p.contexts.copy(), p.runs.copy()
        copy.state[S_LENGTH] = n - 1
        rows = copy.observe_run(p.phase, 2)
        said = Prediction(int(rows[0, 0]), int(rows[0, 1]), int(rows[0, 2]), *rows[0, 3:].tolist())
        same = (rows[0, [0, 1, 3, 4, 5]] == rows[1, [0, 1, 3, 4, 5]]).all()
        return said, int(rows[1, 2] - rows[0, 2]) if same else 0


class PhasePredictor:
    """The online predictor of one stream: :meth:`observe` each interval's
    phase in order (or :meth:`observe_block` a block of them), and get what
    follows it."""

    def __init__(self, max_phases: int = MAX_PHASES):
        if max_phases < 1:
            raise ValueError(f"max_phases {max_phases}: at least 1")
        self.max_phases = max_phases
        self.rules = np.array([ORDER, KEPT, CONTEXTS, SUPPORT, PRIOR, max_phases, CHANGE_SHARE,
                               TOLERANCE, RETURN_GUESS], np.float64)
        self.state = np.zeros(S_BEFORE + ORDER + KEPT, np.int64)
        self.state[S_PHASE] = NONE
        self.table = np.zeros((0, 2), np.int64)
        self.contexts = np.zeros((0, CONTEXTS + ORDER + 1, C_KEY + ORDER), np.int64)
        self.runs = np.zeros((0, CONTEXTS + ORDER + 1, KEPT, 2), np.int64)
        self._grow(min(FIRST_SLOTS, max_phases + 2))

    @property
    def phase(self) -> int:
        """The current run's phase (NONE: none yet)."""
        return int(self.state[S_PHASE])

    @property
    def length(self) -> int:
        """Intervals in the current run so far."""
        return int(self.state[S_LENGTH])

    @property
    def before(self) -> tuple[int, ...]:
        """The phases of the runs before, latest last."""
        return tuple(self.state[S_BEFORE:S_BEFORE + self.state[S_BEFORE_COUNT]].tolist())

    @property
    def outlook(self) -> _Outlook | None:
        return None if self.phase == NONE else _Outlook(self)

    def observe(self, phase: int) -> Prediction:
        """The interval's phase (NONE: no phase yet); what is expected after it."""
        if phase < 0:
            return UNKNOWN
        row = self.observe_run(phase, 1)[0]
        return Prediction(int(row[0]), int(row[1]), int(row[2]), *row[3:].tolist())

    def observe_run(self, phase: int, count: int) -> np.ndarray:
        """``count`` intervals of ``phase`` in a row: what :meth:`observe`
        says after each, as rows of :class:`Prediction`'s fields."""
        zero = np.zeros(count, np.int64)
        pr = self.observe_block(np.full(count, phase, np.int64), np.zeros(count, np.bool_),
                                zero, zero)
        return np.column_stack([pr.next_phase, pr.after_change, pr.remaining,
                                pr.confidence_next, pr.confidence_after_change,
                                pr.confidence_remaining]).astype(np.float64)

    def observe_block(self, phase: np.ndarray, new_phase: np.ndarray, t_start_ns: np.ndarray,
                      t_end_ns: np.ndarray) -> Predictions:
        """A block of intervals' phases (int64), whether each opened its
        phase afresh (a phase id taken again: what was kept of the id is
        forgotten first) and their times: the predictions after each."""
        n = len(phase)
        ints, floats = np.empty((3, n), np.int64), np.empty((4, n), np.float64)
        at = 0
        while at < n:
            at = _predict_block(self.rules, self.state, self.table, self.contexts, self.runs,
                               phase, new_phase, t_start_ns, t_end_ns, at, ints, floats)
            if at < n:
                self._grow(min(2 * len(self.table), self.max_phases + 2))
        return Predictions.of_columns(ints, floats)

    def forget(self, phase: int) -> None:
        """The phase is retired: drop what is kept of it and of its runs as
        the context or successor of others."""
        _forget_phase(self.state, self.table, self.contexts, self.runs, int(phase))

    def retain(self, live: Iterable[int]) -> None:
        """Forget every phase not in ``live`` (the classifier's phases now)."""
        keep = set(live)
        for phase in [p for p in self._phases() if p not in keep]:
            self.forget(phase)

    @property
    def memory(self) -> OrderedDict[int, OrderedDict[tuple[int, ...], _Runs]]:
        """What is kept, phase by phase (the least recent first), context by
        context: a copy, as Python objects."""
        out: OrderedDict = OrderedDict()
        for slot in np.argsort(self.table[:, T_USED], kind="stable").tolist():
            phase = int(self.table[slot, T_ID])
            if phase == NONE:
                continue
            kept = out[phase] = OrderedDict()
            rows = self.contexts[slot]
            for c in np.argsort(rows[:, C_USED], kind="stable").tolist():
                used, length, count, head = rows[c, :C_KEY].tolist()
                if used:
                    ring = self.runs[slot, c]
                    pairs = [tuple(ring[(head + i) % KEPT].tolist()) for i in range(count)]
                    kept[tuple(rows[c, C_KEY:C_KEY + length].tolist())] = _Runs(pairs)
        return out

    def memory_dict(self, phases: Iterable[int] | None = None) -> dict:
        """What the predictor learnt of ``phases`` (default: all it keeps),
        JSON-ready, to be given to :meth:`seed` of a later run."""
        memory = self.memory
        keep = set(memory) if phases is None else set(phases)
        return {"version": MEMORY_VERSION, "phases": [
            [phase, [[list(context), [list(pair) for pair in runs.pairs]]
                     for context, runs in contexts.items() if keep.issuperset(context)]]
            for phase, contexts in memory.items() if phase in keep]}

    def seed(self, memory: dict, known: Iterable[int]) -> bool:
        """Start from what an earlier run learnt, of the phases ``known``
        (ids that mean the same behaviour now: a catalogue's), before the
        first interval; False (and nothing kept) where ``memory`` is not one
        :meth:`memory_dict` wrote."""
        known = set(known)
        kept = self.memory
        try:
            if memory.get("version") != MEMORY_VERSION:
                return False
            for phase, contexts in memory["phases"]:
                if int(phase) not in known:
                    continue
                for context, pairs in contexts:
                    if not known.issuperset(context) or len(context) > ORDER:
                        continue
                    phase_kept = kept.get(int(phase))
                    if phase_kept is None:
                        phase_kept = kept[int(phase)] = OrderedDict()
                    runs = phase_kept.setdefault(tuple(int(p) for p in context), _Runs())
                    for length, successor in pairs[-KEPT:]:
                        runs.pairs.append((max(int(length), 1),
                                           int(successor) if successor in known else NONE))
            while len(kept) > self.max_phases:
                kept.popitem(last=False)
            for contexts in kept.values():
                while len(contexts) > CONTEXTS:
                    contexts.popitem(last=False)
        except (KeyError, TypeError, ValueError, AttributeError):
            self._load(OrderedDict())
            return False
        self._load(kept)
        return True

    @property
    def runs_kept(self) -> int:
        """Runs held in memory, every phase and context (bounded)."""
        used = (self.contexts[:, :, C_USED] != 0) & (self.table[:, T_ID] != NONE)[:, None]
        return int(self.contexts[:, :, C_COUNT][used].sum())

    def _phases(self) -> list[int]:
        """The phases kept, the least recent first."""
        order = np.argsort(self.table[:, T_USED], kind="stable")
        ids = self.table[order, T_ID]
        return ids[ids != NONE].tolist()

    def _grow(self, slots: int, keep: bool = True) -> None:
        """Room for ``slots`` phases, what is kept kept (unless not ``keep``)."""
        had = len(self.table) if keep else 0
        table = np.zeros((slots, 2), np.int64)
        table[:, T_ID] = NONE
        table[:had] = self.table[:had]
        contexts = np.zeros((slots, *self.contexts.shape[1:]), np.int64)
        contexts[:had] = self.contexts[:had]
        runs = np.zeros((slots, *self.runs.shape[1:]), np.int64)
        runs[:had] = self.runs[:had]
        self.table, self.contexts, self.runs = table, contexts, runs

    def _load(self, memory: OrderedDict) -> None:
        """The arrays from ``memory`` (as :attr:`memory` gives it), in its order."""
        self.state[S_USED] = 0
        self._grow(max(min(FIRST_SLOTS, self.max_phases + 2), len(memory) + 2), keep=False)
        clock = int(self.state[S_CLOCK])
        for slot, (phase, contexts) in enumerate(memory.items()):
            clock += 1
            self.table[slot] = (phase, clock)
            for c, (context, runs) in enumerate(contexts.items()):
                clock += 1
                pairs = list(runs.pairs)
                self.contexts[slot, c, :C_KEY] = (clock, len(context), len(pairs), 0)
                self.contexts[slot, c, C_KEY:C_KEY + len(context)] = context
                if pairs:
                    self.runs[slot, c, :len(pairs)] = pairs
        self.state[S_USED] = len(memory)
        self.state[S_CLOCK] = clock
