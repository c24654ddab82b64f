#!/usr/bin/env python3
"""False-split and false-merge rates of the IP segment's noise model.

Synthetic cases, at 10 to 1000 samples an interval:

- a phase ``A``: code spread over ``K`` entries of the 1024-entry signature
  with Dirichlet(1) shares (``K`` = 8, 32, 128: a tight loop nest to code
  spread like a compiler's);
- its centroid: the mean of ``M`` intervals drawn from ``A`` (as the
  classifier holds it after ``M`` members);
- false split: an interval drawn from ``A`` is at a distance above the
  threshold (0.25) from the centroid;
- false merge: an interval drawn from ``B = (1 - D) A + D Q``, where ``Q`` is
  code ``A`` never runs and ``D`` = 0.5 (a real difference twice the
  threshold), is within the threshold.

Three rules side by side: the plain total-variation distance, the earlier
allowance (TV minus twice its expected noise), and the noise model
(``histograms.segment_distance``: (TV - L) / (1 - L), L the 1 % noise level).

    .venv/bin/python benchmarks/bench_noise.py [--trials 2000]
"""

from __future__ import annotations

import argparse

import numpy as np

from phasewatch.core.histograms import (TOTAL_VARIATION, expected_total_variation_reference,
                                        segment_distance_reference,
                                        total_variation_distance_reference)
from phasewatch.core.params import DEFAULT_THRESHOLD

BINS = 1024
SAMPLES = (10, 30, 100, 300, 1000)
SPREADS = (8, 32, 128)
MEMBERS = 10
NEW_CODE = 0.5


def rules():
    def plain(x, n, c, m):
        return total_variation_distance_reference(x, c)

    def allowance(x, n, c, m):
        return max(total_variation_distance_reference(x, c)
                   - 2.0 * expected_total_variation_reference(c, n), 0.0)

    def model(x, n, c, m):
        return segment_distance_reference(x, n, c, m, TOTAL_VARIATION)

    return {"plain TV": plain, "TV - 2E (before)": allowance, "noise model": model}


def draw(rng, p: np.ndarray, n: int) -> np.ndarray:
    return rng.multinomial(n, p) / n


def phase_pair(rng, spread: int) -> tuple[np.ndarray, np.ndarray]:
    entries = rng.permutation(BINS)
    a = np.zeros(BINS)
    a[entries[:spread]] = rng.dirichlet(np.ones(spread))
    q = np.zeros(BINS)
    q[entries[spread:2 * spread]] = rng.dirichlet(np.ones(spread))
    return a, (1 - NEW_CODE) * a + NEW_CODE * q


def rates(trials: int, seed: int = 1):
    rng = np.random.default_rng(seed)
    fns = rules()
    out = {}
    for spread in SPREADS:
        for n in SAMPLES:
            split = {k: 0 for k in fns}
            merge = {k: 0 for k in fns}
            for _ in range(trials):
                a, b = phase_pair(rng, spread)
                centroid = np.mean([draw(rng, a, n) for _ in range(MEMBERS)], axis=0)
                same, other = draw(rng, a, n), draw(rng, b, n)
                for name, fn in fns.items():
                    split[name] += fn(same, n, centroid, MEMBERS) > DEFAULT_THRESHOLD
                    merge[name] += fn(other, n, centroid, MEMBERS) <= DEFAULT_THRESHOLD
            out[spread, n] = {k: (split[k] / trials, merge[k] / trials) for k in fns}
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=2000)
    args = parser.parse_args()
    table = rates(args.trials)
    names = list(rules())
    print(f"threshold {DEFAULT_THRESHOLD}, centroid of {MEMBERS} intervals, new code D = "
          f"{NEW_CODE}, {args.trials} trials a cell; each cell: false split / false merge")
    print("| code spread K | samples | " + " | ".join(names) + " |")
    print("|---|---|" + "---|" * len(names))
    for (spread, n), cell in table.items():
        print(f"| {spread} | {n} | " + " | ".join(f"{100 * s:.1f} % / {100 * m:.1f} %"
                                                for s, m in (cell[k] for k in names)) + " |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
