"""Leader-follower classification held to its plain-Python reference."""

import numpy as np
from hypothesis import given, settings, strategies as st

from phasewatch.core.classify import (MATCHED, NO_DATA, TENTATIVE, ClassifierState, classify,
                                      classify_reference)
from phasewatch.core.intervals import SEGMENT_KINDS as ALL_KINDS

SEGMENT_KINDS = ALL_KINDS[:3]     # voltage, pfreq, ip: the profiles these tests build
from phasewatch.core.params import DetectorParams

BOUNDS = np.array([0, 8, 24, 32])


def random_profiles(rng, n, centres=4, noise=0.05):
    base = rng.dirichlet(np.ones(32), size=centres)
    pick = rng.integers(0, centres, n)
    prof = np.abs(base[pick] + rng.normal(0, noise / 32, (n, 32)))
    counts = rng.integers(0, 40, (n, 3))
    for s in range(3):
        seg = prof[:, BOUNDS[s]:BOUNDS[s + 1]]
        seg /= seg.sum(axis=1, keepdims=True)
        seg[counts[:, s] == 0] = 0.0
    return prof, counts, pick


@settings(max_examples=80)
@given(st.integers(0, 2**32 - 1), st.integers(1, 300), st.floats(0.02, 0.6),
       st.booleans(), st.sampled_from([(True, True, False), (True, True, True), (False, False, True)]),
       st.sampled_from([1, 2, 3, 256]), st.booleans(), st.sampled_from([1, 4, 16]))
def test_kernel_matches_reference(seed, n, threshold, adaptive, used, max_phases, probation,
                                  memory):
    rng = np.random.default_rng(seed)
    prof, counts, _ = random_profiles(rng, n)
    params = DetectorParams(threshold=threshold, adaptive=adaptive, max_phases=max_phases,
                            probation=probation, memory=memory)
    used = np.array(used)
    state = ClassifierState(32, 3, params, capacity=2)
    phase, dist, new, status = classify(prof, counts, BOUNDS, SEGMENT_KINDS, used, state)
    r_phase, r_dist, r_new, r_status = classify_reference(prof, counts, BOUNDS, SEGMENT_KINDS,
                                                          used, params)
    assert np.array_equal(phase, r_phase)
    assert np.array_equal(new, r_new)
    assert np.array_equal(status, r_status)
    assert np.allclose(dist, r_dist, equal_nan=True, atol=1e-9)
    assert state.n_phases == max(r_phase.max() + 1, 0)


def test_first_interval_opens_phase_zero_with_no_distance():
    prof, counts, _ = random_profiles(np.random.default_rng(1), 1)
    counts[:] = 10
    phase, dist, new, _ = classify(prof, counts, BOUNDS, SEGMENT_KINDS, np.array([True] * 3),
                                ClassifierState(32, 3, DetectorParams()))
    assert phase[0] == 0 and new[0] and np.isnan(dist[0])


def two_profiles():
    a, b = np.zeros(32), np.zeros(32)
    a[[0, 8, 24]] = 1.0
    b[[7, 23, 31]] = 1.0
    return a, b


def test_returns_to_an_earlier_phase():
    a, b = two_profiles()
    prof = np.array([a, a, b, b, a])
    counts = np.full((5, 3), 30)
    phase, _, new, status = classify(prof, counts, BOUNDS, SEGMENT_KINDS, np.array([True] * 3),
                                     ClassifierState(32, 3, DetectorParams()))
    # b's first interval is tentative until its second confirms the phase; then both take it
    assert list(phase) == [0, 0, 1, 1, 0]
    assert list(status) == [MATCHED] * 5
    assert list(new) == [True, False, True, False, False]


def test_an_interval_seen_once_opens_no_phase():
    a, b = two_profiles()
    prof = np.array([a, a, b, a, a])
    counts = np.full((5, 3), 30)
    state = ClassifierState(32, 3, DetectorParams())
    phase, _, new, status = classify(prof, counts, BOUNDS, SEGMENT_KINDS, np.array([True] * 3),
                                     state)
    assert list(phase) == [0] * 5 and state.n_phases == 1
    assert list(status) == [MATCHED, MATCHED, TENTATIVE, MATCHED, MATCHED]
    # without the candidates (the thesis's rule), it opens a phase of one interval
    phase, *_ = classify(prof, counts, BOUNDS, SEGMENT_KINDS, np.array([True] * 3),
                         ClassifierState(32, 3, DetectorParams(probation=False)))
    assert list(phase) == [0, 0, 1, 0, 0]


def test_recovers_planted_clusters():
    prof, counts, truth = random_profiles(np.random.default_rng(3), 400, noise=0.01)
    counts[:] = 30
    phase, _, _, status = classify(prof, counts, BOUNDS, SEGMENT_KINDS,
                                   np.array([True, True, False]),
                                   ClassifierState(32, 3, DetectorParams(threshold=0.1)))
    matched = status == MATCHED
    matched[0] = False      # taken as a start-up transient: it keeps the id of the phase after it
    for p in np.unique(phase):              # every phase's matched intervals are one cluster
        assert len(np.unique(truth[(phase == p) & matched])) == 1
    assert matched.mean() > 0.9


def test_adaptive_threshold_moves_within_bounds():
    prof, counts, _ = random_profiles(np.random.default_rng(4), 300, centres=2, noise=0.01)
    counts[:] = 30
    params = DetectorParams(threshold=0.25, adaptive=True)
    state = ClassifierState(32, 3, params)
    classify(prof, counts, BOUNDS, SEGMENT_KINDS, np.array([True] * 3), state)
    thr = state.threshold[0]
    assert thr != 0.25
    assert params.adaptive_min <= thr <= params.adaptive_max


def test_least_recently_used_phase_is_retired_beyond_the_cap():
    a, b, c = np.zeros(32), np.zeros(32), np.zeros(32)
    a[[0, 8, 24]] = 1.0
    b[[7, 23, 31]] = 1.0
    c[[3, 15, 28]] = 1.0
    prof = np.array([a, b, a, c, a, b])
    counts = np.full((6, 3), 30)
    state = ClassifierState(32, 3, DetectorParams(max_phases=2, probation=False))
    phase, _, new, _ = classify(prof, counts, BOUNDS, SEGMENT_KINDS, np.array([True] * 3), state)
    # c takes b's slot (b was used least recently); b's return is a new phase, 3
    assert list(phase) == [0, 1, 0, 2, 0, 3]
    assert list(new) == [True, True, False, True, False, True]
    assert state.n_phases == 4 and state.retired == 2


def test_intervals_without_samples_open_no_phase():
    n = 5000
    prof, counts = np.zeros((n, 32)), np.zeros((n, 3), np.int64)
    prof[:2, 0], counts[:2] = 1.0, 30
    state = ClassifierState(32, 3, DetectorParams(max_phases=16))
    phase, dist, new, status = classify(prof, counts, BOUNDS, SEGMENT_KINDS,
                                        np.array([True] * 3), state)
    assert list(phase[:2]) == [0, 0] and (phase[2:] == 0).all()
    assert (status[2:] == NO_DATA).all() and np.isnan(dist[2:]).all() and not new[2:].any()
    assert state.n_phases == 1 and state.retired == 0 and state.live == 1


def test_no_phase_before_the_first_interval_with_data():
    prof, counts = np.zeros((3, 32)), np.zeros((3, 3), np.int64)
    prof[2, 0], counts[2] = 1.0, 30
    phase, _, new, status = classify(prof, counts, BOUNDS, SEGMENT_KINDS, np.array([True] * 3),
                                     ClassifierState(32, 3, DetectorParams()))
    assert list(phase) == [-1, -1, 0] and list(status) == [NO_DATA, NO_DATA, MATCHED]
    assert list(new) == [False, False, True]


def test_log_cpi_where_both_counts_are_known():
    from phasewatch.core.classify import interval_log_cpi
    got = interval_log_cpi(np.array([10, 0, 5, 4]), np.array([1, 7, 0, 8]))
    assert got[0] == np.log(0.1) and got[3] == np.log(2.0)
    assert np.isnan(got[1]) and np.isnan(got[2])
