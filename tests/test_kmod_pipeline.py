"""The kernel module's rings, mapped as :class:`KmodSource` maps them, through
the same :class:`Pipeline` that ``run`` and ``replay`` use.

The ring file is laid out as the module lays its rings out (ABI:
kmod/phasewatch_uapi.h): per CPU a header, then the records.  The program ran
code region A, then region B; a third of its samples were taken in kernel
mode (the module marks their IP MISSING) and some had no IP at all (0).
Neither may enter the IP vector.
"""

from __future__ import annotations

import numpy as np
import pytest

from phasewatch.collectors import kmod_source as ks
from phasewatch.core.batch import MISSING
from phasewatch.core.params import (DetectorParams, HistogramParams, IntervalParams, Params,
                                    interval_params_of)
from phasewatch.core.pipeline import Pipeline
from phasewatch.formats import metadata as md

TEXT = (0x400000, 0x480000)
REGION_A, REGION_B = 0x401000, 0x470000
PER_CPU = 2000
INTERVAL_INSTRUCTIONS = 100_000      # 100 samples of 1000 instructions


def ring(cpu: int, records: np.ndarray) -> bytes:
    nr = 1 << int(np.ceil(np.log2(len(records))))
    buf = bytearray(ks.ring_bytes(nr))
    header = np.frombuffer(buf, ks.HEADER_DTYPE, count=1)
    header["magic"], header["version"] = ks.RING_MAGIC, ks.ABI_VERSION
    header["record_size"], header["nr_records"], header["cpu"] = ks.RECORD_DTYPE.itemsize, nr, cpu
    header["head"], header["tail"] = len(records), 0
    np.frombuffer(buf, ks.RECORD_DTYPE, count=nr, offset=ks.HEADER_BYTES)[:len(records)] = records
    return bytes(buf)


def records(cpu: int) -> np.ndarray:
    """One CPU's samples at 1 kHz: region A for the first half, B after; every
    third sample in kernel mode, every seventh without an IP."""
    rng = np.random.default_rng(cpu)
    k = np.arange(PER_CPU, dtype=np.uint64)
    rec = np.zeros(PER_CPU, ks.RECORD_DTYPE)
    rec["t_ns"] = 1_000_000_000 + k * 1_000_000 + cpu * 500_000
    base = np.where(k < PER_CPU // 2, REGION_A, REGION_B).astype(np.uint64)
    rec["ip"] = base + rng.integers(0, 0x800, PER_CPU).astype(np.uint64)
    kernel = k % 3 == 2
    rec["ip"][kernel] = 0xFFFF_FFFF_8100_0000 + k[kernel]      # what the CPU was running
    rec["ip"][k % 7 == 3] = 0
    rec["flags"] = np.where(kernel, ks.REC_TARGET, ks.REC_USER | ks.REC_TARGET)
    rec["instructions"] = k * 1000
    rec["cycles"] = k * 1500
    for name in ks.MSRS:
        rec[name] = k * 10 + 1
    rec["perf_status"] = (8000 << 32) | 0x2000
    rec["cpu"], rec["pid"], rec["tid"] = cpu, 42, 42 + cpu
    return rec


@pytest.fixture
def ring_file(tmp_path):
    path = tmp_path / "rings"
    path.write_bytes(ring(0, records(0)) + ring(1, records(1)))
    return path


def pipeline(detector: str) -> Pipeline:
    meta = md.new(interval=IntervalParams(instructions=INTERVAL_INSTRUCTIONS),
                  text_range=list(TEXT), counter_scope="cpu")
    params = Params(interval=interval_params_of(meta),
                    histograms=HistogramParams(text_range=TEXT),
                    detector=DetectorParams(detector=detector))
    return Pipeline.for_trace(meta, params)


def run(path, detector="vpf-ip"):
    """Intervals, and the IP samples each counted, fed batch by batch from the source."""
    pipe = pipeline(detector)
    ip_counts = []
    classify = pipe._classify

    def counting(block):
        ip_counts.extend(block.segment_samples[:, 2].tolist())
        return classify(block)

    pipe._classify = counting
    source = ks.KmodSource(str(path))
    try:
        assert set(source.signals) >= {"ip", "tid", "instructions", "perf_status"}
        batches = list(source.batches())
        parts = [pipe.feed(b) for b in batches]
    finally:
        source.close()
    return batches, parts, ip_counts


def test_kernel_mode_and_unknown_ips_are_left_out_of_the_ip_vector(ring_file):
    batches, parts, ip_counts = run(ring_file)
    ips = np.concatenate([b["ip"] for b in batches])
    assert (ips == MISSING).sum() == 2 * len(range(2, PER_CPU, 3))     # kernel mode, as mapped
    assert ips[(ips != MISSING)].max() < 0xFFFF_8000_0000_0000
    # Each complete interval holds 100 samples per CPU in time order; it may
    # count only its user-space IPs that are known.
    user = (ips != MISSING) & (ips != 0)
    cpus = np.concatenate([b["cpu"] for b in batches])
    instr = np.concatenate([b["instructions"] for b in batches])
    assert len(ip_counts) > 10
    expected = []
    for k in range(len(ip_counts)):
        rows = np.zeros(len(ips), bool)
        for cpu in (0, 1):
            mine = cpus == cpu
            window = (instr >= k * INTERVAL_INSTRUCTIONS // 2) & (instr < (k + 1) * INTERVAL_INSTRUCTIONS // 2)
            rows |= mine & window
        expected.append(int((user & rows).sum()))
    assert sum(ip_counts) < len(ips) - (ips == MISSING).sum()
    assert sum(ip_counts) == pytest.approx(sum(expected), rel=0.05)


def test_the_two_code_regions_are_two_phases(ring_file):
    _, parts, _ = run(ring_file)
    phase = np.concatenate([p.phase for p in parts])
    assert len(phase) > 10
    assert phase[0] != phase[-1]
    assert len(set(phase.tolist())) == 2, phase
