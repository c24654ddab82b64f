"""The IP segment's noise model (histograms.segment_distance): its kernels
against their references, and its behaviour on histograms drawn at random."""

from __future__ import annotations

import numpy as np
import pytest

from phasewatch.core.histograms import (TOTAL_VARIATION, beyond_noise, noise_level,
                                        noise_level_reference, segment_distance,
                                        segment_distance_reference,
                                        total_variation_distance_reference)

BINS = 1024


def phase(rng, spread: int) -> np.ndarray:
    p = np.zeros(BINS)
    p[rng.permutation(BINS)[:spread]] = rng.dirichlet(np.ones(spread))
    return p


def draw(rng, p, n):
    return rng.multinomial(n, p) / n


@pytest.mark.parametrize("n,m", [(10, 1), (100, 5), (1000, 40)])
def test_kernels_match_references(n, m):
    rng = np.random.default_rng(n)
    c = phase(rng, 64)
    x = draw(rng, c, n)
    assert abs(noise_level(c, float(n)) - noise_level_reference(c, n)) < 1e-9
    assert abs(segment_distance(x, n, c, m, TOTAL_VARIATION)
               - segment_distance_reference(x, n, c, m, TOTAL_VARIATION)) < 1e-9


@pytest.mark.parametrize("spread,n", [(8, 30), (32, 100), (128, 300)])
def test_noise_alone_stays_under_the_level(spread, n):
    """The level is the nominal 1 % tail of sampling noise; the normal
    approximation makes it 2-3 % where few entries share few samples
    (2.4 % measured at 8 entries and 30 samples), less elsewhere."""
    rng = np.random.default_rng(spread)
    p = phase(rng, spread)
    over = [total_variation_distance_reference(draw(rng, p, n), p) > noise_level_reference(p, n)
            for _ in range(2000)]
    assert np.mean(over) <= 0.04


def test_a_real_difference_keeps_its_size():
    """Half new code reads as about 0.5 at any sample count the level allows,
    where subtracting the noise would shrink it with fewer samples."""
    rng = np.random.default_rng(3)
    for n in (100, 300, 1000):
        estimates = []
        for _ in range(200):
            a, q = phase(rng, 8), phase(rng, 8)
            q[a > 0] = 0
            q /= q.sum()
            centroid = np.mean([draw(rng, a, n) for _ in range(10)], axis=0)
            other = draw(rng, 0.5 * a + 0.5 * q, n)
            estimates.append(segment_distance_reference(other, n, centroid, 10, TOTAL_VARIATION))
        assert 0.35 <= np.median(estimates) <= 0.6, (n, np.median(estimates))


def test_beyond_noise():
    assert beyond_noise(0.9, 0.8) == pytest.approx(0.5)
    assert beyond_noise(0.3, 0.4) == 0.0
    assert beyond_noise(0.7, 0.0) == pytest.approx(0.7)
    assert beyond_noise(1.0, 1.2) == 0.0


def test_effective_samples_of_an_interval_and_a_centroid():
    from phasewatch.core.histograms import effective_samples
    assert effective_samples(10, 0) == 10.0          # no centroid members: the interval alone
    assert effective_samples(10, 1) == 5.0           # two alike: half
    assert effective_samples(12, 3) == 9.0


def test_no_samples_expect_no_variation():
    from phasewatch.core.histograms import (expected_total_variation,
                                            expected_total_variation_reference)
    h = np.array([0.25, 0.75])
    assert expected_total_variation(h, 0) == expected_total_variation_reference(h, 0) == 0.0


def test_each_kind_of_segment_on_a_worked_pair():
    from phasewatch.core.histograms import CUMULATIVE
    x, c = np.array([0.0, 1.0, 0.0, 0.0]), np.array([1.0, 0.0, 0.0, 0.0])
    # all of x is one bin over: half the L1 distance is 1, the cumulative 1 of 3 steps;
    # the centroid has no spread, so noise explains none of it
    assert segment_distance(x, 10_000, c, 100, TOTAL_VARIATION) == 1.0
    assert segment_distance(x, 10_000, c, 100, CUMULATIVE) == pytest.approx(1 / 3)


def test_no_effective_samples_have_no_cumulative_noise():
    from phasewatch.core.histograms import (cumulative_noise_level,
                                            cumulative_noise_level_reference)
    h = np.array([0.25, 0.25, 0.5])
    assert cumulative_noise_level(h, 0.0) == cumulative_noise_level_reference(h, 0.0) == 0.0
