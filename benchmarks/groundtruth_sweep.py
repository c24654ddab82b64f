"""A grid of detector settings over the tuning half of the ground truth.

    python benchmarks/groundtruth_sweep.py --workdir DIR \\
        --grid threshold=0.2,0.25,0.3 --grid cpi_tolerance=0.03,0.05 [--set FIELD=VALUE ...]

Every combination of the ``--grid`` values (each FIELD a field of
phasewatch.core.params.DetectorParams; ``--set`` fixes others) labels the
tuning half's cached IP traces (groundtruth.py; valgrind outputs must be in
DIR already) at 30 samples an interval, PMU and IP-only, and prints, per
setting and condition, the mean CoV of CPI over SimPoint's, the worst
workload's, and the share of one-interval phases.  The test half is never
read: check a chosen setting on it with ``groundtruth.py --set ...``.
"""

from __future__ import annotations

import argparse
import itertools
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from groundtruth import (CONDITION_NAMES, CONDITIONS, HEADLINE, Pool, aggregate,  # noqa: E402
                         common_arguments, evaluate, parse_sets, select, summary_of,
                         tree_description)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    common_arguments(ap)
    ap.add_argument("--grid", action="append", default=[], metavar="FIELD=V1,V2,...",
                    help="values to try for a DetectorParams field (repeatable)")
    ap.add_argument("--set", dest="sets", action="append", default=[], metavar="FIELD=VALUE",
                    help="a DetectorParams field fixed for every setting (repeatable)")
    ap.add_argument("--samples", type=int, default=HEADLINE)
    args = ap.parse_args()
    fixed = parse_sets(args.sets)
    axes = []
    for g in args.grid:
        name, _, values = g.partition("=")
        axes.append([parse_sets([f"{name}={v}"]) for v in values.split(",") if v])
    settings = [dict(fixed, **{k: v for d in combo for k, v in d.items()})
                for combo in itertools.product(*axes)] if axes else [fixed]
    workloads = select((), "tuning", args.workdir, need_outputs=True)
    names = [w.name for w in workloads]
    runs = [{"detector": args.detector, "overrides": s} for s in settings]
    pool = Pool(args.jobs)
    t0 = time.time()
    try:
        result = evaluate(workloads, args.workdir, [args.samples], CONDITIONS, args.seeds, runs,
                          pool, args.simpoint, check_cli=not args.no_check)
    finally:
        pool.close()
    print(f"tree: {tree_description()}")
    print(f"tuning half: {len(names)} workloads ({', '.join(names)}); detector {args.detector}; "
          f"{args.samples} samples an interval; {len(runs)} settings in {time.time() - t0:.0f} s")
    head = "| setting |"
    rule = "|---|"
    for c in CONDITIONS:
        cn = CONDITION_NAMES[c]
        head += f" {cn} mean CoV/SP | {cn} worst | {cn} one-interval share |"
        rule += "---|---|---|"
    print(head)
    print(rule)
    for r, run in enumerate(runs):
        line = "| " + (", ".join(f"{k}={v}" for k, v in run["overrides"].items()) or "defaults") + " |"
        for c in CONDITIONS:
            s = summary_of(aggregate(result, r, names, args.samples, c, args.seeds))
            line += (f" {s['mean_ratio']:.2f} | {s['worst']} {s['worst_ratio']:.2f} | "
                     f"{100 * s['one_interval_share']:.0f} % |")
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
