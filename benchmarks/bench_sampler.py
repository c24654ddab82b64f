"""The collectors' own CPU cost.

1. The MSR sampler at 1 kHz against fake MSR files (all eight registers, and
   the four the thesis samples per millisecond), as % of one core per watched CPU: process CPU time (user+sys, all
   threads) over wall time, median of several runs.  Also the same sampler
   with a reader that reads nothing, which is the floor this host's timer
   wake-ups cost, and the time one tick's reads take.
2. The perf IP-sampling source at 1 kHz on a real child process: our CPU
   time per sample (the child's time is not ours), and % of a core at 1 kHz.

    .venv/bin/python benchmarks/bench_sampler.py [--seconds 3] [--runs 3] [--cpus 1,2,4]
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import struct
import sys
import tempfile
import time
import timeit
from pathlib import Path

import numpy as np

from phasewatch.collectors import msr
from phasewatch.collectors.perf_source import PerfSource
from phasewatch.collectors.sampler import Sampler
from phasewatch.core import registers
from phasewatch.live.child import Child


def cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def fake_msr_files(root: Path, ncpu: int) -> str:
    for cpu in range(ncpu):
        path = root / f"cpu{cpu}" / "msr"
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "wb") as f:
            f.truncate(0x1000)
            for address in sorted(registers.REGISTERS.values()):
                f.seek(address)
                f.write(struct.pack("<Q", address))
    return str(root / "cpu{cpu}" / "msr")


class NullReader:
    kind = "null"
    columns = ("tsc",)

    def read(self, out):
        pass

    def stats(self):
        return {"errors": 0}

    def close(self):
        pass


def cost_of(sampler: Sampler) -> tuple[float, dict]:
    """% of one core the sampler's process used while it ran."""
    c0, t0 = cpu_seconds(), time.monotonic()
    with sampler:
        for _ in sampler.batches():
            pass
    return 100 * (cpu_seconds() - c0) / (time.monotonic() - t0), sampler.stats()


CORE = ("perf_status", "aperf", "mperf", "pperf")    # the thesis's per-ms signals


def bench_sampler(ncpu: int, seconds: float, runs: int, template: str, columns) -> dict:
    ticks = int(seconds * 1000)
    results, nulls, missed = [], [], []
    for _ in range(runs):
        reader = msr.MsrReader(range(ncpu), columns, template)
        pct, stats = cost_of(Sampler(list(range(ncpu)), [reader], max_ticks=ticks))
        results.append(pct)
        missed.append(stats["missed_ticks"])
        nulls.append(cost_of(Sampler(list(range(ncpu)), [NullReader()], max_ticks=ticks))[0])
    reader = msr.MsrReader(range(ncpu), columns, template)
    out = np.empty((ncpu, len(columns)), np.uint64)
    read_us = timeit.timeit(lambda: reader.read(out), number=5000) / 5000 * 1e6
    reader.close()
    return {"cpus": ncpu, "registers": len(columns), "total_pct": statistics.median(results),
            "per_cpu_pct": statistics.median(results) / ncpu,
            "wakeup_floor_pct": statistics.median(nulls), "read_us": read_us,
            "missed": statistics.median(missed)}


BUSY = [sys.executable, "-c", "n = 0\nfor i in range(40_000_000): n += i"]


def bench_perf(runs: int) -> dict:
    per_sample, rates = [], []
    for _ in range(runs):
        child = Child.start(BUSY, pin=False)
        src = PerfSource(pid=child.pid, enable_on_exec=True, event="auto", wakeup=64)
        child.release()
        c0, t0 = cpu_seconds(), time.monotonic()
        for _ in src.batches():
            pass
        ours, wall = cpu_seconds() - c0, time.monotonic() - t0
        samples = src.stats()["samples"]
        src.close()
        child.wait()
        per_sample.append(ours / samples * 1e6)
        rates.append(samples / wall)
    us = statistics.median(per_sample)
    return {"event": src.event, "us_per_sample": us, "pct_at_1khz": us * 1000 / 1e6 * 100,
            "samples_per_s": statistics.median(rates)}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--cpus", default="1,2,4", help="watched CPU counts (fake MSR files)")
    args = parser.parse_args(argv)
    counts = [int(c) for c in args.cpus.split(",")]
    print(f"host: {os.uname().release}, {os.cpu_count()} CPUs; {args.runs} runs of "
          f"{args.seconds:g} s, median")
    print()
    print("MSR sampler, 1 kHz (fake MSR files)")
    print(f"{'regs':>5} {'CPUs':>5} {'% core':>8} {'% core/CPU':>11} {'wake-up floor %':>16} "
          f"{'reads µs/tick':>14} {'missed':>7}")
    with tempfile.TemporaryDirectory() as d:
        template = fake_msr_files(Path(d), max(counts))
        for columns in (registers.ALL_COLUMNS, CORE):
            for n in counts:
                r = bench_sampler(n, args.seconds, args.runs, template, columns)
                print(f"{r['registers']:>5} {r['cpus']:>5} {r['total_pct']:>8.2f} {r['per_cpu_pct']:>11.2f} "
                      f"{r['wakeup_floor_pct']:>16.2f} {r['read_us']:>14.1f} {r['missed']:>7.0f}")
    print()
    p = bench_perf(args.runs)
    print(f"perf IP sampling ({p['event']}, woken every 64 samples) of a busy child")
    print(f"{'µs/sample':>10} {'% core at 1 kHz':>16} {'samples/s':>10}")
    print(f"{p['us_per_sample']:>10.2f} {p['pct_at_1khz']:>16.2f} {p['samples_per_s']:>10.0f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
