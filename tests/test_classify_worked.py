"""The classifier's rules worked by hand on profiles whose distances are
exact: point masses in ordered bins, so that the cumulative distance of two
points is how many bins lie between them over the bins less one.  Each case
is run through the kernel and the plain-Python reference, and both must give
the decisions worked out here from the rules in agent/core/classify.py and
docs/detectors.md (the stay margin of 0.05, a distance equal to the threshold
being within it, a candidate confirmed by the next interval, at most eight
candidates waiting, merges at powers of two and every 16 joins, the CPI band
and its fit to the run from the eighth interval with a CPI)."""

import math
import warnings

import numpy as np
import pytest

from phasewatch.core.classify import (MATCHED, NO_DATA, TENTATIVE, ClassifierState, KnownPhase,
                                      classify, classify_reference, interval_log_cpi,
                                      threshold_history, _merge_into, _oldest,
                                      cpi_out_of_tolerance)
from phasewatch.core.params import DetectorParams

M, N, T = MATCHED, NO_DATA, TENTATIVE
# slot columns: id, interval last used, kind, members with a known CPI, joins
ID, USED_AT, KIND, CPI_N, JOINS = range(5)
PHASE, CANDIDATE = 1, 2
LOG_CPI, CPI_LAST, CPI_D2 = range(3)
RUN_N = 4                   # threshold state: intervals with a CPI counted for the run's spread


class Layout:
    """``segments`` cumulative (ordered-bin) segments of ``bins`` bins each."""

    def __init__(self, bins, segments=1):
        self.bins, self.segments = bins, segments
        self.bounds = np.arange(segments + 1) * bins
        self.kinds = np.zeros(segments, np.int64)
        self.used = np.ones(segments, bool)

    def interval(self, *parts):
        """``parts``: per segment with samples, (segment, {bin: weight})
        or (segment, bin) for a point; 30 samples in each of them."""
        x = np.zeros(self.bins * self.segments)
        counts = np.zeros(self.segments, np.int64)
        for seg, where in parts:
            where = where if isinstance(where, dict) else {where: 1.0}
            for b, w in where.items():
                x[seg * self.bins + b] = w
            counts[seg] = 30
        return x, counts

    def point(self, b):
        return self.interval((0, b))

    def arrays(self, intervals):
        return (np.array([x for x, _ in intervals]),
                np.array([c for _, c in intervals], np.int64))

    def kernel(self, intervals, params, log_cpi=None, tol=0.0, state=None):
        prof, counts = self.arrays(intervals)
        state = state or ClassifierState(len(prof[0]), self.segments, params, capacity=1)
        return classify(prof, counts, self.bounds, self.kinds, self.used, state,
                        None if log_cpi is None else np.array(log_cpi, float), tol)

    def reference(self, intervals, params, log_cpi=None, tol=0.0):
        prof, counts = self.arrays(intervals)
        return classify_reference(prof, counts, self.bounds, self.kinds, self.used, params,
                                  None if log_cpi is None else np.array(log_cpi, float), tol)

    def both(self, intervals, params, log_cpi=None, tol=0.0):
        return [self.kernel(intervals, params, log_cpi, tol),
                self.reference(intervals, params, log_cpi, tol)]


def check(got, phase=None, status=None, new=None, distance=None):
    for d in got:
        if phase is not None:
            assert d.phase.tolist() == phase
        if status is not None:
            assert d.status.tolist() == status
        if new is not None:
            assert d.new_phase.tolist() == new
        if distance is not None:
            assert np.allclose(d.distance, distance, equal_nan=True, rtol=0, atol=1e-12), \
                d.distance.tolist()


# -- staying in the previous phase: the margin of 0.05 ---------------------

HUNDRED = Layout(101)       # a point's distance to another: bins between them / 100


def stay_case(layout, a, b, x, threshold):
    """Phase 0 at bin ``a``, phase 1 at bin ``b`` (the previous phase), then
    an interval at bin ``x``."""
    ivs = [layout.point(a), layout.point(a), layout.point(b), layout.point(b), layout.point(x)]
    return layout.both(ivs, DetectorParams(threshold=threshold))


@pytest.mark.parametrize("x_bin, last_phase", [
    (31, 1),    # 0.31 from phase 0, 0.35 from phase 1: nearer phase 0 by 0.04, stays in 1
    (30, 0),    # 0.30 against 0.36: nearer by 0.06, beyond the margin: moves to phase 0
    (26, 0),    # 0.40 from phase 1, the threshold itself, but phase 0 is 0.14 nearer
])
def test_an_interval_stays_unless_another_phase_is_nearer_by_more_than_the_margin(x_bin,
                                                                                   last_phase):
    got = stay_case(HUNDRED, 0, 66, x_bin, threshold=0.4)
    check(got, phase=[0, 0, 1, 1, last_phase], status=[M] * 5)


def test_nearer_by_exactly_the_margin_stays():
    # 21 bins: 0.25 from phase 0 and 0.30 from phase 1, 0.25 + 0.05 == 0.30 exactly
    got = stay_case(Layout(21), 0, 11, 5, threshold=0.4)
    check(got, phase=[0, 0, 1, 1, 1], distance=[np.nan, 0, 0.55, 0, 0.3])


def test_at_the_threshold_from_two_phases_it_stays_in_the_previous_one():
    # 0.40 from both, the threshold: within it, and no phase is nearer
    got = stay_case(HUNDRED, 0, 80, 40, threshold=0.4)
    check(got, phase=[0, 0, 1, 1, 1], status=[M] * 5, distance=[np.nan, 0, 0.8, 0, 0.4])


FIVE = Layout(5)            # a point's distance to another: bins between them / 4


def test_a_phase_exactly_at_the_threshold_is_taken():
    # the interval at bin 1 is 0.75 from the previous phase (bin 4), 0.25 from phase 0
    ivs = [FIVE.point(0), FIVE.point(0), FIVE.point(4), FIVE.point(4), FIVE.point(1)]
    got = FIVE.both(ivs, DetectorParams(threshold=0.25))
    check(got, phase=[0, 0, 1, 1, 0], status=[M] * 5, distance=[np.nan, 0, 1, 0, 0.25])


def test_a_candidate_exactly_at_the_threshold_is_waited_on():
    # E (bin 4) waits; then x (bin 3) is 0.25 from it: it joins E's candidate,
    # and the next x confirms it, 0.125 from the mean of E and x
    e, a, x = FIVE.point(4), FIVE.point(0), FIVE.point(3)
    got = FIVE.both([a, a, e, a, x, x], DetectorParams(threshold=0.25))
    check(got, phase=[0, 0, 0, 0, 1, 1], status=[M, M, T, M, M, M],
          new=[True, False, False, False, True, False],
          distance=[np.nan, 0, 1, 0, 0.75, 0.125])


NINE = Layout(9)            # bins between over 8


def test_the_candidate_just_opened_exactly_at_the_threshold_is_confirmed():
    # E (bin 3) waits; F (bin 0) opens a candidate (0.375 from E); y (bin 2) is
    # 0.25 from F, the threshold, and 0.125 from E: F's candidate, opened just
    # before, is confirmed, not E's
    a, e, f, y = NINE.point(8), NINE.point(3), NINE.point(0), NINE.point(2)
    got = NINE.both([a, a, e, a, f, y], DetectorParams(threshold=0.25))
    check(got, phase=[0, 0, 0, 0, 1, 1], status=[M, M, T, M, M, M],
          new=[True, False, False, False, True, False],
          distance=[np.nan, 0, 0.625, 0, 1.0, 0.25])


def test_a_phase_with_no_segment_in_common_is_at_distance_one():
    """Phase 0 has samples only in the third segment, phase 1 only in the
    first; an interval 1 from phase 1 (opposite ends of the first segment)
    and with nothing in common with phase 0 is 1 from both: it is tentative
    and labelled with the phase in the lower slot, phase 0."""
    lay = Layout(5, segments=3)
    a = lay.interval((2, 0))
    b = lay.interval((0, 0))
    x = lay.interval((0, 4), (1, 2))
    got = lay.both([a, a, b, b, x], DetectorParams(threshold=0.2))
    check(got, phase=[0, 0, 1, 1, 0], status=[M, M, M, M, T],
          new=[True, False, True, False, False], distance=[np.nan, 0, 1, 0, 1])


# -- the threshold each interval was judged against -----------------------

ADAPTIVE = DetectorParams(threshold=0.3, adaptive=True, adaptive_alpha=0.5, adaptive_z=2.0,
                          adaptive_min=0.05, adaptive_max=0.5, adaptive_warmup=2)
# joins at 0.1, 0.3, 0.2: means 0.1, 0.2, 0.2; variances 0, 0.5 * 0.5 * 0.2**2 = 0.01,
# 0.5 * 0.01 = 0.005; from the second join, mean + 2 standard deviations
AFTER_TWO, AFTER_THREE = 0.2 + 2 * 0.1, 0.2 + 2 * math.sqrt(0.005)


def test_the_adaptive_threshold_moves_by_the_distances_of_joins_all_matched_if_no_status():
    got = threshold_history([np.nan, 0.1, 0.3, 0.2, 0.2], [True, False, False, False, False],
                            ADAPTIVE)
    assert np.allclose(got, [0.3, 0.3, 0.3, AFTER_TWO, AFTER_THREE])


def test_new_phases_tentative_intervals_and_no_data_do_not_move_the_threshold():
    distance = [np.nan, 0.1, 0.9, 0.9, np.nan, 0.3, 0.2, 0.2]
    new = [True, False, True, False, False, False, False, False]
    status = np.array([M, M, M, T, N, M, M, M], np.int8)
    got = threshold_history(distance, new, ADAPTIVE, status)
    assert np.allclose(got, [0.3, 0.3, 0.3, 0.3, 0.3, 0.3, AFTER_TWO, AFTER_THREE])


def test_a_fixed_threshold_is_the_threshold_throughout():
    fixed = DetectorParams(threshold=0.3, adaptive=False, adaptive_warmup=1)
    got = threshold_history([np.nan, 0.1, 0.1], [True, False, False], fixed,
                            np.zeros(3, np.int8))
    assert got.tolist() == [0.3, 0.3, 0.3]


# -- log CPI, the state's limits and its table ----------------------------

def test_log_cpi_of_one_instruction_and_none_without_a_warning():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        got = interval_log_cpi(np.array([1, 0, 5, 4]), np.array([2, 7, 0, 4]))
    assert got[0] == math.log(2) and np.isnan(got[1]) and np.isnan(got[2]) and got[3] == 0.0


@pytest.mark.parametrize("field", ["max_phases", "memory"])
def test_a_state_needs_at_least_one_phase_and_one_member(field):
    with pytest.raises(ValueError, match=f"{field} 0: at least 1"):
        ClassifierState(4, 1, DetectorParams(**{field: 0}))


def test_the_table_grows_as_slots_are_needed_up_to_the_phases_and_eight_candidates():
    """One phase at most, then nine intervals each unlike all before (each in
    a segment of its own): eight candidates wait, the ninth takes the oldest's
    slot, so the table ends at 1 + 8 slots; two intervals of one phase need
    one slot."""
    lay = Layout(3, segments=10)
    params = DetectorParams(max_phases=1)
    state = ClassifierState(30, 10, params, capacity=1)
    lay.kernel([lay.interval((0, 0))] * 2, params, state=state)
    assert len(state.centroids) == 1
    got = lay.kernel([lay.interval((s, 0)) for s in range(1, 10)], params, state=state)
    assert got.status.tolist() == [T] * 9 and got.phase.tolist() == [0] * 9
    assert len(state.centroids) == 9 and state.ids.tolist() == [0] + [-1] * 8


# -- the CPI gate, its band and its fit to the run -------------------------

def test_the_band_is_fitted_to_the_run_from_its_eighth_interval_with_a_cpi():
    """The first interval (CPI 0.9) is start-up: the second does not fit it
    and takes its phase over, and the run's spread counts from the second.
    Eight intervals at 0 and 0.1 in turn: a standard deviation of 0.05, so
    the tolerance of 0.5 narrows to 0.05; the phase's own scatter (squared
    differences 7 * 0.01 over 2 * 7) allows 4 * sqrt(0.005) = 0.283.  A tenth
    interval 0.4 from the phase's mean (0.05) is kept out; a ninth, before
    the fit, is not."""
    five = Layout(5)
    ivs = [five.point(0)] + [five.point(4)] * 9
    params = DetectorParams(threshold=0.2, cpi_run_share=1.0, cpi_floor=0.01)
    cpis = [0.9] + [0.0, 0.1] * 4 + [0.45]
    got = five.both(ivs, params, cpis, tol=0.5)
    check(got, phase=[0] * 10, status=[M] * 9 + [T], distance=[np.nan, 1] + [0] * 7 + [1])
    early = five.both(ivs[:9], params, cpis[:8] + [0.45], tol=0.5)
    check(early, status=[M] * 9)


def test_a_run_whose_cpi_never_varied_is_cut_at_the_floor():
    """Nine intervals at log CPI 0.1: the run's spread is 0, so the tolerance
    of 0.05 narrows to the floor, 0.01, and an interval 0.03 away is kept out."""
    five = Layout(5)
    params = DetectorParams(threshold=0.2, cpi_run_share=1.0, cpi_floor=0.01)
    got = five.both([five.point(0)] * 10, params, [0.1] * 9 + [0.13], tol=0.05)
    check(got, phase=[0] * 10, status=[M] * 9 + [T], distance=[np.nan] + [0] * 8 + [1])


def test_a_cpi_exactly_at_the_band_is_within_it():
    ints = np.array([0, 0, PHASE, 1, 0], np.int64)
    assert not cpi_out_of_tolerance(0.5, ints, np.array([0.25, 0.25, 0.0]), 0.25)
    assert cpi_out_of_tolerance(0.5, ints, np.array([0.25, 0.25, 0.0]), 0.2)
    five = Layout(5)
    params = DetectorParams(threshold=0.2, cpi_run_share=0.0)
    got = five.both([five.point(0)] * 3, params, [0.0, 0.0, 0.25], tol=0.25)
    check(got, status=[M] * 3)
    got = five.both([five.point(0)] * 3, params, [0.0, 0.0, 0.25 + 2 ** -10], tol=0.25)
    check(got, status=[M, M, T])


@pytest.mark.parametrize("probe", [0.35, -0.15])
def test_a_phase_of_one_member_has_exactly_that_members_cpi(probe):
    """The first phase holds one interval (log CPI 0.1); the next, exactly
    the tolerance away on either side, is within it (without candidates, a
    second interval kept out would open a phase of its own)."""
    five = Layout(5)
    params = DetectorParams(threshold=0.2, cpi_run_share=0.0, probation=False)
    got = five.both([five.point(0)] * 2, params, [0.1, probe], tol=abs(probe - 0.1))
    check(got, phase=[0, 0], status=[M, M])


def test_without_a_tolerance_the_cpi_keeps_no_interval_out():
    five = Layout(5)
    prof, counts = five.arrays([five.point(0)] * 3)
    cpis = np.array([0.0, 0.0, 2.0])
    params = DetectorParams(threshold=0.2)
    got = classify(prof, counts, five.bounds, five.kinds, five.used,
                   ClassifierState(5, 1, params), cpis)
    want = classify_reference(prof, counts, five.bounds, five.kinds, five.used, params, cpis)
    check([got, want], phase=[0, 0, 0], status=[M] * 3)


def test_a_known_phase_without_a_cpi_takes_its_first_members_exactly():
    """A known phase given without CPI fields has no member with a known CPI:
    an interval far from 0 in CPI is not kept out, and the phase's CPI is
    then that one member's, with no scatter."""
    five = Layout(5)
    params = DetectorParams(threshold=0.2, cpi_run_share=0.0)
    state = ClassifierState(5, 1, params)
    state.seed([KnownPhase(4, five.point(0)[0], np.array([3]), np.array([30.0]), 3)], next_id=0)
    got = five.kernel([five.point(0)], params, [0.1], tol=0.05, state=state)
    assert got.phase.tolist() == [4] and got.status.tolist() == [M]
    (known,) = state.known()
    assert (known.cpi_n, known.log_cpi, known.cpi_last, known.cpi_d2) == (1, 0.1, 0.1, 0.0)


# -- merging, retiring and reseeding slots ---------------------------------

def table(rows, width=4, segments=2):
    return (np.zeros((rows, width)), np.zeros((rows, segments), np.int64),
            np.zeros((rows, segments)), np.zeros((rows, 5), np.int64), np.zeros((rows, 3)))


def test_a_merge_folds_every_segment_the_other_phase_has_and_a_single_cpi_member():
    centroids, members, mean_samples, slots, cpi = table(2)
    centroids[0], centroids[1] = [0.0, 0.0, 1.0, 0.0], [0.0, 0.0, 0.0, 1.0]
    members[0], members[1] = [2, 1], [0, 3]         # the other has nothing in the first segment
    mean_samples[0], mean_samples[1] = [10.0, 20.0], [0.0, 40.0]
    slots[0] = [0, 5, PHASE, 2, 3]
    slots[1] = [1, 6, PHASE, 1, 3]
    cpi[0], cpi[1] = [0.0, 0.0, 0.0], [0.3, 0.3, 0.0]
    _merge_into(0, 1, centroids, members, mean_samples, slots, cpi, np.array([0, 2, 4]), 16)
    # second segment 1 : 3, so the other side weighs 3/4
    assert np.allclose(centroids[0], [0.0, 0.0, 0.25, 0.75])
    assert members[0].tolist() == [2, 4] and np.allclose(mean_samples[0], [10.0, 35.0])
    # CPI: 2 members at 0 and 1 at 0.3
    assert math.isclose(cpi[0, LOG_CPI], 0.1) and slots[0, CPI_N] == 3


def test_the_slot_used_least_recently_is_the_lowest_of_those_used_as_long_ago():
    slots = np.zeros((3, 5), np.int64)
    slots[:, KIND] = [PHASE, PHASE, PHASE]
    slots[:, USED_AT] = [4, 2, 2]
    assert _oldest(slots, 3, PHASE) == 1


def test_a_phase_in_a_retired_phases_slot_holds_only_its_own_members():
    """At most one phase, no candidates: the second profile (samples in the
    first segment only) retires the first (both segments) and takes its
    slot, which it finds empty."""
    lay = Layout(5, segments=2)
    a, b = lay.interval((0, 0), (1, 2)), lay.interval((0, 4))
    params = DetectorParams(threshold=0.2, max_phases=1, probation=False)
    state = ClassifierState(10, 2, params)
    got = lay.kernel([a, a, b, b], params, state=state)
    assert got.phase.tolist() == [0, 0, 1, 1] and state.retired == 1
    (known,) = state.known()
    assert known.centroid.tolist() == lay.interval((0, 4))[0].tolist()
    assert known.members.tolist() == [2, 0] and known.mean_samples.tolist() == [30.0, 0.0]


def test_the_first_phase_after_a_start_up_interval_holds_only_the_second_ones_profile():
    lay = Layout(5, segments=2)
    a, b = lay.interval((0, 0), (1, 2)), lay.interval((0, 4))
    params = DetectorParams(threshold=0.2)
    state = ClassifierState(10, 2, params)
    got = lay.kernel([a, b, b], params, [0.9, 0.2, 0.2], state=state)
    assert got.phase.tolist() == [0, 0, 0] and got.status.tolist() == [M] * 3
    (known,) = state.known()
    assert known.centroid.tolist() == lay.interval((0, 4))[0].tolist()
    assert known.members.tolist() == [2, 0] and known.mean_samples.tolist() == [30.0, 0.0]
    assert (known.cpi_n, known.log_cpi, known.cpi_d2, known.joins) == (2, 0.2, 0.0, 2)


# -- merges at powers of two, then every 16 joins --------------------------

def test_twins_are_merged_when_joins_reach_48_not_before():
    """Memory 1: a centroid is its last member.  Phase 0 at bin 0 of the
    second segment (21 bins, nothing in the first); phase 1 at bin 6, 0.3
    away, joined 45 times (the interval that opened its candidate is not a
    join), then at bin 4, 0.2 from phase 0: the threshold, so twins, but
    joins 46 and 47 are no check; at 48 (a multiple of 16) phase 1 merges
    into phase 0, the older.  Its centroid is then half bin 0, half bin 4:
    the next interval at bin 4 is 0.1 from it; at 64 joins it is checked
    again (no twin left)."""
    lay = Layout(21, segments=2)
    b, p0, p1 = lay.interval((1, 0)), lay.interval((1, 6)), lay.interval((1, 4))
    ivs = [b, b] + [p0] * 46 + [p1] * 17
    params = DetectorParams(threshold=0.2, memory=1, merge_share=1.0)
    state = ClassifierState(42, 2, params, capacity=2)
    got = [lay.kernel(ivs, params, state=state), lay.reference(ivs, params)]
    check(got, phase=[0, 0] + [1] * 48 + [0] * 15, status=[M] * 65,
          distance=[np.nan, 0, 0.3] + [0] * 45 + [0.1, 0, 0, 0.1] + [0] * 13)
    assert state.merged == 1 and state.retired == 1 and state.live == 1
    (known,) = state.known()
    assert known.joins == 2 + 48 + 14


def test_a_ninth_candidate_takes_the_oldest_ones_place():
    """Nine intervals each in a segment of its own open nine candidates: the
    ninth takes the first one's place.  An interval 0.125 from the first
    then finds no candidate to wait on, opens its own (the second gives way),
    and the next interval like it confirms that one, at distance 0."""
    lay = Layout(9, segments=10)
    a = lay.interval((0, 0))
    alone = [lay.interval((s, 0)) for s in range(1, 10)]
    x = lay.interval((1, 1))
    got = lay.both([a, a, *alone, x, x], DetectorParams(threshold=0.25))
    check(got, phase=[0] * 11 + [1, 1], status=[M, M] + [T] * 9 + [M, M],
          new=[True] + [False] * 10 + [True, False], distance=[np.nan, 0] + [1] * 10 + [0])


# -- a state seeded with known phases --------------------------------------

def test_a_known_phase_in_the_tables_last_slot_is_no_previous_phase():
    """One known phase (id 0, one join) fills a table of one slot.  An
    interval without data before any other has no phase (-1); an interval
    unlike it is tentative, not a start-up transient (the known phase keeps
    its profile, and the next interval like it takes it); the run's spread of
    CPI does not count the first interval with data."""
    five = Layout(5)
    params = DetectorParams(threshold=0.2, max_phases=2)
    state = ClassifierState(5, 1, params, capacity=1)
    state.seed([KnownPhase(0, five.point(0)[0], np.array([4]), np.array([30.0]), 1)], next_id=0)
    empty = (np.zeros(5), np.zeros(1, np.int64))
    got = five.kernel([empty, five.point(4), five.point(0)], params, [np.nan, 0.3, np.nan],
                      tol=0.05, state=state)
    check([got], phase=[-1, 0, 0], status=[N, T, M], distance=[np.nan, 1, 0])
    assert state.threshold[RUN_N] == 0


def test_the_candidate_just_opened_in_the_first_slot_is_confirmed():
    """Two known phases alike, the first (id 7) never joined, the second
    (id 3) joined 3 times: an interval like them takes the first (the lower
    slot), whose joins reach 1, a power of two: it merges into the older
    id, 3, and the first slot is free.  E (third segment) waits in the third
    slot; D (second segment) then opens a candidate in the first slot.  y is
    0.05 from phase 3 (first segment), 0.025 from D (second segment) and 0
    from E (third): D's candidate, opened just before and nearer than the
    phase, is confirmed as phase 8, not E's."""
    lay = Layout(21, segments=3)
    p = lay.interval((0, 0))
    params = DetectorParams(threshold=0.2, max_phases=4, merge_share=0.01)
    state = ClassifierState(63, 3, params)
    state.seed([KnownPhase(7, p[0], np.array([3, 0, 0]), np.array([30.0, 0, 0]), 0),
                KnownPhase(3, p[0], np.array([3, 0, 0]), np.array([30.0, 0, 0]), 3)],
               next_id=0)
    e, d = lay.interval((2, 10)), lay.interval((1, 10))
    y = lay.interval((0, 1), (1, {10: 0.5, 11: 0.5}), (2, 10))
    got = lay.kernel([e, p, d, y], params, state=state)
    check([got], phase=[7, 3, 8, 8], status=[T, M, M, M], new=[False, False, True, False],
          distance=[1, 0, 1, 0.025])
    assert state.merged == 1 and state.ids.tolist() == [8, 3, -1]


def test_the_candidate_just_opened_in_the_first_slot_is_confirmed_without_known_phases():
    """Memory 1, at most two phases, twins within half the threshold (0.1).
    A (bin 20) and B (bin 0) are phases 0 and 1; C (bin 8) retires A, the
    phase used least recently, and takes its slot, the first, as phase 2.
    C drifts to bin 1 and, at 8 joins (its candidate's first interval is
    not one), 0.05 from B, merges into it: the first
    slot is free, and B's centroid is half bin 0, half bin 1.  Meanwhile E
    (third segment) waits.  D (second segment) opens a candidate in the
    first slot; y is 0.125 from B, 0.05 from D and 0 from E: D's candidate,
    opened just before, is confirmed as phase 3, not E's."""
    lay = Layout(21, segments=3)
    s0 = [lay.interval((0, b)) for b in range(21)]
    e, d = lay.interval((2, 10)), lay.interval((1, 10))
    y = lay.interval((0, 3), (1, 11), (2, 10))
    ivs = [s0[20], s0[20], s0[0], s0[0], s0[8], s0[8], s0[6], s0[4], s0[3], e,
           s0[2], s0[1], s0[1], s0[1], d, y]
    params = DetectorParams(threshold=0.2, memory=1, max_phases=2, merge_share=0.5)
    got = lay.both(ivs, params)
    check(got, phase=[0, 0, 1, 1, 2, 2, 2, 2, 2, 2, 2, 2, 2, 1, 3, 3],
          status=[M] * 9 + [T] + [M] * 6,
          distance=[np.nan, 0, 1, 0, 0.4, 0, 0.1, 0.1, 0.05, 1, 0.05, 0.05, 0, 0, 1, 0.05])


def test_a_candidate_nearer_than_the_previous_phase_in_the_first_slot_wins():
    """P (bin 0, the first slot) and Q (bin 6) are phases; back in P, F
    (second segment) opens a candidate.  y is 0.1625 from P and 0.1375 from
    Q (nearer by less than the margin: it would stay in P) and 0.15 from F,
    nearer than P: F's candidate is confirmed, as phase 2."""
    lay = Layout(21, segments=2)
    p, q, f = lay.interval((0, 0)), lay.interval((0, 6)), lay.interval((1, 0))
    y = lay.interval((0, {3: 0.75, 4: 0.25}), (1, 3))
    got = lay.both([p, p, q, q, p, f, y], DetectorParams(threshold=0.2, merge_share=0.5))
    check(got, phase=[0, 0, 1, 1, 0, 2, 2], status=[M] * 7,
          new=[True, False, True, False, False, True, False],
          distance=[np.nan, 0, 0.3, 0, 0, 1, 0.15])


# -- a candidate that turns out to be a known phase ------------------------

TWENTY = Layout(21)         # bins between over 20
FOLD = DetectorParams(threshold=0.2, merge_share=2.0, cpi_run_share=0.0)


def test_a_candidate_without_a_cpi_within_twice_the_threshold_folds_into_the_phase():
    """Twins within merge_share 2 of the threshold: the candidate at bin 16
    is 0.3 from the phase at bin 10, beyond the threshold but within 0.4, so
    the interval that confirms it joins phase 0 instead: no new id, and the
    interval that opened it stays tentative.  A candidate without a known
    CPI is not kept out by the phase's."""
    p, x = TWENTY.point(10), TWENTY.point(16)
    got = TWENTY.both([p, p, x, x], FOLD, [0.5, 0.5, np.nan, np.nan], tol=0.05)
    check(got, phase=[0, 0, 0, 0], status=[M, M, T, M], new=[True, False, False, False],
          distance=[np.nan, 0, 0.3, 0])


@pytest.mark.parametrize("candidate_cpi, probe, mean", [
    ([0.04, np.nan], 0.061, 0.04 / 3),      # 2 members at 0 and 1 at 0.04
    ([0.04, 0.04], 0.066, 0.02),            # 2 at 0 and 2 at 0.04
])
def test_a_folded_candidate_brings_its_members_cpi(candidate_cpi, probe, mean):
    """After the fold the phase's mean log CPI weighs each side by its
    members with a CPI; no scatter, so the band is the tolerance, 0.05.  An
    interval at bin 10 (0.15 from the merged centroid, half bin 10, half bin
    16) whose CPI is within 0.05 of that mean joins."""
    assert abs(probe - mean) < 0.05 < abs(probe)
    p, x = TWENTY.point(10), TWENTY.point(16)
    got = TWENTY.both([p, p, x, x, p], FOLD, [0.0, 0.0, *candidate_cpi, probe], tol=0.05)
    check(got, phase=[0] * 5, status=[M, M, T, M, M], distance=[np.nan, 0, 0.3, 0, 0.15])


def test_a_new_phase_beyond_the_low_slots_takes_the_retired_phases_slot():
    """At most three phases: A (bin 0) in slot 0, B (bin 6) in slot 1, X
    (second segment) in slot 2; A is used again, so B is used least
    recently.  C (bin 20, 0.7 from B) retires B and, its candidate being in slot 3,
    moves to slot 1, B's, behind A.  An interval at bin 10, 0.5 from both A
    and C, is tentative and labelled with the phase in the lower slot, A."""
    lay = Layout(21, segments=2)
    a, b, c, p = (lay.interval((0, k)) for k in (0, 6, 20, 10))
    x = lay.interval((1, 0))
    ivs, params = [a, a, b, b, x, x, a, c, c, p], DetectorParams(threshold=0.2, max_phases=3)
    state = ClassifierState(42, 2, params)
    got = [lay.kernel(ivs, params, state=state), lay.reference(ivs, params)]
    check(got, phase=[0, 0, 1, 1, 2, 2, 0, 3, 3, 0], status=[M] * 9 + [T],
          distance=[np.nan, 0, 0.3, 0, 1, 0, 0, 0.7, 0, 0.5])
    assert state.ids.tolist() == [0, 3, 2, -1] and state.retired == 1
