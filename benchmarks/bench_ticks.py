#!/usr/bin/env python3
"""What one register-sampler tick costs here, by rate, watched CPUs and loop.

For each case the sampler runs over fake MSR files (sparse files, one per
CPU) for --seconds, and its thread's CPU time (schedstat) is divided by the
ticks it took: the wake-up plus one pread per register per CPU.  The
difference between eight registers and one, over seven reads, is the cost of
one read.  Median of --runs runs; the figures feed docs/cost-model.md.

    .venv/bin/python benchmarks/bench_ticks.py [--seconds 2] [--runs 3]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

from phasewatch.collectors import budget, msr
from phasewatch.collectors.sampler import Sampler
from phasewatch.core import registers

CASES = [  # (loop, rate Hz, CPUs, registers)
    ("compiled", 1000, 1, 8), ("compiled", 1000, 1, 1), ("compiled", 1000, 8, 8),
    ("compiled", 250, 1, 8), ("compiled", 50, 1, 8), ("compiled", 50, 8, 8),
    ("python", 1000, 1, 8), ("python", 50, 1, 8),
]


def fake_msr_files(root: Path, cpus: int) -> str:
    for cpu in range(cpus):
        path = root / f"cpu{cpu}" / "msr"
        path.parent.mkdir(parents=True)
        with open(path, "wb") as f:
            f.truncate(0x1000)
    return str(root / "cpu{cpu}" / "msr")


def thread_cpu_s(native_id: int) -> float:
    with open(f"/proc/self/task/{native_id}/schedstat") as f:
        return int(f.read().split()[0]) / 1e9


def tick_cost_us(template: str, loop: str, rate: int, cpus: int, nregs: int,
                 seconds: float) -> float:
    reader = msr.MsrReader(range(cpus), registers.ALL_COLUMNS[:nregs], template)
    sampler = Sampler(range(cpus), [reader], rate_hz=rate, batch_ticks=max(1, rate // 2),
                      compiled=loop == "compiled")
    sampler.start()
    try:
        time.sleep(1.0)
        c0, n0 = thread_cpu_s(sampler._thread.native_id), sampler.ticks
        time.sleep(seconds)
        c1, n1 = thread_cpu_s(sampler._thread.native_id), sampler.ticks
    finally:
        sampler.close()
    if (loop == "compiled") != (sampler._loop is not None):
        sys.exit("bench_ticks: the compiled tick loop is not built (make install)")
    return 1e6 * (c1 - c0) / max(n1 - n0, 1)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seconds", type=float, default=2.0)
    p.add_argument("--runs", type=int, default=3)
    args = p.parse_args()
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        template = fake_msr_files(Path(tmp), 8)
        for case in CASES:
            runs = [tick_cost_us(template, *case, args.seconds) for _ in range(args.runs)]
            results[case] = runs
    print(f"sampler tick cost over fake MSR files, {args.runs} runs of {args.seconds:g} s, "
          f"median (min-max)")
    print(f"{'loop':>9} {'Hz':>5} {'CPUs':>5} {'regs':>5} {'µs/tick':>18} {'% core/CPU':>11}")
    for (loop, rate, cpus, nregs), runs in results.items():
        med = statistics.median(runs)
        print(f"{loop:>9} {rate:>5} {cpus:>5} {nregs:>5} "
              f"{med:>7.1f} ({min(runs):.1f}-{max(runs):.1f}) {100 * rate * med / 1e6 / cpus:>9.3f}")
    one = statistics.median(results[("compiled", 1000, 1, 1)])
    eight = statistics.median(results[("compiled", 1000, 1, 8)])
    print(f"one pread of a fake MSR file, compiled: {(eight - one) / 7:.2f} µs")
    print(f"register share of the budget: {100 * budget.REGISTER_SHARE:.2f} % of a core per CPU")
    return 0


if __name__ == "__main__":
    sys.exit(main())
