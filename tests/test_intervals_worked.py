"""``core.intervals``' accumulator on samples worked by hand: the interval
still open (``pending``), its totals, and each segment's histogram over the
ranges and bins of ``HistogramParams``' defaults."""

import dataclasses
import zlib

import numpy as np
import pytest
from splitmix import plain_mix

from phasewatch.core.decode import F
from phasewatch.core.histograms import (CUMULATIVE, CUMULATIVE_BEYOND_NOISE, MULTI_RESOLUTION,
                                        TOTAL_VARIATION)
from phasewatch.core.intervals import IntervalAccumulator, Layout, segment_kinds
from phasewatch.core.params import HistogramParams, IntervalParams


def decoded(**fields):
    out = np.full((len(F), 3), np.nan)
    for name, values in fields.items():
        out[F[name]] = values
    return out


def test_the_open_interval_and_each_segments_histogram():
    acc = IntervalAccumulator(IntervalParams(instructions=1000), HistogramParams())
    done = acc.feed(np.array([10, 20, 30], np.int64), None, decoded(
        voltage_mv=[962.0, 1000.0, 1080.0], pfreq_mhz=[0.0, 1500.0, 3000.0],
        freq_mhz=[3000.0] * 3, c0=[0.5, 0.5, 1.0], d_instructions=[100.0] * 3,
        d_cycles=[200.0] * 3))
    assert len(done) == 0                           # 300 of 1000 instructions
    open_ = acc.pending()
    assert len(open_) == 1
    assert (open_.t_start_ns[0], open_.t_end_ns[0]) == (10, 30)
    assert (open_.instructions[0], open_.cycles[0], open_.samples[0]) == (300, 600, 3)
    # voltage, productive frequency, code (no IPs), clock, busy share
    assert open_.segment_samples[0].tolist() == [3, 3, 0, 3, 3]
    assert (open_.voltage_sum[0], open_.pfreq_sum[0]) == (3042.0, 4500.0)
    # bounds: 32 voltage bins, 64 pfreq, 2 x 1024 code entries, 64 clock, 20 busy
    v, p, code, clock, busy = np.split(open_.profiles[0], [32, 96, 2144, 2208])
    # 962..1080 mV in 32 bins of 3.6875 mV: 962 -> 0, 1000 -> 10, 1080 (the top) -> 31
    assert np.flatnonzero(v).tolist() == [0, 10, 31] and np.allclose(v[[0, 10, 31]], 1 / 3)
    # 0..3000 MHz in 64 bins of 46.875: 0 -> 0, 1500 -> 32, 3000 -> 63
    assert np.flatnonzero(p).tolist() == [0, 32, 63] and np.allclose(p[[0, 32, 63]], 1 / 3)
    assert not code.any()
    assert np.flatnonzero(clock).tolist() == [63] and clock[63] == 1.0
    # 0..1 in 20 bins: 0.5 -> 10 twice, 1.0 (the top) -> 19
    assert np.flatnonzero(busy).tolist() == [10, 19]
    assert np.allclose(busy[[10, 19]], [2 / 3, 1 / 3])


def test_nothing_open_is_no_interval():
    acc = IntervalAccumulator(IntervalParams(instructions=1000), HistogramParams())
    assert len(acc.pending()) == 0


def test_time_intervals_end_at_the_first_sample_past_each_mark_from_the_first_sample():
    acc = IntervalAccumulator(IntervalParams(kind="time", ns=100), HistogramParams())
    t = np.array([1000, 1050, 1100, 1149, 1150, 1310, 1400], np.int64)
    values = np.full((len(F), len(t)), np.nan)
    values[F["voltage_mv"]] = 1000.0
    values[F["d_instructions"]] = values[F["d_cycles"]] = 0.0
    done = acc.feed(t, None, values)
    # marks at 1100, 1200 (the next after 1100), 1400 (the next after 1310)
    assert done.t_end_ns.tolist() == [1100, 1310, 1400]
    assert done.samples.tolist() == [3, 3, 1]


def samples(n, **fields):
    """``n`` samples of 100 instructions and 200 cycles each, the named fields
    set, the rest unread (NaN)."""
    out = np.full((len(F), n), np.nan)
    out[F["d_instructions"]], out[F["d_cycles"]] = 100.0, 200.0
    for name, values in fields.items():
        out[F[name]] = values
    return out


def test_segment_kinds_follow_the_signature_and_the_value_noise_setting():
    plain, beyond = CUMULATIVE, CUMULATIVE_BEYOND_NOISE
    assert segment_kinds(HistogramParams()).tolist() == [plain, plain, MULTI_RESOLUTION,
                                                         plain, plain]
    assert segment_kinds(HistogramParams(value_noise=True)).tolist() == [
        beyond, beyond, MULTI_RESOLUTION, beyond, beyond]
    assert segment_kinds(HistogramParams(ip_signature="fold")).tolist() == [
        plain, plain, TOTAL_VARIATION, plain, plain]
    assert segment_kinds(HistogramParams(ip_signature="fold", value_noise=True)).tolist() == [
        beyond, beyond, TOTAL_VARIATION, beyond, beyond]


def test_a_layout_cannot_be_changed():
    layout = Layout.of(HistogramParams())
    assert layout.bounds.tolist() == [0, 32, 96, 2144, 2208, 2228]
    with pytest.raises(dataclasses.FrozenInstanceError):
        layout.bounds = np.zeros(6, np.int64)


def test_the_first_bin_of_each_segment_counts():
    """0 MHz, a busy share of 0 and the first byte of .text all fall in their
    segments' first bins (the fold of position 0 is entry 0)."""
    lo = 0x400000
    acc = IntervalAccumulator(IntervalParams(instructions=1000),
                              HistogramParams(ip_signature="fold", text_range=(lo, lo + 4096)))
    acc.feed(np.array([10, 20], np.int64), np.array([lo, lo], np.uint64),
             samples(2, voltage_mv=962.0, pfreq_mhz=0.0, freq_mhz=0.0, c0=0.0))
    open_ = acc.pending()
    assert open_.segment_samples[0].tolist() == [2, 2, 2, 2, 2]
    v, p, code, clock, busy = np.split(open_.profiles[0], [32, 96, 128, 192])
    for segment in (v, p, code, clock, busy):
        assert segment[0] == 1.0 and segment.sum() == 1.0


def test_kernel_addresses_are_no_code_in_the_fold():
    """The fold covers user space only: an IP at the kernel's first address
    (or above) is unknown, not an end bin of .text."""
    lo = 0x400000
    acc = IntervalAccumulator(IntervalParams(instructions=1000),
                              HistogramParams(ip_signature="fold", text_range=(lo, lo + 4096)))
    ips = np.array([0xFFFF_8000_0000_0000, 0xFFFF_8000_0000_1000, lo + 4095], np.uint64)
    acc.feed(np.array([10, 20, 30], np.int64), ips, samples(3, voltage_mv=1000.0))
    open_ = acc.pending()
    assert open_.segment_samples[0][2] == 1
    code = open_.profiles[0][96:128]
    # 4095 of 4096 bytes: position 1023 of 1024 = 0b11111_11111, folded 31 ^ 31 = 0
    assert np.flatnonzero(code).tolist() == [0] and code[0] == 1.0


def test_the_fold_without_a_text_range_has_no_code_segment():
    acc = IntervalAccumulator(IntervalParams(instructions=1000),
                              HistogramParams(ip_signature="fold"))
    acc.feed(np.array([10, 20], np.int64), np.array([0x400000, 0x7f0000001000], np.uint64),
             samples(2, voltage_mv=1000.0))
    open_ = acc.pending()
    assert open_.segment_samples[0][2] == 0
    assert not open_.profiles[0][96:128].any()


def test_a_code_line_in_entry_zero_goes_to_the_line_block():
    """With no mapping list, an IP's (region, line) entries hash its address
    with the whole address space's key.  IP 0x4151c0: its line (address >> 6)
    hashes to entry 0 of the line block, its region (address >> 14) to entry
    532 of the region block; each takes half of the sample."""
    ip = 0x4151C0
    raw = b"[address space]"
    key = (zlib.crc32(raw) << 32) | zlib.adler32(raw)
    assert plain_mix(key ^ plain_mix(ip >> 6)) % 1024 == 0
    assert plain_mix(key ^ plain_mix(ip >> 14)) % 1024 == 532
    acc = IntervalAccumulator(IntervalParams(instructions=1000), HistogramParams())
    acc.feed(np.array([10], np.int64), np.array([ip], np.uint64), samples(1, voltage_mv=1000.0))
    code = acc.pending().profiles[0][96:2144]
    assert np.flatnonzero(code).tolist() == [532, 1024 + 0]
    assert code[532] == code[1024] == 0.5


def test_an_interval_fed_in_two_batches_counts_its_code_samples_from_both():
    lo = 0x400000
    acc = IntervalAccumulator(IntervalParams(instructions=300),
                              HistogramParams(ip_signature="fold", text_range=(lo, lo + 4096)))
    assert len(acc.feed(np.array([10, 20], np.int64), np.array([lo, lo], np.uint64),
                        samples(2, voltage_mv=1000.0))) == 0
    done = acc.feed(np.array([30], np.int64), np.array([lo + 2048], np.uint64),
                    samples(1, voltage_mv=1000.0))
    assert len(done) == 1
    assert done.segment_samples[0].tolist() == [3, 0, 3, 0, 0]
    # 2048 of 4096 bytes: position 512 = 0b10000_00000, folded 16 ^ 0 = 16
    code = done.profiles[0][96:128]
    assert np.flatnonzero(code).tolist() == [0, 16]
    assert np.allclose(code[[0, 16]], [2 / 3, 1 / 3])


def test_each_segment_is_normalised_by_its_own_samples():
    """Three samples, one without a productive frequency: the voltage
    histogram holds thirds, the productive frequency's halves."""
    acc = IntervalAccumulator(IntervalParams(instructions=300), HistogramParams())
    done = acc.feed(np.array([10, 20, 30], np.int64), None,
                    samples(3, voltage_mv=[962.0, 962.0, 1080.0],
                            pfreq_mhz=[0.0, np.nan, 3000.0], c0=[0.0, 0.0, 0.0]))
    assert done.segment_samples[0].tolist() == [3, 2, 0, 0, 3]
    v, p, code, clock, busy = np.split(done.profiles[0], [32, 96, 2144, 2208])
    assert np.allclose(v[[0, 31]], [2 / 3, 1 / 3]) and np.isclose(v.sum(), 1.0)
    assert np.allclose(p[[0, 63]], [0.5, 0.5]) and np.isclose(p.sum(), 1.0)
    assert not code.any() and not clock.any()
    assert busy[0] == 1.0 and busy.sum() == 1.0
