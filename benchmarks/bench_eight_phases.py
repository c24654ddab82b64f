#!/usr/bin/env python3
"""Adjusted Rand index of each detector on the eight-phase synthetic traces
(``phasewatch.formats.synthetic.eight_phases``: 2-32 KiB code regions over a 1.8 MiB
text, one pair alike in voltage and frequency), seeds 1-5, with the pipeline
and with the numpy reference of the same algorithm.

    .venv/bin/python benchmarks/bench_eight_phases.py
"""

from __future__ import annotations

import numpy as np

from phasewatch.core import reference
from phasewatch.core.batch import concat
from phasewatch.core.params import DetectorParams, Params, histogram_params_of, interval_params_of
from phasewatch.core.pipeline import Pipeline
from phasewatch.formats import synthetic
from phasewatch.formats.results import adjusted_rand_index

INTERVAL = 100_000_000
SEEDS = (1, 2, 3, 4, 5)
DETECTORS = ("vpf", "vpf-ip-fold", "vpf-ip")


def main() -> int:
    print("| detector | " + " | ".join(f"seed {s}" for s in SEEDS) + " | mean ARI | mean ARI, numpy reference | phases found |")
    print("|---|" + "---|" * (len(SEEDS) + 3))
    traces = []
    for seed in SEEDS:
        schedule = synthetic.eight_phase_schedule(seed)
        batch = concat(list(synthetic.generate(schedule, INTERVAL, seed,
                                               phases=synthetic.eight_phases(seed))))
        traces.append((batch, synthetic.labels(schedule)))
    meta = synthetic.eight_phase_metadata(INTERVAL)
    for detector in DETECTORS:
        params = Params(interval=interval_params_of(meta), histograms=histogram_params_of(meta),
                        detector=DetectorParams(detector=detector))
        scores, ref_scores, found = [], [], []
        for batch, labels in traces:
            phases = Pipeline.for_trace(meta, params).feed(batch).phase
            ref = reference.detect(batch, params, synthetic.BASE_MHZ, mappings=meta["mappings"])[0]
            scores.append(adjusted_rand_index(labels[:len(phases)], [str(p) for p in phases]))
            ref_scores.append(adjusted_rand_index(labels[:len(ref)], [str(p) for p in ref]))
            found.append(len(set(phases.tolist())))
        print(f"| `{detector}` | " + " | ".join(f"{s:.3f}" for s in scores)
              + f" | **{np.mean(scores):.3f}** | {np.mean(ref_scores):.3f} | "
              + ", ".join(map(str, found)) + " |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
