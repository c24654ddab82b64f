"""The classifier's rules one at a time, each against numbers worked by hand
from its docstring or docs/detectors.md: the CPI gate and band, the band
fitted to the run, a merge of two phases, the slot used least recently, a
phase kept among the low slots, and a state seeded from known phases."""

import math

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from phasewatch.core.classify import (CANDIDATE, FREE, MATCHED, PHASE, ClassifierState, KnownPhase,
                                      classify, classify_reference,
                                      _low_slot, _merge_into, _oldest, cpi_out_of_tolerance,
                                      detector_settings, initial_threshold, run_tolerance)
from phasewatch.core.params import DetectorParams
from test_classify import BOUNDS, SEGMENT_KINDS, random_profiles

# slot columns: id, interval last used, kind, members with a known CPI, joins
ID, USED_AT, KIND, CPI_N, JOINS = range(5)
# float slot columns: mean log CPI, the last member's, squared successive differences
LOG_CPI, CPI_LAST, CPI_D2 = range(3)
# threshold state: ..., then the run's log CPI count, mean, sum of squared deviations
RUN_N, RUN_MEAN, RUN_M2 = 4, 5, 6


def slot(cpi_n=0, log_cpi=0.0, d2=0.0):
    ints = np.array([0, 0, PHASE, cpi_n, 0], np.int64)
    return ints, np.array([log_cpi, log_cpi, d2])


def test_a_phase_without_a_known_cpi_gates_nothing():
    ints, floats = slot(cpi_n=0, log_cpi=0.0)
    assert not cpi_out_of_tolerance(1.0, ints, floats, 0.05)
    assert not cpi_out_of_tolerance(-1.0, ints, floats, 0.05)


def test_the_cpi_gate_needs_a_tolerance_and_a_known_cpi():
    ints, floats = slot(cpi_n=1, log_cpi=0.0)
    assert cpi_out_of_tolerance(0.06, ints, floats, 0.05)
    assert not cpi_out_of_tolerance(0.04, ints, floats, 0.05)
    assert not cpi_out_of_tolerance(0.06, ints, floats, 0.0)        # 0 turns it off
    assert not cpi_out_of_tolerance(float("nan"), ints, floats, 0.05)


def test_the_band_widens_to_four_standard_deviations_of_the_members_scatter():
    # 3 members, squared successive differences 0.02: variance 0.02 / (2 * 2),
    # four standard deviations 4 * sqrt(0.005) = 0.2828
    ints, floats = slot(cpi_n=3, log_cpi=1.0, d2=0.02)
    assert not cpi_out_of_tolerance(1.0 + 0.28, ints, floats, 0.05)
    assert cpi_out_of_tolerance(1.0 - 0.29, ints, floats, 0.05)
    # a tolerance wider than the scatter is the band
    assert not cpi_out_of_tolerance(1.0 + 0.35, ints, floats, 0.4)


def run_state(n, m2):
    thr = initial_threshold(DetectorParams())
    thr[RUN_N], thr[RUN_MEAN], thr[RUN_M2] = n, 0.0, m2
    return thr


@pytest.mark.parametrize("n, m2, share, floor, tolerance, expected", [
    (10, 0.004, 1.0, 0.01, 0.05, 0.02),     # standard deviation sqrt(0.004 / 10) = 0.02
    (10, 0.004, 0.5, 0.005, 0.05, 0.01),    # half of it
    (10, 0.004, 1.0, 0.03, 0.05, 0.03),     # not below the floor
    (10, 0.004, 1.0, 0.01, 0.015, 0.015),   # nor above the tolerance
    (7, 0.004, 1.0, 0.01, 0.05, 0.05),      # before eight intervals have a CPI
    (8, 0.0032, 1.0, 0.01, 0.05, 0.02),     # from the eighth
    (10, 0.004, 0.0, 0.01, 0.05, 0.05),     # share 0: the tolerance as given
    (10, 0.004, 1.0, 0.01, 0.0, 0.0),       # tolerance 0: off
])
def test_the_band_fitted_to_the_runs_spread(n, m2, share, floor, tolerance, expected):
    settings = detector_settings(DetectorParams(cpi_run_share=share, cpi_floor=floor))
    assert math.isclose(run_tolerance(tolerance, run_state(n, m2), settings), expected)


def table(rows, width=4, segments=2):
    return (np.zeros((rows, width)), np.zeros((rows, segments), np.int64),
            np.zeros((rows, segments)), np.zeros((rows, 5), np.int64), np.zeros((rows, 3)))


def test_a_merge_weighs_each_side_by_its_members():
    centroids, members, mean_samples, slots, cpi = table(2)
    bounds = np.array([0, 2, 4])
    centroids[0], centroids[1] = [1.0, 0.0, 0.5, 0.5], [0.0, 1.0, 1.0, 0.0]
    members[0], members[1] = [3, 2], [1, 0]          # the second segment: nothing to merge
    mean_samples[0], mean_samples[1] = [10.0, 20.0], [30.0, 99.0]
    slots[0] = [5, 7, PHASE, 2, 4]
    slots[1] = [6, 9, PHASE, 2, 3]
    cpi[0], cpi[1] = [0.0, 0.1, 0.5], [1.0, 1.2, 0.25]
    _merge_into(0, 1, centroids, members, mean_samples, slots, cpi, bounds, 16)
    # first segment 3 : 1, so the second side weighs 1/4; the second segment unchanged
    assert np.allclose(centroids[0], [0.75, 0.25, 0.5, 0.5])
    assert members[0].tolist() == [4, 2] and np.allclose(mean_samples[0], [15.0, 20.0])
    # CPI: 2 members each, mean halfway; squared differences add up
    assert math.isclose(cpi[0, LOG_CPI], 0.5) and math.isclose(cpi[0, CPI_D2], 0.75)
    assert slots[0, CPI_N] == 4 and slots[0, JOINS] == 7 and slots[0, USED_AT] == 9
    assert slots[0, ID] == 5


def test_a_merge_of_a_phase_without_cpi_keeps_the_cpi_and_caps_members():
    centroids, members, mean_samples, slots, cpi = table(2)
    bounds = np.array([0, 2, 4])
    members[0], members[1] = [3, 3], [3, 3]
    slots[0] = [0, 9, PHASE, 2, 1]
    slots[1] = [1, 4, PHASE, 0, 1]
    cpi[0], cpi[1] = [0.3, 0.3, 0.1], [5.0, 5.0, 5.0]
    _merge_into(0, 1, centroids, members, mean_samples, slots, cpi, bounds, 4)
    assert members[0].tolist() == [4, 4]
    assert cpi[0].tolist() == [0.3, 0.3, 0.1] and slots[0, CPI_N] == 2
    assert slots[0, USED_AT] == 9


def test_the_slot_used_least_recently_and_none():
    slots = np.zeros((4, 5), np.int64)
    slots[:, KIND] = [PHASE, CANDIDATE, PHASE, PHASE]
    slots[:, USED_AT] = [5, 1, 3, 4]
    assert _oldest(slots, 4, PHASE) == 2
    assert _oldest(slots, 2, PHASE) == 0
    assert _oldest(slots, 4, CANDIDATE) == 1
    assert _oldest(slots, 4, FREE) == -1


def test_a_phase_beyond_the_low_slots_moves_to_the_first_without_a_phase():
    centroids, members, mean_samples, slots, cpi = table(4)
    slots[:, KIND] = [PHASE, CANDIDATE, PHASE, CANDIDATE]
    slots[:, ID] = [0, -1, 1, -1]
    centroids[2] = 7.0
    counters = np.zeros(9, np.int64)
    counters[5] = 2                                      # the previous phase's slot
    assert _low_slot(2, 2, centroids, members, mean_samples, slots, cpi, counters) == 1
    assert slots[1, ID] == 1 and slots[1, KIND] == PHASE and (centroids[1] == 7.0).all()
    assert slots[2, KIND] == CANDIDATE and counters[5] == 1
    # within the low slots it stays
    assert _low_slot(1, 2, centroids, members, mean_samples, slots, cpi, counters) == 1


def known(i, width=8):
    centroid = np.zeros(width)
    centroid[i % width] = 1.0
    return KnownPhase(i, centroid, np.array([4, 4]), np.array([30.0, 30.0]), 4)


@pytest.mark.parametrize("max_phases, given, kept", [(6, 5, 3), (7, 5, 3), (1, 2, 1), (2, 2, 1)])
def test_seeding_keeps_at_most_half_of_max_phases_and_at_least_one(max_phases, given, kept):
    state = ClassifierState(8, 2, DetectorParams(max_phases=max_phases), capacity=1)
    state.seed([known(10 + i) for i in range(given)], next_id=3)
    assert [p.id for p in state.known()] == [10 + i for i in range(kept)]
    assert state.live == kept and state.next_id == 10 + kept


def test_known_phases_by_id():
    state = ClassifierState(8, 2, DetectorParams(), capacity=2)
    state.seed([known(4), known(2), known(9)], next_id=0)
    assert [p.id for p in state.known()] == [4, 2, 9]
    assert [p.id for p in state.known({9, 4})] == [4, 9]
    assert state.known(set()) == []
    assert state.next_id == 10


def test_seeding_is_refused_after_an_interval_or_a_first_seeding():
    state = ClassifierState(8, 2, DetectorParams(), capacity=2)
    state.seed([known(1)], next_id=0)
    with pytest.raises(ValueError, match="before the first interval"):
        state.seed([known(2)], next_id=0)
    state = ClassifierState(8, 2, DetectorParams(), capacity=2)
    classify(np.array([dyadic(1.0)]), np.full((1, 2), 30), np.array([0, 4, 8]), KINDS2,
             np.array([True, True]), state)
    with pytest.raises(ValueError, match="before the first interval"):
        state.seed([known(2)], next_id=0)


KINDS2 = np.array([0, 0], np.int64)      # two value segments


def dyadic(*weights):
    x = np.zeros(8)
    x[:len(weights)] = weights
    return x


def test_a_slot_holding_no_phase_has_id_minus_one():
    # a phase, then an interval unlike it: a candidate waits in the next slot
    a, b = dyadic(1.0), dyadic(0, 0, 0, 1.0)
    state = ClassifierState(8, 2, DetectorParams(threshold=0.2), capacity=4)
    classify(np.array([a, a, b]), np.full((3, 2), 30), np.array([0, 4, 8]), KINDS2,
             np.array([True, False]), state)
    assert state.ids.tolist() == [0, -1]


@pytest.mark.parametrize("probation", [True, False])
def test_a_distance_equal_to_the_threshold_is_within_it(probation):
    # voltage segment alone, 4 ordered bins: the cumulative differences of a
    # against b are 1/2, 1/2, 1/2, 0, over 3: exactly 1/2
    a, b = dyadic(1.0), dyadic(0.5, 0, 0, 0.5)
    prof = np.array([a, a, b, b, a])
    counts = np.full((5, 2), 30)
    params = DetectorParams(threshold=0.5, probation=probation)
    used = np.array([True, False])
    got = classify(prof, counts, np.array([0, 4, 8]), KINDS2, used, ClassifierState(8, 2, params))
    want = classify_reference(prof, counts, np.array([0, 4, 8]), KINDS2, used, params)
    assert got.phase.tolist() == want.phase.tolist() == [0, 0, 0, 0, 0]
    assert got.distance[2] == want.distance[2] == 0.5


def test_the_three_statuses_are_told_apart():
    from phasewatch.core.classify import MATCHED, NO_DATA, TENTATIVE
    assert len({MATCHED, NO_DATA, TENTATIVE}) == 3


def across_calls(threshold, *calls):
    """classify() over each call's intervals in turn on one state: the
    statuses and, after each call, ``relabel``."""
    state = ClassifierState(8, 2, DetectorParams(threshold=threshold), capacity=4)
    statuses, relabels = [], []
    for prof in calls:
        got = classify(np.array(prof), np.full((len(prof), 2), 30), np.array([0, 4, 8]), KINDS2,
                       np.array([True, False]), state)
        statuses.append(got.status.tolist())
        relabels.append(state.relabel)
    return statuses, relabels


def test_relabel_names_the_phase_the_last_call_left_tentative_and_is_minus_one_otherwise():
    from phasewatch.core.classify import MATCHED, TENTATIVE
    # 4 ordered bins: a against b 3/3 = 1; c against b (1/2 + 1/2)/3 = 1/3,
    # c against a (1 + 1/2 + 1/2)/3 = 2/3
    a, b, c = dyadic(1.0), dyadic(0, 0, 0, 1.0), dyadic(0, 0.5, 0, 0.5)
    statuses, relabels = across_calls(0.4, [a, a, b], [c], [c], [a])
    assert statuses == [[MATCHED, MATCHED, TENTATIVE], [MATCHED], [MATCHED], [MATCHED]]
    assert relabels == [-1, 1, -1, -1]


@pytest.mark.parametrize("probation", [True, False])
def test_a_distance_to_a_candidate_equal_to_the_threshold_is_within_it(probation):
    a, b, c = dyadic(1.0), dyadic(0, 0, 0, 1.0), dyadic(0, 0.5, 0, 0.5)
    prof, counts = np.array([a, a, b, c]), np.full((4, 2), 30)
    params = DetectorParams(threshold=1 / 3, probation=probation)
    used = np.array([True, False])
    got = classify(prof, counts, np.array([0, 4, 8]), KINDS2, used, ClassifierState(8, 2, params))
    want = classify_reference(prof, counts, np.array([0, 4, 8]), KINDS2, used, params)
    assert got.phase.tolist() == want.phase.tolist() == [0, 0, 1, 1]
    assert got.new_phase.tolist() == want.new_phase.tolist() == [True, False, True, False]


def twins(cpi_n, log_cpi, tol, distance_share=1.0):
    """Phase 0 (whose twin is sought) and phase 1, the same profile, with
    phase 1's CPI as given; returns _twin's answer."""
    from phasewatch.core.classify import _twin
    centroids, members, mean_samples, slots, cpi = table(2)
    centroids[:, 0] = 1.0
    members[:] = 4
    mean_samples[:] = 30.0
    slots[0] = [0, 1, PHASE, 0, 4]                       # no CPI known
    slots[1] = [1, 2, PHASE, cpi_n, 4]
    cpi[1] = [log_cpi, log_cpi, 0.0]
    counters = np.zeros(9, np.int64)
    counters[4] = 2                                      # slots in use
    settings = detector_settings(DetectorParams(merge_share=distance_share))
    return _twin(0, 0.1, settings, centroids, members, mean_samples, slots, cpi, counters,
                 np.array([0, 2, 4]), KINDS2, np.array([True, False]), tol)


def test_a_phase_without_a_known_cpi_merges_whatever_the_others_cpi():
    assert twins(cpi_n=3, log_cpi=1.0, tol=0.05) == 1
    assert twins(cpi_n=0, log_cpi=0.0, tol=0.05) == 1
    assert twins(cpi_n=3, log_cpi=1.0, tol=0.0) == 1


@settings(max_examples=60)
@given(st.integers(0, 2**32 - 1), st.integers(1, 150), st.floats(0.05, 0.5), st.booleans(),
       st.sampled_from([1, 2, 3, 256]), st.booleans(), st.sampled_from([1, 4, 16]),
       st.sampled_from([0.0, 0.02, 0.1, 0.5]), st.sampled_from([0.0, 0.5, 1.0]),
       st.sampled_from([0.005, 0.05]), st.sampled_from([0.5, 1.0, 1.5]),
       st.lists(st.integers(1, 40), max_size=4))
def test_the_kernel_in_pieces_matches_the_reference_with_cpi_and_every_rule(
        seed, n, threshold, adaptive, max_phases, probation, memory, tolerance, run_share,
        floor, merge, cuts):
    """The reference over all intervals at once against the kernel over them
    in pieces (a tentative interval at the end of a piece takes the phase the
    next piece's ``relabel`` names, as the pipeline does), the CPI band, its
    fit to the run and merging of twins on."""
    rng = np.random.default_rng(seed)
    prof, counts, pick = random_profiles(rng, n, centres=3)
    log_cpi = np.array([-0.5, 0.0, 0.4])[pick] + rng.normal(0, 0.02, n)
    log_cpi[rng.random(n) < 0.2] = np.nan
    params = DetectorParams(threshold=threshold, adaptive=adaptive, max_phases=max_phases,
                            probation=probation, memory=memory, cpi_run_share=run_share,
                            cpi_floor=floor, merge_share=merge)
    used = np.array([True, True, True])
    want = classify_reference(prof, counts, BOUNDS, SEGMENT_KINDS, used, params, log_cpi,
                              tolerance)
    state = ClassifierState(32, 3, params, capacity=2)
    edges = sorted({0, n, *(c % n for c in cuts)})
    phase, new, status = [], [], []
    for a, b in zip(edges, edges[1:]):
        got = classify(prof[a:b], counts[a:b], BOUNDS, SEGMENT_KINDS, used, state, log_cpi[a:b],
                       tolerance)
        if state.relabel >= 0:
            phase[-1], new[-1], status[-1] = state.relabel, True, MATCHED
        phase += got.phase.tolist()
        new += got.new_phase.tolist()
        status += got.status.tolist()
    assert phase == want.phase.tolist()
    assert new == want.new_phase.tolist()
    assert status == want.status.tolist()


def test_phases_opened_count_only_this_runs():
    a, b = dyadic(1.0), dyadic(0, 0, 0, 1.0)
    state = ClassifierState(8, 2, DetectorParams(threshold=0.2), capacity=4)
    state.seed([known(4)], next_id=10)           # known(4): a profile unlike a and b
    classify(np.array([a, a, b, b]), np.full((4, 2), 30), np.array([0, 4, 8]), KINDS2,
             np.array([True, False]), state)
    assert state.ids.tolist() == [4, 10, 11] and state.n_phases == 2


def test_the_table_holds_the_live_phases_and_eight_candidates_at_most():
    """docs/detectors.md: at most max_phases live, and at most 8 candidates wait."""
    for max_phases in (1, 2, 256):
        state = ClassifierState(8, 2, DetectorParams(max_phases=max_phases), capacity=10_000)
        assert len(state.centroids) == state.limit == max_phases + 8


def test_a_candidate_confirmed_by_the_second_interval_of_a_call_takes_the_first_with_it():
    from phasewatch.core.classify import MATCHED
    a, b, c = dyadic(1.0), dyadic(0, 0, 0, 1.0), dyadic(0, 0.5, 0, 0.5)
    statuses, relabels = across_calls(0.4, [a, a], [b, c])
    assert statuses == [[MATCHED, MATCHED], [MATCHED, MATCHED]] and relabels == [-1, -1]


def test_the_reference_gives_intervals_without_data_before_the_first_phase_minus_one():
    a = dyadic(1.0)
    prof = np.array([np.zeros(8), a, a])
    counts = np.array([[0, 0], [30, 30], [30, 30]])
    want = classify_reference(prof, counts, np.array([0, 4, 8]), KINDS2, np.array([True, False]),
                              DetectorParams())
    assert want.phase.tolist() == [-1, 0, 0]
