#!/usr/bin/env python3
"""What ``--pprof`` costs: the pipeline over a synthetic trace alone, then
with the per-phase profile fed alongside, then building and writing the
profile; each the median of --repeat runs (with the smallest and largest).

    .venv/bin/python benchmarks/bench_pprof.py [--samples N] [--repeat R]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time

from bench_whole import make_trace  # the same synthetic trace maker

from phasewatch.core.params import DetectorParams, Params, histogram_params_of
from phasewatch.core.pipeline import Pipeline
from phasewatch.formats.pprof import write_profile
from phasewatch.formats.trace import TraceReader
from phasewatch.live.phase_profile import PhaseProfile
from phasewatch.core.driver import Driver
from phasewatch.live.symbolizer import Symbolizer

INTERVAL = 100_000_000


def batches_of(path: str) -> tuple[list, dict]:
    reader = TraceReader(path)
    batches, meta = list(reader.batches()), reader.metadata
    reader.close()
    return batches, meta


def replay(batches, meta, profile: PhaseProfile | None) -> float:
    params = Params(histograms=histogram_params_of(meta), detector=DetectorParams(detector="vpf-ip"))
    pipeline = Pipeline(params, meta["base_freq_mhz"])
    t0 = time.perf_counter()
    Driver(pipeline, [profile] if profile is not None else []).run(batches)
    return time.perf_counter() - t0


def write(profile: PhaseProfile, out: str) -> tuple[float, int]:
    t0 = time.perf_counter()
    failure = write_profile(out, profile.build(Symbolizer()))
    if failure:
        sys.exit(failure)
    return time.perf_counter() - t0, os.path.getsize(out)


def spread(values: list[float]) -> str:
    return f"{statistics.median(values):.3f} s (min {min(values):.3f}, max {max(values):.3f})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--samples", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--workdir", default=tempfile.gettempdir())
    args = parser.parse_args()
    path = os.path.join(args.workdir, f"bench-pprof-{args.samples}.arrow")
    make_trace(path, args.samples, INTERVAL)
    batches, meta = batches_of(path)
    samples = sum(len(b) for b in batches)
    replay(batches, meta, None)   # the kernels loaded
    alone, fed, written, size = [], [], [], 0
    with tempfile.TemporaryDirectory() as tmp:
        for _ in range(args.repeat):
            alone.append(replay(batches, meta, None))
            profile = PhaseProfile(1_000_000)
            fed.append(replay(batches, meta, profile))
            seconds, size = write(profile, os.path.join(tmp, "p.pb.gz"))
            written.append(seconds)
    extra = [f - a for f, a in zip(fed, alone)]
    print(f"{samples:,} samples, {args.repeat} runs, medians:")
    print(f"  pipeline alone:              {spread(alone)}")
    print(f"  with the profile fed:        {spread(fed)}")
    print(f"  the profile's share:         {1e9 * statistics.median(extra) / samples:.0f} ns "
          f"per sample")
    print(f"  build + gzip + write:        {spread(written)}, {size:,} bytes")


if __name__ == "__main__":
    main()
