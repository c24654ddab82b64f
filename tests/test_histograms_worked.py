"""The histogram kernels and their references on small cases worked by hand
from the rules in core/histograms.py's docstrings: the noise levels' values
and their edges (no samples, one bin), the unseen-code level of Good and
Turing at its limits, and the ends of the IP projection."""

from __future__ import annotations

import math

import numpy as np
import pytest
from code_signatures import signature

from phasewatch.core.histograms import (MULTI_RESOLUTION, beyond_noise, code_distance,
                                        cumulative_noise_level, cumulative_noise_level_reference,
                                        ip_bins, ip_bins_reference, multi_resolution_distance,
                                        multi_resolution_distance_reference, noise_level,
                                        noise_level_reference, scaled_noise_level,
                                        segment_distance, segment_distance_reference,
                                        unseen_code_distance, unseen_code_distance_reference,
                                        value_bins)

Z = 2.326                                   # one-sided 1 % of the normal
PER_EDGE = math.sqrt(2 / math.pi) + Z * math.sqrt(1 - 2 / math.pi)


def test_value_bins_marks_nan_with_minus_one_and_clamps_the_rest():
    out = np.zeros(4, np.int32)
    value_bins(np.array([np.nan, 0.6, -3.0, 10.0]), 0.0, 1.0, 4, out)
    assert out.tolist() == [-1, 2, 0, 3]


@pytest.mark.parametrize("bins", [ip_bins, ip_bins_reference])
def test_an_ip_just_below_the_top_of_a_huge_range_stays_in_the_last_entry(bins):
    """Over 2**60 bytes, the offset of the last byte rounds up to the whole
    range in floating point; it still lies inside [lo, hi) and takes the last
    of the 32 entries, as the top end itself does."""
    lo = 4096
    hi = lo + (1 << 60)
    ips = np.array([hi - 1, hi, lo, lo + (1 << 59)], np.uint64)
    if bins is ip_bins:
        out = np.empty(len(ips), np.int32)
        ip_bins(ips, np.uint64(lo), np.uint64(hi), 5, 1, out)
    else:
        out = ip_bins_reference(ips, lo, hi, 5, 1)
    assert list(out) == [31, 31, 0, 16]


@pytest.mark.parametrize("level", [noise_level, noise_level_reference])
def test_noise_level_of_two_even_entries(level):
    """h = (1/2, 1/2), n = 1: q = 1/4 per entry, so s = 1 and v = 1/2;
    mean 1/2 sqrt(2/pi), deviation 1/2 sqrt((1 - 2/pi) / 2)."""
    h = np.array([0.5, 0.5])
    want = 0.5 * math.sqrt(2 / math.pi) + Z * 0.5 * math.sqrt((1 - 2 / math.pi) * 0.5)
    assert level(h, 1.0) == pytest.approx(want, rel=1e-12)
    # four times the samples: half the level
    assert level(h, 4.0) == pytest.approx(want / 2, rel=1e-12)


def test_scaled_noise_level_scales_the_histogram_first():
    h = np.array([0.25, 0.25, 0.0])           # a half-weight block
    want = 0.5 * math.sqrt(2 / math.pi) + Z * 0.5 * math.sqrt((1 - 2 / math.pi) * 0.5)
    assert scaled_noise_level(h, 2.0, 1.0) == pytest.approx(want, rel=1e-12)


@pytest.mark.parametrize("level", [noise_level, noise_level_reference])
def test_no_samples_no_noise(level):
    assert level(np.array([0.5, 0.5]), 0.0) == 0.0
    assert level(np.array([0.5, 0.5]), -2.0) == 0.0


@pytest.mark.parametrize("level", [cumulative_noise_level, cumulative_noise_level_reference])
def test_cumulative_noise_level_has_no_edge_with_one_bin(level):
    assert level(np.array([1.0]), 100.0) == 0.0
    assert level(np.array([0.5, 0.5]), 0.0) == 0.0


@pytest.mark.parametrize("level", [cumulative_noise_level, cumulative_noise_level_reference])
def test_cumulative_noise_level_of_two_bins(level):
    """One inner edge at F = 1/2: sqrt(F (1 - F)) = 1/2, over sqrt(100) and
    one gap."""
    assert level(np.array([0.5, 0.5]), 100.0) == pytest.approx(0.5 * PER_EDGE / 10, rel=1e-12)
    assert level(np.array([0.25, 0.75]), 100.0) == pytest.approx(
        math.sqrt(0.25 * 0.75) * PER_EDGE / 10, rel=1e-12)


@pytest.mark.parametrize("level", [cumulative_noise_level, cumulative_noise_level_reference])
def test_cumulative_noise_level_sums_the_inner_edges_only(level):
    """Ten bins of 1/10: the nine inner edges F = 1/10 .. 9/10; the outer edge
    (F = 1, or a hair under it after summing tenths) adds nothing."""
    spread = math.fsum(math.sqrt(i / 10 * (1 - i / 10)) for i in range(1, 10))
    want = spread * PER_EDGE / math.sqrt(100) / 9
    assert level(np.full(10, 0.1), 100.0) == pytest.approx(want, rel=1e-13)


def test_cumulative_noise_level_is_capped_at_one():
    assert cumulative_noise_level(np.array([0.5, 0.5]), 0.01) == 1.0
    assert cumulative_noise_level_reference(np.array([0.5, 0.5]), 0.01) == 1.0


def test_beyond_noise_worked():
    assert beyond_noise(0.5, 0.2) == pytest.approx(0.375, rel=1e-15)
    assert beyond_noise(0.1, 0.2) == 0.0
    # noise alone reaches 1 (or more): nothing can be told apart
    assert beyond_noise(0.5, 1.0) == 0.0
    assert beyond_noise(1.0, 1.0) == 0.0
    assert beyond_noise(1.0, 1.5) == 0.0


def code_distances(x, n, c, members):
    return (code_distance(x, n, c, members),
            segment_distance(x, n, c, members, MULTI_RESOLUTION),
            segment_distance_reference(x, n, c, members, MULTI_RESOLUTION))


def test_an_interval_of_no_samples_has_no_noise():
    """n = 0: no noise level, no unseen-code comparison; the distance is the
    plain total variation of the regions, (|1 - 1/2| + |0 - 1/2|) / 2."""
    x = signature({0: 1.0}, {1: 1.0}, width=4)
    c = signature({0: 0.5, 1: 0.5}, {1: 1.0}, width=4)
    for d in code_distances(x, 0, c, 3):
        assert d == pytest.approx(0.5, rel=1e-15)
    for n, members in ((0, 3), (0, 0), (5, 0)):
        assert unseen_code_distance(x, n, c, members) == 0.0
        assert unseen_code_distance_reference(x, n, c, members) == 0.0


def test_one_sample_against_a_phase_of_one_tells_nothing():
    """n = 1, one member: n_eff = 1/2.  The regions' noise level over two even
    entries is 1/2 sqrt(2 / (pi / 2)) + 2.326 / 2 sqrt(1 - 2/pi) = 1.27 > 1,
    and both of the phase's entries were seen once in its one sample (Turing's
    share 1): half the interval's regions moved, and nothing of it counts."""
    x = signature({0: 1.0}, {0: 1.0}, width=4)
    c = signature({0: 0.5, 1: 0.5}, {0: 1.0}, width=4)
    assert (0.5 * math.sqrt(2 / (math.pi * 0.5))
            + Z * 0.5 * math.sqrt((1 - 2 / math.pi) * 0.5 / 0.5)) > 1.0
    for d in code_distances(x, 1, c, 1):
        assert d == 0.0


def test_a_phase_that_saw_no_code_finds_all_of_an_interval_new():
    """The phase's one sample had no known IP: its signature is empty, no entry
    was seen once (Turing's level 0), and all of the interval's code is unseen."""
    x = signature({0: 1.0}, {1: 1.0}, width=4)
    c = np.zeros(8)
    for d in code_distances(x, 1, c, 1):
        assert d == 1.0
    assert unseen_code_distance(x, 1, c, 1) == 1.0
    assert unseen_code_distance_reference(x, 1, c, 1) == 1.0


def test_lines_where_most_samples_were_singletons_say_nothing():
    """Ten samples (n = 10, one member).  Regions: both in one region.  Lines:
    the phase's six singletons (1/10 each) and one line of 4/10; the interval
    is all in a line the phase never ran.  At the lines, noise alone reaches
    total variation 0.685 > 1/2 (s = 6 x 0.3 + sqrt(0.24) = 2.29, v = 0.78,
    n_eff = 5), and Turing's unseen share is 6/10 > 1/2: the lines are left
    out and the regions, identical, give 0."""
    x = signature({0: 1.0}, {7: 1.0}, width=8)
    c = signature({0: 1.0}, {0: .1, 1: .1, 2: .1, 3: .1, 4: .1, 5: .1, 6: .4}, width=8)
    s, v = 6 * 0.3 + math.sqrt(0.24), 6 * 0.09 + 0.24
    lines_level = (0.5 * s * math.sqrt(2 / (math.pi * 5))
                   + Z * 0.5 * math.sqrt((1 - 2 / math.pi) * v / 5))
    assert lines_level > 0.5
    for d in code_distances(x, 10, c, 1):
        assert d == 0.0
    assert multi_resolution_distance(x, c, 5.0) == 0.0
    assert multi_resolution_distance_reference(x, c, 5.0) == 0.0
    assert unseen_code_distance(x, 10, c, 1) == 0.0
    assert unseen_code_distance_reference(x, 10, c, 1) == 0.0


def test_lines_with_half_their_samples_singletons_still_count():
    """Twelve samples: six singleton lines (1/12 each) and four lines of
    exactly 1.5 samples (1/8 each), which are not singletons.  Turing's
    unseen share is 6/12 = 1/2, at the limit, so the lines count; its level
    is 1/2 + 2.326 sqrt(1/4 / 12) = 0.836 < 1, and the interval, all in a new
    line, is new code entirely."""
    lines = {i: 1 / 12 for i in range(6)} | {6 + i: 0.125 for i in range(4)}
    x = signature({0: 1.0}, {15: 1.0}, width=16)
    c = signature({0: 1.0}, lines, width=16)
    assert 0.5 + Z * math.sqrt(0.25 / 12) < 1.0
    for d in code_distances(x, 12, c, 1):
        assert d == 1.0
    assert unseen_code_distance(x, 12, c, 1) == 1.0
    assert unseen_code_distance_reference(x, 12, c, 1) == 1.0


def test_code_disjoint_from_the_phase_is_new_code_and_no_more():
    """No code in common: D = 1, never a rounding error above it (these shares,
    summed in order, come to 2 + 4e-16)."""
    x = signature({0: 0.1, 1: 0.9}, {0: 1.0}, width=6)
    c = signature({2: 0.1, 3: 0.1, 4: 0.6, 5: 0.2}, {0: 1.0}, width=6)
    for d in (*code_distances(x, 100, c, 4), multi_resolution_distance(x, c, 80.0),
              multi_resolution_distance_reference(x, c, 80.0)):
        assert 1.0 - 1e-12 < d <= 1.0
