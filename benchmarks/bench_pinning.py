#!/usr/bin/env python3
"""Wall time of a two-threaded CPU-bound command: alone, under ``phasewatch
run`` (pinned only while it runs one thread), under ``run --no-pin``, and
pinned to one CPU throughout (``taskset -c N``, what a pin kept for the whole
run costs).

Runs ``abab SECONDS --threads 2`` (tests/workloads; each thread runs region
A, B, A for SECONDS of its own CPU time each) --repeat times per way, the ways
interleaved, and prints the median wall time and its spread (min-max).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent / "phasewatch"


def build_abab(out: Path) -> Path:
    subprocess.run(["make", "-s", "-C", str(ROOT / "tests" / "workloads"), f"OUT={out}",
                    "CC=gcc"], check=True)
    return out / "abab"


def wall(argv: list[str]) -> float:
    started = time.monotonic()
    subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
    return time.monotonic() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=1.0)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        cmd = [str(build_abab(Path(tmp))), str(args.seconds), "--threads", "2"]
        cpu = str(max(os.sched_getaffinity(0)))
        ways = {
            "alone": cmd,
            "run": [str(BIN), "run", "--", *cmd],
            "run --no-pin": [str(BIN), "run", "--no-pin", "--", *cmd],
            "pinned throughout": ["taskset", "-c", cpu, *cmd],
        }
        times: dict[str, list[float]] = {name: [] for name in ways}
        for _ in range(args.repeat):
            for name, argv in ways.items():
                times[name].append(wall(argv))
    print(f"abab {args.seconds} --threads 2, {args.repeat} runs each, wall seconds:")
    for name, values in times.items():
        print(f"  {name:18s} median {statistics.median(values):6.2f}  "
              f"(min {min(values):.2f}, max {max(values):.2f})")


if __name__ == "__main__":
    main()
