"""Phase prediction on hand-worked sequences: each rule of the predictor,
its memory's bounds, the scores and the tap, with the answer worked out from
the rule (tests/test_predict.py has the properties and the references)."""

from __future__ import annotations

import numpy as np
import pytest

from phasewatch.core import predict
from phasewatch.core.predict import NONE, PhasePredictor, Prediction, Predictions
from phasewatch.core.prediction import ERROR_BIN, PredictionScore, PredictionTap
from phasewatch.core.source import Classified
from test_predict import intervals_of, predictions, runs, scored

A, B, C, D = 0, 1, 2, 3


def test_each_field_goes_to_its_own_column():
    rows = [Prediction(1, 2, 3, 0.25, 0.5, 0.75), Prediction(NONE, NONE, NONE, 0.0, 0.0, 0.0)]
    cols = Predictions.of(rows, 0.5)
    assert cols.next_phase.tolist() == [1, NONE] and cols.after_change.tolist() == [2, NONE]
    assert cols.remaining.tolist() == [3, NONE]
    assert cols.remaining_s[0] == 1.5 and np.isnan(cols.remaining_s[1])
    assert cols.confidence_next.tolist() == [0.25, 0.0]
    assert cols.confidence_after_change.tolist() == [0.5, 0.0]
    assert cols.confidence_remaining.tolist() == [0.75, 0.0]


def test_past_the_shortest_run_the_longer_runs_give_the_remaining_length():
    # A's runs last 3 or 12; at 9 intervals only the runs of 12 are alike: 3 more
    seq = runs(*[(A, 3), (B, 2), (A, 12), (B, 2)] * 3, (A, 9))
    assert predictions(seq)[-1].remaining == 3


def test_where_a_phase_names_no_successor_the_guess_is_the_run_just_before():
    said = predictions(runs((A, 3), (B, 3), (C, 2)))
    assert said[-1].after_change == B


def test_one_run_is_not_enough_to_foresee_a_change():
    p = PhasePredictor()
    said = [p.observe(x) for x in runs((A, 3), (B, 2), (A, 3))]
    assert said[-1].next_phase == A and said[-1].after_change == B
    # A's run kept under no context; B's under (A) and under none: once each
    assert p.runs_kept == 3


def test_a_run_is_keyed_by_the_two_runs_before_it():
    p = PhasePredictor()
    for x in runs((A, 2), (B, 2), (C, 2), (A, 2), (B, 1)):
        p.observe(x)
    assert set(p.memory[A]) == {(), (C,), (B, C)}


def test_one_phase_is_enough_and_none_is_refused():
    p = PhasePredictor(max_phases=1)
    for x in runs((A, 2), (B, 2)):
        p.observe(x)
    assert set(p.memory) == {B}
    with pytest.raises(ValueError):
        PhasePredictor(max_phases=0)


def test_the_current_run_goes_on_when_another_phase_is_forgotten():
    p = PhasePredictor()
    for x in runs((B, 1), *[(A, 4), (C, 3)] * 3, (A, 2)):
        p.observe(x)
    p.forget(B)
    third, fourth = p.observe(A), p.observe(A)
    assert (third.next_phase, third.remaining) == (A, 1)     # A's runs all lasted 4
    assert (fourth.next_phase, fourth.remaining) == (C, 0)


@pytest.mark.parametrize("length, kept", [(10_000, 2500), (12_000, 3000)])
def test_a_long_run_keeps_every_second_then_every_fourth_remaining_prediction(length, kept):
    # 10,000 intervals of A in blocks of 1,000, each predicted exactly, then B.
    # Positions 1-5,000 pend; at 5,000 (>= 4,096) the odd ones go: 2,500 kept.
    # Blocks 6-9 add their even positions, 500 each: 4,500 at 9,000, and only
    # multiples of 4 stay: 2,250. Block 10 adds its 250 multiples of 4.
    from phasewatch.core.prediction import PENDING
    score = PredictionScore()
    for start in range(0, length, 1000):
        left = length - 1 - np.arange(start, start + 1000)
        score.add(np.full(1000, A), Predictions.of(
            [Prediction(A, B, r, 1.0, 1.0, 1.0) for r in left.tolist()], 1.0))
        assert score.pending <= PENDING + 1000
    score.add(np.array([B]), Predictions.of([Prediction(B, A, 0, 1.0, 1.0, 1.0)], 1.0))
    assert score.summary()["remaining_scored"] == kept       # 12,000: 2,250 + 3 x 250
    assert score.median_remaining_error == pytest.approx(ERROR_BIN / 2)


@pytest.mark.parametrize("newer, share_ended", [(15, 1 / 16), (16, 0.0)])
def test_a_context_keeps_its_last_sixteen_runs(newer, share_ended):
    # three runs of A that lasted 3, then runs of 9, all after (A, B) but the
    # first; on the 3rd interval of the next A, the share of the runs kept
    # that ended there is what the next-interval confidence leaves out
    seq = runs(*[(A, 3), (B, 1)] * 3, *[(A, 9), (B, 1)] * newer, (A, 3))
    last = predictions(seq)[-1]
    assert last.next_phase == A and last.remaining == 6
    assert last.confidence_next == pytest.approx(1.0 - share_ended)
    # the runs of 9 are within 30 % of the median (9), the run of 3 is not
    assert last.confidence_remaining == pytest.approx(1.0 - share_ended)


def test_nothing_known_of_the_successor_gives_no_confidence_in_it():
    said = predictions(runs((A, 4)))
    assert all(s.after_change == NONE and s.confidence_after_change == 0.0 for s in said)
    assert all(s.confidence_remaining == 0.0 for s in said)     # as long again: a guess
    assert all(s.next_phase == A and s.confidence_next == 1.0 for s in said)


def test_runs_whose_successor_was_forgotten_fall_back_to_the_run_before():
    p = PhasePredictor()
    for x in runs((A, 3), (B, 2), (C, 1), (A, 2)):
        p.observe(x)
    p.forget(B)             # A's one run went to B: now to a phase unknown
    said = p.observe(A)
    assert said.after_change == C and said.confidence_after_change == predict.RETURN_GUESS


def test_no_phase_predicts_nothing_with_no_confidence():
    # -1: "no phase", as the classifier's phase column says it
    assert PhasePredictor().observe(-1) == Prediction(-1, -1, -1, 0.0, 0.0, 0.0)


def test_the_predictor_keeps_as_many_phases_as_the_classifier_by_default():
    from phasewatch.core.params import DetectorParams
    assert PhasePredictor().max_phases == DetectorParams().max_phases


def test_a_seeded_phase_keeps_its_contexts_up_to_the_bound():
    contexts = [[[c], [[3, 0]]] for c in range(1, predict.CONTEXTS + 2)]
    known = range(predict.CONTEXTS + 2)
    p = PhasePredictor()
    assert p.seed({"version": 1, "phases": [[0, contexts[:predict.CONTEXTS]]]}, known)
    assert len(p.memory[0]) == predict.CONTEXTS
    p = PhasePredictor()
    assert p.seed({"version": 1, "phases": [[0, contexts]]}, known)
    assert list(p.memory[0]) == [(c,) for c in range(2, predict.CONTEXTS + 2)]   # first gone


def test_forgotten_successors_do_not_outvote_the_known_one():
    p = PhasePredictor()
    for x in runs((A, 2), (B, 1), (A, 2), (B, 1), (A, 2), (C, 1), (A, 1)):
        p.observe(x)
    p.forget(B)         # A went to B twice and to C once: C, one of three
    said = p.observe(A)
    assert said.after_change == C
    assert said.confidence_after_change == pytest.approx(1 / 3)


def test_an_id_opened_afresh_is_predicted_as_a_phase_never_seen():
    seq = runs((A, 3), (B, 1), (A, 3), (B, 1), (A, 2))
    iv = intervals_of(seq)
    iv.new_phase[len(seq) - 2] = True          # the last A is another behaviour
    PredictionTap().classified(Classified("", iv, iv.phase))
    assert iv.prediction.remaining[-3] == 0                    # the old A's end foreseen
    # nothing of its own known: as the stream's recent runs (A 3, B 1, A 3,
    # B 1) that lasted as long did: the median of those lasting 1 lasted 1,
    # of those lasting 2, 3 (the old A's memory would say 2 more, then 1)
    assert iv.prediction.remaining[-2:].tolist() == [0, 1]


def test_the_tap_hands_out_memory_per_stream_and_forgets_all():
    tap = PredictionTap()
    iv = intervals_of(runs(*[(A, 2), (B, 2)] * 3))
    tap.classified(Classified("s", iv, iv.phase))
    assert tap.memory("other", [A, B]) is None
    memory = tap.memory("s", [A])
    assert [phase for phase, _ in memory["phases"]] == [A]
    tap.forget_all()
    assert tap.summary("s") is None and tap.predictors == {}


def tapped(schedule, max_phases: int, step: int):
    """A pipeline of ``max_phases`` over the synthetic ``schedule``, fed
    ``step`` samples at a time, with the tap of it; and their parameters."""
    from phasewatch.core.batch import concat
    from phasewatch.core.params import DetectorParams, Params, histogram_params_of
    from phasewatch.core.pipeline import Pipeline
    from phasewatch.formats import synthetic
    samples = concat(list(synthetic.generate(schedule)))
    params = Params(histograms=histogram_params_of(synthetic.metadata(100_000_000)),
                    detector=DetectorParams(detector="vpf-ip", max_phases=max_phases))
    pipe = Pipeline(params, synthetic.BASE_MHZ)
    tap = PredictionTap.for_pipeline(pipe)
    for a in range(0, len(samples), step):
        iv = pipe.feed(samples.slice(a, a + step))
        tap.classified(Classified("", iv, iv.phase))
    return pipe, tap, params


AGAIN = (("compute-a", 4), ("memory", 4), ("mixed", 4), ("compute-a", 4), ("memory", 4)) * 2


def test_the_tap_of_a_pipeline_keeps_to_the_classifiers_live_phases():
    from phasewatch.core.pipeline import Pipeline
    from phasewatch.formats import synthetic
    pipe, tap, params = tapped(AGAIN, 2, 500)
    assert tap.max_phases == 2
    live = set(pipe.classifier.ids[pipe.classifier.ids >= 0].tolist())
    assert pipe.classifier.retired > 0
    assert set(tap.predictors[""].memory) <= live
    # a later tap started from what this one learnt, of the phases the pipeline knows
    again = Pipeline(params, synthetic.BASE_MHZ)
    again.start_from(pipe.known_phases())
    seeded = PredictionTap.for_pipeline(again, tap.memory("", live))
    known = set(again.classifier.ids[again.classifier.ids >= 0].tolist())
    assert seeded.predictors[""].runs_kept > 0 and set(seeded.predictors[""].memory) <= known
    assert PredictionTap.for_pipeline(again).predictors == {}


@pytest.mark.parametrize("lengths, median", [((2, 4, 6, 8, 10), 6), ((2, 4, 6, 8), 4)])
def test_the_remaining_length_is_the_lower_median_of_the_runs_alike(lengths, median):
    # after (A, B), A lasted these: on its first interval, the lower median
    # less the one so far
    seq = runs((A, 1), (B, 1), *[run for n in lengths for run in ((A, n), (B, 1))], (A, 1))
    assert predictions(seq)[-1].remaining == median - 1


def test_two_runs_alike_in_the_closest_context_are_enough():
    # after (B, D), A lasted 3 twice; over all contexts, mostly 9
    seq = runs(*[(A, 9), (B, 1), (C, 1)] * 5, *[(A, 3), (B, 1), (D, 1)] * 3, (A, 1))
    assert predictions(seq)[-1].remaining == 2


def test_a_run_30_percent_off_the_median_is_still_near_it():
    # after (A, B), A lasted 10, 10 and 13: the median is 10, and 13 is within 30 %
    seq = runs((A, 1), (B, 1), *[run for n in (10, 10, 13) for run in ((A, n), (B, 1))],
               (A, 1))
    last = predictions(seq)[-1]
    assert last.remaining == 9 and last.confidence_remaining == 1.0


def test_half_the_runs_ending_here_is_not_enough_to_foresee_a_change():
    # after (A, B), A lasted 4, 8, 4 and 8: at 4, half ended, half went on
    seq = runs((A, 1), (B, 1), *[run for n in (4, 8, 4, 8) for run in ((A, n), (B, 1))], (A, 4))
    last = predictions(seq)[-1]
    assert last.next_phase == A and last.after_change == B
    assert last.confidence_next == 0.5


def test_a_seeded_run_lasts_at_least_one_interval():
    p = PhasePredictor()
    assert p.seed({"version": 1, "phases": [[A, [[[], [[0, B], [3, B]]]]]]}, known=[A, B])
    assert p.memory_dict()["phases"] == [[A, [[[], [[1, B], [3, B]]]]]]


def test_a_phase_keeps_its_most_recently_used_contexts():
    # A after each of ten other phases X: contexts (A, X) and (X,) for each, and ()
    p = PhasePredictor()
    for x in runs(*[run for other in range(10, 20) for run in ((other, 1), (A, 1))], (B, 1)):
        p.observe(x)
    kept = list(p.memory[A])
    assert len(kept) == predict.CONTEXTS
    # the eight used last, least recently used first: () with every run
    assert kept == [(16,), (A, 17), (17,), (A, 18), (18,), (A, 19), (19,), ()]


def test_a_phase_dropped_beyond_the_bound_leaves_the_context_of_the_runs_after():
    p = PhasePredictor(max_phases=2)
    for x in runs((A, 1), (B, 1), (C, 1), (B, 1)):      # C drops A
        p.observe(x)
    assert set(p.memory) == {B, C}
    assert set(p.memory[C]) == {(B,), ()}


def test_a_seeded_context_of_two_runs_is_kept_and_one_of_three_is_not():
    p = PhasePredictor()
    memory = {"version": 1, "phases": [[A, [[[B, C], [[3, B]]], [[C, B, C], [[4, B]]]]]]}
    assert p.seed(memory, known=[A, B, C])
    assert list(p.memory[A]) == [(B, C)]


def test_only_changes_score_the_phase_after_a_change():
    # predicted on each interval: the phase after its run ends
    seq = [A, A, A, B]
    rows = [Prediction(A, after, 1, 1.0, 1.0, 1.0) for after in (A, A, B, NONE)]
    score = PredictionScore()
    scored(score, seq, rows)
    assert (score.change_right, score.change_wrong) == (1, 0)
    assert score.summary()["changes"] == 1


def test_past_every_run_known_the_successor_is_where_most_of_them_went():
    # A went to B after 1 and 2 intervals, to C after 3; after D (a context
    # never seen) A has lasted 5: longer than any, so all three runs count
    seq = runs((A, 1), (B, 1), (A, 2), (B, 1), (A, 3), (C, 1), (D, 1), (A, 5))
    assert predictions(seq)[-1].after_change == B


def test_intervals_without_a_phase_score_no_remaining_length():
    score = PredictionScore()
    seq = [-1, -1, A, A, B]
    rows = [Prediction(x, NONE, 0, 0.0, 0.0, 0.0) for x in seq]
    scored(score, seq, rows)
    assert score.summary()["remaining_scored"] == 2          # A's two; B's run goes on


def test_an_error_just_under_the_cap_is_not_read_as_the_cap():
    # a run of 2,000: the first 1,501 predicted 3.998-4 times too long (relative
    # to the true remaining length plus one), the rest exactly; the median is
    # in the last bin below the cap
    length = 2000
    true = length - 1 - np.arange(length)
    said = np.where(true + 1 >= 500, true + np.ceil(3.998 * (true + 1)), true).astype(int)
    score = PredictionScore()
    rows = [Prediction(A, B, r, 1.0, 1.0, 1.0) for r in said.tolist()]
    scored(score, runs((A, length), (B, 1)), rows + [Prediction(B, A, 0, 1.0, 1.0, 1.0)])
    assert 3.998 <= score.median_remaining_error < 4.0


def test_errors_beyond_the_cap_read_as_the_cap():
    from phasewatch.core.prediction import ERROR_CAP
    score = PredictionScore()
    rows = [Prediction(A, B, 100, 1.0, 1.0, 1.0)] * 2 + [Prediction(B, A, 0, 1.0, 1.0, 1.0)]
    scored(score, [A, A, B], rows)          # 99 / 2 and 100 / 1 times off
    assert score.median_remaining_error == ERROR_CAP


def test_seeding_more_phases_than_the_bound_keeps_the_last_ones():
    memory = {"version": 1, "phases": [[x, [[[], [[2, B]]]]] for x in (A, C, D)]}
    p = PhasePredictor(max_phases=2)
    assert p.seed(memory, known=[A, B, C, D])
    assert list(p.memory) == [C, D]


def test_the_tap_predicts_a_block_of_one_interval_and_one_starting_at_any_phase():
    tap = PredictionTap()
    one = intervals_of([C])
    tap.classified(Classified("", one, one.phase))
    assert one.prediction is not None and one.prediction.next_phase.tolist() == [C]
    more = intervals_of([C, C, B])
    tap.classified(Classified("", more, more.phase))
    said = predictions([C] * 3 + [B])[1:]          # the first block went on the same
    assert more.prediction.next_phase.tolist() == [p.next_phase for p in said]
    assert more.prediction.remaining.tolist() == [p.remaining for p in said]


def test_the_tap_of_a_pipeline_keeps_phase_0_while_it_lives():
    pipe, tap, _ = tapped((("compute-a", 4), ("memory", 4), ("compute-a", 4), ("mixed", 4),
                           ("compute-a", 4)), 2, 300)
    # compute-a is phase 0 throughout; memory's phase made way for mixed's
    assert pipe.classifier.retired == 1
    assert set(tap.predictors[""].memory) == {0, 2}
    # and its runs before the retirement are remembered
    assert sum(len(runs_.pairs) for runs_ in tap.predictors[""].memory[0].values()) > 0


def test_a_first_short_run_scores_each_of_its_intervals_and_a_wrong_change_counts():
    score = PredictionScore()
    rows = [Prediction(A, C, 1, 1.0, 1.0, 1.0), Prediction(A, C, 0, 1.0, 1.0, 1.0),
            Prediction(B, A, 0, 1.0, 1.0, 1.0)]
    scored(score, [A, A, B], rows)
    summary = score.summary()
    assert summary["remaining_scored"] == 2
    assert (summary["changes"], summary["change_accuracy"]) == (1, 0.0)    # C said, B came


def test_a_phase_never_seen_lasts_as_the_lower_median_of_the_streams_runs_as_long():
    seq = runs((A, 2), (B, 5), (C, 8), (D, 2))
    iv = intervals_of(seq)
    iv.new_phase[len(seq) - 2] = True
    PredictionTap().classified(Classified("", iv, iv.phase))
    # the stream's runs 2, 5 and 8 all lasted 1 and 2: their median is 5
    assert iv.prediction.remaining[-2:].tolist() == [5 - 1, 5 - 2]


def test_a_tap_started_from_memory_takes_phase_zeros_too():
    """Phase 0 is a phase like any other: the first run's memory of it is
    taken where the classifier starts from it (it is the one phase a
    classifier of three live phases starts from: half, rounded down)."""
    from phasewatch.core.pipeline import Pipeline
    from phasewatch.formats import synthetic
    pipe, tap, params = tapped(AGAIN, 3, 500)
    memory = tap.memory("", [0, 1, 2])
    assert sorted(p for p, _ in memory["phases"]) == [0, 1, 2]
    again = Pipeline(params, synthetic.BASE_MHZ)
    again.start_from(pipe.known_phases())
    assert again.classifier.ids[again.classifier.ids >= 0].tolist() == [0]
    seeded = PredictionTap.for_pipeline(again, memory)
    assert set(seeded.predictors[""].memory) == {0}


def test_the_tap_of_a_pipeline_forgets_a_phase_merged_away():
    """One sample an interval, voltage alone: 1000 mV opens phase 0, 1030 mV
    phase 1; intervals stepping down from 1026 to 1000 mV twice draw phase
    1's centroid onto phase 0's, and the two merge into the older: phase 1
    is retired.  The predictor, which knew both, keeps only phase 0."""
    from phasewatch.core.batch import SampleBatch
    from phasewatch.core.params import DetectorParams, IntervalParams, Params
    from phasewatch.core.pipeline import Pipeline
    mv = [1000] * 4 + [1030] * 4 + [1026, 1022, 1018, 1014, 1010, 1006, 1003, 1000] * 2
    n = len(mv)
    batch = SampleBatch({"t_ns": np.arange(n, dtype=np.int64) * 1_000_000,
                         "cpu": np.zeros(n, np.int32), "tid": np.full(n, 7, np.int32),
                         "vcore_mv": np.array(mv, np.uint64)})
    pipe = Pipeline(Params(interval=IntervalParams(kind="samples", samples=1),
                           detector=DetectorParams(detector="vpf")),
                    3000.0, voltage_from_perf_status=False)
    tap = PredictionTap.for_pipeline(pipe)
    iv = pipe.feed(batch)
    tap.classified(Classified("", iv, iv.phase))
    assert {0, 1} <= set(iv.phase.tolist())
    assert pipe.classifier.retired == 1 and pipe.classifier.ids.tolist() == [0, -1]
    assert list(tap.predictors[""].memory) == [0]
