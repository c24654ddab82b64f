#!/usr/bin/env python3
"""Replay benchmark: throughput, kernel speed, start-up, and the numpy reference.

Generates a synthetic trace of --samples samples (10M by default, cached under
--workdir), then measures, each as the median of --repeat runs:

* replay throughput from the trace format (read + decode + intervals + phases),
  in samples/s on one core, after start-up;
* the same pipeline against the straightforward numpy implementation
  (phasewatch.core.reference) on the first --reference-samples samples, side by side;
* the classification kernel alone, in intervals/s;
* start-up: ``phasewatch replay`` of a small trace as a fresh process, and
  the same just in time (PHASEWATCH_KERNELS=jit) with a cold numba cache.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np
from bench_whole import make_trace  # the same synthetic trace maker

from phasewatch.core import reference
from phasewatch.core.batch import concat
from phasewatch.core.classify import ClassifierState, classify
from phasewatch.core.intervals import SEGMENTS, segment_kinds
from phasewatch.core.params import DetectorParams, Params, histogram_params_of
from phasewatch.core.pipeline import Pipeline
from phasewatch.formats import synthetic
from phasewatch.formats.trace import TraceReader

INTERVAL = 100_000_000


def params_for(meta, detector: str) -> Params:
    return Params(histograms=histogram_params_of(meta), detector=DetectorParams(detector=detector))


def replay_once(path: str, detector: str) -> tuple[float, int, int]:
    reader = TraceReader(path)
    pipe = Pipeline(params_for(reader.metadata, detector), reader.metadata["base_freq_mhz"])
    t0 = time.perf_counter()
    intervals = 0
    for batch in reader.batches():
        intervals += len(pipe.feed(batch))
    elapsed = time.perf_counter() - t0
    return elapsed, pipe.samples, intervals


def reference_pair(path: str, n: int, detector: str) -> tuple[float, float]:
    """Seconds for the pipeline and for the numpy reference over the first n samples."""
    reader = TraceReader(path)
    batches, rows = [], 0
    for b in reader.batches():
        batches.append(b)
        rows += len(b)
        if rows >= n:
            break
    batch = concat(batches).slice(0, n)
    params = params_for(reader.metadata, detector)
    base = reader.metadata["base_freq_mhz"]
    t0 = time.perf_counter()
    Pipeline(params, base).feed(batch)
    t_pipe = time.perf_counter() - t0
    t0 = time.perf_counter()
    reference.detect(batch, params, base)
    return t_pipe, time.perf_counter() - t0


def kernel_rate(n_intervals: int, detector: str) -> float:
    rng = np.random.default_rng(3)
    params = params_for(synthetic.metadata(INTERVAL), detector)
    from phasewatch.core.intervals import Layout
    layout = Layout.of(params.histograms)
    centres = rng.dirichlet(np.ones(layout.width), size=6)
    prof = centres[rng.integers(0, 6, n_intervals)] + rng.normal(0, 0.002, (n_intervals, layout.width))
    prof = np.abs(prof)
    counts = np.full((n_intervals, len(SEGMENTS)), 30, np.int64)
    for s in range(len(SEGMENTS)):
        seg = prof[:, layout.bounds[s]:layout.bounds[s + 1]]
        seg /= seg.sum(axis=1, keepdims=True)
    used = np.array([True, True, detector == "vpf-ip"])
    state = ClassifierState(layout.width, len(SEGMENTS), params.detector)
    classify(prof[:10], counts[:10], layout.bounds, segment_kinds(params.histograms), used, state)
    state = ClassifierState(layout.width, len(SEGMENTS), params.detector)
    t0 = time.perf_counter()
    classify(prof, counts, layout.bounds, segment_kinds(params.histograms), used, state)
    return n_intervals / (time.perf_counter() - t0)


def startup(small: str, cold: bool) -> float:
    env = dict(os.environ)
    if cold:    # as on a host without the ahead-of-time module, the first time
        env["NUMBA_CACHE_DIR"] = tempfile.mkdtemp(prefix="numba-cold-")
        env["PHASEWATCH_KERNELS"] = "jit"
    exe = os.path.join(os.path.dirname(sys.executable), "phasewatch")
    t0 = time.perf_counter()
    subprocess.run([exe, "replay", small, "--json"], check=True, env=env,
                   stdout=subprocess.DEVNULL)
    return time.perf_counter() - t0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--samples", type=int, default=10_000_000)
    ap.add_argument("--reference-samples", type=int, default=1_000_000)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--detector", default="vpf-ip")
    ap.add_argument("--workdir", default=os.path.join(tempfile.gettempdir(), "phasewatch-bench"))
    args = ap.parse_args()
    os.makedirs(args.workdir, exist_ok=True)
    big = os.path.join(args.workdir, f"synthetic-{args.samples}.arrow")
    small = os.path.join(args.workdir, "synthetic-small.arrow")
    make_trace(big, args.samples, INTERVAL)
    make_trace(small, 10_000, INTERVAL)
    replay_once(small, args.detector)                      # compile or load kernels

    runs = [replay_once(big, args.detector) for _ in range(args.repeat)]
    secs = statistics.median(r[0] for r in runs)
    samples, intervals = runs[0][1], runs[0][2]
    pairs = [reference_pair(big, args.reference_samples, args.detector) for _ in range(args.repeat)]
    ratios = [ref / pipe for pipe, ref in pairs]
    k_rate = statistics.median(kernel_rate(100_000, args.detector) for _ in range(args.repeat))
    warm = statistics.median(startup(small, cold=False) for _ in range(args.repeat))
    cold = startup(small, cold=True)

    print(f"trace: {samples:,} samples, {intervals:,} intervals, detector {args.detector}, "
          f"median of {args.repeat}")
    print(f"replay throughput       {samples / secs / 1e6:8.1f} M samples/s  ({secs:.2f} s)")
    print(f"pipeline vs numpy ref.  {statistics.median(ratios):8.1f} x faster "
          f"({args.reference_samples:,} samples: {statistics.median(p for p, _ in pairs):.3f} s "
          f"vs {statistics.median(r for _, r in pairs):.3f} s)")
    print(f"classification kernel   {k_rate / 1e6:8.2f} M intervals/s")
    print(f"start-up                {warm:8.2f} s")
    print(f"start-up, just in time with a cold numba cache {cold:8.2f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
