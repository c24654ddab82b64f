#!/usr/bin/env python3
"""Speed of the code-signature kernel: IPs mapped over executable mappings
and hashed into 1024 entries, beside the thesis's 32-entry fold and the numpy
reference.  Median of --repeat runs over --ips IPs: with --trace, a recording's
own IPs and mappings, repeated (real samples come in runs within one object);
without, IPs drawn uniformly at random inside this Python process's own
mappings (the worst case: every sample in another place).

    .venv/bin/python benchmarks/bench_codemap.py [--trace T.arrow] [--ips 10000000]
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import numpy as np

from phasewatch.core.codemap import CodeMap, code_bins_reference
from phasewatch.core.histograms import ip_bins
from phasewatch.formats.tracefiles import open_trace
from phasewatch.live.process_maps import mapping_row
from phasewatch.live.maps import read_maps


def timed(fn, repeat: int) -> float:
    fn()
    runs = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        runs.append(time.perf_counter() - t0)
    return statistics.median(runs)


def random_ips(n: int):
    rows = [mapping_row(m, None) for m in read_maps(os.getpid())]
    rng = np.random.default_rng(1)
    which = rng.integers(0, len(rows), n)
    starts = np.array([r["start"] for r in rows], np.uint64)
    sizes = np.array([r["end"] - r["start"] for r in rows], np.uint64)
    return starts[which] + (rng.random(n) * sizes[which]).astype(np.uint64), rows


def trace_ips(path: str, n: int):
    source = open_trace(path)
    ips = np.concatenate([b["ip"] for b in source.batches()])
    rows = [{k: v for k, v in r.items() if k != "t_ns"} for r in source.metadata["mappings"]]
    return np.resize(ips, n), rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ips", type=int, default=10_000_000)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--trace", help="a recording made by 'phasewatch run --record'")
    args = ap.parse_args()
    if args.trace:
        ips, rows = trace_ips(args.trace, args.ips)
    else:
        ips, rows = random_ips(args.ips)
    starts = np.array([r["start"] for r in rows], np.uint64)
    sizes = np.array([r["end"] - r["start"] for r in rows], np.uint64)
    t = np.zeros(args.ips, np.int64)
    table = CodeMap.from_mappings(rows)
    out = np.empty(args.ips, np.int32)
    lo, hi = int(starts.min()), int((starts + sizes).max())
    code = timed(lambda: table.bins(ips, t, 14, 1024, out), args.repeat)
    fold = timed(lambda: ip_bins(ips, np.uint64(lo), np.uint64(hi), 5, 2, out), args.repeat)
    n_ref = min(args.ips, 1_000_000)
    ref = timed(lambda: code_bins_reference(ips[:n_ref], t[:n_ref], rows, 14, 1024), 1)
    ref *= args.ips / n_ref
    what = args.trace or "random IPs"
    print(f"{what}: {len(rows)} executable mappings, {args.ips:,} IPs, median of {args.repeat}")
    print("| kernel | M IPs/s | time vs fold |")
    print("|---|---|---|")
    for name, s in (("code signature (numba)", code), ("thesis fold (numba)", fold),
                    ("code signature (numpy reference)", ref)):
        print(f"| {name} | {args.ips / s / 1e6:.0f} | {s / fold:.1f}x |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
