"""Phase prediction (phasewatch.core.predict, core.prediction): what the
predictor says on sequences whose future is known, its bounded memory, and
the scores and the tap that carry its predictions to the sinks."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from phasewatch.core import predict
from phasewatch.core.pipeline import Intervals
from phasewatch.core.predict import NONE, PhasePredictor, Prediction, Predictions
from phasewatch.core.prediction import ERROR_BIN, ERROR_CAP, PredictionScore, PredictionTap
from phasewatch.core.source import Classified

A, B, C = 0, 1, 2


def runs(*pairs) -> list[int]:
    out = []
    for phase, length in pairs:
        out += [phase] * length
    return out


def predictions(seq) -> list[Prediction]:
    p = PhasePredictor()
    return [p.observe(x) for x in seq]


def change_points(seq) -> list[int]:
    """The last interval before each change."""
    return [i for i in range(len(seq) - 1) if seq[i + 1] != seq[i]]


def test_fixed_alternation_is_foreseen_from_the_third_cycle():
    seq = runs(*[(A, 20), (B, 10)] * 6)
    said = predictions(seq)
    late = [i for i in change_points(seq) if i >= 60]
    assert len(late) == 7
    assert all(said[i].next_phase == seq[i + 1] for i in late)
    # and not before its time: inside the runs, the next interval is the same phase
    inside = [i for i in range(60, len(seq) - 1) if i not in late]
    assert all(said[i].next_phase == seq[i] for i in inside)
    # the remaining length is exact once two runs of each are known
    for i in range(60, len(seq)):
        end = next((j for j in range(i, len(seq)) if seq[j] != seq[i]), len(seq))
        assert said[i].remaining == end - i - 1, i


def test_the_successor_depends_on_the_run_length_so_far():
    # A short goes to C, A long to B, in an order the runs before do not tell
    X = 3
    parts = []
    for long in (0, 1, 1, 0, 0, 1, 0, 1, 1, 0, 0, 0, 1):
        parts += [(X, 5), (A, 12), (B, 4)] if long else [(X, 5), (A, 3), (C, 4)]
    seq = runs(*parts, (X, 5), (A, 12))
    said = predictions(seq)
    start = len(seq) - 12
    assert said[start + 2].after_change == C and said[start + 2].next_phase == C
    assert said[start + 5].after_change == B      # longer than any short run
    assert said[start + 5].next_phase == A


def test_the_phases_before_choose_the_successor():
    # A after B goes to C, A after C goes to B
    seq = runs(*[(B, 5), (A, 5), (C, 5), (A, 5)] * 4, (B, 5), (A, 5))
    said = predictions(seq)
    assert said[-1].after_change == C
    assert said[-1].next_phase == C
    seq2 = seq[:-10] + runs((B, 5), (A, 5), (C, 5), (A, 5))
    assert predictions(seq2)[-1].after_change == B


def test_unknown_phase_keeps_its_value_and_returns_are_guessed():
    said = predictions(runs((A, 6), (B, 3)))
    first = said[:6]
    assert all(p.next_phase == A and p.after_change == NONE for p in first)
    assert [p.remaining for p in first] == [1, 2, 3, 4, 5, 6]   # as long again
    assert said[-1].after_change == A           # B's own runs name nothing: back to A
    assert said[-1].next_phase == B


def test_no_phase_gives_no_prediction():
    assert PhasePredictor().observe(-1) == predict.UNKNOWN


def test_a_forgotten_phase_leaves_nothing_behind():
    p = PhasePredictor()
    for x in runs(*[(A, 4), (B, 2), (C, 3)] * 5):
        p.observe(x)
    kept = p.runs_kept
    p.forget(B)
    assert B not in p.memory
    assert p.runs_kept < kept
    assert all(B not in context for contexts in p.memory.values() for context in contexts)
    said = [p.observe(x) for x in runs((A, 4), (C, 3), (A, 4))]
    assert all(s.after_change != B and s.next_phase != B for s in said)


def test_retain_drops_the_phases_not_live():
    p = PhasePredictor()
    for x in runs(*[(A, 2), (B, 2), (C, 2)] * 3):
        p.observe(x)
    p.retain([A, C])
    assert set(p.memory) == {A, C}


def test_memory_is_bounded_over_1e5_intervals_of_random_phases():
    rng = np.random.default_rng(7)
    lengths = rng.integers(1, 6, 40_000)
    phases = rng.integers(0, 2000, 40_000)
    seq = np.repeat(phases, lengths)[:100_000]
    assert len(seq) == 100_000
    p = PhasePredictor(max_phases=64)
    most = 0
    for i, x in enumerate(seq.tolist()):
        p.observe(x)
        if i % 1000 == 0:
            most = max(most, p.runs_kept)
            assert len(p.memory) <= 64
            assert all(len(c) <= predict.CONTEXTS for c in p.memory.values())
    assert most <= 64 * predict.CONTEXTS * predict.KEPT
    assert len(p.memory) == 64


@settings(max_examples=100, deadline=None)
@given(st.lists(st.integers(-1, 5), min_size=1, max_size=300))
def test_predictions_are_well_formed(seq):
    p = PhasePredictor(max_phases=4)
    seen = set()
    for x in seq:
        s = p.observe(x)
        if x < 0:
            assert s == predict.UNKNOWN
            continue
        seen.add(x)
        assert s == p.outlook._at(p.length)[0]  # kept along its span: as computed afresh
        assert s.next_phase == x or s.next_phase == s.after_change
        assert s.after_change == NONE or (s.after_change in seen and s.after_change != x)
        assert s.remaining >= 0
        assert all(0.0 <= c <= 1.0 for c in s[3:])


def scored(score: PredictionScore, seq, rows, blocks=1) -> np.ndarray:
    """The score given the sequence in ``blocks`` pieces; the outcomes."""
    cuts = np.linspace(0, len(seq), blocks + 1).astype(int)
    out = [score.add(np.array(seq[a:b]), Predictions.of(rows[a:b], 1.0))
           for a, b in zip(cuts, cuts[1:]) if b > a]
    return np.concatenate(out)


def test_score_counts_what_came_true():
    score = PredictionScore()
    # predictions of a last-value predictor on A A B B A
    seq = [A, A, B, B, A]
    rows = [Prediction(x, B if x == A else A, 0, 1.0, 1.0, 1.0) for x in seq]
    assert scored(score, seq, rows, blocks=2).tolist() == [-1, 1, 0, 1, 0]
    assert (score.next_right, score.next_wrong) == (2, 2)
    assert (score.change_right, score.change_wrong) == (2, 0)
    assert score.foreseen == 0
    assert score.next_accuracy == 0.5 and score.change_accuracy == 1.0


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 3), st.integers(1, 12)), min_size=2, max_size=30),
       st.integers(0, 2**31), st.integers(1, 5))
def test_median_remaining_error_is_the_exact_median(pairs, seed, blocks):
    seq = runs(*pairs)
    rng = np.random.default_rng(seed)
    guesses = rng.integers(0, 15, len(seq))
    score = PredictionScore()
    scored(score, seq, [Prediction(x, NONE, g, 0.0, 0.0, 0.0)
                        for x, g in zip(seq, guesses.tolist())], blocks)
    errors = []         # the last run is cut off: not scored
    changes = [i + 1 for i in change_points(seq)]
    for start, end in zip([0] + changes, changes):
        for i in range(start, end):
            true = end - i - 1
            errors.append(abs(guesses[i] - true) / (true + 1))
    if not errors:
        assert score.median_remaining_error is None
        return
    exact = min(sorted(errors)[(len(errors) + 1) // 2 - 1], ERROR_CAP)     # beyond: the cap
    assert score.median_remaining_error == pytest.approx(exact, abs=ERROR_BIN)


def intervals_of(phases, duration_ns=100_000_000, partial=False) -> Intervals:
    n = len(phases)
    z = np.zeros(n, np.int64)
    start = np.arange(n, dtype=np.int64) * duration_ns
    return Intervals(np.arange(n), start, start + duration_ns, z, z, z, np.zeros(n),
                     np.asarray(phases, np.int64), np.zeros(n, bool), np.zeros(n), np.zeros(n),
                     partial=partial)


def test_tap_gives_each_interval_its_prediction_in_intervals_and_seconds():
    tap = PredictionTap()
    seq = [-1] + runs(*[(A, 4), (B, 2)] * 4)
    iv = intervals_of(seq, duration_ns=250_000_000)
    tap.classified(Classified("", iv, np.concatenate([[-1], iv.phase[:-1]])))
    pr = iv.prediction
    assert len(pr) == len(seq)
    assert pr.next_phase[0] == NONE and np.isnan(pr.remaining_s[0])
    expected = predictions(seq)
    assert pr.next_phase.tolist() == [p.next_phase for p in expected]
    assert pr.remaining.tolist() == [p.remaining for p in expected]
    np.testing.assert_array_equal(pr.remaining_s[1:], pr.remaining[1:] * 0.25)
    assert tap.summary("")["next_scored"] == len(seq) - 2


def test_tap_keeps_streams_apart_and_skips_the_partial_tail():
    tap = PredictionTap()
    for stream, phase in (("a", A), ("b", B)):
        iv = intervals_of([phase] * 5)
        tap.classified(Classified(stream, iv, iv.phase))
    tail = intervals_of([-1], partial=True)
    tap.classified(Classified("a", tail, np.array([A])))
    assert tail.prediction is None
    assert tap.summary("a")["next_scored"] == tap.summary("b")["next_scored"] == 4
    tap.forget_stream("a")
    assert tap.summary("a") is None


def test_tap_forgets_phases_the_classifier_retired():
    live = {"": [A, C]}
    tap = PredictionTap(live_phases=live.get)
    iv = intervals_of(runs((A, 3), (B, 3), (C, 3)))
    tap.classified(Classified("", iv, iv.phase))
    assert set(tap.predictors[""].memory) == {A, C}


@settings(max_examples=50, deadline=None)
@given(st.lists(st.integers(-1, 4), min_size=1, max_size=200), st.integers(2, 9))
def test_scores_do_not_depend_on_how_the_intervals_are_split(seq, blocks):
    rows = predictions(seq)
    whole, split = PredictionScore(), PredictionScore()
    assert scored(whole, seq, rows).tolist() == scored(split, seq, rows, blocks).tolist()
    assert whole.summary() == split.summary()


def test_a_later_run_starts_from_what_an_earlier_one_learnt():
    first = PhasePredictor()
    for x in runs(*[(A, 6), (B, 3)] * 4):
        first.observe(x)
    memory = first.memory_dict()
    import json
    memory = json.loads(json.dumps(memory))        # as the catalogue keeps it
    cold, warm = PhasePredictor(), PhasePredictor()
    assert warm.seed(memory, known=[A, B])
    seq = runs((A, 6), (B, 3))
    said_cold = [cold.observe(x) for x in seq]
    said_warm = [warm.observe(x) for x in seq]
    assert said_warm[5].next_phase == B and said_warm[5].remaining == 0     # foreseen
    assert said_cold[5].next_phase == A                                     # nothing known
    assert [s.remaining for s in said_warm[:6]] == [5, 4, 3, 2, 1, 0]


def test_seeding_keeps_only_the_phases_still_known():
    first = PhasePredictor()
    for x in runs(*[(A, 2), (B, 2), (C, 2)] * 3):
        first.observe(x)
    p = PhasePredictor()
    assert p.seed(first.memory_dict(), known=[A, C])
    assert set(p.memory) == {A, C}
    assert all(B not in context for contexts in p.memory.values() for context in contexts)
    assert all(s != B for contexts in p.memory.values() for runs_ in contexts.values()
               for _, s in runs_.pairs)


@pytest.mark.parametrize("memory", [{}, {"version": 99, "phases": []},
                                    {"version": 1, "phases": [[0, [[[1], [["x", 2]]]]]]},
                                    {"version": 1, "phases": "nonsense"}])
def test_a_memory_that_is_not_one_is_left_out(memory):
    p = PhasePredictor()
    assert p.seed(memory, known=[0, 1]) is False
    assert p.memory == {}


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(st.integers(-1, 4), st.integers(1, 30)), min_size=1, max_size=40))
def test_a_run_at_a_time_says_what_an_interval_at_a_time_says(pairs):
    one, many = PhasePredictor(), PhasePredictor()
    for phase, count in pairs:
        each = [one.observe(phase) for _ in range(count)]
        np.testing.assert_array_equal(many.observe_run(phase, count), np.array(each, np.float64))


def test_a_phase_never_seen_to_end_lasts_as_the_streams_recent_runs_did():
    said = predictions(runs((A, 10), (B, 12), (C, 3)))
    first_run_of_b, c_at_3 = said[11], said[-1]
    assert first_run_of_b.remaining == 2        # one run before: as long again as it lasted
    assert c_at_3.remaining == 10 - 3           # the lower median of 10 and 12, less the 3 gone
    assert c_at_3.confidence_remaining == 0.0   # a guess from other phases: nothing foreseen
    assert said[-1].next_phase == C
