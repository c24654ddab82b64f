"""The code signature's two resolutions (16 KiB regions and 64-byte lines):
the kernel against its numpy reference, and what each resolution decides."""

from __future__ import annotations

import numpy as np

from phasewatch.core.histograms import (MULTI_RESOLUTION, multi_resolution_distance,
                                        multi_resolution_distance_reference, segment_distance)

WIDTH = 1024


def signature(regions: dict[int, float], lines: dict[int, float]) -> np.ndarray:
    """A profile's IP segment: each resolution a histogram carrying half the weight."""
    x = np.zeros(2 * WIDTH)
    for e, share in regions.items():
        x[e] = share / 2
    for e, share in lines.items():
        x[WIDTH + e] = share / 2
    return x


def test_kernel_equals_reference_on_random_signatures():
    rng = np.random.default_rng(3)
    for _ in range(200):
        k = int(rng.integers(1, 300))
        x = signature(dict(zip(rng.integers(0, WIDTH, 5), rng.dirichlet(np.ones(5)))),
                      dict(zip(rng.integers(0, WIDTH, k), rng.dirichlet(np.ones(k)))))
        c = signature(dict(zip(rng.integers(0, WIDTH, 5), rng.dirichlet(np.ones(5)))),
                      dict(zip(rng.integers(0, WIDTH, k), rng.dirichlet(np.ones(k)))))
        n_eff = float(rng.integers(5, 200))
        assert np.isclose(multi_resolution_distance(x, c, n_eff),
                          multi_resolution_distance_reference(x, c, n_eff))


def test_hot_loops_in_one_region_but_different_lines_are_far_apart():
    alpha = signature({7: 1.0}, {100: 0.9, 101: 0.1})
    beta = signature({7: 1.0}, {300: 1.0})
    assert segment_distance(alpha, 30, beta, 5, MULTI_RESOLUTION) == 1.0
    assert segment_distance(alpha, 30, alpha, 5, MULTI_RESOLUTION) == 0.0


def test_lines_of_code_spread_thin_are_left_to_the_regions():
    """Thirty samples over 500 equally hot lines: the line histograms of two
    intervals of one phase barely overlap, which is noise, not new code."""
    rng = np.random.default_rng(4)
    lines = rng.choice(WIDTH, 500, replace=False)
    phase = signature({1: 0.5, 2: 0.5}, {int(e): 1 / 500 for e in lines})
    drawn = rng.choice(lines, 30)
    region = rng.choice([1, 2], 30)
    x = signature({int(r): float((region == r).mean()) for r in (1, 2)},
                  {int(e): float((drawn == e).mean()) for e in np.unique(drawn)})
    assert segment_distance(x, 30, phase, 20, MULTI_RESOLUTION) < 0.25
