"""The code signature's two resolutions (16 KiB regions and 64-byte lines):
the kernel against its numpy reference, and what each resolution decides."""

from __future__ import annotations

import numpy as np
from code_signatures import signature

from phasewatch.core.histograms import (MULTI_RESOLUTION, multi_resolution_distance,
                                        multi_resolution_distance_reference, segment_distance)

WIDTH = 1024


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


def test_unseen_code_kernel_equals_reference():
    from phasewatch.core.histograms import unseen_code_distance, unseen_code_distance_reference
    rng = np.random.default_rng(5)
    for _ in range(200):
        members, n = int(rng.integers(1, 30)), int(rng.integers(5, 100))
        k = int(rng.integers(1, 400))
        drawn = rng.integers(0, WIDTH, (members * n, 2)) % rng.integers(1, WIDTH)
        c = np.zeros(2 * WIDTH)
        np.add.at(c, drawn[:, 0], 0.5)
        np.add.at(c, WIDTH + drawn[:, 1], 0.5)
        c /= members * n
        x = signature(dict(zip(rng.integers(0, WIDTH, 5), rng.dirichlet(np.ones(5)))),
                      dict(zip(rng.integers(0, WIDTH, k), rng.dirichlet(np.ones(k)))))
        assert np.isclose(unseen_code_distance(x, n, c, members),
                          unseen_code_distance_reference(x, n, c, members))


def test_a_third_of_the_samples_in_code_the_phase_never_ran_is_new_code():
    """A phase of 20 intervals over 40 regions; an interval of 30 samples with
    10 of them in regions the phase never ran.  Total variation at 30 samples
    cannot see it (noise alone reaches about 0.6); the unseen share can."""
    from phasewatch.core.histograms import unseen_code_distance
    rng = np.random.default_rng(6)
    regions = rng.choice(WIDTH, 60, replace=False)
    seen, new = regions[:40], regions[40:]
    phase = signature({int(e): 1 / 40 for e in seen}, {int(e): 1 / 40 for e in seen})
    drawn = np.concatenate([rng.choice(seen, 20), rng.choice(new, 10)])
    shares = {int(e): float((drawn == e).mean()) for e in np.unique(drawn)}
    x = signature(shares, shares)
    assert unseen_code_distance(x, 30, phase, 20) > 0.25
    same = rng.choice(seen, 30)
    shares = {int(e): float((same == e).mean()) for e in np.unique(same)}
    assert unseen_code_distance(signature(shares, shares), 30, phase, 20) == 0.0


def test_the_fused_kernel_is_the_larger_of_the_two_references():
    from phasewatch.core.histograms import (code_distance, segment_distance_reference,
                                            unseen_code_distance_reference)
    rng = np.random.default_rng(7)
    for _ in range(300):
        members, n = int(rng.integers(1, 30)), int(rng.integers(5, 100))
        drawn = rng.integers(0, WIDTH, (members * n, 2)) % rng.integers(1, WIDTH)
        c = np.zeros(2 * WIDTH)
        np.add.at(c, drawn[:, 0], 0.5)
        np.add.at(c, WIDTH + drawn[:, 1], 0.5)
        c /= members * n
        own = drawn[rng.integers(0, len(drawn), n)]
        other = rng.integers(0, WIDTH, (n, 2))
        mix = np.where(rng.random((n, 1)) < rng.random(), own, other)
        x = np.zeros(2 * WIDTH)
        np.add.at(x, mix[:, 0], 0.5 / n)
        np.add.at(x, WIDTH + mix[:, 1], 0.5 / n)
        expected = segment_distance_reference(x, n, c, members, MULTI_RESOLUTION)
        assert np.isclose(code_distance(x, n, c, members), expected), expected
        assert expected >= unseen_code_distance_reference(x, n, c, members)
