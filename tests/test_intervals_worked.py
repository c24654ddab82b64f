"""``core.intervals``' accumulator on samples worked by hand: the interval
still open (``pending``), its totals, and each segment's histogram over the
ranges and bins of ``HistogramParams``' defaults."""

import numpy as np

from phasewatch.core.decode import F
from phasewatch.core.intervals import IntervalAccumulator
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
