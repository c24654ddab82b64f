"""``core.reference``, the numpy version the pipeline is held to, on small
batches worked by hand: decoded counters per CPU and per thread, voltage and
its plausible range, where intervals end in each mode, each interval's CPI,
and each interval's profile (values, busy share and code) from decoded rows
set by hand."""

import math
import zlib

import numpy as np
import pytest

from phasewatch.core import reference
from phasewatch.core.batch import MISSING, SampleBatch
from phasewatch.core.decode import F
from phasewatch.core.params import DetectorParams, IntervalParams, Params
from splitmix import plain_mix

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


def test_a_single_instruction_or_cycle_still_gives_a_cpi():
    """CPI is cycles over instructions wherever an instruction was counted:
    1 instruction in 3 cycles is a CPI of 3; an interval of 1 instruction in
    4 cycles has log CPI log 4, one of 2 instructions in 1 cycle log 1/2."""
    b = batch(t_ns=[1, 2], cpu=[0, 0], instructions=[10, 11], cycles=[100, 103])
    assert same(column("cpi", reference.decode(b, 1000.0)), [NAN, 3.0])
    decoded = np.zeros((len(F), 4))
    decoded[F["d_instructions"]] = [0, 1, 2, 0]
    decoded[F["d_cycles"]] = [0, 4, 1, 0]
    got = reference.interval_cpi(decoded, np.array([1, 3]))
    assert math.isclose(got[0], math.log(4.0)) and math.isclose(got[1], math.log(0.5))


def test_instruction_intervals_count_from_zero_instructions():
    """Interval ends at 100, 200, ... instructions from the start: a total of
    99 is one short of the first, 100 reaches it, 200 the second."""
    d = np.array([0, 99, 1, 100], np.float64)
    t = np.arange(4, dtype=np.int64)
    assert reference.interval_ends(t, d, params(instructions=100)).tolist() == [2, 3]


# The default histograms, segment after segment in a profile (SEGMENTS):
# voltage 962-1080 mV in 32 bins, productive frequency 0-3000 MHz in 64, the
# IP segment, the clock 0-3000 MHz in 64, the busy share (C0) 0-1 in 20.
# The IP segment is the code signature's 1024 region entries then its 1024
# line entries, or the thesis's fold of 32 entries.
VOLTAGE, PFREQ, IP = 0, 1, 2
FREQ, C0 = 3, 4


def starts(ip_entries):
    sizes = [32, 64, ip_entries, 64, 20]
    return [sum(sizes[:s]) for s in range(5)]


def hand_decoded(n, **rows):
    decoded = np.full((len(F), n), NAN)
    for name, values in rows.items():
        decoded[F[name]] = values
    return decoded


def detector(name):
    return Params(detector=DetectorParams(detector=name))


def test_each_interval_takes_its_own_rows_from_the_first_row_on():
    """Intervals end at rows 1 and 4: rows 0-1, then 2-4.  Voltage 1000 mV
    is bin floor(38 × 32 / 118) = 10; 1050 mV floor(88 × 32 / 118) = 23."""
    b = batch(t_ns=[1, 2, 3, 4, 5], cpu=[0] * 5)
    decoded = hand_decoded(5, voltage_mv=[1000, NAN, 1050, 1050, NAN])
    prof, counts = reference.profiles(b, decoded, np.array([1, 4]), detector("vpf"), None)
    assert counts[:, VOLTAGE].tolist() == [1, 2]
    assert prof[0, 10] == 1.0 and prof[1, 23] == 1.0
    assert prof[:, :32].sum(axis=1).tolist() == [1.0, 1.0]


def test_the_busy_share_is_binned_over_0_to_1():
    """C0 0.25 falls in bin floor(0.25 × 20) = 5, 0.5 in bin 10, 0.95 in 19."""
    b = batch(t_ns=[1, 2, 3, 4], cpu=[0] * 4)
    decoded = hand_decoded(4, c0=[0.25, 0.5, 0.95, 0.5])
    prof, counts = reference.profiles(b, decoded, np.array([3]), detector("vpf-ip"), None)
    c0 = starts(2048)[C0]
    assert counts[0, C0] == 4
    assert {i: prof[0, c0 + i] for i in np.flatnonzero(prof[0, c0:c0 + 20])} == \
        {5: 0.25, 10: 0.5, 19: 0.25}


def address_space_entry(ip: int, bits: int) -> int:
    """An IP's code entry where no mappings are known: the address space as
    one object (its key from the CRC-32 and Adler-32 of its name), the IP as
    its offset, 2**bits bytes to an entry, hashed into 1024."""
    name = b"[address space]"
    key = (zlib.crc32(name) << 32) | zlib.adler32(name)
    return plain_mix(key ^ plain_mix(ip >> bits)) % 1024


def test_code_in_region_entry_0_is_counted_at_both_resolutions():
    """0x944000 hashes to region entry 0 (16 KiB regions) and line entry 158
    (64-byte lines); 0x400000 elsewhere.  Each sample is half a sample in
    its region and half in its line."""
    ips = [0x944000, 0x400000]
    assert address_space_entry(ips[0], 14) == 0
    regions = [address_space_entry(ip, 14) for ip in ips]
    lines = [address_space_entry(ip, 6) for ip in ips]
    b = batch(t_ns=[1, 2], cpu=[0, 0], ip=ips)
    prof, counts = reference.profiles(b, hand_decoded(2), np.array([1]), detector("vpf-ip"), None)
    ip = starts(2048)[IP]
    assert counts[0, IP] == 2
    want = np.zeros(2048)
    for r, line in zip(regions, lines):
        want[r] += 0.25
        want[1024 + line] += 0.25
    assert prof[0, ip:ip + 2048].tolist() == want.tolist()


KERNEL = 0xFFFF_8000_0000_0000


def test_the_fold_leaves_out_kernel_ips_and_needs_a_text_range():
    """The thesis's fold over .text 0x400000-0x500000: 1024 positions of 1 KiB,
    position p in entry (p mod 32) xor (p div 32).  0x400000 + 33 KiB + 5 is
    position 33, entry 1 xor 1 = 0; 0x400000 + 70 KiB is position 70, entry
    6 xor 2 = 4.  Kernel IPs, the first kernel address among them, have no
    entry; without a text range no IP has one."""
    ips = [0x400000 + 33 * 1024 + 5, 0x400000 + 70 * 1024, KERNEL, KERNEL + 0x1000]
    b = batch(t_ns=[1, 2, 3, 4], cpu=[0] * 4, ip=ips)
    fold = detector("vpf-ip-fold")
    prof, counts = reference.profiles(b, hand_decoded(4), np.array([3]), fold, (0x400000, 0x500000))
    ip = starts(32)[IP]
    assert counts[0, IP] == 2
    assert {i: prof[0, ip + i] for i in np.flatnonzero(prof[0, ip:ip + 32])} == {0: 0.5, 4: 0.5}
    _, counts = reference.profiles(b, hand_decoded(4), np.array([3]), fold, None)
    assert counts[0, IP] == 0
    no_ip = batch(t_ns=[1, 2], cpu=[0, 0])
    text = (0x400000, 0x500000)
    _, counts = reference.profiles(no_ip, hand_decoded(2), np.array([1]), fold, text)
    assert counts[0, IP] == 0
