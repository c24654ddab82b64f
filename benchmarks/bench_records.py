#!/usr/bin/env python3
"""Cost of reading a perf ring that holds side-band records among its
samples: one read of --samples samples with --records MMAP2-sized records
spread among them, against the same samples alone (median of --repeat).

    .venv/bin/python benchmarks/bench_records.py [--samples 1000] [--records 5]
"""

from __future__ import annotations

import argparse
import statistics
import struct
import time

import numpy as np

from phasewatch.collectors import perf_event as pe
from phasewatch.collectors.perf_source import SAMPLE_TYPE


class Counts:
    lost = throttled = 0


def ring_bytes(samples: int, records: int) -> tuple[np.ndarray, np.dtype]:
    dtype = pe.sample_dtype(SAMPLE_TYPE)
    rows = np.zeros(samples, dtype)
    rows["type"], rows["size"] = pe.RECORD_SAMPLE, dtype.itemsize
    record = struct.pack("<IHH", pe.RECORD_MMAP2, 0, 120) + bytes(112)
    cuts = np.linspace(0, samples, records + 2).astype(int)[1:-1]
    parts, last = [], 0
    for cut in cuts:
        parts += [rows[last:cut].tobytes(), record]
        last = cut
    parts.append(rows[last:].tobytes())
    return np.frombuffer(b"".join(parts), np.uint8), dtype


def median_us(raw: np.ndarray, dtype: np.dtype, repeat: int) -> float:
    runs = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        pe.parse_samples(raw, dtype, Counts(), [])
        runs.append(time.perf_counter() - t0)
    return statistics.median(runs) * 1e6


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--samples", type=int, default=1000)
    ap.add_argument("--records", type=int, default=5)
    ap.add_argument("--repeat", type=int, default=2000)
    args = ap.parse_args()
    alone, dtype = ring_bytes(args.samples, 0)
    mixed, _ = ring_bytes(args.samples, args.records)
    print(f"{args.samples} samples alone: {median_us(alone, dtype, args.repeat):.1f} us a read")
    print(f"{args.samples} samples with {args.records} records: "
          f"{median_us(mixed, dtype, args.repeat):.1f} us a read")


if __name__ == "__main__":
    main()
