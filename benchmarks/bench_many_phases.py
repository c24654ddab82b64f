#!/usr/bin/env python3
"""Many-phases benchmark: classification cost does not grow with the phases seen.

* 10^6 intervals with no signals (a trace of only t_ns, cpu, tid, one sample
  per 1 ms interval): every interval opens a new phase.  The whole pipeline
  and the per-phase summary, as ``replay`` runs them.
* Worst case for the leader-follower search: --distinct intervals, each a
  different random profile with samples, so each opens a phase and is compared
  with every live one; with the default cap (DetectorParams.max_phases) against
  no cap, side by side.

Each figure is the median of --repeat runs, after one warm-up run, except the
uncapped classifier's, which is one run (it is quadratic: minutes at 10^4).
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

from phasewatch.core.batch import SampleBatch
from phasewatch.core.classify import ClassifierState, classify
from phasewatch.core.intervals import SEGMENT_KINDS, SEGMENTS, IntervalAccumulator
from phasewatch.core.params import DetectorParams, HistogramParams, IntervalParams, Params
from phasewatch.core.pipeline import Pipeline
from phasewatch.formats.results import PhaseSummary

BATCH = 65536


def no_signal_run(intervals: int) -> tuple[float, int]:
    params = Params(interval=IntervalParams(kind="time", ns=1_000_000),
                    detector=DetectorParams(detector="vpf"))
    pipeline = Pipeline(params, base_mhz=3000.0)
    summary = PhaseSummary()
    t = np.arange(intervals + 1, dtype=np.int64) * 1_000_000
    t0 = time.perf_counter()
    for a in range(0, len(t), BATCH):
        n = len(t[a:a + BATCH])
        zeros = np.zeros(n, np.int32)
        summary.write(pipeline.feed(SampleBatch({"t_ns": t[a:a + BATCH], "cpu": zeros,
                                                 "tid": zeros})))
    summary.write(pipeline.finish())
    return time.perf_counter() - t0, summary.n_intervals


def distinct_profiles(n: int, seed: int = 1):
    rng = np.random.default_rng(seed)
    layout = IntervalAccumulator(IntervalParams(), HistogramParams()).layout
    profiles = np.zeros((n, layout.width))
    for s in range(len(SEGMENTS)):
        lo, hi = layout.bounds[s], layout.bounds[s + 1]
        profiles[:, lo:hi] = rng.dirichlet(np.full(hi - lo, 0.05), size=n)
    counts = np.full((n, len(SEGMENTS)), 100, np.int64)
    return profiles, counts, layout


def distinct_run(profiles, counts, layout, max_phases: int) -> float:
    params = DetectorParams(detector="vpf-ip", threshold=0.05, max_phases=max_phases)
    state = ClassifierState(layout.width, len(SEGMENTS), params)
    used = np.ones(len(SEGMENTS), np.bool_)
    t0 = time.perf_counter()
    classify(profiles, counts, layout.bounds, SEGMENT_KINDS, used, state)
    return time.perf_counter() - t0


def median_of(repeat: int, fn, *args):
    fn(*args)
    return statistics.median(fn(*args) for _ in range(repeat))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--intervals", type=int, default=1_000_000)
    ap.add_argument("--distinct", type=int, default=10_000)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()

    no_signal_run(1000)
    times = []
    for _ in range(args.repeat):
        seconds, n = no_signal_run(args.intervals)
        assert n == args.intervals, n
        times.append(seconds)
    s = statistics.median(times)
    print(f"{args.intervals:,} intervals without signals, pipeline + summary: {s:.2f} s "
          f"({args.intervals / s / 1e6:.2f} M intervals/s)")

    profiles, counts, layout = distinct_profiles(args.distinct)
    capped = median_of(args.repeat, distinct_run, profiles, counts, layout,
                       DetectorParams.max_phases)
    uncapped = distinct_run(profiles, counts, layout, 1 << 30)
    print(f"{args.distinct:,} distinct intervals, classifier alone: cap "
          f"{DetectorParams.max_phases} {capped:.2f} s, no cap {uncapped:.2f} s "
          f"({uncapped / capped:.1f}x)")


if __name__ == "__main__":
    main()
