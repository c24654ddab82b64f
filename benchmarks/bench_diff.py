#!/usr/bin/env python3
"""``diff``'s pairing of phases: the distance matrix and the assignment, by
phases a side, against the phase-by-phase distances it replaced.

Each run has N phases of random mean profiles over the default segments
(voltage and productive-frequency histograms, the code signature), some
phases without samples in a segment.  Figures are the median of --repeat
runs; the phase-by-phase pairing is one run, at the smaller sizes only (it
is quadratic in Python calls: 9 s at 600 phases a side).
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np
from scipy.optimize import linear_sum_assignment

from phasewatch.core.histograms import (TOTAL_VARIATION, cumulative_distance_reference,
                                        total_variation_distance_reference)
from phasewatch.core.intervals import SEGMENT_KINDS
from phasewatch.report.diff import PhaseStats, RunPhases, pair_phases

BOUNDS = np.array([0, 32, 96, 128])


def random_run(phases: int, seed: int) -> RunPhases:
    rng = np.random.default_rng(seed)
    stats = {}
    for p in range(phases):
        intervals = int(rng.integers(1, 50))
        members = rng.integers(0, intervals + 1, len(SEGMENT_KINDS))
        profile = np.concatenate([rng.dirichlet(np.ones(hi - lo)) * m
                                  for lo, hi, m in zip(BOUNDS[:-1], BOUNDS[1:], members)])
        stats[p] = PhaseStats(p, intervals=intervals, samples=intervals * 100,
                              profile_sum=profile, segment_members=members)
    return RunPhases(f"run{seed}", 1_000_000, BOUNDS, np.ones(len(SEGMENT_KINDS), bool),
                     0.3, stats)


def phase_by_phase_pairing(a: RunPhases, b: RunPhases, threshold: float) -> list:
    """The pairing as it was: one Python distance call per pair of phases."""
    def distance(x: PhaseStats, y: PhaseStats) -> float:
        px, py = x.mean_profile(a.bounds), y.mean_profile(a.bounds)
        found = [(total_variation_distance_reference if kind == TOTAL_VARIATION
                  else cumulative_distance_reference)(px[lo:hi], py[lo:hi])
                 for s, (kind, lo, hi) in enumerate(zip(SEGMENT_KINDS, a.bounds[:-1], a.bounds[1:]))
                 if a.used[s] and x.segment_members[s] > 0 and y.segment_members[s] > 0]
        return max(found) if found else 1.0
    ids_a, ids_b = sorted(a.phases), sorted(b.phases)
    cost = np.array([[distance(a.phases[i], b.phases[j]) for j in ids_b] for i in ids_a])
    rows, cols = linear_sum_assignment(cost)
    return [(ids_a[r], ids_b[c]) for r, c in zip(rows, cols) if cost[r, c] <= threshold]


def timed(work, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        work()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--sizes", type=int, nargs="+", default=[600, 1200, 1800, 2000, 4000])
    parser.add_argument("--old-up-to", type=int, default=600,
                        help="time the phase-by-phase pairing up to this many phases a side")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    print("phases a side | pairing (s, median) | phase by phase (s, one run)")
    for n in args.sizes:
        a, b = random_run(n, 1), random_run(n, 2)
        new = timed(lambda: pair_phases(a, b, 0.3), args.repeat)
        old = "-"
        if n <= args.old_up_to:
            t0 = time.perf_counter()
            phase_by_phase_pairing(a, b, 0.3)
            old = f"{time.perf_counter() - t0:.2f}"
        print(f"{n} | {new:.3f} | {old}")


if __name__ == "__main__":
    main()
