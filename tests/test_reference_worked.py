"""``core.reference``, the numpy version the pipeline is held to, on small
batches worked by hand: decoded counters per CPU and per thread, voltage and
its plausible range, where intervals end in each mode, each interval's CPI."""

import math

import numpy as np
import pytest

from phasewatch.core import reference
from phasewatch.core.batch import MISSING, SampleBatch
from phasewatch.core.decode import F
from phasewatch.core.params import IntervalParams, Params

NAN = math.nan
V = 32      # IA32_PERF_STATUS: core voltage in bits 47:32, in 1/8192 V


def column(name, got):
    return got[F[name]].tolist()


def same(a, b):
    return len(a) == len(b) and all(
        (math.isnan(x) and math.isnan(y)) or math.isclose(x, y, abs_tol=1e-12)
        for x, y in zip(a, b))


def batch(**columns):
    return SampleBatch({k: np.array(v, np.int64 if k == "t_ns" else np.int32)
                        if k in ("t_ns", "cpu", "tid") else np.array(v, np.uint64)
                        for k, v in columns.items()})


def two_cpus():
    """CPU 0 in rows 0, 2, 4 and CPU 1 in rows 1, 3."""
    m = int(MISSING)
    return batch(**{
        "t_ns": [10, 11, 20, 21, 30], "cpu": [0, 1, 0, 1, 0], "tid": [5, 5, 5, 5, 5],
        "perf_status": [8192 << V, m, 10240 << V, 4096 << V, 13200 << V],
        "aperf": [100, 1000, 300, 1600, 500], "mperf": [100, 1000, 200, 1300, 300],
        "pperf": [0, 0, 50, 150, 150], "tsc": [0, 0, 400, 600, 800],
        "instructions": [0, 0, 1000, 500, 1000], "cycles": [0, 0, 2000, 1500, 2500],
        "c3": [0, 0, 40, 60, 80], "c6": [0, 0, 20, m, 20], "c7": [10, 0, 20, 0, 5],
    })


def test_decode_by_cpu():
    got = reference.decode(two_cpus(), 1000.0)
    # 1 V, MISSING, 1.25 V, 0.5 V (the plausible floor, kept), 1.611 V (above 1.6 V)
    assert same(column("voltage_mv", got), [1000.0, NAN, 1250.0, 500.0, NAN])
    # row 2: CPU 0's deltas aperf 200, mperf 100, pperf 50, tsc 400, 1000
    # instructions, 2000 cycles, c3 40, c6 20, c7 10; row 3: CPU 1's 600, 300,
    # 150, 600, 500, 1500, 60, MISSING, 0; row 4: CPU 0's 200, 100, 100, 400,
    # 0 instructions, 500 cycles, 40, 0, a step back
    assert same(column("freq_mhz", got), [NAN, NAN, 2000.0, 2000.0, 2000.0])
    assert same(column("pfreq_mhz", got), [NAN, NAN, 500.0, 500.0, 1000.0])
    assert same(column("cpi", got), [NAN, NAN, 2.0, 3.0, NAN])
    assert column("d_instructions", got) == [0.0, 0.0, 1000.0, 500.0, 0.0]
    assert column("d_cycles", got) == [0.0, 0.0, 2000.0, 1500.0, 500.0]
    assert same(column("c0", got), [NAN, NAN, 0.25, 0.5, 0.25])
    assert same(column("c3", got), [NAN, NAN, 0.1, 0.1, 0.1])
    assert same(column("c6", got), [NAN, NAN, 0.05, NAN, 0.0])
    assert same(column("c7", got), [NAN, NAN, 0.025, 0.0, NAN])
    # C1: what is left of the TSC's ticks, C-states not read counting 0
    assert same(column("c1", got), [NAN, NAN, 230 / 400, 240 / 600, 260 / 400])


def test_decode_by_thread_follows_each_thread_across_cpus():
    b = batch(t_ns=[1, 2, 3, 4], cpu=[0, 1, 1, 0], tid=[7, 8, 7, 8],
              aperf=[0, 20, 300, 80], mperf=[0, 20, 100, 40])
    # thread 7: rows 0 and 2, 300 / 100; thread 8: rows 1 and 3, 60 / 20
    assert same(column("freq_mhz", reference.decode(b, 1000.0, scope="tid")),
                [NAN, NAN, 3000.0, 3000.0])
    # CPU 1: rows 1 and 2, 280 / 80; CPU 0: rows 0 and 3, 80 / 40
    assert same(column("freq_mhz", reference.decode(b, 1000.0)), [NAN, NAN, 3500.0, 2000.0])


def test_a_clock_above_10_ghz_and_voltage_from_hwmon():
    b = batch(t_ns=[1, 2, 3], cpu=[0, 0, 0], aperf=[0, 300, 600], mperf=[0, 100, 300],
              vcore_mv=[1100, 0, int(MISSING)])
    got = reference.decode(b, 4000.0, voltage_from_perf_status=False)
    assert same(column("freq_mhz", got), [NAN, NAN, 6000.0])       # 12,000 MHz: not plausible
    assert same(column("voltage_mv", got), [1100.0, NAN, NAN])
    assert same(column("voltage_mv", reference.decode(b, 4000.0)), [NAN, NAN, NAN])


def params(**interval):
    return Params(interval=IntervalParams(**interval))


def test_time_intervals_end_at_the_first_sample_past_each_mark_from_the_first():
    t = np.array([1000, 1050, 1100, 1149, 1150, 1310, 1400], np.int64)
    ends = reference.interval_ends(t, np.zeros(len(t)), params(kind="time", ns=100))
    # marks at 1100, then 1200 (after 1100), 1400 (after 1310), 1500: none past it
    assert ends.tolist() == [2, 5, 6]


def test_sample_intervals_end_every_n_samples():
    t = np.arange(10, dtype=np.int64)
    assert reference.interval_ends(t, np.zeros(10), params(kind="samples", samples=3)).tolist() \
        == [2, 5, 8]
    assert reference.interval_ends(t, np.zeros(10), params(kind="samples", samples=1)).tolist() \
        == list(range(10))


@pytest.mark.parametrize("d_instr, ends", [
    ([0, 40, 40, 40, 40, 40, 100, 10], [3, 5, 6]),     # 120, 200, 300 reach 100, 200, 300
    ([0, 250, 10, 60], [1, 3]),                         # 250 passes 100 and 200; 320 passes 300
])
def test_instruction_intervals_end_at_each_multiple(d_instr, ends):
    d = np.array(d_instr, np.float64)
    t = np.arange(len(d), dtype=np.int64)
    assert reference.interval_ends(t, d, params(instructions=100)).tolist() == ends


def test_each_intervals_cpi_where_both_are_counted():
    decoded = np.zeros((len(F), 6))
    decoded[F["d_instructions"]] = [40, 60, 0, 0, 20, 30]
    decoded[F["d_cycles"]] = [100, 100, 20, 10, 0, 0]
    got = reference.interval_cpi(decoded, np.array([1, 3, 5]))
    assert math.isclose(got[0], math.log(2.0)) and math.isnan(got[1]) and math.isnan(got[2])


def test_busy_shares_are_unknown_where_the_tsc_did_not_move():
    b = batch(t_ns=[1, 2, 3], cpu=[0, 0, 0], mperf=[0, 50, 80], tsc=[0, 100, 100],
              c3=[0, 10, 10])
    got = reference.decode(b, 1000.0)
    # row 1: 50 / 100 busy, 10 / 100 in C3, the rest (40) in C1; row 2: no TSC ticks
    assert same(column("c0", got), [NAN, 0.5, NAN])
    assert same(column("c3", got), [NAN, 0.1, NAN])
    assert same(column("c1", got), [NAN, 0.4, NAN])


def test_the_plausible_bounds_themselves_are_kept():
    b = batch(t_ns=[1, 2, 3, 4], cpu=[0, 0, 0, 0], aperf=[0, 2, 4, 6], mperf=[0, 1, 2, 3],
              pperf=[0, 1, 2, 3], tsc=[0, 1, 2, 3], vcore_mv=[500, 1600, 499, 1601])
    got = reference.decode(b, 5000.0, voltage_from_perf_status=False)
    assert same(column("voltage_mv", got), [500.0, 1600.0, NAN, NAN])
    # one tick of MPERF and of the TSC: 2 / 1 of 5000 MHz, 10 GHz itself
    assert same(column("freq_mhz", got), [NAN, 10000.0, 10000.0, 10000.0])
    assert same(column("pfreq_mhz", got), [NAN, 5000.0, 5000.0, 5000.0])
    assert same(column("c0", got), [NAN, 1.0, 1.0, 1.0])
