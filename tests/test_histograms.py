"""Histogram kernels held to their numpy references, and the distances' properties."""

import numpy as np
from hypothesis import given, settings, strategies as st
from hypothesis.extra import numpy as hnp

from phasewatch.core.histograms import (CUMULATIVE_BEYOND_NOISE, cumulative_distance,
                                        cumulative_distance_reference, cumulative_noise_level,
                                        cumulative_noise_level_reference,
                                        expected_total_variation, segment_distance,
                                        segment_distance_reference,
                                        expected_total_variation_reference, fill, fill_reference,
                                        ip_bins, ip_bins_reference, total_variation_distance,
                                        total_variation_distance_reference)

finite = st.floats(min_value=-1e4, max_value=1e4) | st.just(float("nan"))


def histograms(n):
    counts = hnp.arrays(np.float64, n, elements=st.floats(0, 100))
    return counts.filter(lambda h: h.sum() > 0).map(lambda h: h / h.sum())


@given(hnp.arrays(np.float64, st.integers(0, 300), elements=finite),
       st.floats(-100, 100), st.floats(1, 500), st.integers(1, 64))
def test_fill_matches_reference(values, lo, width, nbins):
    h = fill(values, lo, lo + width, nbins)
    assert np.array_equal(h, fill_reference(values, lo, lo + width, nbins))
    assert h.sum() == np.count_nonzero(~np.isnan(values))


def test_fill_puts_outside_values_in_end_bins():
    h = fill(np.array([900.0, 962.0, 1079.9, 1200.0, np.nan]), 962.0, 1080.0, 32)
    assert h[0] == 2 and h[31] == 2 and h.sum() == 4


@given(hnp.arrays(np.uint64, st.integers(0, 200),
                  elements=st.integers(0, 2**64 - 1).map(np.uint64)),
       st.integers(1, 2**40), st.integers(1, 2**30), st.sampled_from([(5, 1), (5, 2), (4, 3)]))
def test_ip_bins_match_reference(ips, lo, span, shape):
    bits, groups = shape
    out = np.empty(len(ips), np.int32)
    ip_bins(ips, np.uint64(lo), np.uint64(lo + span), bits, groups, out)
    ref = ip_bins_reference(ips, lo, lo + span, bits, groups)
    assert np.array_equal(out, ref)
    assert ((out >= -1) & (out < 2**bits)).all()


def test_ip_fold_keeps_regions_apart_and_zero_unknown():
    lo, hi = 0x400000, 0x400000 + (1 << 20)
    ips = np.array([0, lo + 100, lo + 101, lo + (hi - lo) // 2], np.uint64)
    out = np.empty(4, np.int32)
    ip_bins(ips, np.uint64(lo), np.uint64(hi), 5, 2, out)
    assert out[0] == -1
    assert out[1] == out[2]            # the same instruction neighbourhood
    assert out[3] != out[1]            # the middle of .text


@settings(max_examples=200)
@given(st.integers(2, 64).flatmap(lambda n: st.tuples(histograms(n), histograms(n))))
def test_distances_properties_and_references(pair):
    h1, h2 = pair
    for kernel, ref in ((cumulative_distance, cumulative_distance_reference),
                        (total_variation_distance, total_variation_distance_reference)):
        d = kernel(h1, h2)
        assert kernel(h1, h1) == 0.0
        assert abs(d - kernel(h2, h1)) < 1e-12
        assert -1e-12 <= d <= 1.0 + 1e-12
        assert abs(d - ref(h1, h2)) < 1e-9


def test_cumulative_distance_is_one_for_opposite_ends():
    a, b = np.zeros(32), np.zeros(32)
    a[0], b[31] = 1.0, 1.0
    assert cumulative_distance(a, b) == 1.0
    assert total_variation_distance(a, b) == 1.0


def test_cumulative_distance_grows_with_shift():
    base = np.zeros(32)
    base[10] = 1.0
    near, far = np.roll(base, 1), np.roll(base, 8)
    assert cumulative_distance(base, near) < cumulative_distance(base, far)


@given(histograms(32), st.integers(1, 500))
def test_expected_total_variation_matches_reference(h, n):
    assert abs(expected_total_variation(h, n) - expected_total_variation_reference(h, n)) < 1e-9


def test_expected_total_variation_matches_sampling():
    rng = np.random.default_rng(5)
    p = np.array([0.4, 0.3, 0.2, 0.1] + [0.0] * 28)
    n = 200
    tvs = [0.5 * np.abs(rng.multinomial(n, p) / n - p).sum() for _ in range(4000)]
    assert abs(np.mean(tvs) - expected_total_variation(p, n)) < 0.1 * np.mean(tvs)


@given(histograms(32), st.floats(0, 500), st.integers(1, 40))
def test_cumulative_noise_level_matches_reference(h, n, members):
    assert abs(cumulative_noise_level(h, n) - cumulative_noise_level_reference(h, n)) < 1e-9
    x = np.roll(h, 3)
    assert abs(segment_distance(x, 30, h, members, CUMULATIVE_BEYOND_NOISE)
               - segment_distance_reference(x, 30, h, members, CUMULATIVE_BEYOND_NOISE)) < 1e-9


def test_value_noise_allowance_holds_sampling_noise_and_keeps_real_shifts():
    """Intervals of 10 and 30 samples drawn from a phase's own voltage
    histogram: the plain cumulative distance is never 0, the one beyond noise
    almost always is (the level is a bound, at 1 %).  An interval a quarter
    of the range away keeps most of its distance."""
    rng = np.random.default_rng(11)
    h = np.zeros(32)
    h[8:16] = [1, 3, 6, 9, 9, 6, 3, 1]
    h /= h.sum()
    shifted = np.roll(h, 8)
    for n in (10, 30):
        draws = [rng.multinomial(n, h) / n for _ in range(2000)]
        plain = np.array([cumulative_distance(x, h) for x in draws])
        beyond = np.array([segment_distance(x, n, h, 1000, CUMULATIVE_BEYOND_NOISE)
                           for x in draws])
        assert (plain > 0).mean() > 0.99
        assert (beyond > 0).mean() < 0.01
        moved = [segment_distance(rng.multinomial(n, shifted) / n, n, h, 1000,
                                  CUMULATIVE_BEYOND_NOISE) for _ in range(200)]
        assert np.median(moved) > 0.5 * cumulative_distance(shifted, h)


def test_one_bin_holds_all_of_either_histogram_at_distance_zero():
    one = np.array([1.0])
    assert cumulative_distance(one, one) == 0.0
    assert cumulative_distance_reference(one, one) == 0.0
