"""The predictions' score (core.prediction.PredictionScore) on sequences
worked by hand: what is right and wrong, the changes foreseen, and the
remaining-length errors of runs that end inside a block, across blocks and
past the bound of predictions kept waiting for their run to end."""

from __future__ import annotations

import numpy as np
import pytest

from phasewatch.core.predict import NONE, Predictions
from phasewatch.core.prediction import ERROR_CAP, PENDING, PredictionScore


def predictions(next_phase, after_change, remaining) -> Predictions:
    n = len(next_phase)
    nan = np.full(n, np.nan)
    return Predictions(np.asarray(next_phase, np.int64), np.asarray(after_change, np.int64),
                       np.asarray(remaining, np.int64), nan, nan, nan, nan)


def exact_remaining(phases) -> np.ndarray:
    """For each interval, how many more of its run follow it (the truth)."""
    phases = np.asarray(phases)
    out = np.zeros(len(phases), np.int64)
    for i in range(len(phases) - 2, -1, -1):
        out[i] = out[i + 1] + 1 if phases[i + 1] == phases[i] else 0
    return out


def test_right_wrong_changes_and_foreseen_worked_by_hand():
    score = PredictionScore()
    phases = [0, 0, 1, 1, 0, 2]
    # predicted on each interval for the next:     0  1  1  0  1  .
    # the phase after the current one's change:    1  1  0  0  1  .
    outcome = score.add(np.array(phases), predictions([0, 1, 1, 0, 1, 2],
                                                      [1, 1, 0, 0, 1, 0],
                                                      [1, 0, 1, 0, 0, 0]))
    # interval 0: nothing predicted before it; 1: said 0, right; 2: said 1,
    # right (a change foreseen, its phase after the change right); 3: said 1,
    # right; 4: said 0, right (foreseen; after-change said 0: right); 5: said
    # 1, wrong (after-change said 1: wrong)
    assert outcome.tolist() == [-1, 1, 1, 1, 1, 0]
    assert (score.next_right, score.next_wrong) == (4, 1)
    assert (score.change_right, score.change_wrong) == (2, 1)
    assert score.foreseen == 2
    assert score.next_accuracy == pytest.approx(0.8)
    assert score.change_accuracy == pytest.approx(2 / 3)
    # remaining lengths: the run of 0 said 1 then 0 (right: 1, 0); the run of
    # 1 said 1, 0 (right); the run of 0 said 0 (right): 5 exact, the last run
    # still going
    assert score.summary()["remaining_scored"] == 5
    assert score.median_remaining_error == pytest.approx(0.001)


def test_an_interval_without_a_phase_is_not_scored_nor_scores_the_next():
    score = PredictionScore()
    outcome = score.add(np.array([0, NONE, 0, 0]),
                        predictions([0, 0, 0, 0], [NONE] * 4, [0, 0, 1, 0]))
    assert outcome.tolist() == [-1, -1, -1, 1]
    assert (score.next_right, score.next_wrong) == (1, 0)
    assert score.change_right + score.change_wrong == 0


def test_the_score_carries_across_blocks():
    """The same sequence in blocks of one gives the same counts as in one block."""
    phases = [3, 3, 5, 5, 5, 3, 3, 7, 7]
    said = predictions([3, 5, 5, 5, 3, 3, 5, 7, 7], [5, 5, 3, 3, 3, 7, 7, 3, 3],
                       [1, 0, 2, 0, 0, 1, 0, 1, 0])
    whole, single = PredictionScore(), PredictionScore()
    whole.add(np.array(phases), said)
    for i in range(len(phases)):
        single.add(np.array(phases[i:i + 1]),
                   predictions(said.next_phase[i:i + 1], said.after_change[i:i + 1],
                               said.remaining[i:i + 1]))
    assert whole.summary() == single.summary()
    # by hand: said on 0..7 for 1..8: 3 5 5 5 3 3 5 7 against 3 5 5 5 3 3 7 7:
    # wrong only at 7
    assert (whole.next_right, whole.next_wrong) == (7, 1)
    # changes at 2 (after said 5: right), 5 (said 3: right), 7 (said 7: right)
    assert (whole.change_right, whole.change_wrong, whole.foreseen) == (3, 0, 2)
    # remaining: runs 3,3 / 5,5,5 / 3,3 ended and said (1, 0 / 2, 0, 0 / 1, 0):
    # the 5-run's middle said 0 where 1 was left: error 1 / (1 + 1) = 0.5
    assert whole.summary()["remaining_scored"] == 7
    assert whole.median_remaining_error == pytest.approx(0.001)


def test_the_median_error_is_its_bin_s_middle_and_capped():
    score = PredictionScore()
    # one run of 2 intervals, then a change: said 3 on the first (true 1):
    # error |3 - 1| / (1 + 1) = 1.0; said 2 on the second (true 0): 2.0
    score.add(np.array([0, 0, 1]), predictions([0, 1, 1], [1, 1, 0], [3, 2, 0]))
    assert score.summary()["remaining_scored"] == 2
    assert score.median_remaining_error == pytest.approx(1.001)
    capped = PredictionScore()
    capped.add(np.array([0, 0, 1]), predictions([0, 1, 1], [1, 1, 0], [50, 40, 0]))
    assert capped.median_remaining_error == ERROR_CAP


def test_a_long_run_across_blocks_keeps_a_bounded_share_of_its_predictions():
    """A run of 10,000 intervals in blocks of 100: at 4,100 (the first block
    end past PENDING) every second prediction is kept (2,050: the 2nd, 4th,
    ...), at 8,200 every fourth (2,050 again), and 450 more to 10,000: 2,500
    scored when it ends.  Said exactly at every fourth interval of the run and
    10 too many elsewhere, every one kept is exact."""
    assert PENDING == 4096
    length = 10_000
    phases = np.r_[np.zeros(length, np.int64), [1]]
    position = np.arange(1, len(phases) + 1)
    said = exact_remaining(phases) + np.where(position % 4 == 0, 0, 10)
    score = PredictionScore()
    for lo in range(0, len(phases), 100):
        hi = min(lo + 100, len(phases))
        score.add(phases[lo:hi], predictions(phases[lo:hi], np.ones(hi - lo), said[lo:hi]))
    assert score.summary()["remaining_scored"] == 2_500
    assert score.errors[0] == 2_500
    assert score.median_remaining_error == pytest.approx(0.001)


def test_a_long_run_inside_one_block_keeps_every_second_prediction():
    """A run of 5,000 wholly inside a block (PENDING or longer): every second
    of its predictions is scored (2,500: the 2nd, 4th, ... of the run),
    besides the one-interval run before.  Said exactly there and 10 too many
    at the run's odd places, every one kept is exact."""
    phases = np.r_[[1], np.zeros(5_000, np.int64), [1]]
    place = np.arange(len(phases))             # in the run of 0, from 1
    said = exact_remaining(phases) + np.where((place % 2 == 1) & (phases == 0), 10, 0)
    score = PredictionScore()
    score.add(phases, predictions(phases, np.ones(len(phases)), said))
    assert score.summary()["remaining_scored"] == 1 + 2_500
    assert score.errors[0] == 1 + 2_500
    assert score.median_remaining_error == pytest.approx(0.001)


def test_a_short_run_after_a_long_one_in_the_same_block_keeps_all_its_predictions():
    """Thinning is by the run's own length, not its place in the block: the
    run of 2 × 10 after a run of PENDING + 100 is scored whole (10), the
    long one every second ((PENDING + 100) / 2), the last run still open."""
    long = PENDING + 100
    phases = np.r_[np.zeros(long, np.int64), np.ones(10, np.int64), [2, 2]]
    score = PredictionScore()
    score.add(phases, predictions(phases, np.ones(len(phases)), exact_remaining(phases)))
    assert score.summary()["remaining_scored"] == long // 2 + 10


def test_a_wrong_long_run_scores_its_kept_predictions_against_their_own_positions():
    """Across blocks, each kept prediction is scored against what was left
    at its own place in the run: predictions all one too many give errors
    1 / (left + 1), whose median is that of the positions kept."""
    length = 6_000
    phases = np.r_[np.zeros(length, np.int64), [1]]
    truth = exact_remaining(phases)
    score = PredictionScore()
    for lo in range(0, len(phases), 500):
        hi = min(lo + 500, len(phases))
        score.add(phases[lo:hi], predictions(phases[lo:hi], np.ones(hi - lo), truth[lo:hi] + 1))
    # thinned at 4,500 (the first block end past PENDING): positions 2, 4, ...
    # 4,500 kept (2,250), then every second to 6,000 (750): 3,000 scored, at
    # the even positions p, left = 6,000 - p: errors 1 / (6,001 - p), below
    # the first bin's 0.002 for p < 5,501: 2,750 of them, so the median is there
    assert score.summary()["remaining_scored"] == 3_000
    assert score.median_remaining_error == pytest.approx(0.001)
    # and the largest: p = 6,000, left 0, error 1.0 in bin 500
    assert score.errors[500] == 1 and score.errors[501:].sum() == 0


@pytest.mark.parametrize("block", [PENDING + 2, PENDING])
def test_a_run_of_exactly_pending_intervals_is_thinned(block):
    """A run of exactly PENDING intervals keeps every second prediction,
    whether it ends inside a block (blocks of PENDING + 2) or its block ends
    with it, PENDING pending (blocks of PENDING)."""
    phases = np.r_[[1], np.zeros(PENDING, np.int64), [1]]
    truth = exact_remaining(phases)
    score = PredictionScore()
    for lo in range(0, len(phases), block):
        hi = min(lo + block, len(phases))
        score.add(phases[lo:hi], predictions(phases[lo:hi], np.ones(hi - lo), truth[lo:hi]))
    ones_before = 1
    assert score.summary()["remaining_scored"] == ones_before + PENDING // 2


def test_an_error_of_exactly_the_cap_is_counted_as_capped():
    """Errors are binned up to 4 (ERROR_CAP), 4 and beyond in one bin, whose
    median reads 4: said 4 on a run's last interval (true 0) is an error of
    4 / 1; said 50 there, 50."""
    for said, median in ((4, 4.0), (50, 4.0), (3, 3.001)):
        score = PredictionScore()
        score.add(np.array([0, 1]), predictions([1, 1], [1, 0], [said, 0]))
        assert score.summary()["remaining_scored"] == 1
        assert score.median_remaining_error == pytest.approx(median, abs=1e-9), said


def test_a_long_run_ended_by_the_next_blocks_first_interval_keeps_every_second():
    """A run of 10,000 intervals in one block (PENDING or more) keeps every
    second of its predictions (5,000); the next block opens with another
    phase, which ends the run there: those 5,000 are scored, no fewer."""
    length = 10_000
    phases = np.r_[np.zeros(length, np.int64), [1]]
    truth = exact_remaining(phases)
    score = PredictionScore()
    score.add(phases[:length], predictions(phases[:length], np.ones(length), truth[:length]))
    assert score.summary()["remaining_scored"] == 0
    score.add(phases[length:], predictions([1], [0], [0]))
    assert score.summary()["remaining_scored"] == 5_000
    assert score.errors[0] == 5_000


def test_an_empty_block_gets_no_prediction_and_starts_no_stream():
    from phasewatch.core.pipeline import Intervals
    from phasewatch.core.prediction import PredictionTap
    from phasewatch.core.source import Classified
    tap = PredictionTap()
    iv = Intervals.empty()
    tap.classified(Classified("s", iv, iv.phase))
    assert iv.prediction is None and tap.predictors == {} and tap.scores == {}


def test_arrays_reach_the_kernels_whole_and_writable():
    """The ahead-of-time kernels are built for C-contiguous, writable
    arrays: a strided view and a read-only array are copied into such, one
    already so is passed as it is."""
    from phasewatch.core.prediction import _plain
    a = np.arange(10, dtype=np.int64)
    assert _plain(a) is a
    frozen = np.arange(4, dtype=np.int64)
    frozen.flags.writeable = False
    for given in (a[::2], frozen):
        got = _plain(given)
        assert got.flags.c_contiguous and got.flags.writeable
        assert got.tolist() == given.tolist()
