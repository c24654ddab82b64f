#!/usr/bin/env python3
"""False-split and false-merge rates of the same-phase decision at 10, 30 and
100 samples an interval, on synthetic traces run through the real pipeline.

    .venv/bin/python benchmarks/bench_same_phase.py [--seeds N] [--threshold T]

Each trial draws a phase A as the eight-phase model does
(``synthetic.eight_phases``: 1-4 code regions of 2-32 KiB in a 1.8 MiB text,
IPs uniform in each) and runs 20 intervals of A, then 20 of a phase B:

- **false split**: B is A again; the share of the 39 intervals after the
  first that do not land in the first interval's phase;
- **false merge, a quarter of the code**: B runs A's regions for 75 % of its
  samples and a new 2-32 KiB region for 25 %; the share of B's intervals put
  in A's phase;
- **false merge, productive frequency only**: B runs A's code at another
  productive share of clocks (0.62 against 0.74 of 3 GHz, the step between
  neighbouring phases of the eight-phase model), same voltage; likewise;
- **false merge, CPI only**: B runs A's code at A's voltage and productive
  frequency, at 1.25 times its CPI (the counted cycles and instructions
  the synthetic trace carries); likewise.

``vpf-ip`` runs at its default CPI tolerance and at 0 (code and frequency
only): the split rate shows what the CPI's own noise costs.

Samples per interval follow from the CPI (one sample per millisecond at
3 GHz): CPI = samples x 3M / 100M instructions.
"""

from __future__ import annotations

import argparse
from dataclasses import replace

import numpy as np

from phasewatch.core.batch import concat
from phasewatch.core.params import DetectorParams, Params, histogram_params_of, interval_params_of
from phasewatch.core.pipeline import Pipeline
from phasewatch.formats import synthetic

INTERVAL = 100_000_000
SAMPLES = (10, 30, 100)
STRETCH = 20
#: (row label, detector, CPI tolerance)
DETECTORS = (("vpf-ip", "vpf-ip", DetectorParams.cpi_tolerance),
             ("vpf-ip --cpi-tolerance 0", "vpf-ip", 0.0),
             ("vpf-ip-fold", "vpf-ip-fold", 0.0))
PRODUCTIVE_A, PRODUCTIVE_B = 0.62, 0.74
CPI_STEP = 1.25


def phase_a(rng, samples: int) -> synthetic.Phase:
    sizes = rng.integers(2 << 10, (32 << 10) + 1, int(rng.integers(1, 5)))
    starts = [int(rng.integers(0, synthetic.WIDE_TEXT_SIZE - s)) for s in sizes]
    shares = rng.dirichlet(np.ones(len(sizes)) * 2.0)
    cpi = samples * synthetic.CLOCKS_PER_TICK / INTERVAL
    return synthetic.Phase("A", 1020.0, 3.0, PRODUCTIVE_A, 0.02, cpi, 0.06, (0.0, 1.0), 38.0,
                           (), tuple(zip(starts, (int(s) for s in sizes), shares)))


def quarter_new_code(a: synthetic.Phase, rng) -> synthetic.Phase:
    size = int(rng.integers(2 << 10, (32 << 10) + 1))
    start = int(rng.integers(0, synthetic.WIDE_TEXT_SIZE - size))
    regions = tuple((s, n, share * 0.75) for s, n, share in a.regions) + ((start, size, 0.25),)
    return replace(a, name="B", regions=regions)


def phases_of(a, b, seed: int, detector: tuple) -> np.ndarray:
    schedule = (("A", STRETCH), ("B", STRETCH))
    batch = concat(list(synthetic.generate(schedule, INTERVAL, seed, phases={"A": a, "B": b})))
    meta = synthetic.eight_phase_metadata(INTERVAL)
    params = Params(interval=interval_params_of(meta), histograms=histogram_params_of(meta),
                    detector=DetectorParams(detector=detector[1], threshold=THRESHOLD,
                                            cpi_tolerance=detector[2]))
    return Pipeline.for_trace(meta, params).feed(batch).phase


def rates(samples: int, seeds: int, detector: tuple) -> tuple[float, ...]:
    split, merge_code, merge_pfreq, merge_cpi = [], [], [], []
    for seed in range(1, seeds + 1):
        rng = np.random.default_rng(seed)
        a = phase_a(rng, samples)
        same = phases_of(a, replace(a, name="B"), seed, detector)
        split.append(np.mean(same[1:] != same[0]))
        code = phases_of(a, quarter_new_code(a, rng), seed, detector)
        merge_code.append(np.mean(code[STRETCH:] == code[0]))
        pfreq = phases_of(a, replace(a, name="B", productive=PRODUCTIVE_B), seed, detector)
        merge_pfreq.append(np.mean(pfreq[STRETCH:] == pfreq[0]))
        cpi = phases_of(a, replace(a, name="B", cpi=a.cpi * CPI_STEP), seed, detector)
        merge_cpi.append(np.mean(cpi[STRETCH:] == cpi[0]))
    return tuple(float(np.mean(x)) for x in (split, merge_code, merge_pfreq, merge_cpi))


THRESHOLD = DetectorParams.threshold


def main() -> int:
    global THRESHOLD
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seeds", type=int, default=20)
    ap.add_argument("--threshold", type=float, default=DetectorParams.threshold)
    args = ap.parse_args()
    THRESHOLD = args.threshold
    print(f"threshold {THRESHOLD}, {args.seeds} trials each")
    print("| detector | samples an interval | false split | false merge: a quarter of the code "
          "| false merge: productive frequency only | false merge: CPI only |")
    print("|---|---|---|---|---|---|")
    for detector in DETECTORS:
        for samples in SAMPLES:
            split, code, pfreq, cpi = rates(samples, args.seeds, detector)
            print(f"| {detector[0]} | {samples} | {split:.3f} | {code:.3f} | {pfreq:.3f} "
                  f"| {cpi:.3f} |", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
