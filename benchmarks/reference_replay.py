#!/usr/bin/env python3
"""The numpy reference of the whole algorithm as a command, for the benchmarks.

``reference_replay.py TRACE --output R.jsonl``: reads the whole trace at once
(pyarrow), runs ``phasewatch.core.reference.detect`` (plain numpy, no compiled
kernels, no state between batches) and writes one ``json.dumps`` per interval.
What a straightforward implementation of the same algorithm costs, start-up
included, to set beside ``phasewatch replay``.
"""

from __future__ import annotations

import argparse
import json
import math
import sys

import numpy as np
import pyarrow as pa

from phasewatch.core import reference
from phasewatch.core.batch import SampleBatch
from phasewatch.core.params import DetectorParams, Params, histogram_params_of, interval_params_of

KEYS = ("index", "t_start_ns", "t_end_ns", "instructions", "cycles", "samples",
        "distance", "phase", "new_phase")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("trace")
    parser.add_argument("--output", required=True)
    parser.add_argument("--detector", default="vpf")
    args = parser.parse_args()
    with pa.OSFile(args.trace) as f:
        table = pa.ipc.open_file(f).read_all()
    meta = json.loads(table.schema.metadata[b"phasewatch"])
    batch = SampleBatch({n: table.column(n).to_numpy() for n in table.column_names})
    params = Params(interval=interval_params_of(meta), histograms=histogram_params_of(meta),
                    detector=DetectorParams(detector=args.detector))
    phase, dist, new, ends = reference.detect(batch, params, meta["base_freq_mhz"])
    before = np.concatenate([[0], ends[:-1]])       # the sample each interval starts after
    t, instr, cycles = (batch[n].astype(np.int64) for n in ("t_ns", "instructions", "cycles"))
    with open(args.output, "w") as out:
        for i, (a, b) in enumerate(zip(before.tolist(), ends.tolist())):
            d = float(dist[i])
            row = (i, int(t[a]), int(t[b]), int(instr[b] - instr[a]), int(cycles[b] - cycles[a]),
                   b - a, None if math.isnan(d) else round(d, 6), int(phase[i]), bool(new[i]))
            out.write(json.dumps(dict(zip(KEYS, row))) + "\n")
    print(f"{len(t):,} samples, {len(ends):,} intervals", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
