#!/usr/bin/env python3
"""Write a synthetic Skylake-like example trace with a known phase schedule.

The samples come from the model in ``phasewatch.formats.synthetic`` (invented values,
not a measurement).  Writes the trace (phasewatch format, or raw CSV with
``--csv``) and, beside it, ``<name>.labels.json``: the true phase of every
interval, for ``phasewatch replay --labels``.
"""

import argparse
import json
import os
import sys

import numpy as np
import pyarrow as pa
import pyarrow.csv as pacsv

from phasewatch.formats import synthetic
from phasewatch.formats.trace import TraceWriter


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, help="trace file to write")
    parser.add_argument("--csv", action="store_true", help="write raw CSV (columns: docs/formats.md)")
    parser.add_argument("--samples", type=int, default=0,
                        help="repeat the schedule until at least this many samples")
    parser.add_argument("--interval", type=int, default=100_000_000,
                        help="instructions per interval (default 100M)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--eight-phases", action="store_true",
                        help="the eight-phase model in 2-32 KiB code regions (synthetic.eight_phases)")
    args = parser.parse_args()

    schedule, phases, meta = synthetic.SCHEDULE, synthetic.PHASES, synthetic.metadata(args.interval)
    if args.eight_phases:
        schedule, phases = synthetic.eight_phase_schedule(args.seed), synthetic.eight_phases(args.seed)
        meta = synthetic.eight_phase_metadata(args.interval)
    if args.samples:
        schedule = synthetic.repeat_schedule(args.samples, args.interval, schedule, phases)
    batches = synthetic.generate(schedule, args.interval, args.seed, phases=phases)
    if args.csv:
        rows = write_csv(args.out, batches)
    else:
        rows = write_trace(args.out, batches, meta)
    labels_path = os.path.splitext(args.out)[0] + ".labels.json"
    with open(labels_path, "w") as f:
        json.dump(synthetic.labels(schedule), f)
    print(f"{args.out}: {rows:,} samples, {len(synthetic.labels(schedule))} intervals "
          f"(labels in {labels_path})", file=sys.stderr)
    return 0


def write_trace(path, batches, meta) -> int:
    first = next(batches)
    with TraceWriter(path, meta, first.signals) as writer:
        writer.write(first)
        for batch in batches:
            writer.write(batch)
    return writer.rows_written


def write_csv(path, batches) -> int:
    rows = 0
    with pa.OSFile(path, "wb") as sink:
        writer = None
        for batch in batches:
            table = pa.table({n: np.asarray(batch[n]) for n in batch.signals})
            if writer is None:
                writer = pacsv.CSVWriter(sink, table.schema,
                                         write_options=pacsv.WriteOptions(quoting_style="none", quoting_header="none"))
            writer.write_table(table)
            rows += len(batch)
        writer.close()
    return rows


if __name__ == "__main__":
    sys.exit(main())
